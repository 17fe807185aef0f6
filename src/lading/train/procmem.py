"""What a process really costs: RSS, PSS, USS and anonymous memory, read from /proc (Linux).

RSS counts shared pages in full in every process that maps them, so summing RSS over ranks
overstates a memory-mapped store N times; PSS splits shared pages among their users, USS
counts only private ones. ``RssAnon`` (``anon``) is the heap and other memory no file backs
that one process maps, what an in-memory corpus costs that process; but a DataLoader worker
forked from its rank maps the rank's heap copy-on-write, so summing ``anon`` over a rank and
its workers counts the same pages once per worker. ``Pss_Anon`` (``pss_anon``) splits each
anonymous page among the processes that map it: summed over a set of processes it is the
anonymous memory they hold, each page counted once (pages shared with a process outside the
set count only for their share). Elsewhere than Linux only RSS is known.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Memory:
    """One process's memory in bytes (0 where the platform does not say).

    Attributes:
        rss: resident pages (``VmRSS``), shared ones in full.
        pss: resident pages, each shared page divided by the number of processes mapping it.
        uss: pages only this process maps (``Private_Clean`` + ``Private_Dirty``).
        anon: anonymous pages it maps (``RssAnon``), shared copy-on-write ones in full.
        pss_anon: anonymous pages, each shared one divided among its processes (``Pss_Anon``;
            0 on kernels too old to report it).
    """

    pid: int
    rss: int
    pss: int
    uss: int
    anon: int
    pss_anon: int = 0

    def as_dict(self) -> dict[str, int]:
        """Plain dict, for JSON logs."""
        return asdict(self)


def _kib_fields(path: str, names: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in names:
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def process_memory(pid: int | None = None) -> Memory:
    """Memory of ``pid`` (default: this process); zeros for a process that has exited."""
    pid = os.getpid() if pid is None else pid
    status = _kib_fields(f"/proc/{pid}/status", ("VmRSS", "RssAnon"))
    rollup = _kib_fields(
        f"/proc/{pid}/smaps_rollup", ("Pss", "Pss_Anon", "Private_Clean", "Private_Dirty")
    )
    if not status:
        try:
            import psutil

            rss = int(psutil.Process(pid).memory_info().rss)
        except Exception:  # the process is gone, or psutil cannot see it
            rss = 0
        return Memory(pid, rss, 0, 0, 0)
    return Memory(
        pid,
        status.get("VmRSS", 0),
        rollup.get("Pss", 0),
        rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0),
        status.get("RssAnon", 0),
        rollup.get("Pss_Anon", 0),
    )


def tree_memory(pid: int | None = None) -> list[Memory]:
    """Memory of a process and all its descendants (e.g. a rank and its DataLoader workers)."""
    import psutil

    root = psutil.Process(os.getpid() if pid is None else pid)
    pids = [root.pid] + [child.pid for child in root.children(recursive=True)]
    return [process_memory(p) for p in pids]
