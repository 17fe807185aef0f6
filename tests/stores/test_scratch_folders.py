"""A scratch folder beside the node cache (a shard built into object storage, a merge's mirror,
a Ray task's block) outlives no process: one whose process was SIGKILLed (it never reached its
``finally``) is removed by the next scratch folder made there; a live process's is kept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from lading.remote.settings import RemoteSettings
from lading.stores.building.remote_shards import scratch_folder

HOLD = """
import sys, time
from lading.remote.settings import RemoteSettings
from lading.stores.building.remote_shards import scratch_folder
with scratch_folder(RemoteSettings.of(sys.argv[1], None, None), sys.argv[2]) as folder:
    (folder / "corpus").mkdir()
    (folder / "corpus" / "tokens.bin").write_bytes(b"x" * 100_000)
    print(folder, flush=True)
    time.sleep(120)
"""


def holding(cache: Path, prefix: str) -> tuple[subprocess.Popen[str], Path]:
    """A process that made a scratch folder in ``cache`` and holds it; the folder."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(cache), prefix], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    return child, Path(child.stdout.readline().strip())


def test_a_killed_workers_scratch_folder_is_removed_by_the_next_one(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    settings = RemoteSettings.of(cache, None, None)
    killed, left = holding(settings.cache, "shard-")
    ray_killed, ray_left = holding(settings.cache, "ray-shard-")
    live, kept = holding(settings.cache, "shard-")
    try:
        for child in (killed, ray_killed):
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        assert (left / "corpus" / "tokens.bin").is_file(), "the kill reached no finally"
        theirs = settings.cache / "tmpabc123"  # not a scratch folder of this lading's: kept
        theirs.mkdir()
        with scratch_folder(settings, "merge-") as mine:
            assert mine.is_dir() and mine.parent == settings.cache
            assert not left.exists() and not ray_left.exists()
            assert (kept / "corpus" / "tokens.bin").is_file(), "a live worker's folder went"
            assert theirs.is_dir()
        assert not mine.exists()
    finally:
        live.kill()
        live.wait()
    with scratch_folder(settings, "shard-"):
        assert not kept.exists()
