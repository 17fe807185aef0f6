"""Client CPU a GET: lading's fetcher (its loop, calls of 10 ranges, the node's slots, pinned or
not) beside obstore's own ``get_ranges``, on the local S3 (30 ms ± 10 a request).

    python benchmarks/bench_fetch_cpu.py [--gets 300] [--repeats 3]

Each leg fetches ``--gets`` ranges of 12,000 bytes of one 4 MiB object and is timed by this
process's CPU (``time.process_time``: every thread, obstore's runtime included; the server is
another process); the legs alternate within a repeat, median [min-max] over repeats.

- ``obstore, one range a call``: ``obstore.get_ranges`` (sync) of one range, one after another;
- ``obstore, 8 ranges a call``: the same, 8 ranges a call (8 GETs side by side, none merged);
- ``lading``: ``Fetcher.submit_many`` of 8 requests at a time, up to 64 in flight (the node
  cache's route: one loop thread, calls of up to 10 ranges), with ``node=`` (the node's slot
  files) and ``pin_every=`` (each range its own GET with ``If-Match``: what parquet objects,
  which a user may rewrite in place, are read with) on and off.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lading.remote.clients import open_client
from lading.remote.fetch import Fetcher
from lading.testing import LocalS3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import obstore
    from obstore.store import from_url

    n = args.gets
    ranges = [(i * 13_000, i * 13_000 + 12_000) for i in range(n)]
    with LocalS3(latency=0.03, jitter=0.01) as s3, tempfile.TemporaryDirectory() as scratch:
        s3.make_bucket("fetchcpu")
        client = open_client("s3://fetchcpu")
        client.put("x.bin", os.urandom(max(4 << 20, ranges[-1][1])))
        info = client.head("x.bin")
        etag = info.etag if info else None
        store = from_url("s3://fetchcpu", client_options={"allow_http": True})

        def bare(per_call: int) -> Callable[[], None]:
            def run() -> None:
                for i in range(0, n, per_call):
                    part = ranges[i : i + per_call]
                    obstore.get_ranges(
                        store, "x.bin", starts=[a for a, _ in part], ends=[b for _, b in part],
                        coalesce=0,
                    )  # fmt: skip

            return run

        def lading(node: bool, pin: bool) -> tuple[Callable[[], None], Fetcher]:
            slots = Path(tempfile.mkdtemp(dir=scratch)) / "inflight" if node else None
            fetcher = Fetcher(lambda: open_client("s3://fetchcpu"), node=slots, pin_every=pin)

            def run() -> None:
                futures = []
                for i in range(0, n, 8):
                    batch = [("x.bin", a, b, etag) for a, b in ranges[i : i + 8]]
                    futures += fetcher.submit_many(batch)
                    if len(futures) >= 64:
                        [f.result() for f in futures]
                        futures = []
                [f.result() for f in futures]

            run()  # its client made, its loop started: nobody's cost
            return run, fetcher

        legs: dict[str, Callable[[], None]] = {
            "obstore, one range a call": bare(1),
            "obstore, 8 ranges a call": bare(8),
        }
        fetchers = []
        for node in (False, True):
            for pin in (False, True):
                run, fetcher = lading(node, pin)
                pinned = "each" if pin else "a call a second"
                legs[f"lading, node slots {'on' if node else 'off'}, pinned {pinned}"] = run
                fetchers.append(fetcher)
        found: dict[str, list[float]] = {name: [] for name in legs}
        for r in range(args.repeats):
            names = list(legs)
            for name in names[r % len(names) :] + names[: r % len(names)]:
                cpu = time.process_time()
                legs[name]()
                found[name].append(1e6 * (time.process_time() - cpu) / n)
        for fetcher in fetchers:
            fetcher.close()
    print(
        f"\n{n} GETs of 12,000 bytes a leg, {args.repeats} repeats, load {os.getloadavg()[0]:.1f}"
    )
    print("| route | client CPU us a GET |\n|---|---:|")
    for name, values in found.items():
        spread = f"{statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]"
        print(f"| {name} | {spread} |")


if __name__ == "__main__":
    main()
