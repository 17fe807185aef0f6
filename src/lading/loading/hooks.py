"""What a map-style dataset gives ``lading.loader``: two methods it needs, and every optional hook.

``lading.loader(dataset, batch_size)`` needs ``len(dataset)`` and ``dataset[item]``
(:class:`MapDataset`). Anything else it reads of a dataset is one of the hooks below, looked up
once, when the loader is made, into a :class:`Hooks` record (a method added to the dataset
later is not seen); nothing else of the dataset is read, and nowhere else:

======================================  =========================================================
hook                                    what the loader does with it
======================================  =========================================================
``__getitems__(items) -> list``         builds a batch with one call instead of ``dataset[i]``
                                        per item (torch's name; an HF ``datasets.Dataset`` has it)
``epoch_aware = True``                  hands each item as :class:`EpochIndex` ``(epoch, item)``:
                                        per-epoch draws (hard negatives) stay right in persistent
                                        DataLoader workers, which never see the main process again
``set_epoch(epoch)``                    (datasets not ``epoch_aware``) called before the first
                                        batch of each epoch, in whichever process builds it
``at_step(step)``                       called before a batch's reads, in whichever process
                                        builds it: the reads that follow are step ``step``'s
``prefetch(batches, first_step, now)``  the items of the batches ahead, as the loader hands out
                                        their keys, in the process that iterates: fetch them
``plan(batches, first_step, steps)``    once an iteration: every batch left in the epoch and the
                                        next epoch's, each read at ``steps[j]``: what to keep
``settle(timeout)``                     when the loader closes: wait, at most ``timeout`` s,
                                        until what ``prefetch`` asked for is fetched (nothing
                                        is fetched for a loader after its ``close`` returns)
``duplicate_keys(items, epoch)``        ``batching="no_duplicates"``: one row of keys per item,
                                        no two samples of a batch may share one
``data_fingerprint() -> str | None``    when the loader is made: the dataset's identity, put in
                                        the loader's state (a state of other data is refused)
``ranks_fingerprint() -> str | None``   at a first pass under a process group: what every rank
                                        that reads the same data with the same settings holds
                                        alike (no copy's identity), compared across the ranks
                                        (:mod:`lading.loading.agree`)
``remote_url: str | None``              where the items are read from, when that is object
                                        storage: a loader made with DataLoader workers warns
                                        (:meth:`lading.loading.workers.Workers.for_remote`)
======================================  =========================================================

A dataset's identity is also found without ``data_fingerprint``: an HF ``datasets.Dataset``'s own
``_fingerprint`` (datasets' key of its content and every transform since) and a lading store's
snapshot ``content_id``. ``batches`` are lists of the items the dataset will be asked for (ints or
:class:`EpochIndex`); steps are one clock for every rank (:func:`lading.step.step_of`:
``epoch * 2**32 + batch``). ``prefetch``, ``plan`` and ``at_step`` affect speed only: a dataset
reads the same items without them (:mod:`lading.loading.announce` says when each is called).
:class:`lading.ir.TrainingGroups` has ``prefetch``, ``plan`` and ``settle`` (a remote
store's ``prefetch_rows``, ``plan_rows`` and ``settle``) and its store's ``remote_url``; the
step of the batch being built also reaches every read without a hook: the loader sets it
around the build (:func:`lading.step.at_step`), and a remote store's reads take it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

DuplicateKeys = Callable[[npt.NDArray[np.int64], int], npt.NDArray[np.int64]]
"""``(items, epoch) -> keys``: one row of keys per item (see the module docstring)."""


class MapDataset(Protocol):
    """What :func:`lading.loader` needs of a dataset: a length and items by index."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: Any) -> Any: ...


class EpochIndex(NamedTuple):
    """An index handed to an epoch-aware dataset together with the epoch it belongs to.

    Persistent DataLoader workers hold their own copy of the dataset, which never sees a
    ``set_epoch`` called in the main process; passing the epoch with every index keeps
    per-epoch sampling (e.g. hard negatives) correct in every worker.
    """

    epoch: int
    item: int


@dataclass(frozen=True)
class Hooks:
    """The optional hooks of one dataset, each a bound method or None (see the module
    docstring for when each is called). Made once per loader (:meth:`of`); it pickles with the
    dataset into DataLoader workers, each method still bound to the worker's copy.

    Attributes:
        getitems: ``__getitems__``.
        epoch_aware: items are :class:`EpochIndex`.
        set_epoch: ``set_epoch``, None for an ``epoch_aware`` dataset (its items say the epoch).
        at_step: ``at_step``.
        prefetch: ``prefetch``.
        plan: ``plan`` (called only where there is a ``prefetch``).
        settle: ``settle``.
        duplicate_keys: ``duplicate_keys``.
        identity: the dataset's identity (:func:`identity_of`), computed when made.
        ranks: ``ranks_fingerprint`` (called at a first pass in a process group only).
        remote_url: ``remote_url``, where it is a string.
    """

    getitems: Callable[[list[Any]], Any] | None = None
    epoch_aware: bool = False
    set_epoch: Callable[[int], Any] | None = None
    at_step: Callable[[int], Any] | None = None
    prefetch: Callable[..., Any] | None = None
    plan: Callable[..., Any] | None = None
    settle: Callable[[float], Any] | None = None
    duplicate_keys: DuplicateKeys | None = None
    identity: str | None = None
    ranks: Callable[[], Any] | None = None
    remote_url: str | None = None

    @classmethod
    def of(cls, dataset: object) -> Hooks:
        """The hooks ``dataset`` has: every one looked up here, once."""

        def method(name: str) -> Callable[..., Any] | None:
            found = getattr(dataset, name, None)
            return found if callable(found) else None

        epoch_aware = bool(getattr(dataset, "epoch_aware", False))
        remote = getattr(dataset, "remote_url", None)
        return cls(
            getitems=method("__getitems__"),
            epoch_aware=epoch_aware,
            set_epoch=None if epoch_aware else method("set_epoch"),
            at_step=method("at_step"),
            prefetch=method("prefetch"),
            plan=method("plan"),
            settle=method("settle"),
            duplicate_keys=method("duplicate_keys"),
            identity=identity_of(dataset, method("data_fingerprint")),
            ranks=method("ranks_fingerprint"),
            remote_url=remote if isinstance(remote, str) else None,
        )


def identity_of(dataset: object, data_fingerprint: Callable[[], Any] | None) -> str | None:
    """What identifies the data of ``dataset``, where it has an identity, put in the loader's
    state so that a state saved over other data of the same length is refused:

    - ``dataset.data_fingerprint()`` where the dataset defines it (TrainingGroups, GroupRows): a
      digest of its content;
    - an HF ``datasets.Dataset``: ``datasets:`` and its ``_fingerprint`` (datasets' own key of
      its content and every transform since, the same in every process);
    - a lading store: ``store:`` and the content id of the snapshot it reads.

    Any other dataset is known by its length only (None)."""
    if data_fingerprint is not None:
        found = data_fingerprint()
        return None if found is None else str(found)
    hf = getattr(dataset, "_fingerprint", None)
    if type(dataset).__module__.split(".")[0] == "datasets" and isinstance(hf, str):
        return f"datasets:{hf}"
    content = getattr(dataset, "content_id", None)
    if isinstance(content, str) and hasattr(dataset, "snapshot"):
        return f"store:{content}"
    return None
