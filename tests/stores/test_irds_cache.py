"""ir_datasets' docstore beside a local TSV (``<file>.pklz4``) follows the TSV. ir_datasets
builds it once and then trusts it (built = not empty), so after an edit of the TSV
``IrDatasetsStore.from_tsv`` answered with the old texts, while every lading store of that file
rebuilt. The TSV's size, modification time and head/tail hash are recorded beside the docstore
when it is built; a docstore of another TSV (or of none recorded) is built again."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("ir_datasets")

import lading


def docstore_of(tsv: Path) -> Path:
    return tsv.with_name(tsv.name + ".pklz4")


def test_an_edited_tsv_is_read_again(tmp_path: Path) -> None:
    tsv = tmp_path / "c.tsv"
    tsv.write_text("a\tone\nb\ttwo\n")
    assert lading.IrDatasetsStore.from_tsv(tsv)["a"] == "one"
    assert docstore_of(tsv).is_dir()
    tsv.write_text("a\tone, edited\nb\ttwo\nc\tthree\n")
    store = lading.IrDatasetsStore.from_tsv(tsv)
    assert store["a"] == "one, edited"  # the old docstore answered "one"
    assert store["c"] == "three" and len(store) == 3


def test_a_same_size_edit_is_read_again(tmp_path: Path) -> None:
    tsv = tmp_path / "c.tsv"
    tsv.write_text("a\tone\nb\ttwo\n")
    assert lading.IrDatasetsStore.from_tsv(tsv)["b"] == "two"
    stat = tsv.stat()
    tsv.write_text("a\tone\nb\ttwA\n")
    os.utime(tsv, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime: the hash
    assert lading.IrDatasetsStore.from_tsv(tsv)["b"] == "twA"


def test_a_copy_with_its_docstore_is_not_rebuilt(tmp_path: Path) -> None:
    """The bench copies the TSV and its docstore to a RAM disk (``copy2``: the same mtime):
    the copy is the same file, so its docstore is used as it is."""
    tsv = tmp_path / "c.tsv"
    tsv.write_text("a\tone\nb\ttwo\n")
    assert lading.IrDatasetsStore.from_tsv(tsv)["a"] == "one"
    (tmp_path / "copy").mkdir()
    copy = tmp_path / "copy" / "c.tsv"
    shutil.copy2(tsv, copy)
    shutil.copytree(docstore_of(tsv), docstore_of(copy))
    before = {p.name: p.stat().st_ino for p in docstore_of(copy).iterdir()}
    assert lading.IrDatasetsStore.from_tsv(copy)["b"] == "two"
    after = {p.name: p.stat().st_ino for p in docstore_of(copy).iterdir()}
    assert after == before
