"""GETs a window starts for ranges the node cache would not keep, held by their reader.

An exact shuffle of windows at a cap under the corpus reads each range once an epoch: its next
read is an epoch away, past anything the cap can hold, unless the next epoch reads it among
its first. Through the node cache such a range costs a claim, a fill (a write of the payload
file and a ledger transaction), a lookup and a generation check at its read, and every block
it evicts was worth more: ~0.1 of the ~0.3 ms of client CPU a window at a 10 % cap
(benchmarks/RESULTS.md). A window ahead hands such ranges to :class:`AroundGets` instead: their
GETs start at once (pinned as every GET, :mod:`lading.remote.fetch`), and the futures are held
by the loader that announced them until the read of that exact range takes its bytes
(:meth:`~.reads.NodeCache.read` with ``around=``), or their step passes. The bytes held are the
window's: at most the announced batches' ranges.

Owner: the loader's remote reads (one :class:`AroundGets` a token file), which empty it when the
loader closes (after its GETs settled) and which the node cache's view tells at a fork (a
forked child's reads never wait on the parent's GETs in flight: it fetches those ranges
itself).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from lading.remote.cancel import closed_reason
from lading.remote.fetch import Fetcher, Future
from lading.threads import carry

Key = tuple[int, int, int]  # object id, start, end


class AroundGets:
    """This loader's GETs of ranges read around the node cache, by range (see the module doc).

    The building thread takes, the announcing one holds (the same thread but for a loader
    whose batches are built in the main thread while another announces): one lock, held
    for the dict's updates only, never across a wait.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Key, tuple[Future, int]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def hold(
        self,
        keys: Sequence[Key],
        futures: Sequence[Future],
        steps: Sequence[int],
        fetcher: Fetcher | None = None,
    ) -> None:
        """Hold ``futures`` (the GET of each range of ``keys``, read at ``steps``). A range held
        for another step (announced again: :meth:`unheld`) has its older GET given up through
        ``fetcher`` (unheld, nobody would read it, and no close could stop its retries)."""
        replaced = []
        with self._lock:
            for key, future, step in zip(keys, futures, steps):
                old = self._held.get(key)
                if old is not None and old[0] is not future and not old[0].done():
                    replaced.append(old[0])
                self._held[key] = (future, step)
        if replaced and fetcher is not None:
            fetcher.abandon(replaced, "its range was fetched again for a later read")

    def unheld(self, keys: Sequence[Key], steps: Sequence[int]) -> list[int]:
        """The indexes of ``keys`` (read at ``steps``) with no GET held for that read, or one
        that failed: a window announcing a batch again (at each of its steps) fetched it
        again."""
        with self._lock:
            held = self._held
            return [
                i
                for i, (key, step) in enumerate(zip(keys, steps))
                if key not in held or held[key][1] != step or held[key][0].failed()
            ]

    def take(self, keys: Sequence[Key], now: int | None, fetcher: Fetcher) -> dict[Key, Future]:
        """The held GETs of ``keys``, no longer held (the taker's to wait for: a loader's read
        ties them to its flag, :mod:`lading.remote.cancel`); those of steps before ``now`` (a
        pass that moved on, or broke off) are given up (``fetcher``'s :meth:`~.Fetcher.abandon`):
        unheld, nobody would read them, and no close could stop their retries."""
        with self._lock:
            got = {k: self._held.pop(k)[0] for k in keys if k in self._held}
            passed = []
            if now is not None:
                for k in [k for k, (_, step) in self._held.items() if step < now]:
                    passed.append(self._held.pop(k)[0])
        if passed:
            fetcher.abandon(passed, "its read's step passed: nobody reads it")
        return got

    def settle(self, fetcher: Fetcher, timeout: float) -> bool:
        """Wait, at most ``timeout`` seconds, until every held GET is answered, then let them
        go (the loader closes: nothing it started runs on after, the unanswered given up);
        whether they all were."""
        with self._lock:
            futures = {future for future, _ in self._held.values()}
        done = fetcher.wait_settled(timeout, futures)
        if not done:  # a stalled server: given up, never sent again for this loader
            fetcher.abandon(futures, closed_reason())
        self.clear()
        return done

    def drop_failed(self) -> None:
        """Let the GETs that failed go: a read that raised one ended its pass, and the next
        pass (the server may be back) sends their ranges again."""
        with self._lock:
            for key in [k for k, (future, _) in self._held.items() if future.failed()]:
                del self._held[key]

    def clear(self) -> None:
        with self._lock:
            self._held.clear()

    def forked(self) -> None:
        """In a forked child: the parent's GETs in flight never settle here (their ranges are
        read again when asked); those answered before the fork hold their bytes. The parent's
        are carried, never freed here."""
        carry(self._held)
        self._lock = threading.Lock()
        self._held = {k: held for k, held in self._held.items() if held[0].done()}
