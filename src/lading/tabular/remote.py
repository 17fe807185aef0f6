"""Parquet row groups from object storage: ranged GETs of column chunks through the node cache.

The footers are staged per node (:mod:`lading.tabular.remote_files`); they give every column
chunk's byte range, so a row group is read as the ranges of the columns read (touching ones
merged: usually one range a row group), through the node cache every process of the node
shares (:class:`~lading.remote.cache.NodeCache`: blocks fetched once per node, a hard
cap on disk, eviction by next use). pyarrow decodes them from memory: ``pq.ParquetFile`` over
a file object serving those ranges (:class:`~lading.tabular.remote_files.FetchedRanges`),
with the staged footer as its metadata, so it reads nothing else.

The loader knows the epoch's order of chunks before it reads one.
:func:`~lading.tabular.remote_plan.announced_reads` says which row groups the batch at a key
reads first (a chunk's are read at its first batch), and
the loader core's announce route (:mod:`lading.loading.announce`) hands them to
:meth:`RemoteParquet.prefetch` (fetched ``LOOKAHEAD`` batches ahead) and
:meth:`RemoteParquet.plan` (the epoch's whole order: what eviction keeps), from the process that
iterates; a DataLoader worker reads at the step its batch key names.

Every GET is pinned to the ETag the listing gave: an object rewritten while a run reads it is
refused (:class:`~lading.remote.objects.RemoteReadError` naming it), never read with
the old footer's offsets; the node cache's blocks are named by the dataset's objects and ETags,
so a rewritten object never meets the old one's cached bytes.

Over 400 lines, as one idea: a dataset of parquet objects read by ranges, its row reader and
the one check of its cap beside it (the footers and ranges served are
:mod:`lading.tabular.remote_files`, the plan :mod:`lading.tabular.remote_plan`).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lading.errors import ParquetError, RemoteChangedError
from lading.remote.cache import NodeCache, Planner
from lading.remote.fetch import Fetcher
from lading.remote.objects import RemoteReadError
from lading.remote.ranges import Need
from lading.remote.schedule import Schedule
from lading.remote.settings import RemoteSettings
from lading.remote.stage import keep_within
from lading.tabular.plan import Piece
from lading.tabular.read import RowReader, does_not_decode, leaf_fields, undecodable
from lading.tabular.remote_files import (
    FetchedRanges,
    Parts,
    RemoteFile,
    decode_footer,
    list_files,
    split_root,
    stage_footers,
)

Batches = Sequence[Sequence[Piece]]  # the row groups each batch reads, in order
_FOLDER = ("cap", "index_bytes", "bytes_cached", "blocks", "folder_payload", "folder_index")


class RemoteParquet:
    """The objects of a remote parquet dataset, their footers and one node cache a bucket.

    Pickled to DataLoader workers and other processes as its files (URL, size, ETag) and
    settings: the footers are read again from the node's staged copies (10,000 files of 10 KB
    footers would be 100 MB pickled to each spawned worker), the clients and caches made again
    on first use (after a fork too).
    """

    def __init__(
        self,
        files: Sequence[RemoteFile],
        footers: Sequence[bytes | None],
        settings: RemoteSettings,
    ) -> None:
        self.files, self.footers, self.settings = list(files), list(footers), settings
        self.footer_bytes = sum(len(f) for f in footers if f is not None)  # staged on the node
        self.urls = [f.url for f in self.files]
        self._index = {url: i for i, url in enumerate(self.urls)}
        self.columns: list[str] = []  # the columns read (set by the dataset)
        self._reset()

    def _reset(self) -> None:
        self._fetchers: dict[str, Fetcher] = {}
        self._caches: dict[str, NodeCache] = {}
        self._planners: dict[str, Planner] = {}
        self._meta: dict[str, Any] = {}
        self._spans: dict[tuple[str, int, tuple[str, ...]], list[tuple[int, int]]] = {}
        self._leaf_fields: dict[str, list[tuple[str, str]]] = {}
        self._closed_stats: dict[str, dict[str, Any]] = {}  # a bucket's figures at close
        self._closed = False  # closed, and not read since

    def __getstate__(self) -> dict[str, Any]:
        keep = ("files", "settings", "urls", "_index", "columns", "footer_bytes")
        return {**{k: self.__dict__[k] for k in keep}, "footers": [None] * len(self.files)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    @classmethod
    def open(cls, urls: Sequence[str], settings: RemoteSettings) -> RemoteParquet:
        """List ``urls`` (objects and prefixes) and stage their footers on this node.

        Raises:
            RemoteNotSupportedError: a scheme lading cannot reach.
            FileNotFoundError, ValueError: an object missing, a prefix without parquet, an
                object that is not parquet (one line naming it and the fix).
            RemoteReadError: a LIST or GET failed for good.
            CacheSettingsError: the cache folder was made with another cap.
        """
        settings.check_cap()
        made = cls([], [], settings)
        try:
            for url in urls:
                made._fetcher(split_root(url)[0])
            files = list_files(urls, made._fetchers)
            footers = stage_footers(files, made._fetchers, Path(settings.cache))
        except RemoteReadError as e:  # (an object replaced since the LIST: a parquet fix)
            made.close()
            raise _rewritten(e) from None
        except BaseException:
            made.close()  # (its clients: nothing else holds them)
            raise
        keep_within(Path(settings.cache), settings.index_budget(sum(map(len, footers))), None)
        found = cls(files, footers, settings)
        found._fetchers = made._fetchers  # this process's clients, already open
        return found

    # -- per process -----------------------------------------------------------------------

    def _fetcher(self, root: str) -> Fetcher:
        if root not in self._fetchers:
            # pin_every: a rewritten file's bytes at the old offsets are never read
            self._fetchers[root] = self.settings.fetcher(root, pin_every=True)
        return self._fetchers[root]

    def cache(self, root: str) -> NodeCache:
        """The node cache of bucket ``root``, as this process sees it."""
        if root not in self._caches:
            self._caches[root] = self._view(root)
            self._closed_stats, self._closed = {}, False  # (read again: figures anew)
        return self._caches[root]

    def _view(self, root: str) -> NodeCache:
        """A new view of bucket ``root``'s node cache, its blocks named by each object's
        version (its ETag, else where none its size and modification time): a dataset of
        other files of the bucket (a validation day beside the training days) shares the
        blocks of those it holds too. Named by the whole list of files, every other list
        fetched and kept every row group again (``lading train sessions``, which opens four
        lists, fetched 1.9x the bytes: a review's measure)."""
        mine = [f for f in self.files if f.root == root]
        view = self.settings.node_cache(
            self._fetcher(root),
            f"{root}@parquet",
            {f.key: f.etag for f in mine},
            {f.key: _version(f) for f in mine},
        )
        view.index_bytes = self.settings.index_budget(self.footer_bytes)
        return view

    def planner(self, root: str) -> Planner:
        """What this process's loader tells the node cache of bucket ``root`` ahead."""
        if root not in self._planners:
            self._planners[root] = Planner(self.cache(root))
        return self._planners[root]

    def metadata(self, url: str) -> Any:
        """The parquet metadata of object ``url`` (from its staged footer)."""
        if url not in self._meta:
            i = self._index[url]
            footer = self.footers[i]
            if footer is None:  # a pickled copy: the node's staged footer (pinned to the ETag)
                file = self.files[i]
                fetchers = {file.root: self._fetcher(file.root)}
                try:
                    footer = stage_footers([file], fetchers, Path(self.settings.cache))[0]
                except RemoteReadError as e:  # (replaced since the dataset opened)
                    raise _rewritten(e) from None
            self._meta[url] = decode_footer(footer, url)
        return self._meta[url]

    def _fields(self, url: str) -> list[tuple[str, str]]:
        """The top-level field and the dotted path of each leaf column of object ``url``."""
        if url not in self._leaf_fields:
            schema = self.metadata(url).schema
            paths = [schema.column(j).path for j in range(len(schema))]
            self._leaf_fields[url] = list(zip(leaf_fields(schema), paths))
        return self._leaf_fields[url]

    # -- byte ranges -------------------------------------------------------------------------

    def spans(self, piece: Piece, columns: Sequence[str] | None = None) -> list[tuple[int, int]]:
        """The byte ranges of ``piece``'s column chunks of ``columns`` (default: the columns
        read), touching ones merged (all columns of a row group: one range)."""
        names = tuple(self.columns if columns is None else columns)
        found = self._spans.get((piece.path, piece.row_group, names))
        if found is None:
            meta = self.metadata(piece.path)
            group = meta.row_group(piece.row_group)
            ranges = []
            for j in _leaves(self._fields(piece.path), names):
                chunk = group.column(j)
                start = chunk.data_page_offset
                if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                    start = chunk.dictionary_page_offset
                ranges.append((start, start + chunk.total_compressed_size))
            found = []
            for start, end in sorted(ranges):
                if found and start <= found[-1][1]:
                    found[-1] = (found[-1][0], max(found[-1][1], end))
                else:
                    found.append((start, end))
            self._check_within(piece, found, meta)
            self._spans[piece.path, piece.row_group, names] = found
        return found

    def _check_within(self, piece: Piece, spans: list[tuple[int, int]], meta: Any) -> None:
        """Refuse column chunks that the footer places past the object's data (bytes cut
        from its middle, its footer kept): each GET of them came back short, and was retried
        as a network fault."""
        data_end = self._file(piece.path).size - meta.serialized_size - 8
        if spans and spans[-1][1] > data_end:
            raise ParquetError(
                f"{piece.path}, row group {piece.row_group}: its footer puts column chunks at "
                f"bytes {spans[-1][0]}-{spans[-1][1]}, past the object's data (bytes 0-"
                f"{data_end}); the file is damaged: write it again"
            )

    def largest_group(self) -> int:
        """Bytes of the largest row group's ranges (what one read must hold)."""
        return max(
            sum(b - a for a, b in self.spans(Piece(url, g, 0)))
            for url in self.urls
            for g in range(self.metadata(url).num_row_groups)
        )

    def _file(self, url: str) -> RemoteFile:
        return self.files[self._index[url]]

    def read(
        self, pieces: Iterable[Piece], step: int | None, columns: Sequence[str] | None = None
    ) -> dict[tuple[str, int], Parts]:
        """The ranges of ``columns`` (default: those read) of each of ``pieces`` (one cache
        read a bucket), read at ``step``.

        Raises:
            RemoteReadError: a GET failed for good; an object rewritten since the dataset was
                opened is named with the fix.
        """
        by_root: dict[str, list[tuple[tuple[str, int], int, int]]] = {}
        for piece in pieces:
            file = self._file(piece.path)
            for a, b in self.spans(piece, columns):
                by_root.setdefault(file.root, []).append(((piece.path, piece.row_group), a, b))
        out: dict[tuple[str, int], Parts] = {}
        for root, wanted in by_root.items():
            spans = [(self._file(k[0]).key, a, b) for k, a, b in wanted]
            try:
                datas = self.cache(root).read(spans, step)
            except RemoteReadError as e:
                raise _rewritten(e) from None
            for (k, a, _), data in zip(wanted, datas):
                out.setdefault(k, []).append((a, data))
        return out

    def decode(self, piece: Piece, parts: Parts, columns: Sequence[str]) -> Any:
        """Row group ``piece`` as an Arrow table of ``columns``, from its ranges ``parts``.

        Raises:
            ValueError: the bytes do not decode (the object is damaged), naming it.
        """
        import pyarrow.parquet as pq

        ranges = FetchedRanges(self._file(piece.path), parts)
        meta = self.metadata(piece.path)
        try:
            return pq.ParquetFile(
                ranges, metadata=meta, pre_buffer=False, page_checksum_verification=True
            ).read_row_group(piece.row_group, columns=list(columns))
        except Exception as e:
            if not does_not_decode(e):
                raise
            raise undecodable(piece.path, piece.row_group, e, "object") from None

    def read_group(self, url: str, group: int, columns: Sequence[str]) -> Any:
        """One row group's ``columns``, read now (outside any plan)."""
        piece = Piece(url, group, 0)
        return self.decode(piece, self.read([piece], None, columns)[url, group], columns)

    # -- what the loader announces (lading.loading.announce) ---------------------------------

    def _needs(self, batches: Sequence[Sequence[Piece]], steps: Sequence[int]) -> dict[str, list]:
        needs: dict[str, list[Need]] = {}
        for pieces, step in zip(batches, steps):
            for piece in pieces:
                file = self._file(piece.path)
                got = needs.setdefault(file.root, [])
                got += [Need(file.key, a, b, step) for a, b in self.spans(piece)]
        return needs

    def prefetch(self, batches: Batches, first_step: int, now: int | None = None) -> None:
        """Start fetching the row groups of ``batches`` (batch ``j`` read at step
        ``first_step + j``; ``now``: the step about to be read). Returns at once."""
        steps = range(first_step, first_step + len(batches))
        needs = self._needs(batches, steps)
        for root in {f.root for f in self.files}:
            self.planner(root).prefetch(needs.get(root, []), first_step if now is None else now)

    def plan(
        self, batches: Batches, first_step: int = 0, steps: Sequence[int] | None = None
    ) -> None:
        """The epoch's whole order of reads (batch ``j`` at ``steps[j]``): eviction keeps the
        blocks needed soonest. Fetches nothing."""
        at = (
            list(steps) if steps is not None else list(range(first_step, first_step + len(batches)))
        )
        needs = self._needs(batches, at)
        for root in {f.root for f in self.files}:
            self.planner(root).plan(Schedule(needs.get(root, []), at[0] if at else first_step))

    def settle(self, timeout: float) -> None:
        """Wait, at most ``timeout`` seconds, until the GETs the prefetches of these files
        started are answered, in every bucket's cache (reads wait for their own): a loader
        calls it as it closes."""
        ends = time.monotonic() + timeout
        for planner in list(self._planners.values()):
            planner.settle(max(0.0, ends - time.monotonic()))

    def cache_stats(self) -> dict[str, Any]:
        """The node cache's figures (:meth:`lading.stores.remote.store.RemoteStore.cache_stats`):
        this process's summed over the buckets read (``"process"`` and ``"by_epoch"`` too),
        the folder's (one for every bucket) and, under ``"node"``, every process's. After
        :meth:`close`, a bucket's figures as they were at close, no cache opened for them (a
        later read starts its figures anew)."""
        total: dict[str, Any] = {}
        by_epoch: dict[int, tuple[int, int]] = {}
        for root in sorted({f.root for f in self.files}):
            if root in self._caches or not self._closed:
                found = self.cache(root).node_stats()
            elif root in self._closed_stats:
                found = self._closed_stats[root]
            else:  # closed before it was read: the node's figures, its view let go at once
                view = self._view(root)
                try:
                    found = view.node_stats()
                finally:
                    view.close()  # (and its fetcher)
                    self._fetchers.pop(root, None)
            for name, value in found.items():
                if name == "by_epoch":
                    for epoch, counts in value.items():
                        had = by_epoch.get(epoch, (0, 0))
                        by_epoch[epoch] = (had[0] + counts[0], had[1] + counts[1])
                elif name == "node" or name in _FOLDER:
                    total[name] = value  # the one folder's (the node's: every process's)
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    total[name] = total.get(name, 0) + value
        total["by_epoch"] = by_epoch
        node = total.pop("node", None)
        total["process"] = dict(total)  # (what node_stats repeats: this process's)
        if node is not None:
            total["node"] = node
        return total

    def close(self) -> None:
        """Stop this process's GETs and let its node caches go (done at exit too), keeping
        their figures for :meth:`cache_stats`; a later read opens them again, with new
        clients."""
        for root, cache in self._caches.items():
            with contextlib.suppress(Exception):  # (figures are a report: never a failure)
                self._closed_stats[root] = cache.node_stats()
            cache.close()
        for fetcher in self._fetchers.values():  # (those that only listed and staged too)
            fetcher.close()
        self._caches, self._planners, self._fetchers = {}, {}, {}
        self._closed = True


class RemoteRowReader(RowReader):
    """:class:`~lading.tabular.read.RowReader` over remote objects: a chunk's row groups are
    read in one cache read at the chunk's step, then decoded from memory."""

    def __init__(self, files: RemoteParquet, *reading: Any, **options: Any) -> None:
        """``files``: the objects read; ``reading``, ``options``: :class:`RowReader`'s."""
        super().__init__(*reading, **options)
        self.files = files
        self._fetched: dict[tuple[str, int], Parts] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_fetched"] = {}
        return state

    def settle(self, timeout: float) -> None:
        """:meth:`RemoteParquet.settle` of the objects read."""
        self.files.settle(timeout)

    def read(self, share: Any, step: int | None = None) -> Any:
        recent = {k for k, _ in self._recent}
        wanted = {f.piece: None for f in share.fragments}
        todo = [p for p in wanted if (p.path, p.row_group) not in recent]
        self._fetched = self.files.read(todo, step)
        try:
            return super().read(share, step)
        finally:
            self._fetched = {}

    def _decode(self, path: str, index: int) -> Any:
        piece = Piece(path, index, 0)
        parts = self._fetched.get((path, index))
        if parts is None:
            parts = self.files.read([piece], None)[path, index]
        return self.files.decode(piece, parts, self.columns)

    def _metadata(self, path: str) -> Any:
        return self.files.metadata(path)


def warn_if_too_small(source: RemoteParquet) -> None:
    """Warn, naming the fix, when the node cache's cap cannot hold the largest row group:
    row groups are then read around the cache (fetched at each read, never kept), as the
    document store reads a document larger than its cap. A block is at most a region, and a
    region at most :data:`~lading.remote.cache.regions.MAX_REGION`: a row group whose read
    columns exceed that is never cached at any cap, and the only fix is smaller row groups."""
    from lading.remote.cache.regions import MAX_REGION, REGIONS, Layout

    largest = source.largest_group()
    cap = source.settings.cache_bytes
    layout = Layout.of(cap, source.settings.region_bytes)
    if largest <= layout.region_bytes:  # a block is at most a region (the unit of eviction)
        return
    if largest > MAX_REGION:
        fix = (
            f"no cap can hold it (a region is at most {MAX_REGION:,} bytes): write smaller row "
            "groups (lading repartition --row-group-size)"
        )
    else:  # a cap whose regions hold the row group, 8 of them a region's window ahead
        fix = (
            f"raise cache_bytes to {REGIONS * 8 * largest:,} (8 row groups a window), or write "
            "smaller row groups (lading repartition --row-group-size)"
        )
    warnings.warn(
        f"PartitionedParquet: cache_bytes={cap:,} caches no row group past "
        f"{layout.region_bytes:,} bytes (a cached block is at most a region, "
        f"1/{layout.regions} of the cap), and the largest reads {largest:,} bytes: every row "
        f"group that large is fetched at each read and never cached; {fix}",
        UserWarning,
        stacklevel=3,
    )


def _leaves(fields: Sequence[tuple[str, str]], columns: Sequence[str]) -> list[int]:
    """Indices of the leaf columns (parquet's column chunks) that decoding ``columns`` reads,
    given each leaf's top-level field (:func:`~lading.tabular.read.leaf_fields`) and dotted
    path: those under a wanted field, and those pyarrow takes a wanted name to mean by path
    (``meta.x`` names top-level ``meta.x`` and struct ``meta``'s ``x`` alike: it reads both)."""
    wanted = set(columns)
    return [
        j
        for j, (field, path) in enumerate(fields)
        if field in wanted or any(path == c or path.startswith(f"{c}.") for c in wanted)
    ]


_STORE_FIX = ": reopen the store, or rebuild it"  # lading.disk.remote.changed()'s words


def _rewritten(error: RemoteReadError) -> RemoteReadError:
    """``error``, with a parquet dataset's fix (not the document store's) where an object was
    rewritten or deleted under a running dataset."""
    text = str(error)
    text = text[: -len(_STORE_FIX)] if text.endswith(_STORE_FIX) else text
    if "ETag changed" in text or "was replaced" in text:
        return RemoteChangedError(
            f"{text}. A parquet object was rewritten while this dataset read it: nothing of "
            "the new version was read. Open PartitionedParquet again to read the new files (a "
            "state saved before then is refused: its data changed)"
        )
    if isinstance(error, RemoteChangedError):  # a 404: deleted since the dataset opened
        return RemoteChangedError(
            f"{text}. A parquet object was deleted while this dataset read it: open "
            "PartitionedParquet again to read the files left (a state saved before then is "
            "refused: its data changed), or write the missing file again"
        )
    return error


def _version(file: RemoteFile) -> str:
    """What names a version of ``file`` in the node cache: its ETag, else its size and
    modification time (a store that lists no ETag: fsspec's ``memory://``, ``file://``)."""
    if file.etag:
        return f"etag:{file.etag}"
    return f"size:{file.size}:{'' if file.modified is None else file.modified}"
