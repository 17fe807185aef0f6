"""PyTorch Lightning against its own route on the same data (tests/lightning_job.py).

The stock route is a plain ``DataLoader`` that Lightning shards with its ``DistributedSampler``.
With ``shuffle=False`` both routes give each rank the same batches, so the losses, the optimizer
steps and the weights must agree to 1e-5; shuffled, each epoch must read every sample once.
Resumes go through Lightning's own checkpoints (``ModelCheckpoint``, ``fit(ckpt_path=...)``).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import TESTS
from distributed import free_port

# found, not imported: importing Lightning took 1.8 s of every collection, the unit tier's too,
# where these e2e tests are deselected
pytestmark = [
    pytest.mark.e2e,  # a whole user path: see the e2e marker in pyproject.toml
    pytest.mark.skipif(
        importlib.util.find_spec("lightning") is None,
        reason="PyTorch Lightning is the `lightning` extra",
    ),
]


def fit(config: dict[str, Any]) -> dict[str, Any]:
    """tests/lightning_job.py's fit, imported when a test runs."""
    from lightning_job import fit as run

    result: dict[str, Any] = run(config)
    return result


JOB = TESTS / "lightning_job.py"
N, BATCH = 32, 4  # 8 batches an epoch in one process


def base(**changes: Any) -> dict[str, Any]:
    config = {"route": "lading", "n": N, "batch_size": BATCH, "shuffle": False, "epochs": 2}
    config.update(changes)
    return config


