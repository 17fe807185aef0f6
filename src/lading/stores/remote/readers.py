"""One loader's view of a remote store: its plan, its window, what it keeps around the cache.

A store object is the user's, and several loaders may read it at once (a training loader and a
validation loader over one store), each announcing its own order at its own steps. Each loader
(its workload, which says whose the reads and hints of its thread are:
:func:`lading.step.as_reader`) gets a :class:`Reader` of its own at its first hint; a read or
hint outside any loader, or of a loader that gave none, is the store's own reader's (a loop of
``get_many`` along ``store.plan``). With one plan for all, each pass's plan replaced the other
loader's: the training loader fetched 1.36-1.74x its bytes with a validation loader
interleaved (a review's measure, caps of 3 % and 33 %, with and without DataLoader workers
and ``read_ahead``; 1.30x in ``tests/remote/test_plane_readers.py``, 1.00x now).
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from lading.remote.cache import NodeCache, Planner
from lading.remote.cache.around import AroundGets
from lading.step import current_reader
from lading.stores.remote.kept import Kept


class Asked(NamedTuple):
    """A plan that named no columns: its batches of rows, the step of each, and the columns
    planned for it (those the reader had read, else a guess), kept to plan again when the
    reader's reads name others."""

    batches: list[npt.NDArray[np.int64]]
    steps: list[int]
    columns: list[str]


class Reader:
    """One loader's plan of a store (a :class:`~lading.remote.cache.Planner`), whether it
    announces its batches (``told``: else reads move the window along the plan), the
    documents its window fetched around the cache for it (``around``), which ranges its plan
    keeps in the cache (``kept``), and whether it reads where it plans (``reads_here``: its
    window then fetches around the cache). ``columns``: the payload columns its reads named,
    in order; ``asked``: its last plan that named none; ``announced``: the last step its
    prefetches named. A plan, a prefetch and a loader's reads come from the loader's one
    building thread (:mod:`lading.loading.announce`)."""

    def __init__(self, cache: NodeCache) -> None:
        self.planner = Planner(cache, once=True)
        self.told = False
        self.around = AroundGets()
        self.kept = Kept()
        self.reads_here = False
        self.columns: dict[str, None] = {}
        self.asked: Asked | None = None
        self.announced = -1
        cache.planners.add(self.around)  # (its rule at a fork: the cache's)


class Readers:
    """The readers of one store: its own and one a loader, dropped with the loader."""

    def __init__(self, cache: NodeCache) -> None:
        self.cache = cache
        self.own = Reader(cache)
        self._of: weakref.WeakKeyDictionary[object, Reader] = weakref.WeakKeyDictionary()

    def current(self, hint: bool = False) -> Reader:
        """The reader of this thread's loader, else the store's own. A loader's is made at
        its first hint (``hint``: a plan or a prefetch); until then its reads are the store's
        own reader's (a loader over a dataset with no hooks reads along a plan the user gave
        the store, ``store.plan``, as before)."""
        loader = current_reader()
        if loader is None:
            return self.own
        found = self._of.get(loader)
        if found is None and hint:  # (two of its threads at once: one reader kept, no lock)
            found = self._of.setdefault(loader, Reader(self.cache))
        return self.own if found is None else found

    def of(self, loader: object) -> Reader | None:
        """The reader of ``loader`` (its workload), if it has hinted yet."""
        return self._of.get(loader)
