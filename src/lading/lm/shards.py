"""A token corpus built in shards: shard ``i`` of ``n`` by any worker, then one merge commits.

::

    lading lm build corpus/ wiki --tokenizer t.json --shard 0/4   # ... 3/4, anywhere, any order
    lading lm merge wiki                                          # offsets over all shards, commit

The rules are the document stores' (:mod:`lading.stores.building.parallel`, sharing
:mod:`lading.stores.building.shardset`): the input files are dealt out as a store's are (their
bytes laid end to end cut into ``n`` runs; uncompressed JSONL cut at line starts, any other file
whole to the shard its first byte falls in; a lading store given as the source: its rows in
``n`` runs), so the shards in order read the documents in the one-process order. Workers agree
on ``wiki/build-<id>/shard-<i>-of-<n>/`` without talking (the id from the inputs' identity, the
options and ``n``); each shard is written in a temporary directory renamed into place once whole
(a killed worker leaves nothing a merge takes; a rerun writes only the missing shards). The
tokenizer (its SHA-256) is one of the options: shards rerun with another tokenizer are another
build, tokenized again, as a one-process build's recipe makes it rebuild; a shard of another
one under one explicit build id is refused at its claim, and at the merge naming both shards
(:mod:`lading.lm.merge`).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from lading.disk import BuildContext, write_file
from lading.disk.meta import META_FILE
from lading.disk.names import check_inside, check_name, refuse
from lading.errors import SkippedRecordsWarning, StoreFormatError
from lading.lm.corpus_format import FORMAT_NAME, TOKEN_DTYPES
from lading.lm.texts import (
    Skips,
    file_texts,
    folder_files,
    is_records,
    refuse_unused_text_field,
    source_identity,
    texts_only,
)
from lading.lm.tokenize import find_eos, progress_bar, write_tokens
from lading.sources import (
    COMPRESSED_SUFFIXES,
    OnError,
    SourceReader,
    fingerprint,
    refuse_if_changed,
)
from lading.stores.building.inputs import Piece, check_shard_count, listed_files, plan_shard
from lading.stores.building.shard_work import ShardDone, check_shard
from lading.stores.building.shardset import (
    SHARD_FILE,
    check_shard_files,
    claim_shard,
    derive_build_id,
    finished_shard,
    shard_record,
)
from lading.stores.tokens import describe_tokenizer, load_tokenizer

COMMAND = "lading lm build"  # how a missing shard is built, in the merge's messages
_DTYPES = TOKEN_DTYPES


@dataclass(frozen=True)
class CorpusShardReport(ShardDone):
    """What a shard worker did: ``documents`` tokenized into shard ``shard`` of ``shards``
    (``reused``: it was there already) of build ``build_id`` of the corpus at ``dest``;
    ``skipped`` malformed records left out (``on_error="skip"``), the first of them in
    ``skip_examples``."""

    COUNTED: ClassVar[str] = "documents"
    MERGE: ClassVar[str] = "lading lm merge"
    documents: int
    reused: bool
    skipped: int = 0
    skip_examples: tuple[str, ...] = ()


@dataclass
class Inputs:
    """What a sharded build reads: ``files`` (whose stats name the build; JSONL cut at line
    starts, the others whole: ``format`` "files"), or a lading ``store`` (its meta.json in
    ``files``, ``format`` "store") dealt out by rows."""

    files: list[Path]
    format: str
    store: Path | None = None
    skipped: Skips = field(default_factory=Skips)


def inputs_of(source: Any) -> Inputs:
    """The files of ``source`` in the one-process build's reading order (a folder: its files
    sorted by path, as :func:`lading.lm.texts.iter_texts` reads them; a list: as given).

    Raises:
        FileNotFoundError: a missing source or listed file.
        ValueError: a folder without files, an empty list.
    """
    if isinstance(source, (list, tuple)):
        files = listed_files(source, globs=False)
    else:
        path = Path(source)
        if path.is_dir() and (path / META_FILE).is_file():
            return Inputs([path / META_FILE], "store", store=path)
        if path.is_dir():
            files = folder_files(path)
            if not files:
                raise ValueError(f"{path} holds no files")
        else:
            files = [path]
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"source {path} does not exist")
    return Inputs(files, "files")


def is_jsonl(path: Path) -> bool:
    """Whether a shard may cut ``path`` at line starts: JSONL (a record a line); plain text
    splits into documents at blank lines, WikiExtractor output at ``</doc>``, so it goes whole,
    as does a compressed file (no line start can be found in its bytes)."""
    return not path.name.endswith(COMPRESSED_SUFFIXES) and is_records(path)


def shard_texts(
    inputs: Inputs,
    pieces: list[Piece],
    split: str,
    on_error: OnError,
    text_field: str | None = None,
) -> Iterator[str]:
    """The texts of ``pieces``, as the one-process build reads them (a record's text under
    ``text_field``, by default the usual keys); records skipped (``on_error="skip"``) counted
    into ``inputs.skipped``, a compressed JSONL's and a text file's (whole to one shard) too."""
    parse = texts_only(text_field)
    for piece in pieces:
        if piece.span is None and not is_records(piece.path):
            yield from file_texts(piece.path, split, on_error, inputs.skipped, text_field)
            continue
        reader = SourceReader(piece.path, "jsonl", on_error, parse, span=piece.span)
        yield from map(attrgetter("text"), reader)  # no Python frame a record
        inputs.skipped.add(reader.skipped, reader.skip_reasons)


def store_texts(store: Path, shard: tuple[int, int]) -> tuple[Iterator[str], dict[str, Any]]:
    """Rows ``[count * i // n, count * (i + 1) // n)`` of the store's current snapshot and
    what they are (the snapshot is in the input's stats: a rebuilt store is refused)."""
    from lading.stores import PackedStore

    opened = PackedStore(store, on_stale="ignore")
    i, n = shard
    lo, hi = len(opened) * i // n, len(opened) * (i + 1) // n

    def texts() -> Iterator[str]:
        for at in range(lo, hi, 10_000):
            yield from opened.texts_at(np.arange(at, min(at + 10_000, hi)))

    return texts(), {"path": str(store.resolve()), "snapshot": opened.snapshot, "rows": [lo, hi]}


@dataclass(frozen=True)
class DocumentOptions:
    """How a token corpus's documents are cut from its source and ended: ``append_eos``,
    ``eos_token``, ``split``, ``on_error`` and ``text_field`` as :meth:`TokenCorpus.build
    <lading.lm.TokenCorpus.build>` takes them. Every shard of a build records them (with its
    tokenizer and inputs' format): shards made with others are another build."""

    append_eos: bool = True
    eos_token: str | None = None
    split: str = "blank"
    on_error: OnError = "raise"
    text_field: str | None = None


def _options(inputs: Inputs, documents: DocumentOptions, tokenizer: str) -> dict[str, Any]:
    """The options a shard records (and its build id is derived from); ``tokenizer``: its
    SHA-256 (shards of another tokenizer are another build); ``text_field`` only when named
    (shards of another text key are another build; the ids of builds without one unchanged)."""
    options = {
        "kind": "tokens",
        "tokenizer": tokenizer,
        "append_eos": documents.append_eos,
        "eos_token": documents.eos_token,
        "split": documents.split,
        "on_error": documents.on_error,
        "format": inputs.format,
    }
    if documents.text_field is not None:
        options["text_field"] = documents.text_field
    return options


def corpus_build_id(source: Any, n: int, tokenizer: Any, documents: DocumentOptions) -> str:
    """The build id every worker of an ``n``-shard build of ``source`` with ``tokenizer``
    and ``documents`` derives alike."""
    inputs = inputs_of(source)
    sha = describe_tokenizer(load_tokenizer(tokenizer))["sha256"]
    return derive_build_id(inputs.files, _options(inputs, documents, sha), n)


def build_corpus_shard(
    source: Any,
    dest: Path,
    shard: tuple[int, int],
    tokenizer: Any,
    documents: DocumentOptions,
    *,
    build_id: str | None = None,
    progress: bool | None = None,
) -> CorpusShardReport:
    """Write shard ``i`` of ``n`` of the token corpus at ``dest``, its documents cut and ended
    as ``documents`` says (see the module doc)."""
    i, n = check_shard(shard)
    on_error, text_field = documents.on_error, documents.text_field
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error={on_error!r}: choose 'raise' or 'skip'")
    inputs = inputs_of(source)
    refuse_unused_text_field(text_field, source, inputs.files, inputs.store is not None)
    if inputs.store is None:
        check_shard_count(inputs.files, n, None, is_jsonl, "JSONL")  # n bounded first
    tok = load_tokenizer(tokenizer)
    info = describe_tokenizer(tok)
    eos = find_eos(tok, documents.eos_token) if documents.append_eos else None
    options = _options(inputs, documents, info["sha256"])
    bid, where, stats = claim_shard(
        dest, inputs.files, options, (i, n), build_id, "token corpus", FORMAT_NAME
    )
    with BuildContext(where, None, "shard") as build:
        record = finished_shard(where)
        if record is not None:  # a rerun: this shard is whole already
            if record.get("tokenizer") != info["sha256"]:  # (a build.json without options)
                raise StoreFormatError(
                    f"{where} was tokenized with another tokenizer (SHA-256 "
                    f"{record.get('tokenizer')}, this one's {info['sha256']}); build the shards "
                    "under another build id (--build-id), or remove it to build it again"
                )
            return CorpusShardReport.of_record((dest, bid, i, n), record, True)
        with build.scratch() as tmp:
            identity = (
                source_identity(source)
                if inputs.store or not isinstance(source, (list, tuple))
                else {}
            )
            if inputs.store is not None:
                texts, described = store_texts(inputs.store, (i, n))
                before: list[dict[str, Any]] = []
                pieces = [described]
            else:
                planned = plan_shard(inputs.files, n, None, i, is_jsonl)
                before = [fingerprint(p) for p in dict.fromkeys(x.path for x in planned)]
                texts = shard_texts(inputs, planned, documents.split, on_error, text_field)
                pieces = [p.describe() for p in planned]
            with progress_bar(f"shard {i}/{n}", progress) as bar:
                meta = write_tokens(tmp, texts, tok, info, eos, bar)
            for taken in before:
                refuse_if_changed(taken)
            about = {
                "input_stats": stats,
                "fingerprints": before,
                "source": pieces,
                "source_path": str(Path(source).resolve()) if identity else None,
                "source_identity": identity,
                "skipped": inputs.skipped.count,
                "skip_examples": inputs.skipped.examples,
            }
            written = finish_shard(tmp, meta, info["sha256"], options, about)
            build.publish_new(tmp)
    if inputs.skipped.count:  # (the merge sums them into the corpus's "skipped")
        warnings.warn(
            inputs.skipped.said(f"shard {i}/{n} of {source} building {dest}"),
            SkippedRecordsWarning,
            stacklevel=3,  # the caller of TokenCorpus.build_shard
        )
    return CorpusShardReport.of_record((dest, bid, i, n), written, False)


def finish_shard(
    tmp: Path, meta: dict[str, Any], tokenizer: str, options: dict[str, Any], about: dict[str, Any]
) -> dict[str, Any]:
    """Write the ``shard.json`` that makes the shard in ``tmp`` whole (last, after its token
    files): what :func:`write_tokens` wrote (``meta``), the tokenizer's SHA-256, the build's
    ``options`` and ``about`` (where the texts came from, ``skipped``); the record."""
    record = {
        **{k: meta[k] for k in ("documents", "tokens", "dtype", "vocab_size", "eos_id")},
        "tokenizer": tokenizer,
        "options": options,
        "seconds": meta["seconds"],
        "files": meta["files"],
        **about,
    }
    write_file(tmp / SHARD_FILE, json.dumps(record, indent=2, sort_keys=True).encode())
    return record


@dataclass
class CorpusShard:
    """A finished shard of a token corpus: its directory (relative to the corpus) and record."""

    dir: str
    record: dict[str, Any]


def read_corpus_shard(root: Path, rel: str) -> CorpusShard:
    """The shard in ``root/rel`` as its worker described it (``shard.json``), checked: counts,
    dtype, every file named inside the shard, listed and of the size it says.

    Raises:
        StoreFormatError: not finished (no ``shard.json``), damaged, or its files differ.
    """
    path, record = shard_record(root, rel)
    if not isinstance(record, dict):
        raise refuse(path, SHARD_FILE, type(record).__name__, "is not a JSON object")
    for key in ("documents", "tokens", "vocab_size", "skipped"):
        value = record.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise refuse(path, key, value, "is not a count (a whole number >= 0)")
    examples = record.setdefault("skip_examples", [])  # (none in older shards)
    if not isinstance(examples, list) or not all(isinstance(e, str) for e in examples):
        raise refuse(path, "skip_examples", examples, "is not a list of strings")
    if record.get("dtype") not in _DTYPES:
        raise refuse(path, "dtype", record.get("dtype"), f"is not one of {list(_DTYPES)}")
    files = record.get("files")
    if not isinstance(files, dict) or not {"tokens.bin", "tokens.off"} <= set(files):
        raise refuse(path, "files", files, "does not list tokens.bin and tokens.off")
    for name, info in files.items():
        check_name(name, "a name in files", path)
        if not isinstance(info, dict) or not isinstance(info.get("size"), int):
            raise refuse(path, f"files.{name}", info, "has no size")
    check_inside(root / rel, list(files), "a name in files", path)  # one lstat a directory
    check_shard_files(root, rel, path, files)
    itemsize = np.dtype(record["dtype"]).itemsize
    if files["tokens.bin"]["size"] != record["tokens"] * itemsize or files["tokens.off"][
        "size"
    ] != 8 * (record["documents"] + 1):
        raise StoreFormatError(
            f"{path}: its tokens.bin/tokens.off sizes do not match {record['tokens']:,} tokens "
            f"in {record['documents']:,} documents; build this shard again"
        )
    return CorpusShard(rel, record)
