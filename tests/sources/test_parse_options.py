"""``ParseOptions`` is the one parameter for where ids, text and fields are found in a source.

Every public entry point that reads a source (``build_store``, ``InMemoryStore.from_source``,
``OffsetStore.build``, ``read_records``) takes ``parse=ParseOptions(...)``; ``id_field=``,
``text_field=`` or ``columns=`` given loose are Python's unexpected keywords. The options are
recorded in each store's meta through ``to_dict``/``from_dict``, so a store built before
``keep_fields`` was recorded still opens and is still reused.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import lading
from conftest import write
from lading import InMemoryStore, OffsetStore, ParseOptions, build_store, read_records

JSONL = "".join(
    json.dumps({"key": f"k{i}", "body": f"text {i}", "title": f"T{i}", "url": f"u{i}"}) + "\n"
    for i in range(5)
)
PARSE = ParseOptions(id_field="key", text_field="body", keep_fields=("url",))


def test_exported_at_the_top_and_from_sources() -> None:
    assert lading.ParseOptions is lading.sources.ParseOptions
    assert "ParseOptions" in lading.__all__


def test_dict_round_trip_and_defaults_for_old_records() -> None:
    options = ParseOptions(id_field="a", columns=["id", "x", "text"], keep_fields=["t", "u"])
    assert options.columns == ("id", "x", "text") and options.keep_fields == ("t", "u")
    record = options.to_dict()
    assert record == {
        "id_field": "a",
        "text_field": None,
        "columns": ["id", "x", "text"],
        "keep_fields": ["t", "u"],
    }
    assert json.loads(json.dumps(record)) == record  # plain JSON, no tuples or objects
    assert ParseOptions.from_dict(record) == options
    # what stores recorded before keep_fields was reachable: it was always the default
    old = {"id_field": None, "text_field": None, "columns": ["id", "text"]}
    assert ParseOptions.from_dict(old) == ParseOptions()
    # a store's whole build record will do: its other keys are not options
    assert ParseOptions.from_dict({**record, "duplicates": "first"}) == options


def test_a_bare_string_is_not_a_list_of_names() -> None:
    with pytest.raises(TypeError, match=r"keep_fields=\('url',\)"):
        ParseOptions(keep_fields="url")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="columns"):
        ParseOptions(columns="id,text")  # type: ignore[arg-type]


def test_read_records_takes_parse_with_keep_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", JSONL)
    first = next(iter(read_records(path, parse=PARSE)))
    assert (first.id, first.text, dict(first.fields)) == ("k0", "text 0", {"url": "u0"})
    tsv = write(tmp_path / "c.tsv", "D1\thttp://x\tBody\n")
    (record,) = read_records(tsv, parse=ParseOptions(columns=("id", "url", "text")))
    assert (record.id, record.text, dict(record.fields)) == ("D1", "Body", {"url": "http://x"})


def test_build_store_takes_parse_records_it_and_reuses_or_rebuilds(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", JSONL)
    store = build_store(path, tmp_path / "s", parse=PARSE, progress=False)
    assert store.fields == ("url",) and store["k3"] == "text 3" and store.field("k3", "url") == "u3"
    assert ParseOptions.from_dict(store.meta["build"]) == PARSE
    built = store.meta["build"]["seconds"]
    again = build_store(path, tmp_path / "s", parse=PARSE, progress=False)
    assert again.meta["build"]["seconds"] == built  # same options: reused
    other = ParseOptions(id_field="key", text_field="body")  # keeps title, the default
    rebuilt = build_store(path, tmp_path / "s", parse=other, progress=False)
    assert rebuilt.fields == ("title",)


def test_a_store_recorded_without_keep_fields_is_still_reused(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", JSONL)
    parse = ParseOptions(id_field="key", text_field="body")
    store = build_store(path, tmp_path / "s", parse=parse, progress=False)
    meta_path = tmp_path / "s" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["build"]["keep_fields"]  # as every store built before this change
    meta_path.write_text(json.dumps(meta))
    again = build_store(path, tmp_path / "s", parse=parse, progress=False)
    assert "keep_fields" not in again.meta["build"]  # reused, not rebuilt
    assert again.meta["build"]["seconds"] == store.meta["build"]["seconds"]


def test_build_store_refuses_parse_with_a_reader(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", JSONL)
    reader = lading.sources.SourceReader(path, options=PARSE)
    with pytest.raises(ValueError, match="carries its own ParseOptions"):
        build_store(reader, tmp_path / "s", parse=PARSE, progress=False)
    store = build_store(reader, tmp_path / "s", progress=False)
    assert ParseOptions.from_dict(store.meta["build"]) == PARSE  # the reader's own, recorded


def test_in_memory_store_takes_parse_and_pickles_it(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", "d1\tx\tone\nd2\ty\ttwo\n")
    parse = ParseOptions(columns=("id", "url", "text"))
    store = InMemoryStore.from_source(path, parse=parse)
    assert store["d2"] == "two"
    again = pickle.loads(pickle.dumps(store))
    assert again["d1"] == "one" and again.get_many(["d2", "d1"]) == ["two", "one"]


def test_offset_store_records_parse_in_its_meta_and_reopens(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", JSONL)
    store = OffsetStore.build(path, tmp_path / "idx", parse=PARSE)
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["options"] == PARSE.to_dict()
    assert OffsetStore(tmp_path / "idx")["k4"] == store["k4"] == "text 4"


def test_an_offset_store_recorded_without_keep_fields_still_opens(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", "a\tx\tone\nb\ty\ttwo\n")
    OffsetStore.build(path, tmp_path / "idx", parse=ParseOptions(columns=("id", "url", "text")))
    meta_path = tmp_path / "idx" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["options"]["keep_fields"]
    meta_path.write_text(json.dumps(meta))
    assert OffsetStore(tmp_path / "idx").get_many(["b", "a"]) == ["two", "one"]


ENTRY_POINTS: dict[str, Callable[..., Any]] = {
    "build_store": lambda src, tmp, **kw: build_store(src, tmp / "s", progress=False, **kw),
    "from_source": lambda src, tmp, **kw: InMemoryStore.from_source(src, **kw),
    "build": lambda src, tmp, **kw: OffsetStore.build(src, tmp / "idx", **kw),
    "read_records": lambda src, tmp, **kw: read_records(src, **kw),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("old", ["columns", "id_field", "text_field"])
def test_a_keyword_parse_holds_is_unexpected_and_writes_nothing(
    entry: str, old: str, tmp_path: Path
) -> None:
    path = write(tmp_path / "c.tsv", "a\tx\tone\n")
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{old}'"):
        ENTRY_POINTS[entry](path, tmp_path, **{old: "key"})
    assert not (tmp_path / "s").exists() and not (tmp_path / "idx").exists()


def test_hf_build_store_keeps_fields_of_a_parquet_path(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from lading.integrations.hf_datasets import build_store as build_hf

    rows = {"doc": ["a", "b"], "body": ["x", "y"], "title": ["Ta", "Tb"], "url": ["ua", "ub"]}
    pq.write_table(pa.table(rows), tmp_path / "d.parquet")
    store = build_hf(
        tmp_path / "d.parquet", tmp_path / "s", id_column="doc", text_column="body",
        fields=("url",), progress=False,
    )  # fmt: skip
    assert store.fields == ("url",) and store.field("b", "url") == "ub"  # was: title, url dropped


TREC = "<DOC>\n<DOCNO>D1</DOCNO>\n<TEXT>Body</TEXT>\n</DOC>\n"
IGNORED = [  # (file name, contents, options the format would ignore, the option named)
    ("c.tsv", "D1\tBody\n", ParseOptions(id_field="key"), "id_field"),
    ("c.tsv", "D1\tBody\n", ParseOptions(text_field="body"), "text_field"),
    ("c.tsv", "D1\tBody\n", ParseOptions(keep_fields=("url",)), "keep_fields"),
    ("c.trec", TREC, ParseOptions(id_field="key", text_field="body"), "id_field"),
    ("c.jsonl", JSONL, ParseOptions(columns=("id", "url", "text")), "columns"),
]


@pytest.mark.parametrize(("name", "content", "parse", "named"), IGNORED)
@pytest.mark.parametrize("entry", ["build_store", "build_shard", "in_memory", "offset", "read"])
def test_options_a_format_would_ignore_are_refused_naming_the_file_and_the_fix(
    tmp_path: Path, name: str, content: str, parse: ParseOptions, named: str, entry: str
) -> None:
    """A TSV has columns, TREC names its own id and text, JSON has keys: an option the format
    does not read was taken and silently ignored (the CLI refused its flags, the library did
    not). Each entry that reads a source refuses it before anything is written."""
    path = write(tmp_path / name, content)
    calls: dict[str, Callable[[], Any]] = {
        "build_store": lambda: build_store(path, tmp_path / "s", parse=parse, progress=False),
        "build_shard": lambda: lading.build_shard(path, tmp_path / "s", (0, 1), parse=parse),
        "in_memory": lambda: InMemoryStore.from_source(path, parse=parse),
        "offset": lambda: OffsetStore.build(path, tmp_path / "s", parse=parse),
        "read": lambda: read_records(path, parse=parse),
    }
    with pytest.raises(ValueError, match=named) as raised:
        calls[entry]()
    message = str(raised.value)
    assert str(path) in message and "leave" in message, message
    assert not (tmp_path / "s").exists()


def test_options_a_format_reads_are_still_taken(tmp_path: Path) -> None:
    """The defaults, and what each format does read, pass the check."""
    tsv = write(tmp_path / "c.tsv", "D1\thttp://x\tBody\n")
    (record,) = read_records(tsv, parse=ParseOptions(columns=("id", "url", "text")))
    assert record.text == "Body"
    trec = write(tmp_path / "c.trec", TREC)
    (record,) = read_records(trec, parse=ParseOptions())
    assert (record.id, record.text) == ("D1", "Body")
    store = build_store(write(tmp_path / "c.jsonl", JSONL), tmp_path / "s", parse=PARSE)
    assert store["k1"] == "text 1"


@pytest.mark.parametrize("recorded", [{"keep_fields": []}, {"id_field": "key"}])
def test_a_store_recorded_with_an_option_its_format_ignores_is_reused_without_it(
    tmp_path: Path, recorded: dict[str, Any]
) -> None:
    """A TSV store an older lading built with an option TSV never reads (then taken and ignored,
    now refused): following the refusal's fix, leaving it out, reuses the same store rather than
    rebuilding it, since the option never changed a byte."""
    path = write(tmp_path / "c.tsv", "".join(f"d{i}\ttext {i}\n" for i in range(50)))
    store = build_store(path, tmp_path / "s", progress=False)
    meta_path = tmp_path / "s" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["build"].update(recorded)  # as that older lading recorded it
    meta_path.write_text(json.dumps(meta))
    again = build_store(path, tmp_path / "s", progress=False)
    assert again.snapshot == store.snapshot  # was: a whole rebuild
    assert again.meta["build"]["seconds"] == store.meta["build"]["seconds"]
