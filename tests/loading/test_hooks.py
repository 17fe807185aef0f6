"""A map-style dataset's optional hooks are looked up once, when the loader is made, into one
record (lading.loading.hooks), and called from there in every process."""

from __future__ import annotations

import pickle
from typing import Any

import lading
from lading.loading.announce import step_of
from lading.loading.hooks import EpochIndex, Hooks
from lading.world import World

HOOKS = (
    "__getitems__",
    "epoch_aware",
    "set_epoch",
    "at_step",
    "prefetch",
    "plan",
    "duplicate_keys",
    "data_fingerprint",
)


class Asked:
    """A dataset of ``n`` numbers that counts every lookup of a hook's name on it."""

    def __init__(self, n: int) -> None:
        self.n, self.asked = n, 0
        self.calls: list[tuple[str, Any]] = []

    def __getattribute__(self, name: str) -> Any:
        if name in HOOKS:
            object.__setattr__(self, "asked", object.__getattribute__(self, "asked") + 1)
        return object.__getattribute__(self, name)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i

    def set_epoch(self, epoch: int) -> None:
        self.calls.append(("set_epoch", epoch))

    def at_step(self, step: int) -> None:
        self.calls.append(("at_step", step))


def test_hooks_are_looked_up_when_the_loader_is_made_never_per_batch() -> None:
    """Before, ``build`` looked up ``set_epoch``, ``at_step`` and ``__getitems__`` on the
    dataset for every batch (3 lookups a batch here); now an epoch reads none."""
    data = Asked(12)
    made = lading.loader(data, 3, collate_fn=list, world=World(), shuffle=False)
    asked = data.asked
    assert asked >= 1  # the lookups when made
    batches = list(made)
    assert batches == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert data.asked == asked
    # and the hooks found were called as documented: the epoch once, each batch's step first
    assert data.calls[0] == ("set_epoch", 0)
    assert [what for kind, what in data.calls if kind == "at_step"] == [
        step_of(0, b) for b in range(4)
    ]


def test_the_record_holds_what_the_dataset_has_and_none_of_what_it_lacks() -> None:
    data = Asked(4)
    hooks = Hooks.of(data)
    assert hooks.set_epoch == data.set_epoch and hooks.at_step == data.at_step
    assert hooks.getitems is hooks.prefetch is hooks.plan is hooks.duplicate_keys is None
    assert hooks.epoch_aware is False and hooks.identity is None
    assert Hooks.of([1, 2, 3]) == Hooks()  # a list: length and items only

    class Aware(Asked):
        epoch_aware = True

        def data_fingerprint(self) -> str:
            return "digest"

    aware = Hooks.of(Aware(4))
    # an epoch-aware dataset's items carry the epoch: its set_epoch is not called
    assert aware.epoch_aware and aware.set_epoch is None and aware.identity == "digest"


def test_a_workers_copy_calls_the_hooks_of_its_own_copy_of_the_dataset() -> None:
    """What a DataLoader worker gets (the workload, pickled): its hooks are bound to the
    dataset it unpickled, not to the main process's."""
    made = lading.loader(Asked(6), 2, collate_fn=list, world=World())
    workload = made._workload
    copy = pickle.loads(pickle.dumps(workload))
    assert copy.hooks.at_step.__self__ is copy.dataset is not workload.dataset
    key = next(iter(copy.keys(made.position())))
    assert copy.build(key) == list(key.items)
    assert copy.dataset.calls == [("set_epoch", 0), ("at_step", step_of(0, 0))]
    assert workload.dataset.calls == []


def test_epoch_aware_items_are_epoch_indices() -> None:
    class Aware(Asked):
        epoch_aware = True

    made = lading.loader(Aware(4), 2, collate_fn=list, world=World(), shuffle=False)
    made.set_epoch(3)
    assert list(made) == [
        [EpochIndex(3, 0), EpochIndex(3, 1)],
        [EpochIndex(3, 2), EpochIndex(3, 3)],
    ]
