"""PackedStore: a memory-mapped store, opened for free in every rank and DataLoader worker.

Nothing of the corpus is copied into a process: texts, ids, fields and tokens stay in files
mapped read-only, so their pages sit once in the OS page cache and are shared by every process
on the machine. A process pays only for the rows it decodes and a few small objects.

An open store is pinned to one snapshot (:attr:`PackedStore.snapshot`): it read one manifest
and mapped exactly the files it names (:func:`lading.disk.open_snapshot`), so a rebuild that
commits meanwhile changes nothing it reads. A forked process keeps the parent's maps; a pickled
store is its path and its snapshot, so a ``spawn`` worker or another rank reopens that very
snapshot (or is told it was removed).
"""

from __future__ import annotations

import errno
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from lading.disk import OFFSET_DTYPE, MappedFile, RaggedColumn, open_snapshot
from lading.disk.ragged import check_in_order
from lading.disk.snapshot import content_id, load_manifest
from lading.errors import StaleStoreWarning, StoreFormatError
from lading.sources import Record, fingerprint_changed
from lading.stores.base import DocStore, IdLike, id_list, is_id
from lading.stores.building.inputs import spec_paths
from lading.stores.bulk import contiguous
from lading.stores.hashids import shard_keys
from lading.stores.index import IdIndex
from lading.stores.layout import (
    FORMAT_NAME,
    dtypes,
    field_column,
    index_dir,
    shards,
    tokenizer_file,
)
from lading.stores.shards import Column, ShardedColumn, range_texts, rows_bytes, whole

OnStale = Literal["warn", "raise", "ignore"]
ON_STALE_MODES: tuple[str, ...] = ("ignore", "raise", "warn")


@dataclass
class _Mapped:
    """Everything one process maps of a store."""

    meta: dict[str, Any]
    text: Column
    ids: Column
    fields: dict[str, Column]
    tokens: Column | None
    index: IdIndex


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # .../lading/


def users_frame() -> int:
    """The ``stacklevel`` that makes a warning its caller emits name the first frame outside
    lading: the user's line, whether it called ``PackedStore(...)`` or ``open_store(...)``
    (a fixed ``stacklevel=2`` named open_store's own line in ``stores/__init__.py``)."""
    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        _PACKAGE
    ):
        frame = frame.f_back
        level += 1
    return level


