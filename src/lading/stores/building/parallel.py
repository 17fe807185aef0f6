"""Building a store in parallel: shard ``i`` of ``n`` by any worker, then one merge commits.

::

    lading build 'corpus/*.jsonl' store --shard 0/4     # ... up to --shard 3/4, anywhere, any order
    lading merge store                                  # the id index over all shards, one commit

Workers agree on where their shards go without talking: ``store/build-<id>/``, the id derived
from the inputs' identity (path, size, mtime, inode of every file), the build options and ``n``
(or given: ``build_id=``). Each shard is written under the shard's own lock into a temporary
directory and renamed into ``build-<id>/shard-<i>-of-<n>`` once whole, so a killed worker leaves
nothing a merge would take, and a rerun rebuilds only the shards that are missing. The merge
(under the store's lock) checks that the shards fit together and that no id is in two of them,
writes the global id index and commits the snapshot (:mod:`lading.stores.building.merge`).
Under torchrun every rank builds its shard and rank 0 merges: :func:`build_in_shards`.
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lading.disk import BuildContext, byte_bar, is_ours_to_replace, write_file
from lading.disk.snapshot import BUILD_MARK, BUILD_PREFIX, TMP_PREFIX
from lading.errors import SourceError, StoreFormatError
from lading.sources import ParseOptions, SourceReader, refuse_if_changed
from lading.stores.building.inputs import PiecesReader, check_shard_count, input_files, plan_shard
from lading.stores.building.merge import Shard, manifest_of, read_shard
from lading.stores.building.writer import SHARD_FILE, Duplicates, write_shard
from lading.stores.layout import FORMAT_NAME, shard_name
from lading.stores.packed import PackedStore

BUILD_FILE = BUILD_MARK  # in build-<id>/: the inputs, options and n every shard was made with


@dataclass(frozen=True)
class ShardReport:
    """What a shard worker did.

    Attributes:
        dest: the store the shard belongs to.
        build_id: the build directory (``dest/<build_id>``) the shards of this build share.
        shard: this shard's number.
        shards: how many shards the build has.
        rows: documents in this shard.
        reused: the shard was there already (a rerun), nothing was written.
    """

    dest: Path
    build_id: str
    shard: int
    shards: int
    rows: int
    reused: bool

    def __str__(self) -> str:
        did = "already built" if self.reused else f"{self.rows:,} documents"
        return (
            f"{self.dest}: shard {self.shard}/{self.shards} of {self.build_id}: {did}; once all "
            f"{self.shards} are built: lading merge {self.dest}"
        )


def check_shard(shard: tuple[int, int]) -> tuple[int, int]:
    """``(i, n)`` checked: two whole numbers (an int or a numpy integer; not a float, a bool
    or a string, which ``int()`` would quietly turn into another shard), ``0 <= i < n``."""
    try:
        i, n = (_whole(x) for x in shard)
    except (TypeError, ValueError):
        raise ValueError(
            f"shard={shard!r}: expected (i, n), two whole numbers, e.g. (0, 4) for the first "
            "of 4 shards"
        ) from None
    if not 0 <= i < n:
        raise ValueError(f"shard {i}/{n}: i must be in [0, {n}) (shards are numbered from 0)")
    return i, n


def _whole(x: object) -> int:
    if isinstance(x, bool):
        raise TypeError("a bool is not a shard number")
    return operator.index(x)  # type: ignore[arg-type]  # TypeError for what is not an integer


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


def input_stats(files: list[Path]) -> list[list[Any]]:
    """Each input's identity as every worker sees it alike: resolved path, size, mtime, inode
    (their stat, not their bytes: each worker reads only its part)."""
    stats = []
    for path in files:
        st = path.stat()
        stats.append([str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino])
    return stats


def derive_build_id(files: list[Path], options: dict[str, Any], n: int) -> str:
    """The build directory's name every worker computes alike: a digest of the inputs'
    identity (:func:`input_stats`), options and n."""
    stats = input_stats(files)
    blob = json.dumps({"inputs": stats, "options": options, "n": n}, sort_keys=True, default=str)
    return f"{BUILD_PREFIX}{hashlib.sha256(blob.encode('utf-8')).hexdigest()[:16]}"


def _differ(a: list[Any], b: list[Any]) -> str:
    """How two lists of :func:`input_stats` differ, in a few words."""
    mine, theirs = {str(x[0]): x for x in a}, {str(x[0]): x for x in b}  # checked lists
    if set(mine) != set(theirs):
        extra = sorted(set(theirs) - set(mine)) or sorted(set(mine) - set(theirs))
        return (
            f"{len(mine)} input file(s) against {len(theirs)} ({extra[0]!r} is only in one; an "
            "input folder or glob that gained or lost a file between the two)"
        )
    changed = next(p for p in mine if mine[p] != theirs[p])
    return f"{changed!r} differs (size, mtime or inode: the file changed between the two)"


def claim_build(where: Path, recipe: dict[str, Any], shard: int) -> None:
    """Record ``recipe`` (inputs, options, n) as ``where/build.json``, or refuse when a shard
    of this build read other inputs: two sources under one explicit ``build_id`` (a Slurm
    array whose input folder gained a file while tasks waited) never share a build directory.

    Raises:
        StoreFormatError: naming the build, both inputs and the fix (another build id).
    """
    blob = json.dumps(recipe, indent=2, sort_keys=True).encode()
    if not where.is_dir():  # made whole with its build.json: a racing worker never sees it
        tmp = where.parent / f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"  # bare
        tmp.mkdir(parents=True)
        write_file(tmp / BUILD_FILE, blob)
        try:
            os.rename(tmp, where)
        except OSError:  # another worker made it first: compare with what it recorded
            shutil.rmtree(tmp, ignore_errors=True)
    path = where / BUILD_FILE
    try:
        first = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        first = None
    theirs = first.get("stats") if isinstance(first, dict) else None
    if isinstance(theirs, list) and theirs != recipe["stats"]:
        raise StoreFormatError(
            f"shard {shard} reads other inputs than the shards already in {where}: "
            f"{_differ(recipe['stats'], theirs)}. Shards of one build must read the same "
            f"inputs; build every shard again under a new build id (--build-id), or delete "
            f"{where} to start this build over"
        )
    if theirs is None:  # written by a lading that did not record the inputs: record them
        tmp_file = where.parent / f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}.json"
        write_file(tmp_file, blob)
        os.replace(tmp_file, path)  # whole or absent: a reader never sees half


def check_same_inputs(dest: Path, shards: list[Shard]) -> None:
    """Refuse shards that read different inputs (each ``shard.json`` records the stats of the
    whole input it was planned over), naming both shards and the difference. Shards written by
    a lading that did not record them (or by a Ray ``Datasink``) are not compared."""
    recorded = [(s, s.record.get("input_stats")) for s in shards]
    known = [(s, stats) for s, stats in recorded if isinstance(stats, list)]
    for shard, stats in known[1:]:
        first, theirs = known[0]
        if stats != theirs:
            raise StoreFormatError(
                f"{dest}: shards {dest / first.dir} and {dest / shard.dir} read different "
                f"inputs ({_differ(theirs, stats)}; the input_stats of their shard.json): "
                "merged, the store would mix two sources. "
                "Build every shard again under a new build id (--build-id) from one input"
            )


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
    check_shard_count(files, n, format)  # before anything is planned or written: n is bounded
    pieces = plan_shard(files, n, format, i)
    bid = build_id or derive_build_id(files, options, n)
    if not bid.startswith(BUILD_PREFIX) or "/" in bid:
        raise ValueError(f"build_id {bid!r}: expected {BUILD_PREFIX}<letters, digits>")
    if not is_ours_to_replace(dest):
        raise FileExistsError(f"{dest} exists and is not a lading store; refusing to build into it")
    where = dest / bid / shard_name(i, n)
    dest.mkdir(parents=True, exist_ok=True)
    stats = input_stats(files)
    recipe = {"build_id": bid, "n": n, "options": options, "inputs": [str(p) for p in files]}
    claim_build(where.parent, {**recipe, "stats": stats}, i)
    with BuildContext(where, None, "shard") as build:
        if (where / SHARD_FILE).is_file():  # a rerun: this shard is whole already
            rows = json.loads((where / SHARD_FILE).read_text())["rows"]
            return ShardReport(dest, bid, i, n, rows, True)
        with build.scratch() as tmp:
            reader = PiecesReader(pieces, format, on_error, parse)
            before = reader.fingerprints()  # before reading: a change while reading is seen
            with byte_bar(f"shard {i}/{n}", reader.total_bytes, progress) as bar:
                written = write_shard(
                    reader, tmp, tokenizer=tok, max_length=max_length, duplicates=duplicates,
                    keep_tokenizer=i == 0, allow_empty=n > 1, progress=bar,
                    about={"options": options, "fingerprints": before, "input_stats": stats,
                           "source": [p.describe() for p in pieces]},
                )  # fmt: skip
            for fingerprint in before:
                refuse_if_changed(fingerprint)
            build.publish_new(tmp)
    return ShardReport(dest, bid, i, n, written.record["rows"], False)


def merge_store(dest: Path, build_id: str | None = None) -> PackedStore:
    """Commit the shards of a parallel build of ``dest`` as its new snapshot; open it.

    ``build_id``: which build (default: the one whose shards are all there and that is not
    the current snapshot's). A build already committed is opened as it is.

    Raises:
        StoreFormatError: shards are missing (naming them and the command that builds them),
            or two shards hold the same id (naming both).
    """
    with BuildContext(dest, FORMAT_NAME) as build:
        previous = build.previous
        bid = build_id or pending_build(dest, previous)
        if previous is not None and previous.get("build_id") == bid:
            return PackedStore(dest, snapshot=previous["snapshot"])
        shards = complete_shards(dest, bid)
        check_same_inputs(dest, shards)
        recipe = json.loads((dest / bid / BUILD_FILE).read_text())
        for shard in shards:
            if shard.record.get("options") != recipe["options"]:
                raise StoreFormatError(
                    f"{dest / shard.dir} was built with other options than {bid} records "
                    f"({shard.record.get('options')} vs {recipe['options']}); build it again"
                )
        commit_shards(build, bid, shards, recipe)
    return PackedStore(dest, snapshot=build.snapshot)


def commit_shards(
    build: BuildContext, bid: str, shards: list[Shard], recipe: dict[str, Any]
) -> str:
    """Under ``build`` (the store's build context): the index over ``shards`` and the commit
    of the new snapshot; its id. ``recipe``: the build's ``options`` and ``inputs``."""
    started = time.perf_counter()
    if sum(s.record["rows"] for s in shards) == 0:
        where = recipe["inputs"][0] if recipe.get("inputs") else build.dest
        raise SourceError(where, None, "no documents in any shard; a store of 0 is refused")
    options = recipe["options"]
    about = {"build_id": bid, **_sources(shards, options["format"]), **options}
    with build.scratch() as tmp:
        meta = manifest_of(build.dest, tmp, build.snapshot, shards, about)
        meta["build"]["seconds"] = round(time.perf_counter() - started, 3)
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


def complete_shards(dest: Path, bid: str) -> list[Shard]:
    """Every shard of build ``bid``, read from disk. Time linear in the shards present, not in
    the ``n`` that ``build.json`` claims.

    Raises:
        StoreFormatError: naming the shards that are missing and how to build them.
    """
    n = build_size(dest, bid)
    present = {p.name for p in (dest / bid).iterdir() if (p / SHARD_FILE).is_file()}
    have = sum(1 for name in present if _shard_number(name, n) is not None)
    missing: list[int] = []
    i = 0
    while i < n and len(missing) < 9:  # at most len(present) + 9 names looked at
        if shard_name(i, n) not in present:
            missing.append(i)
        i += 1
    if missing:
        listed = ", ".join(str(i) for i in missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise StoreFormatError(
            f"{dest}: build {bid} has {have:,} of its {n:,} shards; missing {listed}. "
            f"Build each with `lading build SOURCE {dest} --shard {missing[0]}/{n}` (the same "
            "source and options), then merge"
        )
    return [read_shard(dest, f"{bid}/{shard_name(i, n)}") for i in range(n)]


def build_size(dest: Path, bid: str) -> int:
    """The ``n`` that ``dest/bid/build.json`` records, checked to be a shard count."""
    path = dest / bid / BUILD_FILE
    try:
        n = json.loads(path.read_text(encoding="utf-8"))["n"]
    except FileNotFoundError:
        raise StoreFormatError(f"{dest} has no build {bid}") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StoreFormatError(f"{path} is damaged ({e!r}); build the shards again") from None
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise StoreFormatError(f"{path}: n = {n!r} is not a shard count; build the shards again")
    return n


def _shard_number(name: str, n: int) -> int | None:
    head, _, rest = name.removeprefix("shard-").partition("-of-")
    if rest != f"{n:05d}" or not head.isdigit() or int(head) >= n:
        return None
    return int(head)


def pending_build(dest: Path, previous: dict[str, Any] | None) -> str:
    """The build to merge: the one whose shards are all there, not already committed."""
    builds = sorted(p.name for p in dest.glob(f"{BUILD_PREFIX}*") if (p / BUILD_FILE).is_file())
    if not builds:
        raise StoreFormatError(
            f"{dest} has no shards to merge; build them first with "
            f"`lading build SOURCE {dest} --shard i/N` for i = 0 .. N-1"
        )
    done = previous.get("build_id") if previous else None
    complete, partial = [], []
    for bid in builds:
        try:
            complete_shards(dest, bid)
            complete.append(bid)
        except StoreFormatError as e:
            partial.append(e)
    fresh = [b for b in complete if b != done]
    if len(fresh) == 1 or (not fresh and done in complete):
        return fresh[0] if fresh else str(done)
    if not complete:
        raise partial[-1]
    raise StoreFormatError(
        f"{dest} has {len(fresh)} complete builds not merged ({', '.join(fresh)}); name one: "
        f"`lading merge {dest} --build-id ...`"
    )
