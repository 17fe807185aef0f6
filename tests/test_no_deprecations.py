"""Nothing in lading emits a DeprecationWarning: the old aliases are gone, not kept warning.

``drop_last=`` (two meanings), ``ParquetLoader``, ``build_store(builder=...)`` and the modules'
re-exports were deleted; every loader is made here with DeprecationWarning as an error, and
the CLI's main commands run under ``python -W error::DeprecationWarning``.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import lading
from lading.world import World


def test_loaders_and_builds_emit_no_deprecation(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from lading.tabular import PartitionedParquet

    (tmp_path / "d.tsv").write_text("".join(f"d{i}\ttext {i}\n" for i in range(20)))
    pq.write_table(pa.table({"x": list(range(20))}), tmp_path / "x.parquet")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        store = lading.build_store(tmp_path / "d.tsv", tmp_path / "store", shared_fs=False)
        assert len(list(lading.loader(store.ids(), 4, world=World()))) == 5
        parquet = PartitionedParquet(tmp_path / "x.parquet", batch_size=4, world=World())
        assert len(list(parquet)) == 5


def test_the_removed_aliases_are_gone() -> None:
    import lading.tabular

    with pytest.raises(AttributeError):
        lading.tabular.ParquetLoader  # noqa: B018
    with pytest.raises(TypeError, match="builder"):
        lading.build_store("x.tsv", "x.store", builder="local")  # type: ignore[call-arg]


@pytest.mark.slow
def test_cli_commands_emit_no_deprecation(tmp_path: Path) -> None:
    def run(*args: str) -> None:
        done = subprocess.run(
            [sys.executable, "-W", "error::DeprecationWarning", "-m", "lading", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )
        assert done.returncode == 0, f"lading {' '.join(args)}:\n{done.stderr[-3000:]}"

    run("synth", "passages", "300", "syn", "--queries", "10")
    run("build", "syn/collection.tsv", "store")
    run("inspect", "store")
    run(
        "train", "cross-encoder", "--corpus", "syn/collection.tsv", "--queries",
        "syn/queries.tsv", "--qrels", "syn/qrels.txt", "--negatives", "syn/run.trec",
        "--out", "ce", "--steps", "2", "--batch-size", "2", "--model", "tiny",
    )  # fmt: skip
