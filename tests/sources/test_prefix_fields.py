"""``ParseOptions(prefix_fields=...)``: a document's title read before its text, as a model
should see it, in every format and every store; and a build that stores empty texts beside
non-empty titles says so (``EmptyTextWarning``) instead of handing a model nothing.

CACM keeps 1,617 of its 3,204 documents' words in their titles alone: a store of its
``docs.jsonl`` read the text key only, so half the documents a cross-encoder scored were empty.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import write
from lading import InMemoryStore, OffsetStore, ParseOptions, build_store, read_records
from lading.cli import main
from lading.errors import EmptyTextWarning

TITLE = ParseOptions(prefix_fields=("title",))
RECORDS = [
    {"doc_id": "a", "title": "Algol 60", "text": "a report"},
    {"doc_id": "b", "title": "Square roots", "text": ""},  # CACM's half: a title and no text
    {"doc_id": "c", "title": "", "text": "no title"},
    {"doc_id": "d", "text": "no title key"},
]
WANTED = {"a": "Algol 60 a report", "b": "Square roots", "c": "no title", "d": "no title key"}


def _jsonl(tmp_path: Path) -> Path:
    return write(tmp_path / "docs.jsonl", "".join(json.dumps(r) + "\n" for r in RECORDS))


def test_every_format_puts_the_title_before_the_text(tmp_path: Path) -> None:
    jsonl = _jsonl(tmp_path)
    tsv = write(
        tmp_path / "docs.tsv",
        "".join(f"{r['doc_id']}\t{r.get('title', '')}\t{r['text']}\n" for r in RECORDS),
    )
    table = pa.table({k: [r.get(k, None) for r in RECORDS] for k in ("doc_id", "title", "text")})
    pq.write_table(table, tmp_path / "docs.parquet")
    trec = write(
        tmp_path / "docs.trec",
        "".join(
            f"<DOC>\n<DOCNO>{r['doc_id']}</DOCNO>\n<TITLE>{r.get('title', '')}</TITLE>\n"
            f"<TEXT>{r['text']}</TEXT>\n</DOC>\n"
            for r in RECORDS
        ),
    )
    sources = {
        "jsonl": (jsonl, TITLE),
        "tsv": (tsv, ParseOptions(columns=("id", "title", "text"), prefix_fields=("title",))),
        "parquet": (tmp_path / "docs.parquet", TITLE),
        "trec": (trec, TITLE),
    }
    for fmt, (path, parse) in sources.items():
        got = {r.id: r.text for r in read_records(path, parse=parse)}
        assert got == WANTED, fmt
        plain = {
            r.id: r.text
            for r in read_records(
                path,
                parse=ParseOptions(
                    **{k: v for k, v in parse.to_dict().items() if k != "prefix_fields"}
                ),
            )
        }
        assert plain["b"] == "" and plain["a"] == "a report", fmt  # the default is unchanged


def test_every_store_keeps_the_prefixed_text_and_the_field(tmp_path: Path) -> None:
    jsonl = _jsonl(tmp_path)
    packed = build_store(jsonl, tmp_path / "s", parse=TITLE, progress=False)
    offsets = OffsetStore.build(jsonl, tmp_path / "idx", parse=TITLE)
    memory = InMemoryStore.from_source(jsonl, parse=TITLE)
    for store in (packed, offsets, memory, OffsetStore(tmp_path / "idx")):
        assert store.get_many(list(WANTED)) == list(WANTED.values()), store
    assert packed.field("b", "title") == "Square roots"  # still a field of its own


def test_a_store_built_without_the_prefix_is_rebuilt_with_it(tmp_path: Path) -> None:
    jsonl = _jsonl(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyTextWarning)
        plain = build_store(jsonl, tmp_path / "s", progress=False)
    assert plain["b"] == "" and "prefix_fields" not in plain.meta["build"]
    titled = build_store(jsonl, tmp_path / "s", parse=TITLE, progress=False)
    assert titled["b"] == "Square roots" and titled.meta["build"]["prefix_fields"] == ["title"]
    assert ParseOptions.from_dict(titled.meta["build"]) == TITLE
    again = build_store(jsonl, tmp_path / "s", parse=TITLE, progress=False)
    assert again.meta["build"]["seconds"] == titled.meta["build"]["seconds"]  # reused


def test_a_build_of_empty_texts_beside_titles_warns_counting_them(tmp_path: Path) -> None:
    jsonl = _jsonl(tmp_path)
    with pytest.warns(EmptyTextWarning, match=r"1 of 4 documents have an empty text and a title"):
        build_store(jsonl, tmp_path / "s", progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyTextWarning)  # the prefix read them: nothing to say
        build_store(jsonl, tmp_path / "t", parse=TITLE, progress=False)


def test_fields_a_source_does_not_keep_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"prefix_fields \['url'\] are not kept"):
        ParseOptions(prefix_fields=("url",))
    assert ParseOptions(keep_fields=("url",), prefix_fields=("url",)).prefix_fields == ("url",)
    tsv = write(tmp_path / "docs.tsv", "a\tbody\n")
    with pytest.raises(ValueError, match=r"docs.tsv.*columns=\(\.\.\.\)"):
        build_store(tsv, tmp_path / "s", parse=TITLE, progress=False)


def test_the_cli_build_takes_prefix_fields(tmp_path: Path) -> None:
    jsonl = _jsonl(tmp_path)
    args = ["build", str(jsonl), str(tmp_path / "s"), "--quiet", "--prefix-fields", "title"]
    assert main(args) == 0
    assert main(["get", str(tmp_path / "s"), "b"]) == 0
    store = build_store(jsonl, tmp_path / "s", parse=TITLE, progress=False)
    assert store["b"] == "Square roots"


def test_train_ir_refuses_prefix_fields_for_a_built_store(tmp_path: Path) -> None:
    from lading.ir.train import TrainConfig, prepare
    from lading.world import World

    config = TrainConfig(
        queries=tmp_path / "q.tsv",
        qrels=tmp_path / "qrels",
        store=tmp_path / "s",
        out=tmp_path / "o",
        prefix_fields=("title",),
    )
    with pytest.raises(ValueError, match="--prefix-fields"):
        prepare(config, World())


def test_cacm_reads_no_empty_document_with_its_titles(tmp_path: Path, data_dir: Path) -> None:
    docs = data_dir / "ir" / "normalized" / "cacm" / "docs.jsonl"
    if not docs.exists():
        pytest.skip(f"{docs} not found (real data)")
    with pytest.warns(EmptyTextWarning, match=r"1,617 of 3,204 documents"):
        plain = build_store(docs, tmp_path / "plain", progress=False)
    titled = build_store(docs, tmp_path / "titled", parse=TITLE, progress=False)
    ids = plain.ids()
    assert sum(not t for t in plain.get_many(ids)) == 1617
    texts = titled.get_many(ids)
    assert sum(not t for t in texts) == 0
    assert titled["3000"].startswith("Segment Sizes and Lifetimes in Algol 60 Programs The ")
