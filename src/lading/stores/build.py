"""``build_store``: one builder per destination, atomic, reused when nothing changed.

Under DDP every rank may call :func:`build_store` with the same arguments: one rank builds (local
rank 0 of each node for node-local disks, global rank 0 for a shared filesystem: ``shared_fs=``
or ``LADING_SHARED_FS=1|0``) while the others wait at a barrier, then all open the same files.
Unrelated processes (and other nodes' builders) are serialised by the build lock, and whoever
comes second finds the store built and opens it.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lading.disk import (
    build_lock,
    byte_bar,
    is_ours_to_replace,
    publish,
    read_meta,
    remove_dead_temps,
    staging,
)
from lading.errors import SkippedRecordsWarning, StoreFormatError
from lading.sources import (
    OnError,
    ParseOptions,
    SourceReader,
    is_compressed,
)
from lading.stores.layout import FORMAT_NAME
from lading.stores.packed import PackedStore
from lading.stores.tokens import describe_tokenizer, load_tokenizer
from lading.stores.writer import Duplicates, write_store
from lading.world import World, resolve_shared_fs


def build_store(
    source: str | os.PathLike[str] | SourceReader,
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
) -> PackedStore:
    """Build a :class:`PackedStore` at ``dest`` from ``source`` (once) and open it.

    Args:
        source: a TSV/JSONL/TREC file (optionally .gz/.bz2/.zst), a parquet or Arrow file, a
            BEIR folder, ``"irds:<dataset-id>"``, or a reader made elsewhere (a
            :class:`~lading.sources.tables.RecordStream`, e.g. over an HF dataset; ``format``,
            ``on_error`` and ``parse`` are then the reader's own).
        dest: the store directory to create.
        format: the source format; detected from the name when None.
        tokenizer: pre-tokenize with this (a ``tokenizers.Tokenizer``, a HF fast tokenizer, a
            ``tokenizer.json`` path or a local model folder); tokens stored without special
            tokens, as uint16 when the vocabulary has at most 65,536 entries.
        max_length: keep at most this many tokens per document.
        on_error: ``"raise"`` (default) stops at the first malformed record naming file and
            line; ``"skip"`` skips malformed records, warns with their count and records it in
            ``meta.json``.
        duplicates: a repeated id is an error (``"error"``), or keep its ``"first"``/``"last"``.
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

    Returns:
        The opened store.
    """
    shared = resolve_shared_fs(shared_fs)
    dest_path = Path(dest)
    if isinstance(source, SourceReader):
        if parse is not None:
            raise ValueError(
                f"{source.source} is a reader, which carries its own ParseOptions; make the "
                "reader with them instead of passing parse= here"
            )
        reader, on_error = source, source.on_error
    else:
        reader = SourceReader(source, format, on_error, parse or ParseOptions())
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None
    options = {
        "format": reader.format,
        "on_error": on_error,
        "duplicates": duplicates,
        **reader.options.to_dict(),
        "tokenizer": describe_tokenizer(tok) if tok is not None else None,
        "max_length": max_length,
    }

    def build_here() -> None:
        _build_locked(reader, dest_path, tok, max_length, duplicates, options, overwrite, progress)

    return _build_in_group(build_here, dest_path, shared)


def _build_in_group(build: Callable[[], None], dest: Path, shared: bool) -> PackedStore:
    """Run ``build`` here, or under an initialised process group in the builder rank(s) only,
    the others waiting at a barrier; then open the store on every rank."""
    dist = _initialized_dist()
    if dist is None:
        build()
        return PackedStore(dest)
    world = World.detect()
    failure: BaseException | None = None
    if world.is_builder(shared):
        try:
            build()
        except BaseException as e:  # reach the barrier first, or the other ranks hang forever
            failure = e
    dist.barrier()
    if failure is not None:
        raise failure
    try:
        return PackedStore(dest)
    except StoreFormatError as e:
        raise StoreFormatError(
            f"rank {world.rank}: the store at {dest} was not built ({e}); the building rank "
            "failed, see its error"
        ) from None


def _initialized_dist() -> Any:
    # a process group can only exist if torch.distributed was imported; importing torch just
    # to ask would cost ~1 s per build
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def reusable(dest: Path, reader: SourceReader, options: dict[str, Any]) -> bool:
    """Whether ``dest`` holds a complete store of this very source built with ``options``.

    The source must match by path, size and content hash; its mtime alone may differ (a copy
    or a ``touch`` does not call for a rebuild).
    """
    try:
        meta = read_meta(dest, FORMAT_NAME)
    except StoreFormatError:
        return False
    build = meta.get("build", {})
    if ParseOptions.from_dict(build) != reader.options:
        return False  # compared as options: a store recorded before keep_fields still matches
    if any(build.get(k) != v for k, v in options.items() if k not in ParseOptions.KEYS):
        return False
    recorded = meta.get("source", {})
    now = reader.fingerprint()  # its mtime too: a same-size edit in the middle changes only it
    return all(recorded.get(k) == v for k, v in now.items())


def _build_locked(
    reader: SourceReader,
    dest: Path,
    tok: Any,
    max_length: int | None,
    duplicates: Duplicates,
    options: dict[str, Any],
    overwrite: bool,
    progress: bool | None,
) -> None:
    with build_lock(dest):
        remove_dead_temps(dest)
        if not overwrite and reusable(dest, reader, options):
            return
        if not is_ours_to_replace(dest):
            raise FileExistsError(
                f"{dest} exists and is not a lading store; refusing to replace it. Choose "
                "another destination or remove it yourself."
            )
        with staging(dest) as tmp:
            with _progress_bar(reader, progress) as bar:
                meta = write_store(
                    reader,
                    tmp,
                    tokenizer=tok,
                    max_length=max_length,
                    duplicates=duplicates,
                    build_options=options,
                    progress=bar,
                )
            publish(tmp, dest)
    if meta["build"]["skipped"]:
        first = meta["build"]["skip_examples"][0]
        warnings.warn(
            f"skipped {meta['build']['skipped']} malformed record(s) of {reader.source} "
            f"building {dest}; first: {first}",
            SkippedRecordsWarning,
            stacklevel=3,
        )


def _progress_bar(reader: SourceReader, enabled: bool | None) -> Any:
    path = reader.path
    total = path.stat().st_size if path is not None and not is_compressed(path) else None
    return byte_bar(f"building {Path(str(reader.source)).name}", total, enabled)
