"""What an LM loader over remote corpora tells the node cache, and one read of it a batch.

A batch of any LM mode reads ``tokens[a:b]`` of its corpora (pieces of documents: a window is
a contiguous range of the epoch stream, so its pieces are exact ranges of ``tokens.bin``). Its
ranges come from the plan where the mode can say (window modes: every batch of a plan at once,
with numpy, ``reads_many``), else from building it once with a recorder
(:class:`~lading.lm.remote.Build`, local to the building thread: no token value decides what
a batch reads, only the plan, so the build is the one source of truth for every mode,
mixtures, packing and ``boundaries=True`` included). :class:`RemoteReads` wraps the loader's
workload and

- announces (:func:`lading.loading.announce.announcer`, the map loader's route): at each
  iteration's start the epoch's whole order of ranges (and the next epoch's) goes to each
  corpus's node cache as its eviction order (a :class:`~lading.remote.cache.Planner` a corpus),
  and every ``LOOKAHEAD`` batches the next ones are fetched ahead;
- where the node cache holds the corpus, has the window fetch the blocks of ``tokens.bin``
  its node's ranks read (all of it: this rank's and, with the whole world on this node, the
  others') whole, once (:mod:`lading.remote.whole`);
- where it does not, and this process builds the batches it announces, has the window fetch
  around the cache every range but those the next epoch reads first (what the cap can keep
  until then): read once an epoch, the rest gain nothing from the cache and cost its claims,
  fills and lookups (:mod:`lading.remote.cache.around`);
- builds a batch with one read of the cache per corpus (every range of the batch at once, at
  the batch's step), which the build's slices are then served from.

Nothing is shared between builds: two loaders, the read-ahead thread and a reader of the
corpus in the main thread read at once, each with its own ranges and step. A DataLoader worker
reads at its batch's step and writes no order: the planner in the main process moves every
block's next use on as batches are handed out. Reads never depend on what the cache holds:
the same batches come with a cold cache, a cap too small for a window (read around the
cache), or faults the fetcher retries.

Over 400 lines, as one idea: one loader's remote reads (its plan, its window, its builds)
share the plan's arrays; which ranges go around the cache is :mod:`lading.lm.remote_kept`.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.lm.modes.base import ManyReads, stacked
from lading.lm.remote import BUILD, Build, RemoteTokens
from lading.lm.remote_blocks import HeldBlocks
from lading.lm.remote_kept import by_start, split_kept
from lading.lm.segment import SegmentBatchKey
from lading.lm.spans import first_reads, joined, joined_many
from lading.lm.workload import LMWorkload
from lading.loading.announce import Announce, announcer
from lading.loading.hooks import Hooks
from lading.loading.state import Cursor
from lading.remote.cache import AroundGets, Planner
from lading.remote.cache.planner import AHEAD_SHARE
from lading.remote.cache.regions import MAX_REGION
from lading.remote.ranges import Need
from lading.remote.schedule import Schedule, epoch_firsts
from lading.remote.whole import ObjectReads, WholeBlocks, fits
from lading.step import STEPS_PER_EPOCH, at_step, step_of

Ranges = npt.NDArray[np.int64]  # [k, 3]: (corpus, first token, end token) of a batch's reads
# a prefetch this many steps ahead may give up blocks planned for later (the next epoch's):
# else, once the cache holds only those, nothing is fetched ahead and every read waits for
# its GETs (bench_remote_lm.py's windows: 0.27M tokens/s, 10.6 of 15.6 s waiting; 1.57-1.60M
# at 16, 1.21-1.38M at 8). The next epoch's windows start elsewhere: few of its reads hit.
NEAR_STEPS = 16
# the window's bytes ahead where blocks are fetched whole (they fit in the cap by choice): a
# window of cap / 8 took ~8 blocks a step, and each of the epoch's first steps waited on GETs
WHOLE_SHARE = 1.0


def remote_reads(workload: LMWorkload, workers: int = 0) -> RemoteReads | None:
    """``workload`` wrapped to plan its remote corpora's reads, or None when all are local;
    ``workers``: the DataLoader workers building batches (0: this process builds them)."""
    if not any(c.remote is not None for c, _ in workload.data.parts):
        return None
    return RemoteReads(workload, max(1, workers), builds_here=workers == 0)


def _same(key: Any) -> Any:
    return key


class RemoteReads:
    """An :class:`~lading.lm.workload.LMWorkload` whose remote corpora read through the node
    cache as planned (see the module doc); everything else is the workload's.

    Attributes:
        announce: what the loader calls with each iteration's batch keys.
    """

    def __init__(self, workload: LMWorkload, readers: int = 1, builds_here: bool = False) -> None:
        self.inner = workload
        self.readers = max(1, readers)  # processes building batches: DataLoader workers
        # every token file read by GETs, numbered: one a corpus, one a shard of a corpus built
        # in shards (its parts: lading.lm.parts); ranges are (file, a, b) of that file
        self.remote: dict[int, RemoteTokens] = {}
        self._files_of: dict[int, tuple[int, npt.NDArray[np.int64]]] = {}  # corpus -> files
        for c, (corpus, _) in enumerate(workload.data.parts):
            if corpus.remote is not None:
                files, bases = corpus.parts()
                self._files_of[c] = (len(self.remote), np.asarray(bases, dtype=np.int64))
                self.remote.update(enumerate(files, start=len(self.remote)))
        self._parts = {id(tokens): part for part, tokens in self.remote.items()}
        self._share = share = _ahead_share(workload, self.remote)
        self.planners = {
            part: Planner(t.cache, NEAR_STEPS, share) for part, t in self.remote.items()
        }
        self.announce: Announce | None = announcer(Hooks.of(self), _same)
        block = _block_tokens(workload)
        self._held = HeldBlocks(_block_buffer(workload), block) if block else None
        self._ranges = Planned()  # of the keys planned last
        self._fetches = Planned()  # ... and what to fetch for them
        self._firsts = Planned()  # ... and of these, what each batch reads first (held)
        self._whole = WholeBlocks()  # the blocks the plan fetches whole (not held)
        # a file's ranges fetched around the cache, held for this loader's builds; and of
        # the files whose reads go around, the ranges the next epoch reads first (kept)
        self._around = {part: AroundGets() for part in self.remote}
        for part, tokens in self.remote.items():
            tokens.cache.planners.add(self._around[part])  # (told at a fork)
        self._kept: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}
        self._firsts_of: dict[int, dict[int, tuple[Any, Any]]] = {}  # part -> epoch -> kept
        # whether the process that announces builds the batches (no DataLoader workers): what
        # its window fetches around the cache is then read by the process that holds it
        self._builds_here = builds_here
        _warn_small_caches(self.remote, workload)

    def settle(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until the GETs this loader's prefetches started
        are sent and answered (its reads waited for their own): a loader that closes calls
        it, so that nothing is fetched for it after its ``close`` returns (the corpus and its
        cache stay open, and another loader's GETs are not waited for)."""
        ends = time.monotonic() + timeout
        for planner in self.planners.values():
            planner.settle(max(0.0, ends - time.monotonic()))
        for part, around in self._around.items():
            around.settle(self.remote[part].cache.fetcher, max(0.0, ends - time.monotonic()))

    def __getattr__(self, name: str) -> Any:  # batches, keys, layout, fingerprint, ...
        if name == "inner":  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __getstate__(self) -> dict[str, Any]:
        return {"inner": self.inner}

    def __setstate__(self, state: dict[str, Any]) -> None:
        with warnings.catch_warnings():  # the loader warned where it was made: once
            warnings.simplefilter("ignore")
            self.__init__(state["inner"])  # type: ignore[misc]

    # ------------------------------------------------------------------ reading

    def bulk(self, cursor: Cursor) -> Iterator[Any] | None:
        """Batch by batch (so that reads follow the plan), but on a device, where the corpus
        was staged whole (``device=``)."""
        return self.inner.bulk(cursor) if self.inner.resident is not None else None

    def build(self, key: SegmentBatchKey) -> Any:
        """Batch ``key``: its ranges (touching ones joined) read in one call of each corpus's
        cache, or under the locality shuffle the whole blocks it reads, held by this thread
        (:class:`~lading.lm.remote_blocks.HeldBlocks`); then built from views of them."""
        step = step_of(key.epoch, key.batch)
        if self._held is not None:  # the locality shuffle: whole blocks, held
            fetched = self._held.fetched(self.remote, self.fetches(key), step)
        else:
            fetched = {}
            ranges = self.ranges(key)
            for part, tokens in self.remote.items():
                starts, ends = joined(ranges[ranges[:, 0] == part])
                spans = list(zip(starts, ends))
                arrays = tokens.read(spans, step, self._around[part])
                fetched[id(tokens)] = (starts, ends, arrays)
        token = BUILD.set(Build(self._parts, fetched))
        try:
            with at_step(step):
                return self.inner.build(key)
        finally:
            BUILD.reset(token)

    def ranges(self, key: SegmentBatchKey) -> Ranges:
        """``(corpus, a, b)`` of each ``tokens[a:b]`` batch ``key`` reads: from the plan where
        the mode can say (:meth:`~lading.lm.workload.LMWorkload.reads`), else found by
        building it with a recorder of this thread's (not reading)."""
        found = self._ranges.get(key)
        if found is not None:
            return found
        found = self.inner.reads(key)
        if found is not None:
            return self._by_file(found)
        log: list[tuple[int, int, int]] = []
        token = BUILD.set(Build(self._parts, recording=log))
        try:
            self.inner.build(key)
        finally:
            BUILD.reset(token)
        return np.array(log, dtype=np.int64).reshape(-1, 3)

    def fetches(self, key: SegmentBatchKey) -> Ranges:
        """``(corpus, a, b)`` of what to fetch for batch ``key``: its reads, or the whole
        blocks they lie in (:meth:`~lading.lm.workload.LMWorkload.fetches`)."""
        found = self._fetches.get(key)
        if found is None:
            found = self.inner.fetches(key)
            found = None if found is None else self._by_file(found)
        return found if found is not None else self.ranges(key)

    def _by_file(self, ranges: Ranges) -> Ranges:
        """The modes' ``(corpus, a, b)`` rows (positions in a corpus's token count) as
        ``(file, a, b)`` rows of the remote token files (a range over a shard's end cut in
        two); a local corpus's rows are dropped (read from its memory map)."""
        return self._by_file_of(np.zeros(len(ranges), dtype=np.int64), ranges)[1]

    def _by_file_of(self, which: npt.NDArray[np.int64], ranges: Ranges) -> ManyReads:
        """:meth:`_by_file` of rows read by batches ``which`` (one a row), each row's batch
        kept beside it."""
        out, whiches = [], []
        for c, (first, bases) in self._files_of.items():
            at = ranges[:, 0] == c
            mine, by = ranges[at], which[at]
            if not len(mine):
                continue
            k0 = np.searchsorted(bases, mine[:, 1], side="right") - 1
            k1 = np.searchsorted(bases, np.maximum(mine[:, 2] - 1, mine[:, 1]), side="right") - 1
            one = k0 == k1
            k = k0[one]
            out.append(np.stack([first + k, mine[one, 1] - bases[k], mine[one, 2] - bases[k]], 1))
            whiches.append(by[one])
            cut = zip(by[~one].tolist(), mine[~one].tolist(), k0[~one], k1[~one])
            for j, (_, a, b), lo, hi in cut:
                for k in range(int(lo), int(hi) + 1):  # rare: a run over a shard's end
                    cut_a, cut_b = max(a, int(bases[k])), min(b, int(bases[k + 1]))
                    out.append(np.array([[first + k, cut_a - bases[k], cut_b - bases[k]]]))
                    whiches.append(np.array([j], dtype=np.int64))
        if not out:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 3), np.int64)
        return np.concatenate(whiches), np.concatenate(out).astype(np.int64)

    # ------------------------------------------------------------------ what comes next

    def _needs(self, ranges: Sequence[Ranges], steps: Sequence[int]) -> dict[int, list[Need]]:
        """Each corpus's needs of batches of ranges (batch ``j`` read at ``steps[j]``), joined
        as build() reads them; under the locality shuffle cut into pieces a cached block can
        hold (a region): a block larger than a region, or two neighbouring blocks of one
        buffer joined, were never fetched ahead (the planner leaves a range larger than a
        region to its read) and each batch waited for its GETs (blocks of two regions:
        0.41M tokens/s against 0.95M); else, where the plan fetches blocks whole
        (:mod:`lading.remote.whole`), the blocks each range lies in, each once a plan."""
        needs: dict[int, list[Need]] = {part: [] for part in self.remote}
        cut = bool(_block_tokens(self.inner))
        for found, step in zip(ranges, steps):
            for part, tokens in self.remote.items():
                starts, ends = joined(found[found[:, 0] == part])
                size, key, mine = tokens.itemsize, tokens.key, needs[part]
                limit = max(1, tokens.cache.max_block // size) if cut else 0
                for a, b in zip(starts, ends):
                    if not cut:  # whole blocks where the plan chose them, else the range
                        mine.extend(self._whole.needs(key, a * size, b * size, step))
                        continue
                    for lo in range(a, b, limit):
                        mine.append(Need(key, lo * size, min(b, lo + limit) * size, step))
        return needs

    def prefetch(self, keys: list[SegmentBatchKey], first_step: int, now: int) -> None:
        """Fetch the ranges of ``keys`` (batch ``j`` read at step ``first_step + j``)."""
        if not keys:  # a step passed: each planner moves on (what it deferred, tried again)
            for planner in self.planners.values():
                planner.prefetch([], now)
            return
        ranges = [self._announced(k) for k in keys]
        steps = range(first_step, first_step + len(keys))
        for part, needs in self._needs(ranges, steps).items():
            first: dict[tuple[str, int, int], Need] = {}  # a block many batches read: once
            for need in needs:
                first.setdefault((need.key, need.start, need.end), need)
            planned, around = list(first.values()), list[Need]()
            kept = self._kept.get(part)
            if kept is not None and planned:
                around, planned = split_kept(planned, kept, self.remote[part].itemsize)
            # the few kept ranges first: sent after the around GETs of the window's 8 batches,
            # a batch's kept range waited behind them (0.76x the tokens/s, documents permuted)
            self.planners[part].prefetch(planned, now)
            self.remote[part].cache.fetch_around(around, self._around[part])
        told = self._whole.planned()  # reads fetched as whole blocks: planned all the same
        for tokens in self.remote.values():
            tokens.cache.announced([span for span in told if span[0] == tokens.key])

    def _announced(self, key: SegmentBatchKey) -> Ranges:
        """What the window fetches for batch ``key``: what it fetches, but under the locality
        shuffle only the blocks it is the first of its reader to read (the plan's
        :func:`first_reads`). The batches after a block's first read take it from the reader's
        :class:`~lading.lm.remote_blocks.HeldBlocks`; fetched for them, a block the read-ahead
        thread had read, and the cache had let go since (nothing planned for it), was fetched
        again for nothing: 12 of 163 blocks, 1.09x the bytes used, at a 10 % cap under a step."""
        found = self._firsts.get(key) if self._held is not None else None
        return found if found is not None else self.fetches(key)

    def plan(self, keys: list[SegmentBatchKey], first_step: int, steps: Sequence[int]) -> None:
        """The order of ``keys`` (read at ``steps``) as each cache's eviction order: their
        ranges found for all keys at once where the mode can say (numpy over the plan, no
        Python object a read: an epoch of a 4B-token corpus is ~250k batches), else a key
        at a time."""
        self.inner.plan_keys(keys)
        held = self._held is not None  # whole blocks fetched and read: the windows' ranges
        # are not needed; else what a batch fetches is what it reads
        fetches = self.inner.fetches_many(keys) if held else self.inner.reads_many(keys)
        if fetches is None:  # a batch at a time (built with a recorder), the first few only
            keys, steps = keys[:PLAN_BUILT], steps[:PLAN_BUILT]
            self._fetches = Planned(keys, *stacked([self.fetches(k) for k in keys]))
        else:
            self._fetches = Planned(keys, *self._by_file_of(*fetches))
        self._ranges = Planned() if held else self._fetches
        which, rows = self._fetches.which, self._fetches.rows
        at = np.asarray(steps, dtype=np.int64)
        firsts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
        whole: list[ObjectReads] = []
        node = None if held else self._node_rows(keys)  # the node's other ranks' reads
        reads: dict[int, tuple[Any, Any, Any]] = {}  # part -> this loader's joined reads
        for part, tokens in self.remote.items():
            mine = rows[:, 0] == part
            if not held:
                batch, starts, ends = joined_many(which[mine], rows[mine, 1], rows[mine, 2])
                reads[part] = (batch, starts, ends)
            else:  # a held block is read by the first batch of each reader that needs it
                batch, starts, ends = first_reads(
                    which[mine], rows[mine, 1], rows[mine, 2], self.readers
                )
                firsts.append((batch, np.stack([np.full_like(batch, part), starts, ends], 1)))
            size, one_file = tokens.itemsize, np.zeros(len(batch), dtype=np.int64)
            schedule = Schedule.of_arrays(
                [tokens.key], one_file, starts * size, ends * size, at[batch], first_step
            )
            self.planners[part].plan(schedule)
            if not held:
                if node is not None:  # the node's ranks read the blocks together
                    theirs = node[node[:, 0] == part]
                    starts = np.concatenate([starts, theirs[:, 1]])
                    ends = np.concatenate([ends, theirs[:, 2]])
                span = (tokens.key, tokens.n * size, size, starts * size, ends * size)
                whole.append(ObjectReads(*span, tokens.cache))
        self._whole.plan(whole)
        self._kept = {}
        for part, tokens in self.remote.items():  # whole blocks all fit: fetched ahead at once
            whole_ahead = self._whole.chosen(tokens.key) > 0
            self.planners[part].share = WHOLE_SHARE if whole_ahead else self._share
            if not held and not whole_ahead and self._builds_here:
                batch, starts, ends = reads[part]
                ranks = max(1, self.inner.reading.world.local_world_size)  # sharing the cache
                share = max(0.0, 1 - 2 * self._share)
                budget = int(tokens.cache.cap * share) // tokens.itemsize // ranks
                epoch = first_step // STEPS_PER_EPOCH
                first = epoch_firsts(at[batch], ends - starts, epoch + 1, budget)
                kept = starts[first], ends[first]
                # this epoch's first reads, kept by a plan of the epoch before: from the cache
                before = self._firsts_of.get(part, {}).get(epoch)
                self._firsts_of[part] = {epoch + 1: kept, **({epoch: before} if before else {})}
                self._kept[part] = by_start(kept, *([before] if before else []))
        if held:  # one entry a remote file: the first reads of all, by batch
            first_which, first_rows = (np.concatenate(x) for x in zip(*firsts))
            self._firsts = Planned(keys, first_which, first_rows)

    def _node_rows(self, keys: list[SegmentBatchKey]) -> Ranges | None:
        """``(file, a, b)`` of what the other ranks of this node read of ``keys`` (one node
        holding the whole world: :meth:`~lading.lm.workload.LMWorkload.node_reads_many`), where
        its cache may hold the token files (else the blocks are never chosen: not computed)."""
        files = list(self.remote.values())
        if not fits([t.n * t.itemsize for t in files], files[0].cache):
            return None
        found = self.inner.node_reads_many(keys)
        return None if found is None else self._by_file(found[1])


# Batches a plan builds to learn their reads where the mode cannot say them at once (Streams
# after an elastic resume): ~0.2 ms each, all of an epoch and the next were built before the
# first batch (a 900k-batch epoch: ~3 minutes). The batches past them are read unplanned (the
# window still fetches them ahead), that epoch only: the next one plans at once again.
PLAN_BUILT = 1024


class Planned:
    """The ranges of the keys of a plan in one array: those of ``keys[j]`` are the rows whose
    ``which`` is ``j`` (kept sorted by it)."""

    def __init__(
        self,
        keys: Sequence[SegmentBatchKey] = (),
        which: npt.NDArray[np.int64] | None = None,
        rows: Ranges | None = None,
    ) -> None:
        which = np.zeros(0, dtype=np.int64) if which is None else which
        rows = np.zeros((0, 3), dtype=np.int64) if rows is None else rows
        order = np.argsort(which, kind="stable")
        self.which, self.rows = which[order], rows[order]
        self._bounds = np.searchsorted(self.which, np.arange(len(keys) + 1)).tolist()
        self._index = {key: j for j, key in enumerate(keys)}

    def get(self, key: SegmentBatchKey) -> Ranges | None:
        """The rows of ``key``, or None for a key not planned."""
        j = self._index.get(key)
        return None if j is None else self.rows[self._bounds[j] : self._bounds[j + 1]]


def _block_tokens(workload: LMWorkload) -> int:
    """The tokens of a block of the locality shuffle (``Windows(block_tokens=...)``), else 0."""
    return int(getattr(getattr(workload.mode, "shape", None), "block_tokens", 0) or 0)


def _block_buffer(workload: LMWorkload) -> int:
    """The blocks whose windows the locality shuffle mixes (``Windows(block_buffer=...)``)."""
    return int(getattr(getattr(workload.mode, "shape", None), "block_buffer", 1) or 1)


def _ahead_share(workload: LMWorkload, remote: dict[int, RemoteTokens]) -> float:
    """The share of the cap fetched ahead: the planner's default, or under the locality
    shuffle room for the ``block_buffer`` blocks being read and as many next (a batch reads
    from all of them), at most half the cap."""
    tokens = _block_tokens(workload)
    if not tokens or not remote:
        return AHEAD_SHARE
    size = max(t.itemsize for t in remote.values())
    cap = min(t.cache.cap for t in remote.values())
    wanted = 2 * _block_buffer(workload) * (tokens + 1) * size / max(1, cap)
    return min(0.5, max(AHEAD_SHARE, wanted))


def _warn_small_caches(remote: dict[int, RemoteTokens], workload: LMWorkload) -> None:
    """Warn, in one line naming the fix, of a node cache that cannot hold one batch row (a
    window): its reads go around the cache (right, but every byte fetched at each read)."""
    for tokens in remote.values():
        row = (workload.max_seq + 1) * tokens.itemsize
        cap, region = tokens.cache.cap, tokens.cache.max_block
        if region < row or cap < row:
            fix = (  # (a region at most MAX_REGION: no cap holds a window past it)
                f"give cache_bytes of at least {64 * workload.reading.batch_size * row:,} "
                f"to fetch ahead (the window, 8 batches of {workload.reading.batch_size} rows, "
                "is at most an eighth of the cap)"
                if row <= MAX_REGION
                else f"no cap can (a region is at most {MAX_REGION:,} bytes): read shorter windows"
            )
            warnings.warn(
                f"cache_bytes={cap:,} cannot hold one window of {workload.max_seq + 1} tokens "
                f"({row:,} bytes; a cached block is at most a region, {region:,} bytes) of "
                f"{tokens.cache.namespace}: its tokens are read around the node cache, fetched "
                f"at every read; {fix}",
                UserWarning,
                stacklevel=5,  # the caller of LanguageModelLoader(...)
            )
