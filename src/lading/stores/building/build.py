"""``build_store``: one builder per destination, atomic, reused when nothing changed.

Under DDP every rank may call :func:`build_store` with the same arguments: one rank builds (local
rank 0 of each node for node-local disks, global rank 0 for a shared filesystem: ``shared_fs=``
or ``LADING_SHARED_FS=1|0``) while the others wait at a barrier, then all open the snapshot
their builder committed. Unrelated processes (and other nodes' builders) are serialised by the
build lock (:class:`~lading.disk.BuildContext`), and whoever comes second finds the store built
and opens it. The source's identity is taken before it is read and compared after: a source
that changed meanwhile fails the build, naming the file, and nothing is committed.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from lading.disk import BuildContext, byte_bar, committed_without_lock, intact
from lading.errors import SkippedRecordsWarning, StoreFormatError
from lading.remote.objects import is_remote
from lading.remote.settings import RemoteSettings
from lading.sources import (
    OnError,
    ParseOptions,
    SourceReader,
    detect_format,
    is_compressed,
    refuse_if_changed,
)
from lading.stores.building.group import build_in_group, build_in_shards
from lading.stores.building.inputs import (
    Piece,
    PiecesReader,
    input_files,
    input_spec,
    refuse_dest_in_source,
    refuse_mixed_formats,
)
from lading.stores.building.merge import Shard, manifest_of
from lading.stores.building.parallel import ShardReport, check_shard, source_files, write_one_shard
from lading.stores.building.parallel import merge_store as merge_shards
from lading.stores.building.shardset import derive_build_id
from lading.stores.building.writer import Duplicates, write_shard
from lading.stores.layout import FORMAT_NAME, shard_name
from lading.stores.packed import PackedStore, unnamed_columns
from lading.stores.tokens import describe_tokenizer, load_tokenizer
from lading.world import process_group, resolve_shared_fs

ShardSpec = tuple[int, int]


def build_store(
    source: Any,
    dest: str | os.PathLike[str],
    format: str | None = None,
    tokenizer: Any = None,
    max_length: int | None = None,
    on_error: OnError = "raise",
    *,
    duplicates: Duplicates = "error",
    parse: ParseOptions | None = None,
    overwrite: bool = False,
    shared_fs: bool | None = None,
    progress: bool | None = None,
    shard: Literal["auto"] | None = None,
    build_id: str | None = None,
) -> PackedStore:
    """Build a :class:`PackedStore` at ``dest`` from ``source`` (once) and open it (one shard
    of it: :func:`build_shard`).

    Args:
        source: a TSV/JSONL/TREC file (optionally .gz/.bz2/.zst), a parquet or Arrow file, a
            BEIR folder, ``"irds:<dataset-id>"``, several files of one format (a list, a
            folder of them, or a glob such as ``"corpus/*.jsonl.gz"``: read in that order,
            folder and glob sorted by path), or a reader made elsewhere (a
            :class:`~lading.sources.tables.RecordStream`, e.g. over an HF dataset; ``format``,
            ``on_error`` and ``parse`` are then the reader's own).
        dest: the store directory to create.
        format: the source format; detected from the name when None.
        tokenizer: pre-tokenize with this (a ``tokenizers.Tokenizer``, a HF fast tokenizer, a
            ``tokenizer.json`` path or a local model folder); tokens stored without special
            tokens, as uint16 when every id it may give is below 65,536 (its largest id,
            not its entry count: a vocabulary may have gaps), else uint32.
        max_length: keep at most this many tokens per document.
        on_error: ``"raise"`` (default) stops at the first malformed record naming file and
            line; ``"skip"`` skips malformed records, warns with their count and records it in
            ``meta.json``.
        duplicates: a repeated id is an error (``"error"``), or keep its ``"first"``/``"last"``
            occurrence in source order. Built in shards, the same: an id in two shards is
            refused naming both under ``"error"``, else the merge keeps the same row a
            one-process build keeps.
        parse: where ids, text and fields are in the records: JSON/parquet keys, TSV columns,
            fields kept (default: :class:`~lading.sources.ParseOptions`'s). Recorded in
            ``meta.json``: a store built with other options is rebuilt, not reused.
        overwrite: rebuild even when ``dest`` holds a store built from the same source with the
            same options (by default such a store is reused as it is).
        shared_fs: under torch.distributed, whether ``dest`` is on a filesystem every node sees:
            then global rank 0 builds; else local rank 0 of each node builds its own copy.
            Default: ``LADING_SHARED_FS`` (``1``/``0``), else False (on a shared filesystem the
            second node's builder then finds the store built, under the lock, and reuses it).
        progress: show a progress bar (default: when stderr is a terminal).
        shard: ``"auto"``: under an initialised process group, every rank builds one shard
            (:func:`build_shard`) and rank 0 merges (``dest`` must be on a filesystem every
            rank sees); without one, as None.
        build_id: with ``shard="auto"``, the build directory of the shards (default: derived).

    Returns:
        The opened store.
    """
    refuse_dest_in_source(source, dest)
    shared = resolve_shared_fs(shared_fs)
    dest_path = Path(dest)
    check_max_length(tokenizer, max_length)
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None
    parse_options = parse or ParseOptions()
    if shard is not None and shard != "auto":
        raise ValueError(
            f"build_store(shard={shard!r}): one shard of a parallel build is "
            f"lading.build_shard(source, dest, {shard!r}), then lading.merge_store(dest); "
            "build_store takes shard='auto' (one shard per rank of the process group) or None"
        )
    if shard == "auto" and process_group(min_size=2) is not None:
        refuse_shard_args(source, overwrite)
        args = (format, tok, max_length, on_error, duplicates, parse_options)
        options = _shard_options(source, args)
        return build_in_shards(source, dest_path, (*args, options), shared, build_id, progress)
    reader = _reader(source, format, on_error, parse)
    on_error = reader.on_error
    options = build_options(reader.format, on_error, duplicates, reader.options, tok, max_length)
    spec = input_spec(source)

    def build_here() -> str:
        return _build_locked(
            reader, dest_path, tok, max_length, duplicates, options, overwrite, progress, spec
        )

    return build_in_group(build_here, dest_path, shared)


def build_shard(
    source: Any,
    dest: str | os.PathLike[str],
    shard: ShardSpec,
    format: str | None = None,
    tokenizer: Any = None,
    max_length: int | None = None,
    on_error: OnError = "raise",
    *,
    duplicates: Duplicates = "error",
    parse: ParseOptions | None = None,
    progress: bool | None = None,
    build_id: str | None = None,
    cache: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> ShardReport:
    """Write shard ``i`` of ``n`` (``shard=(i, n)``) of the store at ``dest``; once all ``n``
    are written (by any worker, anywhere, any order), :func:`merge_store` commits the store.

    ``source``, ``format``, ``tokenizer``, ``max_length``, ``on_error``, ``duplicates``,
    ``parse`` and ``progress`` are :func:`build_store`'s (files only: a reader made elsewhere
    has no bytes to deal out). ``build_id``: the build directory the shards share (default:
    derived from the inputs, the options and ``n``, which every worker computes alike). A shard
    already written is reused, never overwritten: pass another ``build_id`` to rebuild. See
    :mod:`lading.stores.building.parallel`. ``dest`` may be an object-store URL: the shard
    is written beside the node cache ``cache`` and uploaded once whole, the bucket checked
    writable first (:mod:`lading.stores.building.remote_shards`).

    Returns:
        What this worker did (rows written, or reused), printable as the next step to take.
    """
    if is_remote(dest):  # shards a bucket's merge would refuse: before anything is read
        from lading.stores.building.remote_shards import refuse_dropping_duplicates

        refuse_dropping_duplicates(os.fspath(dest), duplicates)
    refuse_shard_args(source, False)
    refuse_dest_in_source(source, dest)
    check_max_length(tokenizer, max_length)
    settings = None
    if is_remote(dest):  # a bucket that refuses writes: one line before the source is read
        from lading.stores.building.upload import check_writable

        settings = RemoteSettings.of(cache, None, storage_options)
        check_writable(os.fspath(dest), settings)
        from lading.stores.building.bucket_kind import check_bucket_kind

        check_bucket_kind(os.fspath(dest), settings, FORMAT_NAME)
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None
    args = (format, tok, max_length, on_error, duplicates, parse or ParseOptions())
    options = _shard_options(source, args)

    def write(where: Path, bid: str | None = build_id) -> ShardReport:
        return write_one_shard(
            source,
            where,
            check_shard(shard),
            format=format,
            tok=tok,
            max_length=max_length,
            on_error=on_error,
            duplicates=duplicates,
            parse=args[5],
            options=options,
            build_id=bid,
            progress=progress,
        )

    if settings is not None:  # shard built beside the node cache, uploaded once whole
        from lading.stores.building.remote_shards import shard_into_bucket

        i, n = check_shard(shard)
        files = source_files(source, format, args[5])
        bid = build_id or derive_build_id(files, options, n)
        return shard_into_bucket(os.fspath(dest), (i, n), lambda at: write(at, bid), settings, bid)
    return write(Path(dest))


def check_max_length(tokenizer: Any, max_length: int | None) -> None:
    """Refuse a ``max_length`` that is not an int of at least 1 (it is a slice of each
    document's ids: -1 dropped the last token without a word, 0 kept none), or one given
    without a tokenizer: it cuts token ids, and a store built with no tokenizer has none (it
    was taken and ignored)."""
    if max_length is None:
        return
    if isinstance(max_length, bool) or not isinstance(max_length, int):
        raise ValueError(
            f"max_length={max_length!r}: the tokens kept per document must be an int of at "
            f"least 1 (got a {type(max_length).__name__}); pass e.g. max_length=512"
        )
    if max_length < 1:
        raise ValueError(
            f"max_length={max_length}: the tokens kept per document must be at least 1 (a "
            "smaller one would cut every document's last tokens); pass e.g. max_length=512, "
            "or leave it out to keep every token"
        )
    if tokenizer is None:
        raise ValueError(
            f"max_length={max_length} cuts each document's token ids, and without a tokenizer "
            "the store keeps none: pass tokenizer= (--tokenizer) too, or leave max_length out"
        )


def refuse_shard_args(source: Any, overwrite: bool) -> None:
    """Refuse what a shard cannot take: a reader made elsewhere, or ``overwrite`` (a store's
    and a token corpus's sharded builds, and the CLI's ``--shard``, alike)."""
    if isinstance(source, SourceReader) or overwrite:
        raise ValueError(
            "a shard reads files (not a reader made elsewhere) and is never overwritten: "
            "its directory is named by the inputs and options; pass build_id= to rebuild"
        )


def _shard_options(source: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    """The build options a sharded build records (the format detected from the first file;
    files of several formats refused, as a one-process build refuses them, by every shard:
    one holding files of one format only would build)."""
    given, tok, max_length, on_error, duplicates, parse = args
    files = source_files(source, given, parse)
    if given is None and len(files) > 1:  # (by name: no file opened)
        refuse_mixed_formats((Path(path), detect_format(path)) for path in files)
    fmt = given or SourceReader(files[0], None, on_error, parse).format
    parse.refuse_ignored(fmt, files[0])
    return build_options(fmt, on_error, duplicates, parse, tok, max_length)


def _reader(source: Any, format: str | None, on_error: OnError, parse: ParseOptions | None) -> Any:
    """The one reader a one-process build streams: the caller's, several files' or a file's."""
    if isinstance(source, SourceReader):
        if parse is not None:
            raise ValueError(
                f"{source.source} is a reader, which carries its own ParseOptions; make the "
                "reader with them instead of passing parse= here"
            )
        return source
    files = input_files(source)
    reader: PiecesReader | SourceReader
    if files is not None:
        reader = PiecesReader(
            [Piece(path) for path in files], format, on_error, parse or ParseOptions()
        )
    else:
        reader = SourceReader(source, format, on_error, parse or ParseOptions())
    reader.options.refuse_ignored(reader.format, files[0] if files else source)
    return reader


def build_options(
    fmt: Any, on_error: Any, duplicates: Any, parse: ParseOptions, tok: Any, max_length: Any
) -> dict[str, Any]:
    """What a build is made with, recorded in the manifest: another recipe is a rebuild."""
    return {
        "format": fmt,
        "on_error": on_error,
        "duplicates": duplicates,
        **parse.to_dict(),
        "tokenizer": describe_tokenizer(tok) if tok is not None else None,
        "max_length": max_length,
    }


def merge_store(
    dest: str | os.PathLike[str],
    *,
    build_id: str | None = None,
    cache: str | os.PathLike[str] | None = None,
    cache_bytes: int | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Any:
    """Commit the shards of a parallel build of ``dest`` (all of them written by
    ``build_shard(..., (i, n))`` or ``lading build ... --shard i/N``) as the store's new
    snapshot, and open it. See :func:`lading.stores.building.parallel.merge_store`. A URL
    ``dest``: the merge is committed in the bucket (``meta.json`` last) and the store opened
    there through the node cache ``cache`` (:mod:`lading.stores.building.remote_shards`).

    ``build_id``: the build to commit (a shard's report names it: ``report.build_id``); by
    default the one complete build whose shards ran since the current snapshot was committed
    (or were never merged), refused where there are several, the current one's included
    (:func:`lading.stores.building.pending.pending_build`). A pipeline that names its own
    build never commits another's left unmerged in ``dest``."""
    if is_remote(dest):
        from lading.stores.building.remote_shards import merge_store_remote
        from lading.stores.remote.store import RemoteStore

        settings = RemoteSettings.of(cache, cache_bytes, storage_options)
        snapshot = merge_store_remote(os.fspath(dest), build_id, settings)
        return RemoteStore(os.fspath(dest), settings, snapshot=snapshot)
    return merge_shards(Path(dest), build_id)


def reusable(meta: dict[str, Any] | None, reader: Any, options: dict[str, Any]) -> bool:
    """Whether ``meta`` (a store's manifest) is a store of this very source built with
    ``options``.

    The source must match by path, size, the hash of its first and last 64 KiB, its
    modification time and its file identity (device, inode), so a copy or a ``touch`` of the
    source rebuilds: the mtime is what tells a same-size edit in the middle, which the hash
    does not read (make's rule; see :func:`lading.sources.fingerprint.fingerprint_changed`).
    A TSV store whose fields its columns do not name was built by a lading that kept a wider
    line's extra columns (:func:`~lading.stores.packed.unnamed_columns`): never reused.
    """
    if meta is None or unnamed_columns(meta):
        return False  # a TSV read with fewer columns named than it has (see unnamed_columns)
    build = meta.get("build", {})
    read = reader.options.read_by(reader.format)
    if ParseOptions.from_dict(build).read_by(reader.format) != read:
        # compared as the format reads them: a store recorded before keep_fields, or with an
        # option its format never read (taken and ignored then, refused now), still matches
        return False
    if any(build.get(k) != v for k, v in options.items() if k not in ParseOptions.KEYS):
        return False
    recorded = meta.get("sources") or [meta.get("source", {})]
    now = fingerprints(reader)
    if len(recorded) != len(now):
        return False
    return all(r.get(k) == v for r, fp in zip(recorded, now) for k, v in fp.items())


def fingerprints(reader: Any) -> list[dict[str, Any]]:
    """The identity of every file ``reader`` reads (one for a file, irds or a stream)."""
    many = getattr(reader, "fingerprints", None)
    return list(many()) if many is not None else [reader.fingerprint()]


def _opens(dest: Path, manifest: dict[str, Any]) -> bool:
    """Whether the snapshot ``manifest`` names passes every check an open makes: its files'
    sizes and end pages (:func:`~lading.disk.intact`), then the open's own (offsets in order,
    an id index that fits): a snapshot its open refuses, with advice to rebuild, is built
    again, never reused. Damage inside a file that only a full read finds (``lading
    verify``) is not seen here; its fix is a build with ``overwrite``."""
    if not intact(dest, manifest, FORMAT_NAME):
        return False
    try:
        PackedStore(dest, snapshot=str(manifest["snapshot"]))
    except StoreFormatError:
        return False
    return True


def _build_locked(
    reader: Any,
    dest: Path,
    tok: Any,
    max_length: int | None,
    duplicates: Duplicates,
    options: dict[str, Any],
    overwrite: bool,
    progress: bool | None,
    spec: dict[str, str] | None = None,
) -> str:
    """Build (or reuse) the store under its lock; the snapshot id it is at. A store already
    up to date is reused without the lock (a read), so also where none can be taken (a
    read-only mount). ``spec``: the folder or glob the files were listed from
    (:func:`~lading.stores.building.inputs.input_spec`), recorded as ``source.input``."""
    current = None if overwrite else committed_without_lock(dest, FORMAT_NAME)
    if current is not None and reusable(current, reader, options) and _opens(dest, current):
        return str(current["snapshot"])
    started = time.perf_counter()
    with BuildContext(dest, FORMAT_NAME) as build:
        previous = build.previous
        if not overwrite and reusable(previous, reader, options):
            assert previous is not None
            if _opens(dest, previous):  # (damaged: built again, not reused)
                return str(previous["snapshot"])
        build.check_ours()
        with build.scratch() as tmp:
            where = tmp / shard_name(0, 1)
            where.mkdir()
            before = fingerprints(reader)  # before reading: a change while reading is seen
            with _progress_bar(reader, progress) as bar:
                written = write_shard(
                    reader,
                    where,
                    tokenizer=tok,
                    max_length=max_length,
                    duplicates=duplicates,
                    progress=bar,
                )
            for fingerprint in before:
                refuse_if_changed(fingerprint)
            if len(before) == 1:
                source = {**before[0], "format": reader.format}
            else:
                source = {"path": str(reader.source), "format": reader.format}
            if spec is not None:  # an open lists it again: a file added there is a change
                source["input"] = spec
            shard = Shard(f"{build.snapshot}/{where.name}", written.record, written.keys, before)
            recipe = {
                "build_id": build.snapshot,
                "source": source,
                "sources": before,
                **options,
                "seconds": round(time.perf_counter() - started, 3),
            }
            meta = manifest_of(dest, tmp, build.snapshot, [shard], recipe)
            build.commit(tmp, meta)
    if meta["build"]["skipped"]:
        first = meta["build"]["skip_examples"][0]
        warnings.warn(
            f"skipped {meta['build']['skipped']} malformed record(s) of {reader.source} "
            f"building {dest}; first: {first}",
            SkippedRecordsWarning,
            stacklevel=6,  # the caller of build_store (through its keyword guard)
        )
    return str(meta["snapshot"])


def _progress_bar(reader: Any, enabled: bool | None) -> Any:
    path = reader.path
    total = getattr(reader, "total_bytes", None)
    if path is not None and not is_compressed(path):
        total = path.stat().st_size
    return byte_bar(f"building {Path(str(reader.source)).name}", total, enabled)
