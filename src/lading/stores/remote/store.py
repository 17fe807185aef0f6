"""RemoteStore: a packed store in object storage, read by id through a bounded node cache.

``lading.open_store("s3://bucket/prefix/name", cache="DIR", cache_bytes=N)`` gives a store with
the local store's protocol (``[]``, ``get_many``, ``tokens_many``, ``ids()``, ``len``, ``in``,
``snapshot``), so training groups, loaders and integrations take it unchanged:

- the manifest, id index, offsets and ids are staged once per node and snapshot
  (:mod:`lading.remote.stage`) and memory-mapped, shared by every process;
- documents come by ranged GETs of the shards' data files, coalesced by the planner and kept
  in the node cache (``DIR``, at most ``N`` bytes, shared by every process of the node);
- :meth:`RemoteStore.prefetch` (which ``lading.loader`` calls with the batches ahead when the
  dataset passes it on, as :class:`~lading.ir.TrainingGroups` does) fetches what the next
  batches read before they ask, and tells the cache when each block is next needed.

An open store is pinned to the snapshot it read: a manifest replaced meanwhile changes nothing
it reads; a pickled store (a spawned worker, another rank) reopens that snapshot from the
node's staged copy. The cache only ever holds bytes of the snapshot's own files (GETs are
pinned to their ETags), so what a run reads never depends on what the cache holds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.disk.snapshot import content_id
from lading.errors import StoreFormatError
from lading.remote.ranges import Need
from lading.remote.schedule import Schedule
from lading.remote.settings import RemoteSettings
from lading.remote.snapshot import open_snapshot
from lading.remote.stage import verify_remote
from lading.sources import Record
from lading.step import current_step
from lading.stores.base import DocStore, IdLike, id_list, is_id
from lading.stores.hashids import shard_keys
from lading.stores.index import IdIndex
from lading.stores.layout import field_column
from lading.stores.remote.columns import At, Columns
from lading.stores.remote.kept import KEEP_SHARE, Reads
from lading.stores.remote.manifest import no_store, parse, payload_files, staged_files
from lading.stores.remote.readers import Asked, Reader, Readers
from lading.world import World

AHEAD = 8  # batches fetched ahead along a plan when no loader announces (a plain loop of reads)


class RemoteStore(DocStore):
    """A store built by :func:`lading.build_store` into object storage (see the module doc).

    Args:
        url: ``s3://bucket/prefix/name`` (``gs://``, anything obstore or fsspec reaches).
        settings: the node cache's directory and cap, the client and planner settings
            (:class:`~lading.remote.settings.RemoteSettings`).
        snapshot: open this snapshot (default: the current one).

    Raises:
        StoreFormatError: no store there, another format or version, a damaged file.
        RemoteReadError: a GET failed for good.
    """

    def __init__(
        self, url: str, settings: RemoteSettings | None = None, *, snapshot: str | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.settings = settings or RemoteSettings.from_environment()
        self.stale: str | None = None  # the source was read on the build's machine: not checked
        self._read_columns: dict[str, None] = {}  # payload columns read so far, in order
        opened = open_snapshot(
            self.url,
            self.settings,
            parse,
            lambda m: (staged_files(m), payload_files(m)),
            no_store,
            snapshot,
        )
        meta, staged, cache = opened
        try:
            self._columns = Columns(staged, meta, cache)
            keys = shard_keys(staged, meta) if meta["index"]["kind"] == "hash-ids" else None
            index_at = staged / str(meta["index"].get("dir", ""))
            self._index = IdIndex(index_at, meta["index"], keys, self._columns.count)
        except (KeyError, TypeError, ValueError, OSError) as e:
            raise StoreFormatError(
                f"{self.url}/meta.json: its index or columns cannot be opened "
                f"({type(e).__name__}: {str(e)[:160]}); rebuild the store"
            ) from None
        self.meta: dict[str, Any] = meta
        self.snapshot: str = meta["snapshot"]
        self.path = staged  # the node's copy of the index (what store_identity reads)
        # read now: the staged copy may be evicted while this store is open (its maps stay open)
        self._tokenizer_json = self.tokenizer_path.read_text() if self.tokenizer_path else None
        # each loader's plan, window and kept ranges, and the store's own: :mod:`.readers`
        self.readers = Readers(cache)

    def __repr__(self) -> str:
        return f"RemoteStore({self.url!r})"

    def __getstate__(self) -> dict[str, Any]:
        # the maps, cache and client belong to this process; a copy elsewhere reopens the
        # same snapshot from the node's staged copy
        return {"url": self.url, "settings": self.settings, "snapshot": self.snapshot}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["settings"], snapshot=state["snapshot"])  # type: ignore[misc]

    # -- what the next batches need -----------------------------------------------------------

    def prefetch(
        self,
        batches: Sequence[Sequence[IdLike]],
        first_step: int = 0,
        now: int | None = None,
    ) -> None:
        """Start fetching the documents of ``batches`` (lists of ids), batch ``j`` needed at
        step ``first_step + j``; ``now`` is the current step (default ``first_step``). Ids
        not in the store are skipped (the read will name them). Returns at once."""
        rows = [r[r >= 0] for r in (self.find_rows(list(b)) for b in batches)]
        self.prefetch_rows(rows, first_step, now)

    def prefetch_rows(
        self,
        batches: Sequence[npt.NDArray[np.int64]],
        first_step: int = 0,
        now: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> None:
        """:meth:`prefetch` by row codes; ``columns``: which payload columns (default: those
        this loader's reads named so far, else those of any read of the store, else
        ``tokens`` in a tokenized store and ``text`` otherwise). Where its reads named other
        columns since its plan (a collate reading the texts of a tokenized store), the plan
        is made again for them and the batches already announced are fetched again for the
        columns they lacked."""
        reader = self.readers.current(hint=True)
        reader.told = True  # a loader announces: reads do not pump the plan themselves
        now = int(first_step) if now is None else int(now)
        chosen = self._plan_columns(columns, reader)
        needs = self._replanned(reader, now) if columns is None else []
        needs += self._needs(batches, range(first_step, first_step + len(batches)), chosen)
        if len(batches):
            reader.announced = max(reader.announced, first_step + len(batches) - 1)
        around: list[Need] = []
        if reader.reads_here:
            around, needs = reader.kept.split(needs)
        # the kept ones first: behind the window's around GETs, a batch's kept range waited
        # (an LM loader's windows: 0.76x the tokens/s)
        reader.planner.prefetch(needs, now)
        self._columns.cache.fetch_around(around, reader.around)

    def _replanned(self, reader: Reader, now: int) -> list[Need]:
        """Where ``reader``'s reads named other columns than its last plan (which named none:
        a guess, ``tokens``, and the collate reads ``text``), plan its batches again for them
        and return the ranges of the new columns of the batches announced from step ``now``
        on. Reading the texts of a tokenized store through a loader waited 13.0 s where the
        store without tokens waited 1.95 s: the plan kept, and the window fetched, tokens
        nobody read (a review's measure)."""
        asked, read = reader.asked, list(reader.columns)
        if asked is None or not read:
            return []
        if set(read) == set(asked.columns):  # planned right: its batches need not be kept
            reader.asked = None  # (an epoch of a large ranker's groups: ~250 MB of rows)
            return []
        self._plan(reader, asked.batches, asked.steps, None)
        new = [c for c in read if c not in asked.columns]
        ahead = [j for j, s in enumerate(asked.steps) if now <= s <= reader.announced]
        return self._needs([asked.batches[j] for j in ahead], [asked.steps[j] for j in ahead], new)

    def settle(self, timeout: float) -> None:
        """Wait, at most ``timeout`` seconds, until the GETs this store's prefetches started
        are answered (reads wait for their own): a loader over this store calls it as it
        closes, so that nothing is fetched for the loader after (the store stays open); the
        GETs held around the cache for its reads are let go."""
        reader = self.readers.current()
        reader.planner.settle(timeout)
        reader.around.settle(self._columns.cache.fetcher, timeout)

    def plan(
        self,
        batches: Sequence[Sequence[IdLike]],
        first_step: int = 0,
        steps: Sequence[int] | None = None,
    ) -> None:
        """The order of reads ahead, for eviction: batch ``j`` (a list of ids) is read at
        step ``first_step + j`` (or ``steps[j]``: ascending, e.g. this epoch's batches and the
        next epoch's). The node cache then keeps the blocks needed soonest and gives up the
        one needed furthest away (or never); fetching stays a window ahead (:meth:`prefetch`,
        or, with no loader announcing, :data:`AHEAD` batches ahead of each read). A read says
        its step: ``get_many(ids, step=s)``, or the step of the batch a loader is building.
        Ids not in the store are skipped (the read will name them). A new plan replaces the
        last one of the same loader: each loader over this store keeps its own, and a call
        outside any loader is the store's own (:mod:`lading.stores.remote.readers`)."""
        rows = [r[r >= 0] for r in (self.find_rows(list(b)) for b in batches)]
        self.plan_rows(rows, first_step, steps=steps)

    def plan_rows(
        self,
        batches: Sequence[npt.NDArray[np.int64]],
        first_step: int = 0,
        columns: Sequence[str] | None = None,
        steps: Sequence[int] | None = None,
    ) -> None:
        """:meth:`plan` by row codes; ``columns`` as in :meth:`prefetch_rows`."""
        at = (
            list(steps) if steps is not None else list(range(first_step, first_step + len(batches)))
        )
        self._plan(self.readers.current(hint=True), list(batches), at, columns)

    def _plan(
        self,
        reader: Reader,
        batches: list[npt.NDArray[np.int64]],
        at: list[int],
        columns: Sequence[str] | None,
    ) -> None:
        """``reader``'s plan: ``batches`` read at steps ``at``, of ``columns`` (None: those
        :meth:`_plan_columns` chooses, kept in ``reader.asked`` to plan again when its reads
        name others)."""
        first = at[0] if at else 0
        chosen = self._plan_columns(columns, reader)
        reads = self._reads(batches, at, chosen)
        reader.planner.plan(Schedule.of_arrays(*reads, first))
        ranks = max(1, World.detect().local_world_size)  # (the node's ranks share the cap)
        budget = int(self._columns.cache.cap * KEEP_SHARE) // ranks
        reader.kept.plan(reads, first, budget)
        reader.asked = None if columns is not None else Asked(batches, at, chosen)

    def _reads(
        self,
        batches: Sequence[npt.NDArray[np.int64]],
        steps: Sequence[int],
        columns: list[str],
    ) -> Reads:
        """The reads of ``batches`` of rows of ``columns`` (batch ``j`` read at ``steps[j]``)
        as arrays ``(keys, obj, starts, ends, steps)`` (read ``i``: ``keys[obj[i]]``): a plan
        of a ranker's epoch holds millions of reads, and through a :class:`Need` a read it
        peaked at 312 bytes and took 3.8 us of CPU a read, against 140 and 0.42 this way
        (benchmarks/bench_plan_memory.py, 2M reads)."""
        sizes = np.fromiter(map(len, batches), np.int64, len(batches))
        rows = (
            np.concatenate([np.asarray(r, np.int64) for r in batches])
            if len(batches)
            else np.zeros(0, np.int64)
        )
        at = np.repeat(np.asarray(steps, np.int64), sizes)
        keys: list[str] = []
        parts = []
        for column in columns:
            found = self._columns.reads(column, rows, at)
            parts.append(found._replace(obj=found.obj + len(keys)))
            keys += found.keys

        def joined(field: str) -> npt.NDArray[np.int64]:  # (one column: no copy)
            found = [getattr(p, field) for p in parts]
            return found[0] if len(found) == 1 else np.concatenate(found)

        return keys, joined("obj"), joined("starts"), joined("ends"), joined("steps")

    def _plan_columns(self, columns: Sequence[str] | None, reader: Reader) -> list[str]:
        """The columns a plan or prefetch names: ``columns``, else those ``reader``'s reads
        named, else those any read of this store named, else ``tokens`` in a tokenized
        store and ``text`` otherwise."""
        if columns is not None:
            return list(columns)
        found = reader.columns or self._read_columns
        return list(found) or ["tokens" if self.has_tokens else "text"]

    def _needs(
        self,
        batches: Sequence[npt.NDArray[np.int64]],
        steps: Sequence[int],
        columns: list[str],
    ) -> list[Need]:
        """The ranges of ``batches`` of rows of ``columns``, batch ``j`` read at ``steps[j]``."""
        needs: list[Need] = []
        for column in columns:
            for rows, step in zip(batches, steps):
                needs += self._columns.needs(column, [np.asarray(rows, dtype=np.int64)], step)
        return needs

    def _step(self, step: int | None) -> tuple[int | None, Reader]:
        """The step a read is at (given, else the building batch's) and this thread's
        reader; with a plan and no loader announcing, the plan's next batches are fetched
        ahead of it."""
        step = current_step() if step is None else int(step)
        reader = self.readers.current()
        if step is not None and not reader.told:
            reader.planner.follow(step, AHEAD)
        return step, reader

    def _reading(self, step: int | None) -> At:
        """A read at ``step`` (:meth:`_step`): whether its loader's plan (this thread's
        reader's) holds the step, and the GETs held around the cache it takes first. Planned:
        a document is read once an epoch, so a read the window did not bring takes the room
        of no block needed later this epoch (at a cap full of the next epoch's blocks, reads
        that did gave up whole regions of them: 0.60x Belady's hits at 0.5 % of 1M passages).
        A DataLoader worker's store holds no plan (a forked one's planner forgot its
        parent's, :meth:`.Planner.forked`): the ledger tells its reads the order the main
        process's plan recorded. A read at a planned step says this process builds the
        batches its loader announces: from then on its window fetches around the cache."""
        step, reader = self._step(step)
        schedule = reader.planner.schedule
        planned = schedule is not None and schedule.covers(step)
        if planned:
            reader.reads_here = True
        return At(step, planned, reader.around if planned else None)

    def cache_stats(self) -> dict[str, Any]:
        """This process's figures of this store: ``gets``, ``bytes_fetched``, ``retried``,
        ``hits`` (documents read that caused no GET), ``misses`` (that caused one, ahead or
        at the read), ``unplanned`` (read with no window announcing them), ``bytes_used``,
        ``bytes_bypassed`` (read around the cache; of it ``bytes_held``, fetched by the
        window ahead for the read), ``wait_s``; the node's ``bytes_cached`` and ``cap``;
        under ``"node"``, the figures of every process that used the cache
        folder since it was last idle (``since``: a Unix time; processes long gone dropped;
        see :meth:`lading.remote.cache.NodeCache.node_stats`). A loader's DataLoader workers
        read in processes of their own: with workers, this process's reads are few or none,
        and the workers' figures are in ``"node"``."""
        return self._columns.cache.node_stats()

    def verify(self) -> list[str]:
        """Read every byte of the payload files and compare each file's CRC32 with the
        manifest's (the index files were checked when staged); the problems (empty: intact)."""
        cache = self._columns.cache
        return verify_remote(cache.fetcher, self.url, self.meta, cache.etags)

    def close(self) -> None:
        """Stop this store's GETs (those in flight fail, saying so) and fetch nothing after:
        a read after ``close`` raises, naming the fix (open it again). Done at exit too."""
        self._columns.cache.close()

    def _payload(self, column: str) -> str:
        """``column``, recorded as read by this store and by this thread's reader."""
        self._read_columns.setdefault(column, None)
        self.readers.current().columns.setdefault(column, None)
        return column

    # -- the store protocol ---------------------------------------------------------------------

    def __len__(self) -> int:
        return self._columns.count

    def __contains__(self, doc_id: object) -> bool:
        if not is_id(doc_id):
            return False
        return self._index.row(doc_id) >= 0  # type: ignore[arg-type]  # is_id checked

    def ids(self) -> list[str]:
        return self.ids_at(np.arange(len(self), dtype=np.int64))

    def find_rows(self, ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
        """Row numbers of ``ids`` (request order), -1 for each absent one: from the id index."""
        return self._index.rows(id_list(ids, "find_rows"))

    def ids_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        return self._columns.texts("ids", rows, At(None))

    def get_many(self, ids: Sequence[IdLike], step: int | None = None) -> list[str]:
        """Texts of ``ids`` in request order; ``step``: the planned step this read is at
        (see :meth:`plan`; by default the planned batch it matches, if any)."""
        return self.texts_at(self.rows(id_list(ids, "get_many")), step)

    def texts_at(self, rows: npt.NDArray[np.int64], step: int | None = None) -> list[str]:
        flat = np.asarray(rows, dtype=np.int64).reshape(-1)  # (any shape, read flat: as local)
        return self._columns.texts(self._payload("text"), flat, self._reading(step))

    def get_many_bytes(self, ids: Sequence[IdLike], step: int | None = None) -> list[bytes]:
        """UTF-8 bytes of ``ids`` in request order, not decoded; each the caller's own."""
        rows = self.rows(id_list(ids, "get_many_bytes"))
        return self._columns.read(self._payload("text"), rows, self._reading(step))

    def texts_range(self, start: int, stop: int) -> list[str]:
        """Texts of rows ``start .. stop - 1`` (neighbours: the planner fetches them together).

        Raises:
            IndexError: the range is not within the store (as a local store's).
        """
        if not 0 <= start <= stop <= len(self):
            raise IndexError(f"rows {start}..{stop} out of range for {len(self)} rows")
        return self.texts_at(np.arange(start, stop, dtype=np.int64))

    @property
    def fields(self) -> tuple[str, ...]:
        """Names of the extra fields stored besides the text (e.g. ``title``)."""
        return tuple(self.meta["fields"])

    @property
    def content_id(self) -> str:
        """A digest of the pinned snapshot's files (sizes and CRC32s, from its manifest): the
        same as a local build's of the same data, what loader states and caches are keyed on."""
        return content_id(self.meta)

    @property
    def remote_url(self) -> str:
        """The store's URL: a loader over data read from here warns when made with DataLoader
        workers (:mod:`lading.loading.hooks`)."""
        return self.url

    def field(self, doc_id: IdLike, name: str) -> str:
        """Field ``name`` of a document (``""`` where that document had none)."""
        if name not in self.meta["fields"]:
            raise KeyError(f"{self!r} has no field {name!r}; it has {sorted(self.fields)}")
        column = self._payload(field_column(name))
        return self._columns.texts(column, self.rows([doc_id]), At(self._step(None)[0]))[0]

    def record(self, doc_id: IdLike) -> Record:
        """Id, text and fields of one document."""
        rows = self.rows([doc_id])
        fields = {name: self.field(doc_id, name) for name in self.fields}
        return Record(self.ids_at(rows)[0], self.texts_at(rows)[0], fields)

    @property
    def has_tokens(self) -> bool:
        return "tokens" in self._columns

    @property
    def token_info(self) -> dict[str, Any] | None:
        info: dict[str, Any] | None = self.meta.get("tokens")
        return info

    @property
    def tokenizer_path(self) -> Path | None:
        if not self.has_tokens:
            return None
        return self.path / str(self.meta.get("tokenizer", "tokenizer.json"))

    def tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` the tokens were made with (staged with the index and
        read at the open: :attr:`tokenizer_path` names the staged file, which a later staging
        may evict while this store stays open)."""
        if self._tokenizer_json is None:
            raise self.no_tokens()
        from lading.stores.tokens import tokenizer_from_json

        return tokenizer_from_json(self._tokenizer_json)

    def tokens_at(self, rows: npt.NDArray[np.int64], step: int | None = None) -> list[np.ndarray]:
        """Token ids of rows, each a read-only array of its own (``step``: see :meth:`plan`)."""
        if not self.has_tokens:
            raise self.no_tokens()
        return self._columns.arrays(self._payload("tokens"), rows, self._reading(step))

    def token_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every document's token ids back to back and their ``n + 1`` offsets: read whole
        into this process's memory by ranged GETs (for a store held on the device)."""
        if not self.has_tokens:
            raise self.no_tokens()
        return self._columns.whole("tokens")


def open_remote(
    url: str,
    *,
    cache: str | os.PathLike[str] | None = None,
    cache_bytes: int | str | None = None,
    options: Mapping[str, Any] | None = None,
    **settings: Any,
) -> RemoteStore:
    """Open the store at ``url`` with the node cache in ``cache`` capped at ``cache_bytes``
    (defaults from the environment: see :mod:`lading.remote.settings`)."""
    return RemoteStore(url, RemoteSettings.of(cache, cache_bytes, options, **settings))
