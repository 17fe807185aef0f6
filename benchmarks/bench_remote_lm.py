"""Token corpora and parquet sessions from object storage, head to head (issue 41, item 4).

One local S3 bucket (moto behind lading's latency proxy, 30 ms ± 10 a request; the proxy
serves GETs from its own copy of each object), the node cache capped at ``--share`` (10 %) of
the corpus's token bytes. One shuffled epoch of LM windows of ``--seq-len`` (2,048) tokens,
in batches of ``--batch``, in this process (no DataLoader workers but in ``+workers`` rows),
per system:

- lading: ``TokenCorpus.open("s3://...", cache=DIR, cache_bytes=N)`` + ``LanguageModelLoader
  (corpus, batch, Windows(seq_len))``; and the same loader on the same corpus on local disk;
- Mosaic ``StreamingDataset`` over MDS token shards, litdata ``StreamingDataset`` with its
  ``TokensLoader`` (see remote_lm_peers.py for their routes);
- ``lading@stored``: ``Windows(seq_len, shuffle_documents=False)`` (one range a window),
  ``lading@blocks``: the locality shuffle (``block_tokens`` one region of the node cache,
  ``--block-regions`` regions with that flag);
  ``--doc-tokens`` sets the synthetic documents' mean length (issue 48);
- ``+step``: a training step a batch (a sleep of batch tokens / ``--consume``), for lading
  local and remote and for the peers, ``+workers`` with 2 DataLoader workers: does the
  look-ahead keep up; ``--neighbour N``: N CPU-bound processes beside every measurement
  (issue 48 item 4; ``--busy-report`` writes its section, see remote_lm_busy.py).

Per system: tokens/s over the epoch and once warm (after the first ``--warm`` of it), the time
from the reader's construction to its first batch, client
CPU per million tokens (this process's own CPU time, every thread, and its DataLoader
workers'; the server excluded), the server's CPU (the local S3's process tree), bytes fetched
(the proxy's counter) / bytes used (windows x (seq_len + 1) x bytes a token), and the resume
each offers, tested: read k batches, save the loader's state, resume in a fresh reader with
a cold cache, compare the next two batches. ``--epochs 2``: the same reader reads a second
epoch, measured apart (``"later"`` in its row: what a cache that outlives an epoch saves).
Parquet: ``PartitionedParquet`` sessions/s, the files on the bucket vs on local disk. The
server's own ceiling (lading's fetcher alone, random small ranges) in the same run.

    python benchmarks/bench_remote_lm.py --repeats 3 --write        # Wikipedia ../shared/data
    python benchmarks/bench_remote_lm.py --synthetic --repeats 3     # synthetic tokens
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import psutil

from bench_remote_node import ceiling, disk_bytes, server_cpu
from common import HERE, OUT, add_write_flag, write_section
from lading.lm import LanguageModelLoader, TokenCorpus, Windows
from lading.remote.cache.regions import Layout
from lading.testing import LocalS3
from lading.world import World
from remote_lm_busy import Neighbours, Runnable, render_busy
from remote_lm_corpus import corpus_for, sessions_for, upload_folder
from remote_lm_peers import PEERS, verdict
from remote_lm_report import render

BUCKET = "bench"
ITEMS = "item_id-list_seq"  # the sessions' item lists, padded to 20 (as bench_parquet.py)


def measure(s3: LocalS3, batches: Iterator[Any], env: dict[str, Any], cache: Path | None,
            warm: float, step: float = 0.0,
            opened: float | None = None) -> dict[str, Any]:  # fmt: skip
    """One epoch of ``batches`` (each ``[rows, >= seq_len]``): rates, CPU, bytes. ``step``:
    seconds a batch's training step takes (a sleep: the GIL is free, as under a GPU step);
    ``opened``: when the reader's construction began (``perf_counter``), the start of its
    time to first batch (construction, first GETs and the first batch's build)."""
    s3.reset()
    load = os.getloadavg()[0]
    server, wall = server_cpu(s3), time.perf_counter()
    client, busy = ClientCPU(s3, env.get("neighbour_pids", ())), Runnable()
    marks, windows, first = [(wall, 0)], 0, float("nan")
    for i, batch in enumerate(batches):
        assert batch.shape[-1] >= env["seq_len"], f"a batch of shape {tuple(batch.shape)}"
        windows += int(batch.shape[0])
        if i == 0:
            first = time.perf_counter() - (wall if opened is None else opened)
        if step:
            time.sleep(step)
        marks.append((time.perf_counter(), windows))
        if i % 16 == 0:  # DataLoader workers' CPU, before they are gone
            client.sample()
            busy.sample()
    cpu = client.seconds()
    server = server_cpu(s3) - server
    stats = s3.stats()
    end = marks[-1]
    start = next(m for m in marks if m[1] >= warm * windows)  # the look-ahead is warm
    tokens, warm_tokens = windows * env["seq_len"], (end[1] - start[1]) * env["seq_len"]
    used = windows * env["window_bytes"]
    return {
        "windows": windows, "tokens_s": tokens / (end[0] - wall),
        "warm_tokens_s": warm_tokens / max(1e-9, end[0] - start[0]),
        "cpu_s_per_mtok": 1e6 * cpu / max(1, tokens),
        "server_s_per_mtok": 1e6 * server / max(1, tokens),
        "gets": stats["gets"], "fetched_used": stats["get_bytes"] / max(1, used),
        "disk": disk_bytes(cache) if cache is not None else 0, "load": load,
        "load_end": os.getloadavg()[0], "runnable": busy.mean(), "first_batch_s": first,
    }  # fmt: skip


class ClientCPU:
    """CPU seconds of this process (every thread) and of its child processes but the local S3
    (DataLoader workers): children are sampled as the epoch goes (a worker's last reading is
    kept: a worker may be gone before the epoch's end is seen). The sampling's own CPU (psutil
    lists every process of the machine every 16 batches: ~0.003 s a million tokens here, once
    counted as every system's) is not the client's."""

    def __init__(self, s3: LocalS3, exclude: Iterable[int] = ()) -> None:
        assert s3._process is not None
        self.me, self.server = psutil.Process(), s3._process.pid
        self.exclude = set(exclude)  # the CPU-bound neighbours (--neighbour): not the client's
        self.children: dict[int, float] = {}
        self.sampling = 0.0  # CPU of this thread inside sample()
        self.own = self._own()

    def _own(self) -> float:
        t = self.me.cpu_times()
        return float(t.user + t.system)

    def sample(self) -> None:
        started = time.thread_time()
        for child in self.me.children(recursive=True):
            try:
                if child.pid in self.exclude or child.pid == self.server:
                    continue
                if self.server in [p.pid for p in child.parents()]:
                    continue
                t = child.cpu_times()
                self.children[child.pid] = t.user + t.system
            except psutil.Error:  # gone meanwhile: its last reading stands
                continue
        self.sampling += time.thread_time() - started

    def seconds(self) -> float:
        """CPU since this was made, less the sampling's."""
        self.sample()
        return self._own() - self.own - self.sampling + sum(self.children.values())


def lading_loader(env: dict[str, Any], remote: bool, cache: Path, workers: int = 0,
                  stored: Any = False) -> LanguageModelLoader:  # fmt: skip
    """lading's own route: the corpus opened from the bucket (or disk), Windows(seq_len)
    shuffled (``stored``: over the stored document order, ``shuffle_documents=False``)."""
    if remote:
        corpus = TokenCorpus.open(env["url"], cache=cache, cache_bytes=env["cap"])
    else:
        corpus = TokenCorpus.open(env["local"])
    block = env.get("block_tokens", 0) if stored == "blocks" else 0
    mode = Windows(env["seq_len"], shuffle_documents=not stored, block_tokens=block)
    return LanguageModelLoader(corpus, env["batch"], mode, shuffle=True, seed=0, world=World(),
                               num_workers=workers)  # fmt: skip


def lading_batches(loader: LanguageModelLoader) -> Iterator[Any]:
    for x, _ in loader:
        yield x


def lading_resume(env: dict[str, Any], remote: bool, k: int, stored: Any = False) -> str:
    """Save after ``k`` batches, resume a fresh loader (a cold cache), compare two batches."""
    work = env["work"]
    first = lading_loader(env, remote, work / f"lading-resume-a-{time.time_ns()}", 0, stored)
    seen, state = [], None
    for i, (x, _) in enumerate(first):
        seen.append(x.clone())
        if i == k - 1:
            state = first.state_dict()
        if i == k + 1:
            break
    second = lading_loader(env, remote, work / f"lading-resume-b-{time.time_ns()}", 0, stored)
    assert state is not None, f"an epoch of {len(seen)} batches: none saved after {k}"
    second.load_state_dict(state)
    again = [x.clone() for _, (x, _) in zip(range(2), second)]
    return verdict(seen[k:], again)


def failure(e: BaseException) -> str:
    """One line for a table cell: the exception's type and first line."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def tested(check: Callable[[], str]) -> str:
    """A resume check's verdict, or why it could not run (the epoch's figures stand)."""
    try:
        return check()
    except Exception as e:
        traceback.print_exc()
        return f"failed: {failure(e)}"


def one_system(s3: LocalS3, system: str, env: dict[str, Any], args: Any,
               repeat: int) -> dict[str, Any]:  # fmt: skip
    """One epoch of ``system`` (its resume tested on the first repeat)."""
    cache = env["work"] / f"cache-{system}-{time.time_ns()}"
    row: dict[str, Any] = {"system": system, "repeat": repeat}
    try:
        if system.startswith("lading"):  # lading[-local][@stored][+step][+workers]
            stored: Any = "blocks" if "@blocks" in system else "@stored" in system
            remote = system.split("+")[0].split("@")[0] == "lading"
            step = env["batch"] * env["seq_len"] / args.consume if "+step" in system else 0.0
            workers = 2 if "+workers" in system else 0
            opened = time.perf_counter()
            loader = lading_loader(env, remote, cache, workers, stored)
            row.update(measure(s3, lading_batches(loader), env, cache if remote else None,
                               args.warm, step, opened))  # fmt: skip
            row["later"] = [measure(s3, lading_batches(loader), env, cache if remote else None,
                                    0.0, step) for _ in range(args.epochs - 1)]  # fmt: skip
            del loader  # its read-ahead thread (building the next epoch) stops
            gc.collect()
            if repeat == 0 and args.resume_after and "+" not in system:
                row["resume"] = tested(
                    lambda: lading_resume(env, remote, args.resume_after, stored)
                )
        else:
            peer = system.split("+")[0]  # mosaic[+step], litdata[+step]
            step = env["batch"] * env["seq_len"] / args.consume if "+step" in system else 0.0
            setup_fn, open_fn, batches_fn, resume_fn = PEERS[peer]
            if peer not in env["setups"]:
                env["setups"][peer] = setup_fn(env, s3, BUCKET)
            setup = env["setups"][peer]
            opened = time.perf_counter()
            loader = open_fn(env, setup, cache)
            row.update(measure(s3, batches_fn(loader), env, cache, args.warm, step, opened))
            row["later"] = [measure(s3, batches_fn(loader), env, cache, 0.0, step)
                            for _ in range(args.epochs - 1)]  # fmt: skip
            del loader
            if repeat == 0 and args.resume_after and "+" not in system:
                row["resume"] = tested(lambda: resume_fn(env, setup, args.resume_after))
            row["layout"] = {k: v for k, v in setup.items() if k != "remote"}
    except Exception as e:  # a system that cannot do it: say why, go on with the others
        row["error"] = failure(e)
        traceback.print_exc()
    shutil.rmtree(cache, ignore_errors=True)
    print(json.dumps(row), flush=True)
    return row


def sessions(s3: LocalS3, env: dict[str, Any], args: Any, repeat: int) -> list[dict[str, Any]]:
    """PartitionedParquet over the files on local disk and on the bucket: sessions/s over
    ``--parquet-epochs`` epochs (one loader, a cold cache at its start), the two in turn,
    which one first alternating by repeat; then the same under a training step of
    ``--parquet-step-ms`` a batch (a sleep: the GIL free, as under a GPU step)."""
    rows = []
    for step in (0.0, args.parquet_step_ms / 1e3) if args.parquet_step_ms else (0.0,):
        for where in ("local", "remote") if repeat % 2 == 0 else ("remote", "local"):
            rows.append(_sessions_run(s3, env, args, repeat, where, step))
    return rows


def _sessions_run(s3: LocalS3, env: dict[str, Any], args: Any, repeat: int, where: str,
                  step: float) -> dict[str, Any]:  # fmt: skip
    from lading.tabular import PartitionedParquet

    files = env["parquet_urls"] if where == "remote" else env["parquet_files"]
    cache = env["work"] / f"parquet-cache-{time.time_ns()}"
    extra = {"cache": cache, "cache_bytes": env["parquet_cap"]} if where == "remote" else {}
    system = f"parquet-{where}" + ("+step" if step else "")
    row: dict[str, Any] = {"system": system, "repeat": repeat, "step_ms": 1e3 * step}
    try:
        loader = PartitionedParquet(files, 256, columns=["session_id", ITEMS],
                                    list_columns={ITEMS: 20}, world=World(),
                                    **extra)  # fmt: skip
        s3.reset()
        wall, cpu, n = time.perf_counter(), time.process_time(), 0
        for _ in range(args.parquet_epochs):
            for batch in loader:  # each iter() an epoch
                n += len(batch["session_id"])
                if step:
                    time.sleep(step)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        row.update(sessions=n, sessions_s=n / wall, cpu_us=1e6 * cpu / max(1, n),
                   fetched=s3.stats()["get_bytes"], load=os.getloadavg()[0])  # fmt: skip
        del loader  # its read-ahead thread (building the next epoch) stops: no GETs in the next
        gc.collect()
    except Exception as e:
        row["error"] = failure(e)
    shutil.rmtree(cache, ignore_errors=True)
    print(json.dumps(row), flush=True)
    return row


def warm_up(env: dict[str, Any]) -> None:
    """One batch of each local reader, untimed: imports and first-use costs (pyarrow, torch's
    collation) are not any system's."""
    from lading.tabular import PartitionedParquet

    loader = lading_loader(env, False, env["work"])
    next(iter(loader))
    if "parquet_files" in env:
        files = env["parquet_files"]
        next(iter(PartitionedParquet(files, 256, columns=["session_id", ITEMS],
                                     list_columns={ITEMS: 20}, world=World())))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--synthetic", action="store_true", help="synthetic tokens, not Wikipedia")
    parser.add_argument("--tokens", type=int, default=4_000_000, help="corpus size, about")
    parser.add_argument("--doc-tokens", type=int, default=680,
                        help="--synthetic: mean tokens a document")  # fmt: skip
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--share", type=float, default=0.1, help="node cache / corpus bytes")
    parser.add_argument("--block-regions", type=float, default=1.0,
                        help="lading@blocks: a block's bytes, in regions")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--warm", type=float, default=0.1, help="share of the epoch skipped")
    parser.add_argument("--epochs", type=int, default=1,
                        help="epochs a reader reads (later ones: the row's 'later')")  # fmt: skip
    parser.add_argument("--resume-after", type=int, default=3,
                        help="batches before saving (0: no resume check)")  # fmt: skip
    parser.add_argument("--systems", default="lading-local,lading,mosaic,litdata,"
                        "lading-local+step,lading+step,lading+step+workers")  # fmt: skip
    parser.add_argument("--consume", "--step-tokens-per-s", type=float, default=1e6,
                        help="+step systems: tokens/s the training step takes")  # fmt: skip
    parser.add_argument("--latency", type=float, default=0.03, help="seconds a request, ± 1/3")
    parser.add_argument("--no-parquet", action="store_true")
    parser.add_argument("--parquet-epochs", type=int, default=3)
    parser.add_argument("--parquet-step-ms", type=float, default=2.0,
                        help="+step parquet rows: ms a batch of 256 rows (0: none)")  # fmt: skip
    parser.add_argument("--ceiling-seconds", type=float, default=3.0)
    parser.add_argument("--neighbour", type=int, default=0,
                        help="CPU-bound processes running beside the measurements")  # fmt: skip
    parser.add_argument("--busy-report", action="store_true",
                        help="write issue 48 item 4's section (a step on a busy machine), "
                        "not issue 41's")  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT.parent / "remote-lm")
    add_write_flag(parser)
    args = parser.parse_args()
    started = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    env = corpus_for(args, args.out)
    # lading@blocks: blocks of the locality shuffle as large as the node cache caches (a
    # region: cap / 16 up to 16 MiB), the window's shared token included
    region = Layout.of(env["cap"]).region_bytes
    env["block_tokens"] = int(args.block_regions * region) // env["tokens"].dtype.itemsize - 1
    print(f"lading@blocks: blocks of {env['block_tokens']:,} tokens", flush=True)
    work = env["work"] = args.out / f"run-{os.getpid()}"
    work.mkdir()
    with LocalS3(latency=args.latency, jitter=args.latency / 3) as s3:
        s3.make_bucket(BUCKET)
        env.update(url=f"s3://{BUCKET}/lading-lm", setups={})
        upload_folder(env["local"], env["url"])
        if not args.no_parquet:
            env.update(sessions_for(args, args.out, BUCKET))
        warm_up(env)
        rows = []
        systems = [s for s in args.systems.split(",") if s]
        for peer in dict.fromkeys(s.split("+")[0] for s in systems if s.split("+")[0] in PEERS):
            env["setups"][peer] = PEERS[peer][0](env, s3, BUCKET)  # written before any neighbour
        with Neighbours(args.neighbour) as busy:  # beside every measurement, none at setup
            env["neighbour_pids"] = busy.pids
            for repeat in range(args.repeats):  # the order rotated: each system first once
                turn = repeat % max(1, len(systems))
                for system in systems[turn:] + systems[:turn]:
                    rows.append(one_system(s3, system, env, args, repeat))
                if not args.no_parquet:
                    rows += sessions(s3, env, args, repeat)
        roof = ceiling(args.ceiling_seconds) if args.ceiling_seconds > 0 else None
    shutil.rmtree(work, ignore_errors=True)
    keep = ("origin", "documents", "n_tokens", "token_bytes", "cap", "seq_len", "batch",
            "parquet_origin", "parquet_bytes", "parquet_cap")  # fmt: skip
    results = {"rows": rows, "ceiling": roof, "args": {k: str(v) for k, v in vars(args).items()},
               "corpus": {k: env[k] for k in keep if k in env}, "cores": os.cpu_count(),
               "seconds": time.time() - started}  # fmt: skip
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    command = "python benchmarks/bench_remote_lm.py " + " ".join(sys.argv[1:])
    if args.busy_report:
        title, body = render_busy(results)
    else:
        title, body = "Remote token corpora and sessions, head to head (issue 41)", render(results)
    write_section(HERE / "RESULTS.md", title, body, command, write=args.write)


if __name__ == "__main__":
    main()
