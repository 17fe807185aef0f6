"""The one loader state: where a loader is in its epoch, checked in one place on load.

Every loader's :meth:`state_dict` is the same schema::

    {"format": "lading.loader-state", "version": 2, "kind": "map" | "lm" | "parquet",
     "epoch": int, "segment": int, "base": None | [[starts...], [stops...]],
     "batches": int, "consumed": int, "layout": {...}, "fingerprint": {...}}

- ``fingerprint``: what fixes the data and its orders (sizes, seed, shuffle, equalize…). A
  state whose fingerprint differs belongs to another dataset or run: refused, naming the key.
  A map-style state's ``data`` is its dataset's identity where it has one
  (:func:`lading.loading.hooks.identity_of`); a state saved without one (``None``,
  or before it was recorded) is checked by length only, as it was then.
- ``layout``: what fixes who reads what (world size, batch size…; not the worker count:
  the batches are the same whatever the workers). The same layout resumes bitwise:
  ``batches`` are skipped. Another layout resumes *elastically*: the positions the saved
  layout left unread become the ``base`` of a new *segment* of the epoch, planned over this
  run's readers (:mod:`lading.loading.plan`).
- ``base``: the epoch positions the current segment reads (``None``: all of them), as one
  value, two lists ``[starts, stops]``, so that ``torch.distributed.checkpoint``, which loads
  into a fresh loader's state's keys (its ``None``), loads a state saved after an elastic
  resume (a dict there, ``{"starts", "stops"}``, was two keys no fresh state has: "Missing
  key loader.base.starts"). A state of that dict form (saved before) still loads.
  ``segment`` counts elastic resumes within the epoch and salts any draw that depends on the
  layout.
- ``batches``: batches this rank received in the current segment (the same on every rank);
  ``consumed``: positions read so far this segment, over all ranks (for humans and logs).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lading.errors import LoaderStateError
from lading.loading.runs import Runs

STATE_FORMAT = "lading.loader-state"
STATE_VERSION = 2


@dataclass(slots=True)
class Cursor:
    """Where a loader is: epoch, segment of the epoch, what the segment reads, batches taken."""

    epoch: int = 0
    segment: int = 0
    base: Runs | None = None
    batches: int = 0
    # what moved its loader on while a pass read from it (said if that pass is read on)
    left_by: str = field(default="", compare=False, repr=False)

    def start_epoch(self, epoch: int) -> None:
        """Go to the first batch of ``epoch`` (any elastic remainder belonged to another)."""
        self.epoch, self.segment, self.base, self.batches = epoch, 0, None, 0

    def base_or_whole(self, n: int) -> Runs:
        """The positions this segment reads, out of an epoch of ``n``."""
        return Runs.whole(n) if self.base is None else self.base


def state_dict(
    kind: str,
    cursor: Cursor,
    layout: Mapping[str, Any],
    fingerprint: Mapping[str, Any],
    consumed: int = 0,
) -> dict[str, Any]:
    """The saved form of a loader's position (see the module docstring)."""
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "kind": kind,
        "epoch": cursor.epoch,
        "segment": cursor.segment,
        "base": base_form(cursor.base),
        "batches": cursor.batches,
        "consumed": consumed,
        "layout": dict(layout),
        "fingerprint": dict(fingerprint),
    }


def base_form(base: Runs | None) -> list[list[int]] | None:
    """The saved form of a cursor's ``base``: ``None`` (the whole epoch), or the runs an
    elastic resume left as one value, ``[starts, stops]`` (see the module docstring)."""
    if base is None:
        return None
    return [base.starts.tolist(), base.stops.tolist()]


def base_of(saved: Any) -> Runs | None:
    """A cursor's ``base`` from its saved form (:func:`base_form`, or the dict
    ``{"starts", "stops"}`` states saved before); :func:`check_position` has checked it."""
    if saved is None:
        return None
    if isinstance(saved, Mapping):
        return Runs.from_dict(dict(saved))
    starts, stops = saved
    return Runs(starts, stops)


def check(state: Mapping[str, Any], kind: str, fingerprint: Mapping[str, Any]) -> None:
    """Raise :class:`LoaderStateError` unless ``state`` is a ``kind`` state of this data."""
    if state.get("format") != STATE_FORMAT or state.get("version") != STATE_VERSION:
        raise LoaderStateError(
            f"unsupported loader state (format {state.get('format')!r}, version "
            f"{state.get('version')!r}); expected {STATE_FORMAT!r} version {STATE_VERSION}: "
            "it was saved by another lading version, restart the epoch without it"
        )
    if state.get("kind") != kind:
        raise LoaderStateError(
            f"loader state is of a {state.get('kind')!r} loader, this one is {kind!r}"
        )
    check_position(state)
    saved = state.get("fingerprint", {})
    for key in sorted(set(saved) | set(fingerprint)):
        if saved.get(key) == fingerprint.get(key):
            continue
        if key == "data" and kind == "map":
            if saved.get(key) is None:
                continue  # saved before its dataset had an identity: known by length, as then
            raise LoaderStateError(other_data(saved[key], fingerprint.get(key)))
        raise LoaderStateError(
            f"loader state has {key}{_shown(saved, key)}, this loader"
            f"{_shown(fingerprint, key, ' ')}; resume with the data and settings of the saved run"
        )