def same_run(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Equal batches, losses (1e-5), optimizer steps and weights."""
    assert [s[:2] for s in a["seen"]] == [s[:2] for s in b["seen"]]
    assert [s[2] for s in a["seen"]] == pytest.approx([s[2] for s in b["seen"]], abs=1e-5)
    assert a["global_step"] == b["global_step"]
    assert a["weights"] == pytest.approx(b["weights"], abs=1e-5)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_same_steps_losses_and_weights_as_lightnings_route(accumulate: int) -> None:
    ours = fit(base(accumulate=accumulate))
    stock = fit(base(route="stock", accumulate=accumulate))
    same_run(ours, stock)
    assert ours["global_step"] == 2 * 8 // accumulate


def test_use_distributed_sampler_off_gives_the_same_data() -> None:
    same_run(fit(base(use_distributed_sampler=False)), fit(base()))


def test_shuffled_epochs_read_every_sample_once_in_a_new_order() -> None:
    ours = fit(base(shuffle=True, epochs=3))
    stock = fit(base(route="stock", shuffle=True, epochs=3))
    orders = []
    for epoch in range(3):
        ids = [i for e, batch, _ in ours["seen"] if e == epoch for i in batch]
        assert sorted(ids) == list(range(N)), f"epoch {epoch}"
        orders.append(ids)
    assert len({tuple(o) for o in orders}) == 3  # set_epoch reached the loader every epoch
    assert ours["global_step"] == stock["global_step"] == 3 * 8


def test_limit_train_batches_starts_each_epoch_at_its_first_batch() -> None:
    full = fit(base(shuffle=True, epochs=2))
    limited = fit(base(shuffle=True, epochs=2, limit_train_batches=3))
    for epoch in range(2):
        want = [s[1] for s in full["seen"] if s[0] == epoch][:3]
        assert [s[1] for s in limited["seen"] if s[0] == epoch] == want
    assert limited["global_step"] == 6


def test_validation_reads_its_whole_share_every_time() -> None:
    run = fit(base(val=True, epochs=3))
    for epoch in range(3):
        ids = [i for e, batch in run["validated"] if e == epoch for i in batch]
        assert sorted(ids) == list(range(N)), f"validation after epoch {epoch}"


@pytest.mark.parametrize(("every", "at"), [(3, 3), (3, 6), (4, 8), (3, 12)])
def test_resume_from_a_lightning_checkpoint_is_bitwise(tmp_path: Path, every: int, at: int) -> None:
    """Mid-epoch (3, 6, 12) and at the end of the first epoch (8): the resumed run's steps get
    the batches, losses and final weights of the unbroken one."""
    full = fit(base(shuffle=True, epochs=2, checkpoint_every=every, checkpoints=str(tmp_path)))
    checkpoint = tmp_path / f"step={at}.ckpt"
    assert checkpoint.is_file(), sorted(p.name for p in tmp_path.iterdir())
    resumed = fit(base(shuffle=True, epochs=2, resume=str(checkpoint)))
    assert resumed["seen"] == full["seen"][at:]
    assert resumed["global_step"] == full["global_step"]
    assert resumed["weights"] == pytest.approx(full["weights"], abs=1e-6)


@pytest.mark.slow
def test_resume_with_loader_workers(tmp_path: Path) -> None:
    """Workers prefetch ahead; the state still counts only the batches the steps received."""
    full = fit(base(shuffle=True, workers=2, checkpoint_every=5, checkpoints=str(tmp_path)))
    resumed = fit(base(shuffle=True, workers=2, resume=str(tmp_path / "step=5.ckpt")))
    assert resumed["seen"] == full["seen"][5:]


def test_fit_ends_the_loaders_workers_as_lightnings_route_does() -> None:
    """Each fit of a LadingDataModule with num_workers=2 left its 2 worker processes alive
    (three fits: 6); Lightning's own DataLoaders leave none. teardown closes the loaders."""
    import multiprocessing

    before = set(multiprocessing.active_children())
    for _ in range(2):
        fit(base(shuffle=True, workers=2, epochs=1))
    assert [p for p in multiprocessing.active_children() if p not in before] == []


def test_a_checkpoint_of_another_world_size_is_refused() -> None:
    import lading
    from lading.errors import LoaderStateError
    from lading.integrations.lightning import TrainLoader
    from lading.world import World

    data = list(range(N))
    two = TrainLoader(lading.loader(data, BATCH, world=World(0, 2)))
    next(iter(two))
    state = two.state_dict()
    one = TrainLoader(lading.loader(data, BATCH, world=World(0, 1)))
    with pytest.raises(LoaderStateError, match=r"world_size.*saved world size"):
        one.load_state_dict(state)


def test_another_world_size_resumes_from_an_epoch_end_checkpoint_as_the_refusal_says(
    tmp_path: Path,
) -> None:
    """The refusal of a step checkpoint of another world size said "or resume from an
    end-of-epoch checkpoint", and the step checkpoint at the epoch's last batch (step 4 of 4
    on 2 ranks) is refused as well (Lightning would count 4 of the new 8 batches done). The
    fix it names is ``ModelCheckpoint(every_n_epochs=...)``'s, which resumes on 1 rank
    reading the next epochs whole (Lightning restores no loader position there)."""
    import lightning.pytorch as pl

    import lading
    from lading.errors import LoaderStateError
    from lading.integrations.lightning import LadingDataModule
    from lading.world import World
    from lightning_job import Items, Regression

    data = Items(N)

    def fit_on(world_size: int, resume: Path | None = None, **every: int) -> list[Any]:
        callbacks = [
            pl.callbacks.ModelCheckpoint(
                dirpath=tmp_path, save_top_k=-1, filename="{epoch}-{step}", **every
            )
        ]
        model = Regression()
        pl.Trainer(
            accelerator="cpu",
            max_epochs=3,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            callbacks=callbacks if every else [],
            enable_checkpointing=bool(every),
        ).fit(  # rank 0 of world_size, in this one process
            model,
            datamodule=LadingDataModule(
                train=lambda world: lading.loader(data, BATCH, world=World(0, world_size))
            ),
            ckpt_path=resume,
        )
        return [s[:2] for s in model.seen]

    fit_on(2, every_n_train_steps=4)  # step=4: the last batch of epoch 0 on 2 ranks
    with pytest.raises(LoaderStateError, match=r"every_n_epochs") as e:
        fit_on(1, resume=tmp_path / "epoch=0-step=4.ckpt")
    assert "saved world size" in str(e.value)
    (tmp_path / "epoch=0-step=4.ckpt").unlink()
    fit_on(2, every_n_epochs=1)  # saved at the end of epoch 0
    want = [s for s in fit_on(1) if s[0] >= 1]
    assert fit_on(1, resume=tmp_path / "epoch=0-step=4.ckpt") == want
    assert len(want) == 2 * 8


def test_len_is_the_epochs_batches_also_after_a_resume() -> None:
    import lading
    from lading.integrations.lightning import TrainLoader

    loader = TrainLoader(lading.loader(list(range(N)), BATCH))
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    again = TrainLoader(lading.loader(list(range(N)), BATCH))
    again.load_state_dict(state)
    assert len(loader) == len(again) == 8
    again.sampler.set_epoch(0)  # what Lightning calls right after restoring: position kept
    assert len(list(again)) == 6
    again.sampler.set_epoch(1)
    assert len(list(again)) == 8


def torchrun(config: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / config["route"]
    config = {**config, "world": 2, "out": str(out)}
    path = tmp / f"{config['route']}-{config.get('resume') is not None}.json"
    path.write_text(json.dumps(config))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            str(JOB),
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=JOB.parent,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
def test_two_processes_match_lightnings_route(tmp_path: Path) -> None:
    """2 gloo processes, accumulation 2, in order: every rank gets the batches, losses and
    optimizer steps of a DistributedSampler(shuffle=False) route, and the ranks end with equal
    weights. Shuffled: Lightning's injected sampler and lading both read each sample once an
    epoch over the ranks, in the same number of optimizer steps."""
    ours = torchrun(base(accumulate=2), tmp_path / "order")
    stock = torchrun(
        base(route="stock", sampler=True, use_distributed_sampler=False, accumulate=2),
        tmp_path / "order",
    )
    for rank in range(2):
        same_run(ours[rank], stock[rank])
    assert ours[0]["weights"] == ours[1]["weights"]
    ours = torchrun(base(shuffle=True, accumulate=2), tmp_path / "shuffled")
    stock = torchrun(base(route="stock", shuffle=True, accumulate=2), tmp_path / "shuffled")
    for run in (ours, stock):
        for epoch in range(2):
            ids = sorted(i for r in run for e, b, _ in r["seen"] if e == epoch for i in b)
            assert ids == list(range(N)), f"epoch {epoch}"  # disjoint shares, all read
        assert run[0]["global_step"] == run[1]["global_step"] == 2 * 4 // 2
        assert run[0]["weights"] == pytest.approx(run[1]["weights"], abs=1e-6)


@pytest.mark.slow
def test_two_processes_resume_mid_epoch(tmp_path: Path) -> None:
    config = base(shuffle=True, checkpoint_every=3, checkpoints=str(tmp_path / "ckpt"))
    full = torchrun(config, tmp_path / "full")
    resumed = torchrun(
        base(shuffle=True, resume=str(tmp_path / "ckpt" / "step=3.ckpt")), tmp_path / "resumed"
    )
    for rank in range(2):
        assert resumed[rank]["seen"] == full[rank]["seen"][3:]
        assert resumed[rank]["weights"] == pytest.approx(full[rank]["weights"], abs=1e-6)


class Recorder:
    """A LightningModule (made on use) that records the sample ids of every training batch."""

    @staticmethod
    def make(ids: Any) -> Any:
        import lightning.pytorch as pl
        import torch

        class _Recorder(pl.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.w = torch.nn.Parameter(torch.ones(1))
                self.seen: list[list[int]] = []

            def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
                self.seen.append(ids(batch))
                return (self.w**2).sum()

            def configure_optimizers(self) -> torch.optim.Optimizer:
                return torch.optim.SGD(self.parameters(), lr=0.1)

        return _Recorder()


def lightning_ids(kind: Any, tmp: Path, resume: Path | None = None, every: int = 0) -> Any:
    import lightning.pytorch as pl

    from lading.integrations.lightning import LadingDataModule

    module = Recorder.make(kind.key)
    callbacks = []
    if every:
        callbacks.append(
            pl.callbacks.ModelCheckpoint(
                dirpath=tmp, every_n_train_steps=every, save_top_k=-1, filename="{step}"
            )
        )
    pl.Trainer(
        accelerator="cpu",
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(callbacks),
        callbacks=callbacks,
    ).fit(
        module,
        datamodule=LadingDataModule(train=lambda world: kind.make(world, 0)),
        ckpt_path=resume,
    )
    return module.seen


@pytest.mark.parametrize("name", ["map", "parquet", "lm-streams", "lm-windows"])
def test_every_workload_through_the_datamodule(tmp_path: Path, name: str) -> None:
    """Each workload's loader in a Lightning fit gives the batches it gives when iterated by
    hand (2 epochs), and a mid-epoch Lightning checkpoint resumes on the next batch."""
    from lading.world import World
    from loader_kinds import lm_kind, map_kind, parquet_kind

    kind = {
        "map": lambda: map_kind(40, tmp_path),
        "parquet": lambda: parquet_kind(40, tmp_path),
        "lm-streams": lambda: lm_kind(400, tmp_path, "streams", jitter=None),
        "lm-windows": lambda: lm_kind(40, tmp_path, "windows"),
    }[name]()
    direct = kind.make(World(), 0)
    want = []
    for epoch in range(2):
        direct.set_epoch(epoch)
        want += [kind.key(b) for b in direct]
    assert lightning_ids(kind, tmp_path / "ckpt", every=2) == want
    assert lightning_ids(kind, tmp_path, resume=tmp_path / "ckpt" / "step=2.ckpt") == want[2:]
