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
bytes fetched stay the bytes read. A cap that holds all the next epoch reads keeps everything,
as before.

Only where this process reads at the steps it planned (a loader with ``num_workers=0``, its
read-ahead thread included): a loader whose DataLoader workers build the batches reads in other
processes, which would fetch each document again (an LM loader's windows did: 2.5-2.8x the bytes
used, ``tests/lm/test_lm_remote_ranges.py``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from lading.remote.ranges import Need
from lading.remote.schedule import epoch_firsts
from lading.step import STEPS_PER_EPOCH

Array = npt.NDArray[np.int64]
Reads = tuple[list[str], Array, Array, Array, Array]  # keys, obj, starts, ends, steps
# the next epoch's first reads kept: this share of the cap. A little over it keeps the cache
# full (eviction by next use gives up the last of them; the open region and whole regions
# evicted leave room): at 0.5 % of 200,000 passages, 0.875 of the cap held 0.81 of what the
# cap's bytes hold, with 0.75x Belady's epoch-2 hits; 1.0, 0.84 and 0.87x; 1.1, 0.95 and 0.98x
KEEP_SHARE = 1.1


class Kept:
    """The ranges a store's plan keeps in the node cache (see the module doc), as sorted arrays
    of their starts by object: a cap of gigabytes keeps millions of documents, which as Python
    tuples would cost ~150 B each."""

    def __init__(self) -> None:
        # object key -> the starts of its ranges kept, sorted; None: every range through the
        # cache (no plan, or the cap keeps the whole next epoch)
        self.starts: dict[str, Array] | None = None
        # epoch -> its first reads, kept (None: every read of it went through the cache)
        self._firsts: dict[int, dict[str, Array] | None] = {}

    def plan(self, reads: Reads, first_step: int, budget: int) -> None:
        """Take a plan's ``reads`` (``(keys, obj, starts, ends, steps)``; read ``i``: object
        ``keys[obj[i]]``, bytes ``[starts[i], ends[i])`` at ``steps[i]``, from ``first_step``
        on): keep the next epoch's first reads up to ``budget`` bytes, this epoch's kept by
        the plan before, and its repeated ones; where the budget holds every read of the next
        epoch, or the plan tells none and the budget holds this epoch's (no read is known to be
        far), keep everything (nothing goes around the cache)."""
        keys, obj, starts, ends, steps = reads
        epoch = first_step // STEPS_PER_EPOCH
        of_epoch = steps // STEPS_PER_EPOCH
        following = np.flatnonzero(of_epoch == epoch + 1)
        if not len(following) and int((ends - starts)[of_epoch == epoch].sum()) <= budget:
            # the next epoch untold (a plan an epoch at a time) and this one's reads within the
            # budget: none is known to be far, all through (a larger epoch: its repeated reads)
            self.starts, self._firsts = None, {epoch + 1: None}
            return
        first = epoch_firsts(steps, ends - starts, epoch + 1, budget)
        if len(following) and len(first) == len(following):  # the cap keeps the next epoch:
            # everything (and the next epoch's plan knows its first reads are kept: they are)
            self.starts = None
            self._firsts = {epoch + 1: _by_object(keys, obj, starts, following)}
            return
        firsts = _by_object(keys, obj, starts, first)
        before = self._firsts.get(epoch, {})  # (a plan again within an epoch keeps it)
        if before is None:  # the plan before kept every read through: so this epoch's
            self.starts, self._firsts = None, {epoch + 1: firsts, epoch: None}  # (cached)
            return
        now = np.flatnonzero(of_epoch == epoch)
        repeated = _by_object(keys, obj, starts, _repeated(obj, starts, now))
        self.starts = _union(firsts, before, repeated)
        self._firsts = {epoch + 1: firsts, **({epoch: before} if before else {})}

    def split(self, needs: list[Need]) -> tuple[list[Need], list[Need]]:
        """``needs`` as (those to fetch around the cache, those to fetch through it)."""
        kept = self.starts
        if kept is None:
            return [], needs
        inside = np.zeros(len(needs), dtype=bool)
        by_key: dict[str, list[int]] = {}
        for i, need in enumerate(needs):
            by_key.setdefault(need.key, []).append(i)
        for key, at in by_key.items():
            have = kept.get(key)
            if have is None or not len(have):
                continue
            want = np.fromiter((needs[i].start for i in at), np.int64, len(at))
            found = np.minimum(np.searchsorted(have, want), len(have) - 1)
            inside[at] = have[found] == want
        flags = inside.tolist()
        return [n for n, k in zip(needs, flags) if not k], [n for n, k in zip(needs, flags) if k]


def _by_object(
    keys: list[str], obj: Array, starts: Array, at: npt.NDArray[np.intp]
) -> dict[str, Array]:
    """The starts of reads ``at``, sorted and unique, by object key."""
    o, a = obj[at], starts[at]
    return {keys[c]: np.unique(a[o == c]) for c in np.unique(o).tolist()}


def _union(*parts: dict[str, Array]) -> dict[str, Array]:
    out: dict[str, Array] = {}
    for part in parts:
        for key, starts in part.items():
            out[key] = np.union1d(out[key], starts) if key in out else starts
    return out


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
