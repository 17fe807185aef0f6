"""sentence-transformers' data arguments on lading groups, against s-t's own route (ADI, offline).

s-t's own route is its trainer on a ``datasets.Dataset`` of the same rows (``train_dataset=``),
batched by its own samplers. lading's must give the same batch and step counts, and with
``batch_sampler="no_duplicates"`` the same guarantee s-t's NoDuplicatesBatchSampler gives: no
query and no document twice in a batch, every example once an epoch.
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("datasets")

from test_integration_sentence_transformers import RecordingCollator, model_folder

from integration_data import Collection, adi

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml

QUERIES = 12  # ADI's first 12 judged queries: 37 (query, relevant) pairs, 37 % 4 == 1


def st_args(tmp: Path, **extra: Any) -> Any:
    from sentence_transformers import SentenceTransformerTrainingArguments

    return SentenceTransformerTrainingArguments(
        output_dir=str(tmp / "out"),
        num_train_epochs=1,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
        **{"seed": 1, "per_device_train_batch_size": 4, **extra},
    )


def trainers(
    data: Collection, tmp: Path, queries: int | None, folder: Path | None = None, **extra: Any
) -> tuple[Any, Any]:
    """lading's trainer on groups and s-t's own on a Dataset of the same epoch-0 rows."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from lading.integrations.rows import GroupRows
    from lading.integrations.sentence_transformers import LadingSentenceTransformerTrainer

    groups = data.groups(group_size=3, queries=queries, seed=5)
    rows = GroupRows(groups, "n-tuple")
    dataset = Dataset.from_list([rows[i][0] for i in range(len(rows))])
    folder = folder or model_folder("bi-encoder", data, tmp)
    model = SentenceTransformer(str(folder), device="cpu")
    loss = MultipleNegativesRankingLoss(model)
    ours = LadingSentenceTransformerTrainer(
        model=model, args=st_args(tmp, **extra), loss=loss, train_groups=groups
    )
    theirs = SentenceTransformerTrainer(
        model=model, args=st_args(tmp, **extra), loss=loss, train_dataset=dataset
    )
    return ours, theirs


# drop_last=False trains two whole ST runs (~13 s): in the slow set, its twin in the default
@pytest.mark.parametrize("drop_last", [pytest.param(False, marks=pytest.mark.slow), True])
def test_drop_last_gives_the_batches_and_steps_of_st_own_route(
    drop_last: bool, data_dir: Path, tmp_path: Path
) -> None:
    data = adi(data_dir, tmp_path)
    ours, theirs = trainers(data, tmp_path, QUERIES, dataloader_drop_last=drop_last)
    assert len(ours.train_groups) == 37
    expected = 9 if drop_last else 10  # 37 rows in batches of 4
    assert len(theirs.get_train_dataloader()) == expected
    assert len(ours.get_train_dataloader()) == expected
    sizes = [len(b) for b in RecordingRows(ours)]
    assert sizes == [4] * 9 + ([] if drop_last else [1])
    assert ours.train().global_step == theirs.train().global_step == expected


def test_data_seed_else_seed_orders_the_rows_as_in_st_own_route(
    data_dir: Path, tmp_path: Path
) -> None:
    """s-t's own default batch sampler is shuffled by ``data_seed``, else ``seed`` (Accelerate
    swaps its RandomSampler for a SeedableRandomSampler); lading's loader takes the same seed."""
    data = adi(data_dir, tmp_path)
    folder = model_folder("bi-encoder", data, tmp_path)
    cases = {
        "seed1": {},
        "seed1-data5": {"data_seed": 5},
        "seed2-data5": {"seed": 2, "data_seed": 5},
    }
    ours: dict[str, list[tuple[str, str]]] = {}
    theirs: dict[str, list[tuple[str, str]]] = {}

    def pair(row: dict[str, Any]) -> tuple[str, str]:
        return row["query"], row["positive"]

    for name, seeds in cases.items():
        lading_route, st_route = trainers(data, tmp_path / name, QUERIES, folder, **seeds)
        ours[name] = [pair(r) for r in RecordingRows(lading_route).batches[0]]
        st_batch = next(iter(st_route.get_train_dataloader().batch_sampler))
        theirs[name] = [pair(st_route.train_dataset[i]) for i in st_batch]
    assert theirs["seed1"] != theirs["seed1-data5"] == theirs["seed2-data5"]  # s-t's own route
    assert ours["seed1"] != ours["seed1-data5"] == ours["seed2-data5"]  # the same relations


class RecordingRows:
    """The row lists of one epoch of a lading trainer's loader (no model run)."""

    def __init__(self, trainer: Any) -> None:
        recorder = RecordingCollator(trainer.data_collator)
        trainer.data_collator = recorder
        trainer.lading_loader = None  # rebuilt with the recording collator
        for _ in trainer.get_train_dataloader():
            pass
        self.batches: list[list[dict[str, Any]]] = recorder.batches

    def __iter__(self) -> Any:
        return iter(self.batches)


