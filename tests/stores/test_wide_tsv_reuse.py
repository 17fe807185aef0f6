"""A store built from a TSV wider than its named columns, by a lading from before the refusal
(issue 33 item 3), is not reused as up to date. That lading read ``msmarco-docs.tsv`` with the
default ``id,text``: the URL became the text and the columns past the named ones fields
``col<N>``, and its ``meta.json`` records the same options a build of today would compare, so
``build_store`` reused it and ``open_store`` opened it without a word. The fields it kept are
the evidence: a TSV store whose fields are not among its named columns is rebuilt (and the
rebuild refuses the wide line, naming the file and ``--columns``)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import lading
from lading import ParseOptions
from lading.errors import SourceError, StaleStoreWarning, StoreFormatError

DOCS = "D1\thttp://a.com/x\tTitle one\tBody one\nD2\thttp://b.com/y\tTitle two\tBody two\n"


def old_store(tmp_path: Path) -> tuple[Path, Path]:
    """(source, store) as the lading before the refusal left them: built with the default
    columns, the URL stored as the text, the title and body as fields col2 and col3."""
    src, dest = tmp_path / "docs.tsv", tmp_path / "s"
    src.write_text(DOCS)
    lading.build_store(src, dest, parse=ParseOptions(columns=("id", "text", "col2", "col3")))
    meta_path = dest / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["build"]["columns"] = ["id", "text"]  # what that lading recorded: the default
    meta_path.write_text(json.dumps(meta))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = lading.open_store(dest)
    assert store["D1"] == "http://a.com/x" and store.fields == ("col2", "col3")
    return src, dest


def test_build_store_does_not_reuse_it(tmp_path: Path) -> None:
    src, dest = old_store(tmp_path)
    with pytest.raises(SourceError, match="--columns id,url,title,text") as e:
        lading.build_store(src, dest, progress=False)  # reused silently before
    assert str(src) in str(e.value)
    columns = ("id", "url", "title", "text")
    store = lading.build_store(src, dest, parse=ParseOptions(columns=columns), progress=False)
    assert store["D1"] == "Body one" and store.field("D1", "url") == "http://a.com/x"


def test_open_store_says_it_and_names_the_fix(tmp_path: Path) -> None:
    src, dest = old_store(tmp_path)
    with pytest.warns(StaleStoreWarning, match="col2") as caught:
        store = lading.open_store(dest)
    said = str(caught[0].message)
    assert str(src) in said and "--columns" in said and "--overwrite" in said, said
    assert store.stale is not None
    with pytest.raises(StoreFormatError, match="col2"):
        lading.open_store(dest, on_stale="raise")


def test_a_store_of_named_columns_is_reused(tmp_path: Path) -> None:
    src = tmp_path / "docs.tsv"
    src.write_text(DOCS)
    columns = ParseOptions(columns=("id", "url", "title", "text"))
    first = lading.build_store(src, tmp_path / "s", parse=columns, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no stale warning on open
        again = lading.build_store(src, tmp_path / "s", parse=columns, progress=False)
    assert again.snapshot == first.snapshot and again.stale is None
