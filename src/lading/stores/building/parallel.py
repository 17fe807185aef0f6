"""Building a store in parallel: shard ``i`` of ``n`` by any worker, then one merge commits.

::

    lading build 'corpus/*.jsonl' store --shard 0/4     # ... up to --shard 3/4, anywhere, any order
    lading merge store                                  # the id index over all shards, one commit

Workers agree on where their shards go without talking: ``store/build-<id>/``, the id derived
from the inputs' identity (path, size, mtime, inode of every file), the build options and ``n``
(or given: ``build_id=``). Each shard is written under the shard's own lock into a temporary
directory and renamed into ``build-<id>/shard-<i>-of-<n>`` once whole, so a killed worker leaves
nothing a merge would take, and a rerun rebuilds only the shards that are missing. The merge
(under the store's lock) checks that the shards fit together, refuses an id in two of them
under ``duplicates="error"`` (``"first"``/``"last"`` keep one, as a one-process build does),
writes the global id index and commits the snapshot (:mod:`lading.stores.building.merge`).
Under torchrun every rank builds its shard and rank 0 merges: :func:`build_in_shards`.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from lading.disk import BuildContext, byte_bar
from lading.errors import SkippedRecordsWarning, SourceError
from lading.sources import ParseOptions, SourceReader, refuse_if_changed
from lading.stores.building.inputs import PiecesReader, check_shard_count, input_files, plan_shard
from lading.stores.building.merge import Shard, manifest_of, read_shard
from lading.stores.building.pending import BuildToCommit, builds_record, merge_in_folder
from lading.stores.building.shard_work import ShardDone, check_shard
from lading.stores.building.shardset import (
    BUILD_FILE,
    claim_shard,
    derive_build_id,
    finished_shard,
)
from lading.stores.building.writer import Duplicates, write_shard
from lading.stores.layout import FORMAT_NAME
from lading.stores.packed import PackedStore

__all__ = ["BUILD_FILE", "ShardReport", "derive_build_id", "merge_store", "write_one_shard"]


@dataclass(frozen=True)
class ShardReport(ShardDone):
    """What a shard worker did.

    Attributes:
        dest: the store the shard belongs to.
        build_id: the build directory (``dest/<build_id>``) the shards of this build share.
        shard: this shard's number.
        shards: how many shards the build has.
        rows: documents in this shard.
        reused: the shard was there already (a rerun), nothing was written.
        skipped: malformed records the shard skipped (``on_error="skip"``).
        skip_examples: the first of them, ``"line L of FILE: why"``.
    """

    COUNTED: ClassVar[str] = "rows"
    MERGE: ClassVar[str] = "lading merge"
    rows: int
    reused: bool
    skipped: int = 0
    skip_examples: tuple[str, ...] = ()


def source_files(source: Any, format: str | None, parse: ParseOptions) -> list[Path]:
    """The files a sharded build reads; a source that is no file (``irds:``, a reader) is
    refused: it has no bytes to deal out."""
    files = input_files(source)
    if files is not None:
        return files
    if isinstance(source, SourceReader) or not isinstance(source, (str, Path)):
        raise ValueError(
            f"{source!r} is a stream of records, which cannot be dealt to shards; build it "
            "with one process (no shard=)"
        )
    reader = SourceReader(source, format, "raise", parse)
    if reader.path is None:
        raise ValueError(f"{source} (format {reader.format}) cannot be split into shards")
    return [reader.path]


def write_one_shard(
    source: Any,
    dest: Path,
    shard: tuple[int, int],
    *,
    format: str | None,
    tok: Any,
    max_length: int | None,
    on_error: Any,
    duplicates: Duplicates,
    parse: ParseOptions,
    options: dict[str, Any],
    build_id: str | None = None,
    progress: bool | None = None,
) -> ShardReport:
    """Write shard ``i`` of ``n`` of the store at ``dest`` (see the module docstring)."""
    i, n = check_shard(shard)
    files = source_files(source, format, parse)
    fmt = format
    if fmt == "beir":  # its corpus.jsonl, read as a BEIR folder reads it: dealt at lines
        fmt = "jsonl"
        parse = parse if parse.id_field is not None else replace(parse, id_field="_id")
    check_shard_count(files, n, fmt)  # before anything is planned or written: n is bounded
    pieces = plan_shard(files, n, fmt, i)
    bid, where, stats = claim_shard(dest, files, options, (i, n), build_id, "store", FORMAT_NAME)
    with BuildContext(where, None, "shard") as build:
        record = finished_shard(where)
        if record is not None:  # a rerun: this shard is whole already
            return ShardReport.of_record((dest, bid, i, n), record, True)
        with build.scratch() as tmp:
            reader = PiecesReader(pieces, fmt, on_error, parse)
            before = reader.fingerprints()  # before reading: a change while reading is seen
            with byte_bar(f"shard {i}/{n}", reader.total_bytes, progress) as bar:
                written = write_shard(
                    reader,
                    tmp,
                    tokenizer=tok,
                    max_length=max_length,
                    duplicates=duplicates,
                    keep_tokenizer=i == 0,
                    allow_empty=n > 1,
                    progress=bar,
                    id_keys=True,
                    about={
                        "options": options,
                        "fingerprints": before,
                        "input_stats": stats,
                        "source": [p.describe() for p in pieces],
                    },
                )
            for fingerprint in before:
                refuse_if_changed(fingerprint)
            build.publish_new(tmp)
    if written.record["skipped"]:  # as a one-process build says it (the merge sums them)
        warnings.warn(
            f"skipped {written.record['skipped']} malformed record(s) of shard {i}/{n} of "
            f"{source} building {dest}; first: {written.record['skip_examples'][0]}",
            SkippedRecordsWarning,
            stacklevel=3,  # the caller of build_shard
        )
    return ShardReport.of_record((dest, bid, i, n), written.record, False)


def merge_store(dest: Path, build_id: str | None = None) -> PackedStore:
    """Commit the shards of build ``build_id`` of ``dest`` (by default the one a merge takes:
    :func:`~lading.stores.building.pending.merge_in_folder`) as its new snapshot; open it
    (the current snapshot, where that build is committed already).

    Raises:
        StoreFormatError: shards are missing (naming them and ``lading build``), or two
            shards hold the same id (naming both).
    """

    kind = (FORMAT_NAME, "store")
    done = merge_in_folder(dest, kind, build_id, read_shard, "lading build", commit_shards)
    return PackedStore(dest, snapshot=done if isinstance(done, str) else done["snapshot"])


def commit_shards(build: BuildContext, merge: BuildToCommit[Shard]) -> str:
    """Under ``build`` (the store's build context): the index over ``merge``'s shards and the
    commit of the new snapshot; its id."""
    bid, shards, recipe = merge.bid, merge.shards, merge.recipe
    started = time.perf_counter()
    if sum(s.record["rows"] for s in shards) == 0:
        where = recipe["inputs"][0] if recipe.get("inputs") else build.dest
        raise SourceError(where, None, "no documents in any shard; a store of 0 is refused")
    options = recipe["options"]
    about = {"build_id": bid, **_sources(shards, options["format"]), **options}
    with build.scratch() as tmp:
        meta = manifest_of(build.dest, tmp, build.snapshot, shards, about)
        meta["build"]["seconds"] = round(time.perf_counter() - started, 3)
        meta["builds"] = builds_record(build.dest, build.previous, bid, merge.passed)
        return build.commit(tmp, meta)


def _sources(shards: list[Shard], fmt: str) -> dict[str, Any]:
    """``source`` (what ``lading inspect`` shows) and ``sources`` (every input file's identity,
    compared on open) of the merged store."""
    seen: dict[str, dict[str, Any]] = {}
    for shard in shards:
        for fingerprint in shard.record.get("fingerprints", []):
            seen.setdefault(str(fingerprint.get("path")), fingerprint)
    sources = list(seen.values())
    if not sources:  # records from elsewhere (a Ray dataset): nothing on disk to compare
        return {"source": {"format": fmt}, "sources": []}
    if len(sources) == 1:
        return {"source": {**sources[0], "format": fmt}, "sources": sources}
    first = str(sources[0].get("path"))
    return {
        "source": {"path": f"{first} (+{len(sources) - 1} more files)", "format": fmt},
        "sources": sources,
    }