def duplicates(batch: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Query texts and document texts found in more than one row of a batch."""
    queries = Counter(r["query"] for r in batch)
    docs = Counter(v for r in batch for k, v in r.items() if k != "query")
    return [q for q, c in queries.items() if c > 1], [d for d, c in docs.items() if c > 1]


@pytest.mark.parametrize("sampler", ["no_duplicates", "no_duplicates_hashed"])
def test_no_duplicates_holds_in_every_batch_as_in_st_own_route(
    sampler: str, data_dir: Path, tmp_path: Path
) -> None:
    from sentence_transformers.base.sampler import NoDuplicatesBatchSampler

    data = adi(data_dir, tmp_path)  # all 35 queries: 170 pairs, query 27 has 33 of them
    ours, theirs = trainers(data, tmp_path, None, batch_sampler=sampler)
    plain, _ = trainers(data, tmp_path / "plain", None)
    assert any(duplicates(b)[0] for b in RecordingRows(plain))  # the problem without it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left out on one rank: every pair once
        batches = RecordingRows(ours).batches
    assert all(duplicates(b) == ([], []) for b in batches)
    st_loader = theirs.get_train_dataloader()
    st_sampler = st_loader.batch_sampler
    st_sampler = getattr(st_sampler, "batch_sampler", st_sampler)  # under accelerate's shard
    assert isinstance(st_sampler, NoDuplicatesBatchSampler)
    assert len(batches) == len(st_loader) == 43
    st_batches = [[theirs.train_dataset[i] for i in b] for b in st_sampler]
    assert all(duplicates(b) == ([], []) for b in st_batches)  # what s-t promises
    st_pairs = Counter((r["query"], r["positive"]) for b in st_batches for r in b)
    pairs = Counter((r["query"], r["positive"]) for b in batches for r in b)
    assert set(pairs.values()) == set(st_pairs.values()) == {1}
    assert set(pairs) == set(st_pairs) and len(pairs) == 170  # every example once, both routes


def test_no_duplicates_on_skewed_data_reads_every_pair_once_or_refuses(
    data_dir: Path, tmp_path: Path
) -> None:
    """Batches of 8 over ADI's 170 pairs: 22 batches, and query 27 has 33 pairs. s-t's own
    route reads every pair once by yielding extra, smaller batches; lading's batch count is
    fixed (equal on every DDP rank), so it refuses before a batch, naming the batch size that
    fits, rather than read some pairs twice and leave others out."""
    from sentence_transformers.base.sampler import NoDuplicatesBatchSampler

    data = adi(data_dir, tmp_path)
    ours, theirs = trainers(
        data, tmp_path, None, batch_sampler="no_duplicates", per_device_train_batch_size=8
    )
    st_loader = theirs.get_train_dataloader()
    st_sampler = getattr(st_loader.batch_sampler, "batch_sampler", st_loader.batch_sampler)
    assert isinstance(st_sampler, NoDuplicatesBatchSampler)
    st_batches = [[theirs.train_dataset[i] for i in b] for b in st_sampler]
    assert len(st_loader) == 22 < len(st_batches)  # more batches than it said: smaller ones
    st_pairs = Counter((r["query"], r["positive"]) for b in st_batches for r in b)
    assert len(st_pairs) == 170 and set(st_pairs.values()) == {1}  # every pair once
    with pytest.raises(ValueError, match=r"shared by 33 samples.*batch_size to at most 5"):
        ours.get_train_dataloader()
    fits, _ = trainers(
        data, tmp_path / "fits", None, batch_sampler="no_duplicates", per_device_train_batch_size=5
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = RecordingRows(fits).batches
    pairs = Counter((r["query"], r["positive"]) for b in batches for r in b)
    assert len(pairs) == 170 and set(pairs.values()) == {1}  # as s-t's own route
    assert all(duplicates(b) == ([], []) for b in batches)


def test_no_duplicates_is_deterministic_resumable_and_equal_over_ranks(
    data_dir: Path, tmp_path: Path
) -> None:
    import lading
    from lading.loading.state import LoaderStateError
    from lading.world import World

    data = adi(data_dir, tmp_path)
    groups = data.groups(group_size=3, seed=5)

    def make(rank: int = 0, world: int = 1, epoch: int = 0) -> Any:
        loader = lading.loader(
            groups,
            batch_size=4,
            collate_fn=lambda items: [(it["qid"], tuple(it["doc_ids"])) for it in items],
            seed=2,
            world=World(rank, world),
            batching="no_duplicates",
        )
        loader.set_epoch(epoch)
        return loader

    first = list(make())
    assert first == list(make())  # deterministic in (seed, epoch)
    assert first != list(make(epoch=1))
    for batch in first:
        assert len({q for q, _ in batch}) == len(batch)
        docs = [d for _, ds in batch for d in ds]
        assert len(set(docs)) == len(docs)
    part = make(epoch=1)
    it = iter(part)
    head = [next(it) for _ in range(5)]
    state = part.state_dict()
    resumed = make(epoch=1)
    resumed.load_state_dict(state)
    assert head + list(resumed) == list(make(epoch=1))  # bitwise resume
    shares = [list(make(r, 2)) for r in range(2)]
    assert len(shares[0]) == len(shares[1]) == len(make(0, 2)) == 22  # 85 a rank
    for share in shares:
        assert all(len({q for q, _ in b}) == len(b) for b in share)
    with pytest.raises(LoaderStateError, match="saved world size and batch size"):
        make(0, 2).load_state_dict(state)  # regrouped for 1 rank: refused, not misread


def test_every_argument_is_honoured_or_refused(data_dir: Path, tmp_path: Path) -> None:
    from sentence_transformers.base.sampler import DefaultBatchSampler

    from lading.integrations.sentence_transformers import LadingSentenceTransformerTrainer

    data = adi(data_dir, tmp_path)
    ours, _ = trainers(
        data,
        tmp_path,
        QUERIES,
        dataloader_num_workers=1,
        dataloader_persistent_workers=False,
        dataloader_prefetch_factor=3,
        dataloader_pin_memory=False,
    )
    workers = ours.get_train_dataloader().workers  # no epoch run: no worker started
    assert (workers.num_workers, workers.persistent_workers) == (1, False)
    assert (workers.prefetch_factor, workers.pin_memory) == (3, False)
    for sampler, match in [
        ("group_by_label", "group_by_label.*no label column"),
        (DefaultBatchSampler, "custom sampler"),
    ]:
        refused, _ = trainers(data, tmp_path / "r", QUERIES, batch_sampler=sampler)
        with pytest.raises(ValueError, match=match):
            refused.get_train_dataloader()
    with pytest.raises(ValueError, match="multi_dataset_batch_sampler"):
        LadingSentenceTransformerTrainer(
            model=ours.model,
            args=st_args(tmp_path),
            loss=ours.loss,
            train_groups={"a": ours.train_groups, "b": ours.train_groups},
        )


def test_batch_size_counting_groups_is_said_once(data_dir: Path, tmp_path: Path) -> None:
    from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainingArguments

    from lading.integrations.sentence_transformers import LadingCrossEncoderTrainer

    data = adi(data_dir, tmp_path)
    folder = model_folder("cross-encoder", data, tmp_path)
    trainer = LadingCrossEncoderTrainer(
        model=CrossEncoder(str(folder), device="cpu", num_labels=1),
        args=CrossEncoderTrainingArguments(
            output_dir=str(tmp_path / "ce"), per_device_train_batch_size=4, report_to="none"
        ),
        train_groups=data.groups(group_size=3, queries=QUERIES),
    )
    with pytest.warns(UserWarning, match=r"counts training groups.*4 groups = 12 'labeled-pair'"):
        trainer.get_train_dataloader()
    ours, _ = trainers(data, tmp_path, QUERIES)  # n-tuple: one row a group, nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours.get_train_dataloader()


def test_arrange_places_a_dominant_key_by_swaps_and_refuses_the_impossible() -> None:
    import numpy as np

    from lading.loading.distinct import arrange

    # 12 items, 4 of them sharing key 0 (one query with 4 pairs: items 0, 9, 10, 11), batches
    # of 3: the walk alone leaves 10 and 11 over for the last batch, where only one fits
    keys = np.array([[0 if i in (0, 9, 10, 11) else 1 + i, 20 + i] for i in range(12)])
    pool = np.arange(12, dtype=np.int64)
    done = arrange(pool, [3, 3, 3, 3], keys)
    assert (done.left_out, done.repeated) == (0, 0)
    assert sorted(int(i) for s in done.slots for i in s) == list(range(12))
    for slot in done.slots:
        ks = [k for i in slot for k in keys[i]]
        assert len(ks) == len(set(ks))
    with pytest.raises(ValueError, match="lower batch_size"):
        arrange(pool[:4], [4], np.zeros((4, 1), dtype=np.int64))


def _rank_epoch(
    rank: int, world: int, data: Collection, folder: Path, tmp: str
) -> list[list[dict[str, Any]]]:
    """One epoch of the s-t trainer's loader with no_duplicates, in a real gloo process group."""
    out = Path(tmp) / str(rank)
    ours, _ = trainers(data, out, None, folder, batch_sampler="no_duplicates")
    return RecordingRows(ours).batches


@pytest.mark.slow
def test_two_gloo_ranks_get_equal_duplicate_free_disjoint_epochs(
    data_dir: Path, tmp_path: Path
) -> None:
    from distributed import run_processes

    data = adi(data_dir, tmp_path)
    folder = model_folder("bi-encoder", data, tmp_path)  # made here: the ranks load it
    ranks = run_processes(_rank_epoch, 2, data, folder, str(tmp_path), timeout=240)
    # s-t turns dataloader_drop_last on under DDP, and lading honours it: 170 pairs, 85 a
    # rank, 21 full batches of 4 on each
    assert len(ranks[0]) == len(ranks[1]) == 21
    assert all(duplicates(b) == ([], []) for share in ranks for b in share)
    pairs = [Counter((r["query"], r["positive"]) for b in share for r in b) for share in ranks]
    assert set(pairs[0].values()) == set(pairs[1].values()) == {1}
    assert not set(pairs[0]) & set(pairs[1])
    assert len(set(pairs[0]) | set(pairs[1])) == 168  # all but the 2 a dropped batch leaves
