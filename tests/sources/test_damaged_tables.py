"""A parquet or Arrow source that pyarrow cannot read (not that format, named for the other one,
or damaged in the middle) is one SourceError naming the file and the fix. Before, pyarrow's
words came alone ("Parquet magic bytes not found in footer", "Expected to read 1651663207
metadata bytes, but only read 4", "Invalid BYTE_ARRAY value"): `lading build` printed them with
no file name, where `lading repartition` names the file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import lading
from lading.cli import main
from lading.errors import SourceError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
feather = pytest.importorskip("pyarrow.feather")

ROWS = 20_000


def _table() -> object:
    texts = [f"hello world {i} " * 5 for i in range(ROWS)]
    return pa.table({"id": [str(i) for i in range(ROWS)], "text": texts})


def _flipped(good: Path, bad: Path) -> Path:
    """``good`` with 2,000 bytes a third of the way in overwritten: the header and footer
    read, the rows there do not."""
    data = bytearray(good.read_bytes())
    start = len(data) // 3
    data[start : start + 2000] = b"\xff" * 2000
    bad.write_bytes(bytes(data))
    return bad


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    pq.write_table(_table(), tmp_path / "good.parquet", row_group_size=5000, compression="NONE")
    feather.write_feather(_table(), tmp_path / "good.arrow", compression="uncompressed")
    (tmp_path / "text.parquet").write_text("not parquet\n")
    (tmp_path / "text.arrow").write_text("garbage\n")
    (tmp_path / "empty.parquet").write_bytes(b"")
    cut = (tmp_path / "good.parquet").read_bytes()[:5000]
    (tmp_path / "cut.parquet").write_bytes(cut)
    shutil.copy(tmp_path / "good.parquet", tmp_path / "parquet_named.arrow")
    shutil.copy(tmp_path / "good.arrow", tmp_path / "arrow_named.parquet")
    _flipped(tmp_path / "good.parquet", tmp_path / "mid.parquet")
    _flipped(tmp_path / "good.arrow", tmp_path / "mid.arrow")
    return tmp_path


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("text.parquet", r"not a parquet file, or a damaged one \(.*magic bytes.*export it again"),
        ("empty.parquet", r"not a parquet file, or a damaged one \(.*0 bytes.*export it again"),
        ("cut.parquet", r"not a parquet file, or a damaged one .*export it again"),
        ("text.arrow", r"not an arrow file, or a damaged one \(.*metadata bytes.*export it again"),
        ("parquet_named.arrow", r"is a parquet file, not an arrow one.*format='parquet'"),
        ("arrow_named.parquet", r"is an arrow file, not a parquet one.*format='arrow'"),
        ("mid.parquet", r"rows from [\d,]+ do not decode \(.*\); the file is damaged: export it"),
        ("mid.arrow", r"rows from [\d,]+ do not decode \(.*\); the file is damaged: export it"),
    ],
)
def test_a_file_pyarrow_cannot_read_is_named_with_the_fix(
    tables: Path, name: str, says: str
) -> None:
    for on_error in ("raise", "skip"):  # not a record to skip: the file is not what it says
        with pytest.raises(SourceError, match=says) as raised:
            lading.build_store(tables / name, tables / "s", on_error=on_error, progress=False)
        assert raised.value.path == str(tables / name)
        assert not (tables / "s").exists()


def test_the_good_files_build(tables: Path) -> None:
    for name in ("good.parquet", "good.arrow"):
        assert len(lading.build_store(tables / name, tables / name[:4], progress=False)) == ROWS


@pytest.mark.parametrize("name", ["text.parquet", "text.arrow", "arrow_named.parquet"])
def test_lading_build_names_the_file_and_the_flag(
    tables: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["build", str(tables / name), str(tables / "s"), "--quiet"])
    line = capsys.readouterr().err.strip()
    assert code == 2 and line.startswith(f"lading build: {tables / name}: "), line
    assert "format=" not in line and ("--format arrow" in line) == ("named" in name), line
