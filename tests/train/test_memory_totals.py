"""The memory totals in ``log.jsonl`` count each page once: anonymous memory shared
copy-on-write between a rank and its forked DataLoader workers is not counted once per
worker (it was: a 2-rank, 2-worker run logged 2.3 GiB of anonymous memory for ~1 GiB)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="Pss_Anon is read from /proc (Linux)"
)

MiB = 2**20

# A fresh process, so that its tree is only what the script makes: it allocates 200 MiB,
# forks two children that only read it, and logs the memory record of itself and them.
SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    import torch
    from lading.train.records import Window

    def total():
        return Window().record(0, 0, "rows_per_s", True, torch.device("cpu"))

    before = total()
    block = b"\\x01" * (200 * 2**20)  # written, so resident and anonymous
    children, ready = [], []
    for _ in range(2):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # only reads the block, then waits to be measured
            os.close(r)
            assert sum(block[::4096]) == len(block) // 4096
            os.write(w, b"x")
            time.sleep(60)
            os._exit(0)
        os.close(w)
        children.append(pid)
        ready.append(r)
    for r in ready:
        assert os.read(r, 1) == b"x"
    after = total()
    for pid in children:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    print(json.dumps({"before": before, "after": after}))
    """
)


def test_pages_shared_with_forked_children_are_counted_once() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    before, after = got["before"], got["after"]
    assert len(after["memory"]["rank0"]) == 3  # the process and its two children
    grew = (after["pss_anon_bytes_total"] - before["pss_anon_bytes_total"]) / MiB
    # 200 MiB held once, plus the children's own few pages; not 3 x 200 MiB.
    assert 180 < grew < 260, (grew, after)
    every = after["memory"]["rank0"]
    assert sum(p["pss_anon"] for p in every) == after["pss_anon_bytes_total"]
    assert all(p["anon"] >= 200 * MiB for p in every)  # each still maps all of it
