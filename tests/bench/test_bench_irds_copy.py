"""The bench's copy of --corpus for ir_datasets (``<out>/stores/irds/collection.tsv``, its
docstore beside it) follows --corpus: it was copied once, when missing, so a second bench of
an edited corpus into the same --out timed ir_datasets on the old texts and the other
strategies on the new ones."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("ir_datasets")
pytest.importorskip("tokenizers")


def test_an_edited_corpus_is_copied_again(tmp_path: Path) -> None:
    from lading.bench.data import prepare, to_ramdisk
    from lading.stores import IrDatasetsStore

    corpus = tmp_path / "c.tsv"
    corpus.write_text("a\talpha one\nb\tbeta two\n")
    queries, qrels = tmp_path / "q.tsv", tmp_path / "qrels.txt"
    queries.write_text("q\talpha\n")
    qrels.write_text("q 0 a 1\n")
    work = tmp_path / "work"
    first = prepare(corpus, queries, qrels, None, work, ["irds"])
    assert first.irds_tsv is not None
    assert IrDatasetsStore.from_tsv(first.irds_tsv)["a"] == "alpha one"
    corpus.write_text("a\talpha edited\nb\tbeta two\n")
    again = prepare(corpus, queries, qrels, None, work, ["irds"])
    assert again.irds_tsv is not None
    assert IrDatasetsStore.from_tsv(again.irds_tsv)["a"] == "alpha edited"
    # the RAM disk copy keeps the modification time: its docstore is the one just built
    ram = to_ramdisk(again, "irds", tmp_path / "ram")
    assert ram.irds_tsv is not None
    assert os.stat(ram.irds_tsv).st_mtime_ns == os.stat(again.irds_tsv).st_mtime_ns
    docstore = ram.irds_tsv.with_name(ram.irds_tsv.name + ".pklz4")
    inodes = {p.name: p.stat().st_ino for p in docstore.iterdir()}
    assert IrDatasetsStore.from_tsv(ram.irds_tsv)["a"] == "alpha edited"
    assert {p.name: p.stat().st_ino for p in docstore.iterdir()} == inodes
    shutil.rmtree(tmp_path / "ram")
