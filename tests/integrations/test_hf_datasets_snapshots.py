"""HF exports keyed on the snapshot of the store object in hand, never on what is on disk now."""

from __future__ import annotations

from pathlib import Path

import pytest

import lading
from conftest import write

pytest.importorskip("datasets")


def test_an_export_through_an_old_object_does_not_stale_the_rebuilt_store(tmp_path: Path) -> None:
    """The issue's repro: 200 documents, 66 of them edited and the store rebuilt; one export
    through an object opened before the rebuild. On the version 1 format every later export
    of the rebuilt store (reopened too) returned the old rows: 0 of 66 edited texts."""
    from lading.integrations.hf_datasets import store_to_dataset

    cache = str(tmp_path / "hf")
    src = tmp_path / "c.tsv"
    write(src, "".join(f"d{i}\toriginal text {i}\n" for i in range(200)))
    dest = tmp_path / "store"
    old = lading.build_store(src, dest, progress=False)
    assert all(r["text"].startswith("original") for r in store_to_dataset(old, cache_dir=cache))
    edited = set(range(0, 200, 3))  # 67 rows; the 66 within a percent
    write(
        src,
        "".join(f"d{i}\t{'edited' if i in edited else 'original'} text {i}\n" for i in range(200)),
    )
    lading.build_store(src, dest, progress=False)
    through_old = store_to_dataset(old, cache_dir=cache)  # the old object reads its snapshot
    assert [r["text"] for r in through_old] == [f"original text {i}" for i in range(200)]
    fresh = lading.open_store(dest)
    rows = store_to_dataset(fresh, cache_dir=cache)
    seen = sum(r["text"].startswith("edited") for r in rows)
    assert seen == len(edited), f"{seen} of {len(edited)} edited texts exported"
    again = store_to_dataset(lading.open_store(dest), cache_dir=cache)
    assert again.cache_files == rows.cache_files  # the same snapshot: the cache is reused
