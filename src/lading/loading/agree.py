"""Every rank of a process group plans the same epochs: checked at a loader's first pass.

A loader's ranks plan their shares each from what it sees: its list of files, its copy of a
store, its settings. Where one rank sees other data (a glob's files in another order, a
file missing from one node's copy, another batch size) the shares overlap and the batch
counts differ: rows read twice and others never, without a word, or a DDP hang at the
epoch's end when one rank runs out of batches first.

At its first pass, a loader that reads as this rank of the initialised process group posts
what fixes its epochs (its kind, fingerprint and layout: the same on every rank of one
loader) in the group's key-value store, under the number of loaders that started a first pass
on this rank before it, and compares the others' with its own, refusing a difference
(:class:`~lading.errors.RanksDisagreeError`, naming the first key that differs on both
sides). It waits at most :data:`WAIT_S` for a rank that has not posted (one that makes this
loader later, or never: a warning says nothing was checked); nothing is posted or waited for
outside a group, and no collective is issued (the group's own operations keep their order).
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import warnings
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from lading.errors import RanksDisagreeError
from lading.world import process_group

WAIT_S = 60.0  # how long a first pass waits for the other ranks' posts
_PREFIX = "lading/agree"
_passes = itertools.count()  # loaders that started a first pass under a group, this process
_lock = threading.Lock()


def check_ranks_agree(
    plan: Mapping[str, Any], rank: int, world_size: int, node: int | None = None
) -> None:
    """Post ``plan`` (what fixes this loader's epochs) as rank ``rank`` of ``world_size`` and
    compare it with every other rank's; nothing outside a process group of that rank and size.
    ``node``: this rank's node (the launcher's; None: this host's name). Ranks on one node
    compare all of it; ranks on two compare all but ``fingerprint.data``, the identity of a
    copy: each node may read a copy of its own, built or staged on its disk (a store's
    snapshot digests differ between two builds of one source), as ``build_store`` makes one
    per node where the filesystem is not shared.

    Raises:
        RanksDisagreeError: another rank's plan differs, naming the first key and both values.
    """
    dist = process_group(min_size=2)
    if dist is None or (dist.get_rank(), dist.get_world_size()) != (rank, world_size):
        return  # (a world given that is not the group's: a group inside it, or none)
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        store = _get_default_store()
    except Exception:  # (no store this torch exposes: nothing to compare through)
        return
    with _lock:
        n = next(_passes)
    here = socket.gethostname() if node is None else f"node {node}"
    mine = json.dumps({"node": here, "plan": dict(plan)}, sort_keys=True, default=str)
    store.set(f"{_PREFIX}/{n}/{rank}", mine)
    for other in range(world_size):
        if other == rank:
            continue
        key = f"{_PREFIX}/{n}/{other}"
        try:
            store.wait([key], timedelta(seconds=WAIT_S))
            theirs = store.get(key).decode()
        except Exception:  # (the store's timeout: that rank made no such loader yet)
            warnings.warn(
                f"rank {other} started no pass of a loader #{n} within {WAIT_S:g} s of this "
                f"rank's (rank {rank}): lading could not check that both read the same data "
                "with the same settings. Make the loaders on every rank, in the same order",
                stacklevel=4,
            )
            continue
        if theirs == mine:
            continue
        a, b = json.loads(theirs), json.loads(mine)
        if a["node"] != b["node"]:  # (a copy of each node's own: its identity apart)
            for side in (a, b):
                side["plan"].get("fingerprint", {}).pop("data", None)
        if a["plan"] != b["plan"]:
            raise RanksDisagreeError(_differs(a["plan"], b["plan"], other, rank))


def _differs(theirs: Mapping[str, Any], mine: Mapping[str, Any], other: int, rank: int) -> str:
    """The error's words: the first key whose value differs, both values, and the fix."""
    flat_theirs, flat_mine = _flat(theirs), _flat(mine)
    key = next(
        k
        for k in sorted(set(flat_theirs) | set(flat_mine))
        if flat_theirs.get(k) != flat_mine.get(k)
    )
    data = " (the files it reads, their order or their contents)" if key.endswith("data") else ""
    return (
        f"the ranks of this loader plan different epochs: {key}{data} is "
        f"{_shown(flat_theirs.get(key))} on rank {other} and {_shown(flat_mine.get(key))} on "
        f"rank {rank} (this one), so their shares would overlap and their batch counts differ "
        "(rows read twice, others never, or a DDP hang at the epoch's end). Every rank must "
        "read the same data with the same settings: the same list of files in the same order "
        "(sorted(glob.glob(...)), not a listing's order), the same copy on every node"
    )


def _flat(plan: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``plan``'s leaves by dotted key (``fingerprint.data``)."""
    out: dict[str, Any] = {}
    for name, value in plan.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