def check_position(state: Mapping[str, Any]) -> None:
    """Raise :class:`LoaderStateError` unless ``state``'s position is one a loader saves:
    ``epoch``, ``segment`` and ``batches`` integers >= 0, ``base`` None or runs of positions
    ``[starts, stops]`` (or the dict of before), ``starts[i] <= stops[i]`` from 0 on (a
    damaged or edited checkpoint failed later, at a batch, with an error of numpy's naming
    none of them). Integers of numpy, and sequences other than lists (a framework's round
    trip), pass as they always did."""
    for key in ("epoch", "segment", "batches"):
        value = state.get(key)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise LoaderStateError(
                f"loader state has {key}={value!r}: a position is an int >= 0; the state is "
                "damaged, resume from another checkpoint or start the epoch without it"
            )
    base = state.get("base")
    if base is None:
        return
    try:
        pair = (base["starts"], base["stops"]) if isinstance(base, Mapping) else tuple(base)
        starts, stops = (np.asarray(part) for part in pair)
        ints = all(a.size == 0 or np.issubdtype(a.dtype, np.integer) for a in (starts, stops))
        fine = ints and starts.ndim == 1 and starts.shape == stops.shape
        fine = fine and bool((starts >= 0).all() and (starts <= stops).all())
    except (KeyError, TypeError, ValueError, IndexError):
        fine = False
    if not fine:
        raise LoaderStateError(
            f"loader state has base={base!r}: the positions left of an epoch are "
            "[[starts...], [stops...]], as many ints of each, 0 <= start <= stop; "
            "the state is damaged, resume from another checkpoint or start the epoch without it"
        )


def _shown(found: Mapping[str, Any], key: str, sign: str = "=") -> str:
    """``=value``, or, where a fingerprint leaves ``key`` out (its setting at the default,
    which states recorded only when changed), `` not set (the default)``: not ``None``, a
    value the user never gave."""
    return f"{sign}{found[key]!r}" if key in found else " not set (the default)"


def other_data(saved: str, now: str | None) -> str:
    """Why a map-style state saved on the dataset ``saved`` identifies is refused here."""
    reads = f"reads {now!r}" if now else "reads a dataset without one"
    return (
        f"loader state was saved on the dataset {saved!r}, this loader {reads} (the "
        "identity of a TrainingGroups, an HF datasets.Dataset's fingerprint, a store's "
        "content): other data, whatever its length; resume on the dataset of the saved "
        "run. If it is the same data under another identity (datasets draws a random "
        "fingerprint after a transform it cannot hash), delete the state's "
        "fingerprint['data'] to load it checked by length only"
    )


def restore(
    state: Mapping[str, Any],
    kind: str,
    layout: Mapping[str, Any],
    fingerprint: Mapping[str, Any],
    unread: Callable[[Mapping[str, Any], Cursor], Runs],
    ended: Callable[[Mapping[str, Any], Cursor], bool],
    batches: Callable[[Cursor], int] | None = None,
) -> Cursor:
    """The cursor to continue from ``state`` with this run's ``layout``.

    ``unread(saved_layout, saved_cursor)`` gives the epoch positions the saved layout had not
    read, and ``ended(saved_layout, saved_cursor)`` whether its readers had read their
    segment to its end; both are asked only when the layouts differ (an elastic resume).
    A state saved at the end of its epoch goes to the next epoch on any layout, as on its
    own: its new segment is empty, though ``truncate`` or a dropped partial batch left
    positions unread (an epoch under them reads them in no layout).

    ``batches(cursor)``, where given, is the batch count of ``cursor``'s segment on this
    layout: a state of this layout past it is damaged (was: loaded, and the rest of its epoch
    skipped without a word), refused. Another layout's count is not known here: its
    position is the saved layout's ``unread``'s to read.
    """
    check(state, kind, fingerprint)
    base = base_of(state["base"])
    saved = Cursor(int(state["epoch"]), int(state["segment"]), base, int(state["batches"]))
    if dict(state["layout"]) == dict(layout):
        if batches is not None and saved.batches > (count := batches(saved)):
            raise LoaderStateError(
                f"loader state has batches={saved.batches} in epoch {saved.epoch}, whose "
                f"segment has {count} batches on this layout: the state is damaged, resume "
                "from another checkpoint or start the epoch without it"
            )
        return saved
    left = Runs([], []) if ended(state["layout"], saved) else unread(state["layout"], saved)
    return Cursor(saved.epoch, saved.segment + 1, left, 0)
