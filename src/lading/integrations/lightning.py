"""PyTorch Lightning: a ``LightningDataModule`` whose loaders are lading loaders.

Give :class:`LadingDataModule` a factory per stage that makes a lading loader for a
:class:`~lading.world.World` (``lading.loader(...)``, ``LanguageModelLoader(...)``,
``PartitionedParquet(...)``, with or without ``num_workers=``): the module calls it with the
Trainer's ranks, so every rank reads its own disjoint, equal share, and Lightning's conventions
hold:

- ``use_distributed_sampler``: Lightning puts its ``DistributedSampler`` only into a torch
  ``DataLoader``; a lading loader is not one and already reads this rank's share, so either
  value gives the same data (nothing is read twice, no rank waits on another).
- ``set_epoch``: Lightning calls ``loader.sampler.set_epoch(epoch)`` at every epoch start,
  also right after restoring a mid-epoch checkpoint. Here it moves the loader to ``epoch``
  only when it is not there already, so a restored position is kept.
- ``len()`` is the epoch's batch count (as a DataLoader's), not the batches left: Lightning
  counts the batches done itself and stops at ``len()`` (``limit_train_batches`` honoured).
- The train loader is ``Stateful``: Lightning saves its ``state_dict()`` in every checkpoint
  and restores it on ``trainer.fit(ckpt_path=...)``; Lightning does not prefetch a sized
  loader, so the state counts exactly the batches the steps received. The resume is bitwise
  with the saved world size; with another one it is refused (Lightning's own batch counter
  belongs to the saved layout), naming the fix.
- Validation and test loaders read their whole share every time Lightning iterates them.
- ``accumulate_grad_batches``: Lightning divides the loss; the loaders give every rank the
  same number of batches, so the accumulation windows line up across ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lading.errors import LoaderStateError, missing_package

try:
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - depends on the environment
    raise missing_package(
        "lading.integrations.lightning", "PyTorch Lightning", "lightning"
    ) from None

from lading.integrations.epochs import refuse_epochs_of_varying_length
from lading.loading.resumable import Resumable
from lading.world import World

LoaderFactory = Callable[[World], Resumable]


class TrainLoader:
    """A lading loader in Lightning's shape: sized by the epoch, epoch-settable, stateful."""

    def __init__(self, loader: Resumable) -> None:
        refuse_epochs_of_varying_length(loader, "Lightning")
        self.loader = loader

    @property
    def sampler(self) -> Resumable:
        """Where Lightning looks for ``set_epoch``: the loader's, which keeps a just-restored
        position (:meth:`lading.loading.Loader.set_epoch`)."""
        return self.loader

    def __len__(self) -> int:
        """Batches of the whole epoch on this rank, as a DataLoader's ``len()``."""
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (saved by Lightning in the checkpoint).

        Raises:
            LoaderStateError: the state is of other data, or of another layout (world size,
                batch size; not workers), which Lightning's batch counter cannot follow. (Lightning
                calls this for a checkpoint saved within an epoch, ``every_n_train_steps``
                even at the epoch's last batch, and, where it trains ``max_steps``, for every
                checkpoint; one of ``every_n_epochs`` under ``max_epochs`` resumes on any.)
        """
        self.loader.load_state_dict(state)
        now = self.loader.state_dict()["layout"]
        if dict(state["layout"]) != dict(now):
            raise LoaderStateError(
                f"the checkpoint's loader was saved with {dict(state['layout'])}, this run has "
                f"{dict(now)}; Lightning counts the saved epoch's batches itself (a step "
                "checkpoint at an epoch's last batch too), so resume it with the saved world "
                "size and batch size (any workers), or, training max_epochs, resume from a "
                "checkpoint saved at an epoch's end (ModelCheckpoint(every_n_epochs=...): "
                "Lightning then starts the next epoch and restores no loader position; "
                "training max_steps, it restores the loader from every checkpoint)"
            )


class EvalLoader:
    """A lading loader that reads this rank's whole share each time it is iterated."""

    def __init__(self, loader: Resumable) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        self.loader.set_epoch(self.loader.epoch)  # from its first batch, every time
        return iter(self.loader)


def _close(loader: Any) -> None:
    close = getattr(loader, "close", None)
    if callable(close):
        close()


def trainer_world(trainer: Any) -> World:
    """The ranks of ``trainer`` (global rank, world size, node-local rank and size)."""
    local = int(getattr(trainer, "num_devices", 1) or 1)
    return World(
        rank=int(trainer.global_rank),
        world_size=int(trainer.world_size),
        local_rank=int(trainer.local_rank),
        local_world_size=local,
        node_rank=int(trainer.node_rank),
        launcher="lightning",
    )


class LadingDataModule(pl.LightningDataModule):
    """Lightning data for the three workloads, from a loader factory per stage.

    Example:
        ```python
        dm = LadingDataModule(
            train=lambda world: lading.loader(groups, batch_size=16, collate_fn=collate,
                                              world=world),
            val=lambda world: lading.loader(valid, batch_size=64, collate_fn=collate,
                                            shuffle=False, world=world),
        )
        pl.Trainer(strategy="ddp", devices=4).fit(model, datamodule=dm)
        ```

    Args:
        train, val, test: each makes this rank's loader for the given :class:`World`
            (``None``: the stage has no data here).
    """

    def __init__(
        self,
        train: LoaderFactory | None = None,
        val: LoaderFactory | None = None,
        test: LoaderFactory | None = None,
    ) -> None:
        super().__init__()
        self._factories = {"train": train, "val": val, "test": test}
        self._made: dict[str, Resumable] = {}  # the loader each stage read last: closed
        # Lightning runs a stage when the datamodule has its *_dataloader method; as its own
        # LightningDataModule.from_datasets does, only the stages given one get it
        if train is not None:
            self.train_dataloader = self._train_loader  # type: ignore[method-assign]
        if val is not None:
            self.val_dataloader = self._val_loader  # type: ignore[method-assign]
        if test is not None:
            self.test_dataloader = self._test_loader  # type: ignore[method-assign]

    def _make(self, stage: str) -> Resumable:
        factory = self._factories[stage]
        assert factory is not None  # the method exists only where a factory was given
        trainer = getattr(self, "trainer", None)
        made = factory(trainer_world(trainer) if trainer is not None else World.detect())
        _close(self._made.pop(stage, None))  # (Lightning reloads: the old one is done)
        self._made[stage] = made
        return made

    def teardown(self, stage: str) -> None:
        """At the end of ``fit``/``validate``/``test``: the loaders made end their workers
        and threads (each ``fit`` with ``num_workers=2`` left 2 processes alive, where
        Lightning's own DataLoaders leave none)."""
        for loader in self._made.values():
            _close(loader)
        self._made.clear()

    def _train_loader(self) -> TrainLoader:
        return TrainLoader(self._make("train"))

    def _val_loader(self) -> EvalLoader:
        return EvalLoader(self._make("val"))

    def _test_loader(self) -> EvalLoader:
        return EvalLoader(self._make("test"))