class PackedStore(DocStore):
    """A store built by :func:`lading.build_store`, memory-mapped.

    Args:
        path: the store directory.
        on_stale: what to do when the source changed since the build: ``"warn"`` (default)
            emits a :class:`~lading.errors.StaleStoreWarning`, ``"raise"`` refuses to open,
            ``"ignore"`` says nothing. :attr:`stale` holds the reason either way.
        snapshot: open this snapshot (default: the current one).

    Attributes:
        snapshot: the id of the snapshot this object reads, fixed when it opened.

    Raises:
        StoreFormatError: the directory is missing, truncated, foreign or of another version.
        SnapshotGoneError: ``snapshot`` was removed.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        on_stale: OnStale = "warn",
        snapshot: str | None = None,
    ) -> None:
        if on_stale not in ON_STALE_MODES:
            raise ValueError(f"unknown on_stale {on_stale!r}; choose from {sorted(ON_STALE_MODES)}")
        self.path = Path(path)
        self.on_stale = on_stale
        self._mapped: _Mapped | None = _map(self.path, snapshot)
        self.snapshot: str = self._mapped.meta["snapshot"]
        self.stale = _stale(self._mapped.meta)
        if self.stale and on_stale == "raise":
            raise StoreFormatError(f"store {self.path} is stale: {self.stale}; rebuild it")
        if self.stale and on_stale == "warn":
            warnings.warn(
                f"store {self.path} is stale: {self.stale}",
                StaleStoreWarning,
                stacklevel=users_frame(),
            )

    def __repr__(self) -> str:
        return f"PackedStore({str(self.path)!r})"

    def __getstate__(self) -> dict[str, Any]:
        # the maps belong to this process; a copy elsewhere reopens the same snapshot
        return {
            "path": str(self.path),
            "on_stale": self.on_stale,
            "stale": self.stale,
            "snapshot": self.snapshot,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
        self.on_stale = state["on_stale"]
        self.stale = state["stale"]
        self.snapshot = state["snapshot"]
        self._mapped = None

    def _maps(self) -> _Mapped:
        # a forked child keeps these maps (read-only, shared pages); an unpickled copy maps
        # its snapshot on first use
        if self._mapped is None:
            self._mapped = _map(self.path, self.snapshot)
        return self._mapped

    @property
    def content_id(self) -> str:
        """A digest of this snapshot's files (sizes and CRC32s): equal for two builds of the
        same data, what caches and loader states are keyed on."""
        return content_id(self._maps().meta)

    @property
    def meta(self) -> dict[str, Any]:
        """The store's ``meta.json``: counts, dtypes, source, build options and report."""
        return self._maps().meta

    @property
    def fields(self) -> tuple[str, ...]:
        """Names of the extra fields stored besides the text (e.g. ``title``)."""
        return tuple(self._maps().fields)

    @property
    def has_tokens(self) -> bool:
        """Whether the store was built with a tokenizer."""
        return self._maps().tokens is not None

    @property
    def token_info(self) -> dict[str, Any] | None:
        info: dict[str, Any] | None = self._maps().meta.get("tokens")
        return info

    @property
    def tokenizer_path(self) -> Path | None:
        name = tokenizer_file(self._maps().meta)
        return self.path / name if name is not None else None

    def __len__(self) -> int:
        return len(self._maps().text)

    def __contains__(self, doc_id: object) -> bool:
        if not is_id(doc_id):
            return False
        return self._maps().index.row(doc_id) >= 0  # type: ignore[arg-type]  # is_id checked

    def ids(self) -> list[str]:
        ids = self._maps().ids
        return range_texts(ids, 0, len(ids))

    def find_rows(self, ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
        """Row numbers of ``ids`` (request order), -1 for each absent one: from the id index."""
        return self._maps().index.rows(id_list(ids, "find_rows"))

    def rows(self, ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
        # the index reports the first absent id itself: no second pass over the rows
        ids = id_list(ids, "rows")  # (a Series' values: ids[absent] is by position)
        rows, absent = self._maps().index.lookup(ids)
        if absent >= 0:
            raise self.missing(ids[absent])
        return rows

    def __getitem__(self, doc_id: IdLike) -> str:
        maps = self._maps()
        row = maps.index.row(doc_id)
        if row < 0:
            raise self.missing(doc_id)
        return maps.text.text(row)

    def get_many(self, ids: Sequence[IdLike]) -> list[str]:
        return self._maps().text.texts(self.rows(id_list(ids, "get_many")))

    def get_many_bytes(self, ids: Sequence[IdLike]) -> list[bytes]:
        """UTF-8 bytes of ``ids`` in request order, not decoded: one copy per document instead
        of two (for long documents that a tokenizer or a writer takes as bytes anyway).
        Each ``bytes`` is the caller's own."""
        return rows_bytes(self._maps().text, self.rows(id_list(ids, "get_many_bytes")))

    def texts_range(self, start: int, stop: int) -> list[str]:
        """Texts of rows ``start .. stop - 1`` (a scan): made in bulk by Arrow when ``pyarrow``
        is installed (see :mod:`lading.stores.bulk`), each ``str`` the caller's own."""
        return range_texts(self._maps().text, start, stop)

    def ids_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        """Ids of rows (as returned by :meth:`rows`)."""
        return self._maps().ids.texts(np.asarray(rows, dtype=np.int64))

    def tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` the tokens were made with (a copy is kept in the store)."""
        path = self.tokenizer_path
        if path is None:
            raise self.no_tokens()
        from lading.stores.tokens import load_tokenizer

        return load_tokenizer(path)

    def texts_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        """Texts of rows (as returned by :meth:`rows`); a run of consecutive rows (a scan)
        goes through :meth:`texts_range`."""
        text = self._maps().text
        rows = np.asarray(rows, dtype=np.int64)
        run = contiguous(rows, len(text))
        return range_texts(text, *run) if run else text.texts(rows)

    def field(self, doc_id: IdLike, name: str) -> str:
        """Field ``name`` of a document (``""`` where that document had none)."""
        maps = self._maps()
        if name not in maps.fields:
            raise KeyError(f"{self!r} has no field {name!r}; it has {sorted(maps.fields)}")
        return maps.fields[name].texts(self.rows([doc_id]))[0]

    def record(self, doc_id: IdLike) -> Record:
        """Id, text and fields of one document."""
        maps = self._maps()
        rows = self.rows([doc_id])
        fields = {name: col.texts(rows)[0] for name, col in maps.fields.items()}
        return Record(maps.ids.texts(rows)[0], maps.text.texts(rows)[0], fields)

    def token_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every document's token ids back to back and their ``n + 1`` offsets (row order):
        views of the map for a store of one shard, a copy for a store built in shards. What
        :func:`lading.device.to_device` copies to a GPU."""
        tokens = self._maps().tokens
        if tokens is None:
            raise self.no_tokens()
        return whole(tokens)

    def tokens_at(self, rows: npt.NDArray[np.int64]) -> list[np.ndarray]:
        """Token ids of rows (as returned by :meth:`rows`), each a read-only view of the map
        (no copy); :meth:`tokens` and :meth:`tokens_many` go through here."""
        tokens = self._maps().tokens
        if tokens is None:
            raise self.no_tokens()
        return tokens.arrays(np.asarray(rows, dtype=np.int64))


def _stale(meta: dict[str, Any]) -> str | None:
    """Why a source of the store differs from what was built, or None."""
    wide = unnamed_columns(meta)
    if wide:
        return wide
    sources = meta.get("sources") or [meta.get("source", {})]
    for source in sources if isinstance(sources, list) else []:
        changed = fingerprint_changed(source)
        if changed:
            return changed
    return listing_changed(meta)


def listing_changed(meta: dict[str, Any]) -> str | None:
    """Why the folder or glob a store was built from (``source.input``) now lists other files
    than the build read (``sources``), or None: a file added or removed, which the next
    build's reuse decision (it lists the folder again) would see. None where no folder or
    glob was recorded (a file, a list, a store built before lading recorded it), or it lists
    nothing here (the store copied to another machine, as a missing source file is no
    change)."""
    source, sources = meta.get("source"), meta.get("sources")
    spec = source.get("input") if isinstance(source, dict) else None
    if not isinstance(spec, dict) or len(spec) != 1 or not isinstance(sources, list):
        return None
    kind, value = next(iter(spec.items()))
    if kind not in ("folder", "glob") or not isinstance(value, str) or not value:
        return None
    if "\0" in value or not os.path.isabs(value):
        return None  # a manifest is input: only an absolute name lading recorded is listed
    read = {s.get("path") for s in sources if isinstance(s, dict)}
    where = value if kind == "folder" else f"the files matching {value}"
    now = set()
    for path in spec_paths({kind: value}):
        resolved = str(path.resolve())
        if resolved not in read:  # the first file the build did not read: no further listing
            return f"{path} was added to {where} after the build (a build would read it)"
        now.add(resolved)
    if not now:
        return None
    removed = sorted(str(p) for p in read - now if isinstance(p, str))
    if removed:
        return f"{removed[0]} was removed from {where} after the build"
    return None


def unnamed_columns(meta: dict[str, Any]) -> str | None:
    """Why a TSV store was read with fewer columns named than its lines have, or None.

    A lading from before the refusal of wider lines (issue 33) kept the columns past the named
    ones as fields ``col<N>``: ``msmarco-docs.tsv`` read as ``id,text`` stored its URL as the
    text. Its manifest records the same options a build of today compares, so the fields it
    kept that its columns do not name are the only record of it; such a store is rebuilt, not
    reused (the rebuild refuses the wide line, naming the file and ``--columns``).
    """
    build = meta.get("build")
    if not isinstance(build, dict) or build.get("format") != "tsv":
        return None
    named = list(build.get("columns") or ("id", "text"))
    extra = [f for f in meta.get("fields", []) if f not in named]
    if not extra:
        return None
    source = (meta.get("source") or {}).get("path", "its source")
    wide = len(named) + len(extra)
    example = "id,url,title,text" if wide == 4 and named == ["id", "text"] else "…"
    return (
        f"{source} has lines of {wide} columns and {len(named)} were named "
        f"({','.join(named)}) when a lading from before the refusal of wider lines built it: "
        "it kept the others as fields "
        f"{', '.join(extra)} and its text may be another column (msmarco-docs.tsv read as "
        f"id,text stored the URL); rebuild it naming every column, e.g. lading build "
        f"{source} STORE --columns {example} --overwrite"
    )


def _map(path: Path, snapshot: str | None) -> _Mapped:
    """Map the files of one snapshot of the store at ``path`` (see the module docstring).

    Raises:
        OSError: (``EMFILE``) where maps keep a descriptor each (no C library to map with:
            :mod:`lading.disk.maps`), the maps need more open files than this process may
            hold (~2 a column a shard), naming how many and the fix.
    """
    try:
        return open_snapshot(path, FORMAT_NAME, lambda meta: _map_snapshot(path, meta), snapshot)
    except OSError as e:
        if e.errno != errno.EMFILE:
            raise
    # out of the handler: the error and its frames are gone, and with them the maps made so
    # far, so their descriptors are free again to read the manifest for the message
    raise OSError(errno.EMFILE, too_many_files(path))


def too_many_files(path: Path) -> str:
    """What to do where a store's maps meet the limit of open files. Maps keep no descriptor
    where lading maps with the C library (:mod:`lading.disk.maps`); elsewhere Python's
    ``mmap`` keeps one a map, about two a column a shard, so a store merged from a few
    hundred shards needs more than the 1,024 many systems allow by default."""
    try:
        meta = load_manifest(path, FORMAT_NAME)
        files = len(meta["files"])
        shard_count = len(shards(meta))
    except (OSError, StoreFormatError, KeyError, TypeError):
        files, shard_count = 0, 0
    soft, hard = _open_files_limit()
    return (
        f"{path}: its {shard_count:,} shards' {files:,} files are mapped, each map holding a file "
        f"descriptor, and this process may hold {soft} open files (hard limit {hard}). Raise "
        f"the limit before opening it (`ulimit -n {max(4 * files, 4096)}` in the shell, or "
        "resource.setrlimit(resource.RLIMIT_NOFILE, ...) in Python, up to the hard limit), "
        "or build it in fewer shards"
    )


def _open_files_limit() -> tuple[str, str]:
    """This process's (soft, hard) limit of open files, in words."""
    try:
        import resource

        limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return "?", "?"
    infinity = getattr(resource, "RLIM_INFINITY", -1)
    soft, hard = ("unlimited" if v == infinity else f"{v:,}" for v in limits)
    return soft, hard


def _map_snapshot(path: Path, meta: dict[str, Any]) -> _Mapped:
    """The snapshot ``meta`` describes; a key it lacks is a ``KeyError`` that
    :func:`~lading.disk.snapshot.open_snapshot` names with the manifest it read (``meta.json``
    or a pinned snapshot's ``manifest.json``)."""
    parts = shards(meta)
    types = dtypes(meta)
    names = ["text", "ids", *(field_column(f) for f in meta["fields"])]
    if meta.get("tokens"):
        names.append("tokens")
    spans = meta.get("global_offsets", {})
    columns = {name: _column(path, parts, name, types[name], spans.get(name)) for name in names}
    keys = shard_keys(path, meta) if meta["index"]["kind"] == "hash-ids" else None
    count = meta.get("count")
    index = IdIndex(path / index_dir(meta), meta["index"], keys, count)
    for column in columns.values():
        if len(column) != count:
            raise StoreFormatError(
                f"{path}: a column has {len(column)} rows, the manifest's count is {count!r}; "
                "rebuild the store"
            )
    fields = {name: columns[field_column(name)] for name in meta["fields"]}
    return _Mapped(meta, columns["text"], columns["ids"], fields, columns.get("tokens"), index)


def _column(
    path: Path, parts: list[dict[str, Any]], name: str, dtype: str, spans: str | None
) -> Column:
    # rows are read by id, anywhere in the files: no read-ahead around each page fault
    maps = [
        RaggedColumn(
            path / part["columns"][name]["data"],
            path / part["columns"][name]["offsets"],
            dtype,
            random_access=True,
        )
        for part in parts
    ]
    for part, column in zip(parts, maps):
        if len(column) != part["rows"]:
            raise StoreFormatError(
                f"{path}: {part['columns'][name]['offsets']} has {len(column)} rows, the "
                f"manifest's shard rows say {part['rows']!r}; rebuild the store"
            )
    if len(maps) == 1:
        return maps[0]
    mapped = MappedFile(path / spans, random_access=True) if spans else None
    offsets = mapped.array(OFFSET_DTYPE) if mapped is not None else None
    if mapped is not None and offsets is not None:  # a store merged before issue 49
        total = sum(int(m.offsets[-1]) for m in maps)
        if len(offsets) != sum(len(m) for m in maps) + 1 or (
            int(offsets[0]) != 0 or int(offsets[-1]) != total
        ):
            raise StoreFormatError(f"{path / str(spans)} does not describe the shards; rebuild it")
        check_in_order(mapped, offsets)  # as each shard's own are (RaggedColumn)
    return ShardedColumn(maps, offsets, mapped)
