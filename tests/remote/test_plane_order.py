"""The epoch's whole order drives eviction (``store.plan``): epoch-2 hits near the optimum
(Belady on the same trace, in document bytes at the same cap) and far above a plan-blind cache,
reads carrying their step, the loader handing each epoch's order at its start."""

from __future__ import annotations

import itertools
import os
import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import lading
from belady import belady
from conftest import write
from lading.ir import TrainingGroups
from lading.remote.cache import NodeCache, Planner, node_of
from lading.remote.cache.ledger import Ledger
from lading.remote.clients import open_client
from lading.remote.fetch import Fetcher
from lading.remote.ranges import Need
from lading.remote.schedule import Schedule
from lading.step import current_step
from lading.stores.remote.store import RemoteStore

ROWS, BATCH, STEPS = 20_000, 32, 200  # two epochs of 100 batches; 1/16 of it holds 6 batches


def _cache(tmp_path: Path, data: bytes, cap: int, policy: str) -> NodeCache:
    (tmp_path / "obj").mkdir(exist_ok=True)
    (tmp_path / "obj" / "text.bin").write_bytes(data)
    url = f"file://{tmp_path / 'obj'}"
    fetcher = Fetcher(lambda: open_client(url, "fsspec"))
    node = node_of(tmp_path / f"cache-{policy}", cap)
    return NodeCache(node, fetcher, url, policy=policy, max_gap=0)


def _lru(trace: list[int], sizes: list[int], cap: int) -> list[bool]:
    """Hits of keeping the documents used most recently, in document bytes at ``cap``."""
    held: dict[int, None] = {}
    used, hits = 0, []
    for d in trace:
        hits.append(d in held)
        if d in held:
            del held[d]
        else:
            used += sizes[d]
        held[d] = None
        while used > cap:
            x = next(iter(held))
            used -= sizes[x]
            del held[x]
    return hits


def _epoch2_hits(
    cache: NodeCache, data: bytes, batches: list[list[tuple[str, int, int]]], plan: bool
) -> float:
    """Read two epochs as the loader does: at each epoch's start the order of it and the next
    one planned (``plan``), the batches announced 8 to 16 ahead within the epoch; the share
    of epoch 2's accesses that caused no GET, each step's prefetches landed before its read."""
    half = len(batches) // 2
    epochs = [batches[:half], batches[half:]]
    planner = Planner(cache)
    for epoch, mine in enumerate(epochs):
        steps = [(epoch << 32) + j for j in range(half)]
        if plan:
            ahead = mine + (epochs[epoch + 1] if epoch + 1 < len(epochs) else [])
            at = steps + [((epoch + 1) << 32) + j for j in range(len(ahead) - half)]
            needs = [Need(*s, at[j]) for j, b in enumerate(ahead) for s in b]
            planner.plan(Schedule(needs, at[0]))
        told = 0
        for j, batch in enumerate(mine):
            if told < j + 8:
                upto = min(j + 16, half)
                needs = [Need(*s, steps[i]) for i in range(told, upto) for s in mine[i]]
                planner.prefetch(needs, steps[j])
                told = upto
            else:
                planner.prefetch([], steps[j])
            # a training step outlasts its window's GETs: what the plan fetched is filled in
            # before the read (reads racing them on a loaded core measured 0.029-0.038 at
            # 1/16 over three runs of one seed: this tests the policy, not the race)
            cache.drain(10.0)
            assert cache.read(batch, steps[j], plan) == [data[a:b] for _, a, b in batch]
            assert cache.stats()["bytes_cached"] <= cache.cap
    hits, misses = cache.stats()["by_epoch"][1]
    return float(hits / (hits + misses))


