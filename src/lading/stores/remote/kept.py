"""Which documents a remote store fetches through its node cache, and which around it.

A loader tells the store its plan (:meth:`~lading.stores.remote.store.RemoteStore.plan_rows`):
the reads left in this epoch and the next epoch's. A training epoch reads a document once or a
few times, and its next read is the next epoch's: a cap under what an epoch reads cannot keep it
until then, but for the documents the next epoch reads first. Those, up to a budget of the cap,
go through the node cache; so do this epoch's own first reads (which the plan before kept: they
are there) and every document this epoch reads more than once. The window ahead starts the GETs
of every other document for the process that reads them (:mod:`lading.remote.cache.around`):
no claim, no fill, no ledger lookup or generation check at the read, and no block the cap keeps
for a later read given up for one read an epoch away. Each document is still one range: the
bytes fetched stay the bytes read.

Only where this process reads at the steps it planned (a loader with ``num_workers=0``, its
read-ahead thread included): a loader whose DataLoader workers build the batches reads in other
processes, which would fetch each document again (an LM loader's windows did: 2.5-2.8x the bytes
used, ``tests/lm/test_lm_remote_ranges.py``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from lading.remote.ranges import Need
from lading.step import STEPS_PER_EPOCH

Key = tuple[str, int, int]  # object key, start, end
Array = npt.NDArray[np.int64]
Reads = tuple[list[str], Array, Array, Array, Array]  # keys, obj, starts, ends, steps
# the next epoch's first reads kept: this share of the cap. A little over it keeps the cache
# full (eviction by next use gives up the last of them; the open region and whole regions
# evicted leave room): at 0.5 % of 200,000 passages, 0.875 of the cap held 0.81 of what the
# cap's bytes hold, with 0.75x Belady's epoch-2 hits; 1.0, 0.84 and 0.87x; 1.1, 0.95 and 0.98x
KEEP_SHARE = 1.1


class Kept:
    """The ranges a store's plan keeps in the node cache (see the module doc)."""

    def __init__(self) -> None:
        self.keys: set[Key] | None = None  # None: no plan, every range through the cache
        self._firsts: dict[int, set[Key]] = {}  # epoch -> its first reads, kept for it

    def plan(self, reads: Reads, first_step: int, budget: int) -> None:
        """Take a plan's ``reads`` (``(keys, obj, starts, ends, steps)``; read ``i``: object
        ``keys[obj[i]]``, bytes ``[starts[i], ends[i])`` at ``steps[i]``, from ``first_step``
        on): keep the next epoch's first reads up to ``budget`` bytes, this epoch's kept by
        the plan before, and its repeated ones."""
        keys, obj, starts, ends, steps = reads
        epoch = first_step // STEPS_PER_EPOCH
        of_epoch = steps // STEPS_PER_EPOCH
        nxt = np.flatnonzero(of_epoch == epoch + 1)
        nxt = nxt[np.argsort(steps[nxt], kind="stable")]
        take = int(np.searchsorted(np.cumsum(ends[nxt] - starts[nxt]), budget, side="right"))
        firsts = _keys(keys, obj, starts, ends, nxt[:take])
        before = self._firsts.get(epoch)  # (a plan again within an epoch keeps it)
        now = np.flatnonzero(of_epoch == epoch)
        self.keys = (
            firsts | (before or set()) | _keys(keys, obj, starts, ends, _repeated(obj, starts, now))
        )
        self._firsts = {epoch + 1: firsts, **({epoch: before} if before else {})}

    def split(self, needs: list[Need]) -> tuple[list[Need], list[Need]]:
        """``needs`` as (those to fetch around the cache, those to fetch through it)."""
        kept = self.keys
        if kept is None:
            return [], needs
        around = [n for n in needs if (n.key, n.start, n.end) not in kept]
        through = [n for n in needs if (n.key, n.start, n.end) in kept]
        return around, through

    def forget(self) -> None:
        """No plan now (a new one comes at the next pass): every range through the cache."""
        self.keys = None
        self._firsts = {}


def _keys(
    keys: list[str],
    obj: npt.NDArray[np.int64],
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    at: npt.NDArray[np.intp],
) -> set[Key]:
    return {
        (keys[o], a, b) for o, a, b in zip(obj[at].tolist(), starts[at].tolist(), ends[at].tolist())
    }


def _repeated(
    obj: npt.NDArray[np.int64], starts: npt.NDArray[np.int64], among: npt.NDArray[np.intp]
) -> npt.NDArray[np.intp]:
    """Of the reads ``among``, those of a range read more than once among them."""
    if len(among) < 2:
        return among[:0]
    order = among[np.lexsort((starts[among], obj[among]))]
    same = (obj[order][1:] == obj[order][:-1]) & (starts[order][1:] == starts[order][:-1])
    twice = np.zeros(len(order), dtype=bool)
    twice[1:] |= same
    twice[:-1] |= same
    return order[twice]
