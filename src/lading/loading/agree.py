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
sides). What identifies a copy of the data rather than its content is left out by the loader
(a store's snapshot digest: each node may build its own; an HF dataset's fingerprint: random
in each process after a transform ``datasets`` cannot hash): a parquet loader's footer digest
and a token corpus's document digest are content, and compared. At the first pass after each
``load_state_dict``, the position it starts from is compared the same way, under the
loader's key and the load's number (ranks that loaded other steps' states read 5 and 2
batches, and gloo aborted the job). It waits at most :data:`WAIT_S` in all for ranks that
have not posted (one that makes this loader later, or never: a warning says nothing was
checked with it); nothing is posted or waited for outside a group or where its store cannot
be used, and no collective is issued (the group's own operations keep their order).
"""

from __future__ import annotations

import itertools
import json
import socket
import time
import warnings
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from lading.errors import RanksDisagreeError
from lading.world import process_group

WAIT_S = 60.0  # how long, in all, a first pass waits for the other ranks' posts
_PREFIX = "lading/agree"
# loaders that started a first pass under a group, this process (next() of a count is one
# step under the GIL: no two threads draw one number)
_passes = itertools.count()


def check_ranks_agree(
    plan: Mapping[str, Any], rank: int, world_size: int, key: str | None = None
) -> str | None:
    """Post ``plan`` (what fixes this loader's epochs, the same on every rank that reads the
    same data: no identity of a copy in it) as rank ``rank`` of ``world_size`` and compare it
    with every other rank's; nothing outside a process group of that rank and size, nor
    where the group's store cannot be used (the ``fake`` and MPI backends have none).

    ``key``: where to post (a loader's own key, and what its check is of: ``KEY/load2``, the
    start after its second ``load_state_dict``); by default the next loader's, by the order
    of first passes on this rank. Returns the key posted under (None: nothing compared).

    Raises:
        RanksDisagreeError: another rank's plan differs, naming the first key and both values.
    """
    dist = process_group(min_size=2)
    if dist is None or (dist.get_rank(), dist.get_world_size()) != (rank, world_size):
        return None  # (a world given that is not the group's: a group inside it, or none)
    mine = json.dumps(dict(plan), sort_keys=True, default=str)
    if key is None:
        key, what = f"{_PREFIX}/{next(_passes)}", "pass of a loader"
    else:
        what = "pass after the same load_state_dict() of a loader"
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        store = _get_default_store()
        # the host under a key of its own, first: the plan's key keeps what lading always
        # posted there, so ranks of an older lading compare with this one as before
        store.set(f"{key}/{rank}/host", socket.gethostname())
        store.set(f"{key}/{rank}", mine)
    except Exception:  # (no store this backend or torch offers: nothing to compare through)
        return None
    end = time.monotonic() + WAIT_S  # one wait in all, whatever the number of ranks
    for other in range(world_size):
        if other == rank:
            continue
        theirs_at = f"{key}/{other}"
        try:
            left = max(0.001, end - time.monotonic())
            store.wait([theirs_at], timedelta(seconds=left))
            theirs = store.get(theirs_at).decode()
        except Exception:  # (the store's timeout: that rank made no such loader yet)
            warnings.warn(
                f"rank {other} started no {what} (#{key.removeprefix(_PREFIX + '/')}) within "
                f"{WAIT_S:g} s of this rank's (rank {rank}): lading could not check that both "
                "read the same data with the same settings from the same position. Make the "
                "loaders on every rank, in the same order, and load the same state on every "
                "rank",
                stacklevel=4,
            )
            continue
        if theirs != mine:
            where = (_host(store, f"{theirs_at}/host"), socket.gethostname())
            raise RanksDisagreeError(
                _differs(json.loads(theirs), json.loads(mine), other, rank, where)
            )
    return key


def _host(store: Any, key: str) -> str:
    """The host a rank posted (``?`` where it posted none: an older lading)."""
    try:
        return str(store.get(key).decode()) if store.check([key]) else "?"
    except Exception:
        return "?"


def _differs(
    theirs: Mapping[str, Any],
    mine: Mapping[str, Any],
    other: int,
    rank: int,
    hosts: tuple[str, str] = ("?", "?"),
) -> str:
    """The error's words: the first key whose value differs, both values (and each rank's
    host: which node holds the other copy), and the fix."""
    flat_theirs, flat_mine = _flat(theirs), _flat(mine)
    key = next(
        k
        for k in sorted(set(flat_theirs) | set(flat_mine))
        if flat_theirs.get(k) != flat_mine.get(k)
    )
    data = " (the files it reads, their order or their contents)" if key.endswith("data") else ""
    fix = (
        "Every rank must read the same data with the same settings: the same list of files in "
        "the same order (sorted(glob.glob(...)), not a listing's order), the same copy on "
        "every node"
    )
    if key.startswith("start."):
        data = " (where the pass after load_state_dict() starts)"
        fix = (
            "Every rank must resume from the same position: load_state_dict() of one state "
            "(saved at one step: every rank's is the same) on every rank"
        )
    return (
        f"the ranks of this loader plan different epochs: {key}{data} is "
        f"{_shown(flat_theirs.get(key))} on rank {other} (host {hosts[0]}) and "
        f"{_shown(flat_mine.get(key))} on rank {rank} (this one, host {hosts[1]}), so their "
        "shares would overlap and their batch counts differ (rows read twice, others never, "
        f"or a DDP hang at the epoch's end). {fix}"
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
