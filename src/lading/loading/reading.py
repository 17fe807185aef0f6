"""The reading settings every loader takes (batch size, order, evening out, ranks), checked once.

``lading.loader``, ``LanguageModelLoader`` and ``PartitionedParquet`` take the same seven
settings under the same keyword names; each refuses DataLoader's ``drop_last``
(:func:`refuse_drop_last`) and makes one :class:`Reading` of the rest (:meth:`Reading.of`),
which refuses a bad value when the loader is made, in one line naming the keyword and the
fix, and hands it to its workload. A workload reads its settings from there
and only there: the layout and fingerprint of a saved state start from :meth:`Reading.layout`
and :meth:`Reading.fingerprint`, and :meth:`Reading.refuse_empty` refuses an epoch of no batch
alike for every workload. The loader answers ``batch_size``, ``seed``, ``shuffle``, ``world``,
``equalize`` and ``drop_partial_batch`` from the record too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lading.errors import WorldChangedError
from lading.loading.plan import check_epoch, check_equalize
from lading.world import World, process_group


def check_batch_size(batch_size: object) -> int:
    """``batch_size`` if it is an int >= 1 (a bool is not one), else an error naming it."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise TypeError(
            f"batch_size={batch_size!r}: batch_size must be an int >= 1 (the items of one "
            "batch on each rank)"
        )
    if batch_size < 1:
        raise ValueError(
            f"batch_size={batch_size!r}: batch_size must be an int >= 1 (the items of one "
            "batch on each rank)"
        )
    return int(batch_size)


def refuse_drop_last(drop_last: object, where: str) -> None:
    """Refuse DataLoader's ``drop_last`` (lading splits its two effects) naming what to pass.

    DataLoader's ``drop_last=True`` drops a rank's last partial batch; under DDP the sampler's
    own ``drop_last`` also cuts the data to equal shares. lading names these separately:
    ``drop_partial_batch`` and ``equalize``. A user typing the DataLoader name gets this error,
    never a silent guess at which of the two was meant.
    """
    if drop_last is not None:
        raise TypeError(
            f"{where}(drop_last=...) is not a lading argument: pass drop_partial_batch=True to "
            "leave out each rank's last partial batch (DataLoader's drop_last), and "
            "equalize='truncate' to cut the data to equal shares (DistributedSampler's)"
        )


def _check_flag(name: str, value: object) -> bool:
    """``value`` as a bool if it is one (numpy's too); ``"no"`` or 0 would pass silently."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}={value!r}: {name} must be True or False")
    return bool(value)


@dataclass(frozen=True)
class Reading:
    """How every loader reads its epoch, whatever the workload (checked when made).

    Attributes:
        batch_size: items (samples, rows, stream rows, windows) per batch on each rank.
        world: this process among the ranks (``rank`` and ``world_size`` are its).
        seed: with the epoch, fixes every order (and every LM sequence length).
        shuffle: draw the orders from ``(seed, epoch)``; False reads the data in its order.
        equalize: ``"pad"`` or ``"truncate"`` the shares to equal sizes.
        drop_partial_batch: leave out each reader's last batch when it is not full.
        detected: ``world`` was detected, not given (:meth:`check_world` then checks it).
        rank, world_size: the world's (not arguments).
    """

    batch_size: int
    world: World
    seed: int = 0
    shuffle: bool = True
    equalize: str = "pad"
    drop_partial_batch: bool = False
    detected: bool = field(default=False, repr=False, compare=False)
    rank: int = field(init=False, repr=False, compare=False, default=0)
    world_size: int = field(init=False, repr=False, compare=False, default=1)

    def __post_init__(self) -> None:
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed={seed!r}: seed must be an int (it fixes every order)")
        if seed < 0:  # (numpy's generators take none: the first pass would fail, not here)
            raise ValueError(f"seed={seed!r}: seed must be an int >= 0 (it fixes every order)")
        if not isinstance(self.world, World):
            raise TypeError(
                f"world={self.world!r}: pass a lading.World (or leave it out to detect it)"
            )
        fields = {
            "batch_size": check_batch_size(self.batch_size),
            "seed": int(seed),
            "shuffle": _check_flag("shuffle", self.shuffle),
            "equalize": check_equalize(self.equalize),
            "drop_partial_batch": _check_flag("drop_partial_batch", self.drop_partial_batch),
            "rank": self.world.rank,  # the world's, as fields: an LM batch reads them
            "world_size": self.world.world_size,
        }
        for name, value in fields.items():  # numpy ints and bools as Python's (saved as JSON)
            object.__setattr__(self, name, value)

    @classmethod
    def of(
        cls,
        batch_size: int,
        shuffle: bool,
        seed: int,
        equalize: str,
        drop_partial_batch: bool,
        world: World | None,
    ) -> Reading:
        """The settings a loader was given, in its keywords' order, ``world`` detected when left
        out (each loader refuses DataLoader's ``drop_last`` first: :func:`refuse_drop_last`)."""
        found = world or World.detect()
        detected = world is None and found.launcher != "lading"  # (LADING_RANK: given)
        return cls(batch_size, found, seed, shuffle, equalize, drop_partial_batch, detected)

    def check_world(self) -> None:
        """Refuse to read where the world was detected and a process group started since
        says another rank or size (a loader made before ``init_process_group``, with no
        launcher variables: each rank took itself for rank 0 of 1 and read everything). A
        world set by ``LADING_RANK``/``LADING_WORLD_SIZE`` is a world given (a data-parallel
        group inside a larger one), never checked.

        Raises:
            WorldChangedError: naming both worlds and the fix.
        """
        if not self.detected:
            return
        group = process_group()
        if group is None:
            return
        rank, size = group.get_rank(), group.get_world_size()
        if (rank, size) != (self.rank, self.world_size):
            raise WorldChangedError(
                f"this loader was made before torch.distributed.init_process_group: it took "
                f"this process for rank {self.rank} of {self.world_size}, and the process "
                f"group now says rank {rank} of {size} (its ranks would read the shares of "
                "another world; of a world of 1, each the whole dataset). Make the loader after "
                "init_process_group, or pass world=lading.World(rank, world_size) (or set "
                "LADING_RANK and LADING_WORLD_SIZE)"
            )

    def layout(self) -> dict[str, Any]:
        """What these settings fix of who reads what (a state of another resumes elastically)."""
        return {"world_size": self.world_size, "batch_size": self.batch_size}

    def fingerprint(self) -> dict[str, Any]:
        """What these settings fix of the data's orders (a state of another is refused)."""
        return {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "equalize": self.equalize,
            "drop_partial_batch": self.drop_partial_batch,
        }

    def refuse_empty(self, n: int, items: str) -> None:
        """Refuse settings whose fresh epoch of ``n`` ``items``, one reader per rank, yields
        no batch (:func:`~lading.loading.plan.check_epoch`: every loader alike)."""
        check_epoch(
            n,
            self.world_size,
            self.equalize,
            self.batch_size,
            self.drop_partial_batch,
            items=items,
            readers_are="world_size",
        )