@pytest.mark.slow  # two epochs against Belady: ~9 s each
@pytest.mark.parametrize("share", [4, 16])
def test_the_whole_order_keeps_what_is_needed_soonest(
    tmp_path: Path, rng: random.Random, share: int
) -> None:
    lengths = [rng.randrange(100, 500) for _ in range(ROWS)]
    ends = list(itertools.accumulate(lengths, initial=0))
    data = os.urandom(ends[-1])
    chosen = rng.sample(range(ROWS), STEPS // 2 * BATCH)  # the working set: each once an epoch
    orders = []
    for _ in range(2):
        rng.shuffle(chosen)
        orders += [chosen[i : i + BATCH] for i in range(0, len(chosen), BATCH)]
    batches = [[("text.bin", ends[r], ends[r + 1]) for r in rows] for rows in orders]
    working = sum(lengths[r] for r in {r for rows in orders[: STEPS // 2] for r in rows})
    cap = working // share
    trace = [r for rows in orders for r in rows]
    # Belady reads a document at a time; a loader holds the batch it reads and the window it
    # fetches ahead (an eighth of the cap) besides what it keeps: the optimum of the rest is
    # the bar (at 1/16 the batch alone is a sixth of the cap; the benchmark's caps of 10 % and
    # 0.5 % of 1M passages compare with Belady at the whole cap: bench_remote_plane.py)
    transit = BATCH * int(np.mean(lengths)) + cap // 8
    optimum = float(np.mean(belady(trace, lengths, cap - transit)[len(trace) // 2 :]))
    whole = float(np.mean(belady(trace, lengths, cap)[len(trace) // 2 :]))
    planned = _epoch2_hits(_cache(tmp_path, data, cap, "next-use"), data, batches, plan=True)
    fifo = _epoch2_hits(_cache(tmp_path, data, cap, "fifo"), data, batches, plan=False)
    lru = float(np.mean(_lru(trace, lengths, cap)[len(trace) // 2 :]))
    print(f"1/{share}: plan {planned:.3f} Belady {optimum:.3f} ({whole:.3f} at the whole cap)")
    print(f"fifo {fifo:.3f} lru {lru:.3f}")
    # at 1/16 epoch 2 has ~130 hits of 3,200 reads (a count this small varies by ~10 % from
    # seed to seed), and the batch and the window ahead are a third of the cap. With each
    # step's window filled in before its read, the ratio to Belady measured 0.81-1.02 at 1/16
    # and 1.02-1.08 at 1/4 over 13 seeds; 14 more at 1/16 measured 0.76-1.02, and one run
    # beside a loaded machine (4+ runnable) went under 0.75: the bar at 1/16 is 0.65, which
    # a plan that keeps what is needed soonest passes and one that keeps nothing (LRU and
    # FIFO: ~0 here) fails. The 0.8 at 10 % and 0.5 % of 1M passages is
    # benchmarks/bench_remote_plane.py's (0.84 and 0.86 in RESULTS).
    assert planned >= (0.9 if share == 4 else 0.65) * optimum
    assert planned > 1.5 * max(lru, fifo)


def test_next_uses_of_many_blocks_are_each_blocks_own(rng: random.Random) -> None:
    """The batch lookup (numpy, a key at a time) answers what a scan of every planned read
    overlapping a block answers, for blocks overlapping no, one or several reads (reads that
    start before the block and reach into it too), objects never read, two epochs of steps."""
    needs = []
    for step in range(200):
        epoch = (rng.random() < 0.3) << 32
        for _ in range(rng.randrange(1, 8)):
            start = rng.randrange(0, 4000)
            needs.append(Need(rng.choice("ab"), start, start + rng.randrange(1, 60), epoch + step))
    needs.sort(key=lambda n: n.step)
    schedule = Schedule(needs, 0)
    for _ in range(200):
        spans = []
        for _ in range(rng.randrange(0, 30)):
            start = rng.randrange(0, 4100)
            spans.append((rng.choice("abc"), start, start + rng.randrange(1, 300)))
        at = rng.choice([0, rng.randrange(0, 220), (1 << 32) + rng.randrange(0, 220)])
        want = [
            min(
                (
                    n.step
                    for n in needs
                    if n.key == k and n.start < b and n.end > a and n.step >= at
                ),
                default=None,
            )
            for k, a, b in spans
        ]
        assert schedule.next_use_many(spans, at) == want


def test_reads_between_answers_as_the_spans_do(rng: random.Random) -> None:
    """The planner's per-batch question (a read planned in ``first .. stop - 1``?) answers
    what the spans read there say, for empty, single-step and wide ranges, before the first
    read and past the last."""
    steps = sorted(rng.sample(range(300), rng.randrange(1, 40)))
    needs = [Need("a", 10 * s, 10 * s + 5, s) for s in steps]
    schedule = Schedule(needs, 0)
    for _ in range(500):
        first = rng.randrange(-20, 320)
        stop = first + rng.choice([0, 1, rng.randrange(0, 40)])
        assert schedule.reads_between(first, stop) == bool(schedule.spans(first, stop))


def test_a_schedule_of_arrays_answers_as_the_schedule_of_its_needs(rng: random.Random) -> None:
    """``Schedule.of_arrays`` (a plan with no Python object a read) answers every question as
    ``Schedule`` of the same reads as :class:`Need` s: the reads of any steps, in order, the
    spans (used again or not), the next use of any block, whether a step range reads; keys
    given in any order, some named twice."""
    names = ["c@s/t.bin", "a@s/t.bin", "b@s/t.bin"]
    n = rng.randrange(0, 400)
    needs = []
    for _ in range(n):
        a = rng.randrange(0, 2_000)
        needs.append(Need(rng.choice(names), a, a + rng.randrange(1, 60), rng.randrange(5, 90)))
    keys = [*names, names[1]]  # code 3 names the same object as code 1
    code = {k: i for i, k in enumerate(names)}
    obj = np.array([code[x.key] if rng.random() < 0.5 or x.key != names[1] else 3 for x in needs])
    arrays = [np.array([getattr(x, f) for x in needs], np.int64) for f in ("start", "end", "step")]
    first = 3 if n else 0
    got = Schedule.of_arrays(keys, obj.astype(np.int64).reshape(-1), *arrays, first)
    want = Schedule(needs, first)
    assert (got.first_step, got.last_step, got.objects()) == (
        want.first_step, want.last_step, want.objects(),
    )  # fmt: skip
    for _ in range(60):
        lo = rng.randrange(0, 95)
        hi = lo + rng.randrange(0, 40)
        assert got.needs(lo, hi) == want.needs(lo, hi)
        assert got.spans(lo, hi) == want.spans(lo, hi)
        assert got.spans(lo, hi, lo + 5) == want.spans(lo, hi, lo + 5)
        assert got.reads_between(lo, hi) == want.reads_between(lo, hi)
        blocks = [(rng.choice(names), a, a + rng.randrange(1, 200)) for a in
                  (rng.randrange(0, 2_100) for _ in range(20))]  # fmt: skip
        assert got.next_use_many(blocks, lo) == want.next_use_many(blocks, lo)


@pytest.mark.slow  # ~3-6 s over the local S3 (the default tier's 10 minutes)
def test_a_store_plans_the_reads_its_needs_name(bucket: str, tmp_path: Path) -> None:
    """A remote store's plan (``plan_rows``: made from arrays) holds the reads that its
    per-batch needs name, over several shards, batches empty or repeating rows included; a
    row out of range is refused as a read of it is."""
    url = f"s3://{bucket}/arrays"
    src = _corpus(tmp_path / "src", 300)
    for i in range(3):
        lading.build_shard(src, url, (i, 3), cache=tmp_path / f"w{i}", progress=False)
    lading.merge_store(url, cache=tmp_path / "m")
    store = lading.open_store(url, cache=tmp_path / "node", cache_bytes="1M")
    assert isinstance(store, RemoteStore)
    gen = np.random.default_rng(7)
    batches = [gen.integers(0, 300, int(gen.integers(0, 9))) for _ in range(40)]
    steps = list(range(500, 540))
    for named in (None, ["text"]):  # (None: the columns a plan naming none reads)
        columns = store._plan_columns(named, store.readers.own)
        got = Schedule.of_arrays(*store._reads(batches, steps, columns), 500)
        want = Schedule(store._needs(batches, steps, columns), 500)
        assert got.needs(0, 1_000) == want.needs(0, 1_000) and want.needs(0, 1_000)
        assert got.objects() == want.objects() and len(got.objects()) >= 2
    with pytest.raises(IndexError, match="out of range"):
        store._reads([np.array([300])], [1], ["text"])


def test_the_spans_used_again_are_those_of_runs_read_later(rng: random.Random) -> None:
    """``spans(first, stop, used_from)`` keeps a range read in ``first .. stop - 1`` when its
    run (the reads of its epoch joined to it by touching or overlapping, transitively) has a
    read at ``used_from`` or after, as a scan of every read finds it; without ``used_from``,
    all."""

    def at(i: int) -> int:  # steps 0-29 of epoch 0, then 0-29 of epoch 1
        return i if i < 30 else (1 << 32) + i - 30

    needs = []
    for i in range(60):
        step = at(i)
        for _ in range(rng.randrange(0, 5)):
            start = rng.randrange(0, 600)
            needs.append(Need(rng.choice("ab"), start, start + rng.randrange(1, 12), step))
    schedule = Schedule(needs, 0)
    run: dict[Need, int] = {}  # each read's run, by flooding touching reads
    for n in needs:
        if n in run:
            continue
        run[n], todo = len(run), [n]
        while todo:
            m = todo.pop()
            for o in needs:
                if o in run or o.key != m.key or o.step >> 32 != m.step >> 32:
                    continue
                if o.start <= m.end and m.start <= o.end:
                    run[o] = run[n]
                    todo.append(o)
    last: dict[int, int] = {}
    for n in needs:
        last[run[n]] = max(last.get(run[n], -1), n.step)
    for _ in range(300):
        i = rng.randrange(-5, 65)
        first, stop, used_from = at(i), at(i + rng.randrange(0, 20)), at(rng.randrange(-5, 70))
        read = [n for n in needs if first <= n.step < stop]
        want = sorted({(n.key, n.start, n.end) for n in read if last[run[n]] >= used_from})
        assert schedule.spans(first, stop, used_from) == want, (first, stop, used_from)
        assert schedule.spans(first, stop) == sorted({(n.key, n.start, n.end) for n in read})


def test_a_once_reader_moves_on_only_the_blocks_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader of each range once an epoch (documents) moves the next use of the blocks read
    before a step on only where a touching read comes later: two touching documents read at
    steps 0 and 5 are one block, next used at 5 once step 0 is read; a document read alone
    is not looked up (the lookups of every passed read were 0.03 of 0.11 ms of main-thread
    CPU a cold document read along a plan: benchmarks/remote_cpu.py)."""
    data = os.urandom(1000)
    cache = _cache(tmp_path, data, 10_000, "next-use")
    planner = Planner(cache, once=True)
    a, b, alone = ("text.bin", 0, 100), ("text.bin", 100, 200), ("text.bin", 500, 600)
    planner.plan(Schedule([Need(*a, 0), Need(*alone, 0), Need(*b, 5)], 0))
    planner.prefetch([Need(*a, 0), Need(*alone, 0), Need(*b, 5)], 0)
    cache.drain()
    assert cache.read([a, alone], 0, True) == [data[0:100], data[500:600]]
    looked: list[tuple[int, int, int]] = []
    real = Ledger.overlapping

    def recording(conn: sqlite3.Connection, ranges: list[tuple[int, int, int]]) -> list:
        looked.extend(ranges)
        return real(conn, ranges)

    monkeypatch.setattr(Ledger, "overlapping", staticmethod(recording))
    planner.advance(1)
    obj = cache.obj("text.bin")
    assert looked == [(obj, 0, 100)]  # a only: the lone document's block has no later use
    with cache.ledger.read() as conn:
        uses = dict(conn.execute("SELECT start, next_use FROM blocks").fetchall())
    assert uses[0] == 5  # the block of a and b, next used when b is read


def test_a_range_larger_than_a_region_is_not_kept_for_later(tmp_path: Path) -> None:
    """A range no block can hold (larger than a region: read around the cache at its read)
    is neither fetched ahead nor kept to try again at every later batch; a small one is."""
    data = bytes(range(256)) * 64
    cache = _cache(tmp_path, data, 16 << 10, "next-use")
    try:
        big, small = Need("text.bin", 0, 6000, 3), Need("text.bin", 8192, 8292, 4)
        assert big.end - big.start > cache.max_block
        planner = Planner(cache)
        planner.plan(Schedule([big, small], 0))
        planner.prefetch([big, small], 0)
        assert big not in planner._pending + planner._deferred
        cache.drain()
        assert cache.stats()["gets"] == 1  # the small one, fetched ahead
        assert cache.read([("text.bin", 0, 6000)], 3) == [data[:6000]]
        assert cache.stats()["bytes_bypassed"] == 6000  # read around, fetched at its read
        assert cache.read([("text.bin", 8192, 8292)], 4) == [data[8192:8292]]
        assert (cache.stats()["gets"], cache.stats()["bytes_fetched"]) == (2, 6100)
    finally:
        cache.close()


def _corpus(folder: Path, count: int) -> Path:
    lines = [f"D{i}\tpassage {i} " + "word " * (i % 40) for i in range(count)]
    return write(folder / "collection.tsv", "\n".join(lines) + "\n")


def _local_and_remote(url: str, tmp_path: Path) -> tuple[lading.DocStore, RemoteStore]:
    """400 passages built into a folder and into ``url``, the latter opened on a 1 MB cap."""
    local = lading.build_store(_corpus(tmp_path / "src", 400), tmp_path / "local", progress=False)
    lading.build_store(tmp_path / "src" / "collection.tsv", url, cache=str(tmp_path / "up"),
                       progress=False)  # fmt: skip
    store = lading.open_store(url, cache=tmp_path / "node", cache_bytes="1M")
    assert isinstance(store, RemoteStore)
    return local, store


def test_reads_move_along_the_plan_and_fetch_ahead(bucket: str, tmp_path: Path) -> None:
    local, store = _local_and_remote(f"s3://{bucket}/plan", tmp_path)
    rng = np.random.default_rng(0)
    batches = [[f"D{i}" for i in rng.choice(400, 8, replace=False)] for _ in range(12)]
    store.plan(batches, first_step=100)
    for step, ids in enumerate(batches, 100):
        assert store.get_many(ids, step=step) == local.get_many(ids)  # a loop over the plan
    stats = store.cache_stats()
    assert stats["unplanned"] == 0  # each read was fetched ahead along the plan
    assert stats["misses"] <= 12 * 8 and stats["gets"] <= 12 * 8


def test_a_loop_over_the_plan_hands_each_planned_read_to_the_window_once(
    bucket: str, tmp_path: Path
) -> None:
    """With no loader announcing, each read moves the window along the plan: the steps it had
    not reached yet, not the whole window again (handing it all at every read claimed each
    document ~8 times: 0.28 of 0.51 ms of client CPU a cold document, benchmarks/remote_cpu.py)."""
    local, store = _local_and_remote(f"s3://{bucket}/once", tmp_path)
    rng = np.random.default_rng(1)
    batches = [[f"D{i}" for i in rng.choice(400, 8, replace=False)] for _ in range(20)]
    store.plan(batches, first_step=10)
    cache = store.readers.own.planner.cache
    handed: list[Need] = []
    fetch_ahead = cache.fetch_ahead

    def counting(needs: list[Need], *args: object) -> list[Need]:
        handed.extend(needs)
        return fetch_ahead(needs, *args)  # type: ignore[arg-type]

    cache.fetch_ahead = counting  # type: ignore[method-assign]
    for step, ids in enumerate(batches, 10):
        assert store.get_many(ids, step=step) == local.get_many(ids)
    planned = store.readers.own.planner.schedule.needs(10, 30)  # type: ignore[union-attr]
    assert sorted(handed) == sorted(planned)  # every planned read handed once, none again
    assert store.cache_stats()["unplanned"] == 0


def test_the_loader_plans_each_epoch_and_names_each_step(bucket: str, tmp_path: Path) -> None:
    url = f"s3://{bucket}/loader"
    folder = tmp_path / "src"
    _corpus(folder, 200)
    write(folder / "queries.tsv", "".join(f"q{i}\tquery {i}\n" for i in range(40)))
    write(folder / "qrels.tsv", "".join(f"q{i} 0 D{i * 3} 1\n" for i in range(40)))
    lading.build_store(folder / "collection.tsv", url, cache=str(tmp_path / "up"), progress=False)
    store = lading.open_store(url, cache=tmp_path / "node", cache_bytes="1M")
    groups = TrainingGroups(
        store, lading.ir.read_queries(folder / "queries.tsv"),
        lading.ir.read_qrels(folder / "qrels.tsv"), group_size=4, sampling="random", seed=0,
    )  # fmt: skip
    steps: list[int | None] = []

    def collate(items: list[dict[str, object]]) -> list[list[str]]:
        steps.append(current_step())  # the step the loader set around the batch's build
        return [store.get_many(item["doc_ids"]) for item in items]  # type: ignore[arg-type]

    loader = lading.loader(groups, 5, collate_fn=collate, world=lading.World(0, 1), seed=0)
    for epoch in range(2):
        loader.set_epoch(epoch)
        for batch, _ in enumerate(loader):
            mine = store.readers.of(loader._workload)  # the loader's plan, not the store's own
            assert mine is not None and store.readers.own.planner.schedule is None
            schedule = mine.planner.schedule
            assert schedule is not None and schedule.first_step == epoch << 32
            assert schedule.covers(((epoch + 1) << 32) + len(loader) - 1)  # and the next epoch
            assert steps[-1] == (epoch << 32) + batch  # the build's reads carried its step
    assert store.cache_stats()["unplanned"] == 0


def test_the_needs_left_for_later_are_those_overlapping_a_deferred_block() -> None:
    """``inside`` (one binary search a need, not every block a need: that was ~55 of 128 s
    of a 30k-document epoch's prefetches) agrees with the plain overlap test."""
    from lading.remote.cache.claims import inside
    from lading.remote.ranges import Block

    seed = int(os.environ.get("LADING_SEED", random.randrange(1 << 30)))
    print(f"LADING_SEED={seed}")
    rng = random.Random(seed)
    for _ in range(500):
        blocks = []
        for key in "ab":
            at = 0
            for _ in range(rng.randint(0, 5)):  # disjoint blocks of one object, as coalesced
                at += rng.randint(0, 20)
                end = at + rng.randint(1, 20)
                blocks.append(Block(key, at, end, 0))
                at = end
        rng.shuffle(blocks)
        needs = []
        for _ in range(10):
            start = rng.randint(0, 150)
            needs.append(Need(rng.choice("ab"), start, start + rng.randint(1, 30), 0))
        plain = [
            n
            for n in needs
            if any(b.key == n.key and b.start < n.end and n.start < b.end for b in blocks)
        ]
        assert inside(needs, blocks) == plain


@pytest.mark.slow  # both readers: ~5 s each, kept under the default run's 10 minutes
@pytest.mark.parametrize(
    "reader", ["planner", "another"]
)  # another: a store with no plan of its own on the folder reads (a DataLoader worker's)
def test_a_store_that_knows_the_order_keeps_the_next_epochs_blocks_until_read(
    bucket: str, tmp_path: Path, reader: str
) -> None:
    """Through the store's own reads (``get_many`` at its step, after ``store.plan``), as
    through the cache's: a read that misses takes the room of no block planned later in the
    epoch. At a cap full of blocks the next epoch needs (an epoch ends so), all of them but
    the regions the batch and the window take are still there at their reads; the store's
    reads once evicted whole regions of them (5 of 16
    regions at the start of epoch 2 at a 0.5 % cap of 1M passages: 0.60x Belady's hits), yet
    the window ahead still finds room (a read that takes none had it find none)."""
    count, batch = 1_200, 24
    folder = tmp_path / "src"
    lines = [f"D{i}\tpassage {i} " + "word " * (200 + i % 40) for i in range(count)]
    write(folder / "collection.tsv", "\n".join(lines) + "\n")  # ~1 KiB a document
    url = f"s3://{bucket}/kept"
    built = lading.build_store(folder / "collection.tsv", url, cache=str(tmp_path / "up"),
                               progress=False)  # fmt: skip
    spans = built._columns.spans("text", np.arange(count))
    mean = sum(b - a for _, a, b in spans) / count
    store = lading.open_store(url, cache=tmp_path / "node", cache_bytes=int(96 * mean))
    assert isinstance(store, RemoteStore)
    reads = store
    if reader == "another":  # its reads learn the order from the ledger
        reads = lading.open_store(url, cache=tmp_path / "node", cache_bytes=int(96 * mean))
        assert reads.readers.own.planner.schedule is None
    rng = np.random.default_rng(0)
    orders = [rng.permutation(count) for _ in range(2)]
    epochs = [[[f"D{i}" for i in o[j : j + batch]] for j in range(0, count, batch)] for o in orders]
    cache = store._columns.cache
    caches = list({id(s._columns.cache): s for s in (store, reads)}.values())

    def figure(name: str) -> int:  # this process's, over the stores' caches (one or two)
        return sum(int(s.cache_stats()[name]) for s in caches)

    for epoch, batches in enumerate(epochs):
        steps = [(epoch << 32) + j for j in range(len(batches))]
        after = epochs[epoch + 1] if epoch + 1 < len(epochs) else []
        store.plan(
            batches + after, steps=steps + [((epoch + 1) << 32) + j for j in range(len(after))]
        )
        if epoch == 1:
            cache.drain()
            with cache.ledger.read() as conn:
                kept = conn.execute(
                    "SELECT total(end - start) FROM blocks WHERE owner IS NULL AND next_use >= ?",
                    (1 << 32,),
                ).fetchone()[0]
            fetched = figure("bytes_fetched")
            around = figure("bytes_bypassed") - figure("bytes_held")
        told = 0
        for j, ids in enumerate(batches):
            if told < min(j + 8, len(batches)):
                upto = min(j + 16, len(batches))
                store.prefetch(batches[told:upto], steps[told], steps[j])
                told = upto
            else:
                store.prefetch([], steps[j] + 1, steps[j])
            assert reads.get_many(ids, step=steps[j]) == built.get_many(ids)
    used = sum(b - a for _, a, b in spans)  # epoch 2 reads every document once
    saved = used - (figure("bytes_fetched") - fetched)  # bytes epoch 2 read with no GET
    around = figure("bytes_bypassed") - figure("bytes_held") - around  # by the reads
    print(
        f"kept for epoch 2: {kept / mean:.0f} documents' bytes; read with no GET: "
        f"{saved / mean:.0f}; fetched around the cache at the reads: {around / used:.2f}"
    )
    assert kept >= 48 * mean  # the cap was full of the next epoch's blocks (~96 documents)
    # each was read from the cache but those of the regions the batch and the window took
    # (2 of the 16 at most)
    assert saved >= 0.8 * kept
    # the window still fetched ahead (a read that takes no room had it find none: every read
    # around the cache); a reader in another store, learning the order from the ledger, reads
    # 0.23-0.27 of epoch 2 around this tiny cap (9 runs, timing-dependent): 0.25 failed 1 in 2
    assert around <= (0.25 if reader == "planner" else 0.4) * used
    reads.close()
    store.close()


def test_a_once_reader_moves_a_read_on_to_the_next_epoch_when_that_epoch_comes(
    tmp_path: Path,
) -> None:
    """A reader of each range once an epoch (documents) moves the next use of a block read
    again only in a later epoch on when the clock crosses into that epoch, not at each step
    of its own epoch: until then its passed use reads as none to eviction, so the window
    ahead may take its region (moving every such block on at each step kept the window's
    retries finding no room: the plan's client CPU a cold document 1.28-1.38x a bare GET
    against 1.20-1.22x without, at a 10 % cap of 1M passages, with the same epoch-2 hits).
    A block read again within its epoch (a touching read later) is moved on at once."""
    data = os.urandom(1000)
    cache = _cache(tmp_path, data, 10_000, "next-use")
    planner = Planner(cache, once=True)
    a, b, later = ("text.bin", 0, 100), ("text.bin", 100, 200), ("text.bin", 500, 600)
    epoch2 = 1 << 32
    needs = [Need(*a, 0), Need(*later, 0), Need(*b, 5), Need(*later, epoch2 + 3)]
    planner.plan(Schedule(needs, 0))
    planner.prefetch(needs[:3], 0)
    cache.drain()
    assert cache.read([a, later], 0, True) == [data[0:100], data[500:600]]

    def uses() -> dict[int, int]:
        with cache.ledger.read() as conn:
            return dict(conn.execute("SELECT start, next_use FROM blocks").fetchall())

    planner.advance(1)
    assert uses() == {0: 5, 500: 0}  # a's block waits for b; the other is passed until epoch 2
    planner.advance(6)
    assert uses()[500] == 0
    planner.advance(epoch2)  # the clock crossed into epoch 2: its reads are next
    assert uses()[500] == epoch2 + 3
    assert uses()[0] is None or uses()[0] < epoch2  # no later use: none, or one passed


def test_a_once_reader_leaves_a_block_read_again_far_ahead_to_the_window(
    tmp_path: Path,
) -> None:
    """A block a reader of each range once an epoch reads again in the epoch only more than
    ``HOLD_STEPS`` after now is not moved on at its read: its region stays free to go for
    the window ahead until that read is announced, and the window records the use then (a
    few such blocks kept most regions from the window at a 10 % cap of 1M passages: its
    retries found no room; leaving them cost 6 more GETs of 30,000)."""
    from lading.remote.cache.planner import HOLD_STEPS

    data = os.urandom(1000)
    cache = _cache(tmp_path, data, 10_000, "next-use")
    planner = Planner(cache, once=True)
    a, b, c, d = (("text.bin", x, x + 100) for x in (0, 100, 300, 400))
    far = 1 + HOLD_STEPS + 10
    needs = [Need(*a, 0), Need(*c, 0), Need(*b, 5), Need(*d, far)]
    planner.plan(Schedule(needs, 0))
    planner.prefetch(needs, 0)
    cache.drain()
    assert cache.read([a, c], 0, True) == [data[0:100], data[300:400]]

    def uses() -> dict[int, int]:
        with cache.ledger.read() as conn:
            return dict(conn.execute("SELECT start, next_use FROM blocks").fetchall())

    planner.advance(1)
    assert uses() == {0: 5, 300: 0}  # b is near: held; d far: left to the window
    planner.prefetch([Need(*d, far)], far - 8)  # d announced: the window records its use
    assert uses()[300] == far
