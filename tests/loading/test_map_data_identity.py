"""A map-style loader's state is keyed on its dataset where the dataset has an identity.

A state saved on one dataset once loaded into another of the same length without a word (only
the length was compared), and the run went on from a position in data it never read. Now an HF
``datasets.Dataset`` (its fingerprint), a lading store (its snapshot's content),
``TrainingGroups`` and the rows over them (their digest) key the state, and another dataset is
refused naming both; the same data, rebuilt, loads; a state saved before (no key) loads as
it did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import lading
from conftest import write
from lading.errors import LoaderStateError
from lading.world import World


def mid_epoch_state(dataset: Any) -> dict[str, Any]:
    loader = lading.loader(dataset, 2, collate_fn=list, world=World(), seed=4)
    batches = iter(loader)
    next(batches)
    return loader.state_dict()


def refused(state: dict[str, Any], dataset: Any, saved: str, now: str) -> None:
    other = lading.loader(dataset, 2, collate_fn=list, world=World(), seed=4)
    with pytest.raises(LoaderStateError, match=rf"saved on the dataset '{saved}.*reads '{now}"):
        other.load_state_dict(state)


def resumes(state: dict[str, Any], dataset: Any) -> list[Any]:
    """The rest of the epoch after loading ``state`` into a loader of ``dataset``."""
    loader = lading.loader(dataset, 2, collate_fn=list, world=World(), seed=4)
    loader.load_state_dict(state)
    return list(loader)


def test_an_hf_dataset_keys_the_state_on_its_fingerprint() -> None:
    datasets = pytest.importorskip("datasets")
    one = datasets.Dataset.from_dict({"x": list(range(10))})
    other = datasets.Dataset.from_dict({"x": list(range(100, 110))})  # the same length
    state = mid_epoch_state(one)
    assert state["fingerprint"]["data"] == f"datasets:{one._fingerprint}"
    refused(state, other, f"datasets:{one._fingerprint}", f"datasets:{other._fingerprint}")
    refused(state, one.map(lambda row: {"x": row["x"] + 1}), "datasets:", "datasets:")
    again = datasets.Dataset.from_dict({"x": list(range(10))})  # the same data, made anew
    assert len(resumes(state, again)) == 4  # 5 batches an epoch, 1 read


def test_a_state_saved_without_a_key_loads_as_before() -> None:
    datasets = pytest.importorskip("datasets")
    one = datasets.Dataset.from_dict({"x": list(range(10))})
    state = mid_epoch_state(list(range(10)))  # a list has no identity: data is None
    assert state["fingerprint"]["data"] is None
    rest = [[row["x"] for row in batch] for batch in resumes(state, one)]
    assert rest == resumes(state, list(range(10)))  # not refused: the same positions
    older = {**state, "fingerprint": {k: v for k, v in state["fingerprint"].items() if k != "data"}}
    assert len(resumes(older, one)) == 4
    with pytest.raises(LoaderStateError, match="loader state has n=10, this loader 11"):
        lading.loader(list(range(11)), 2, collate_fn=list, world=World(), seed=4).load_state_dict(
            state
        )  # the length is still compared


def test_a_keyed_state_into_a_dataset_without_identity_is_refused() -> None:
    datasets = pytest.importorskip("datasets")
    one = datasets.Dataset.from_dict({"x": list(range(10))})
    state = mid_epoch_state(one)
    loader = lading.loader(list(range(10)), 2, collate_fn=list, world=World(), seed=4)
    fix = r"reads a dataset without one.*fingerprint\['data'\]"
    with pytest.raises(LoaderStateError, match=fix):
        loader.load_state_dict(state)


def store_of(tmp: Path, name: str, word: str) -> Any:
    lines = "".join(f"{i}\t{word} {i}\n" for i in range(8))
    return lading.build_store(write(tmp / f"{name}.tsv", lines), tmp / name, progress=False)


def test_a_store_keys_the_state_on_its_snapshots_content(tmp_path: Path) -> None:
    one, other = store_of(tmp_path, "one", "alpha"), store_of(tmp_path, "other", "beta")
    assert one[3] == "alpha 3"  # ids 0..7: the store is a map-style dataset
    state = mid_epoch_state(one)
    assert state["fingerprint"]["data"] == f"store:{one.content_id}"
    refused(state, other, f"store:{one.content_id}", f"store:{other.content_id}")
    rebuilt = store_of(tmp_path / "again", "one", "alpha")  # the same content, built anew
    assert resumes(state, rebuilt) == resumes(state, one)


def test_training_groups_and_their_rows_key_the_state(tmp_path: Path) -> None:
    from lading import ir
    from lading.integrations.rows import GroupRows

    store = store_of(tmp_path, "docs", "doc")
    queries = write(tmp_path / "q.tsv", "".join(f"q{i}\tquery {i}\n" for i in range(4)))

    def groups(relevant: int) -> Any:
        qrels = "".join(f"q{i} 0 {(i + relevant) % 8} 1\n" for i in range(4))
        return ir.TrainingGroups(
            store, ir.read_queries(queries), ir.read_qrels(write(tmp_path / f"r{relevant}", qrels)),
            None, group_size=2, sampling="random", seed=1,
        )  # fmt: skip

    one, other = groups(0), groups(1)  # four groups each, other documents judged
    state = mid_epoch_state(one)
    refused(state, other, one.data_fingerprint(), other.data_fingerprint())
    rows = mid_epoch_state(GroupRows(one))
    assert rows["fingerprint"]["data"] == f"{one.data_fingerprint()}:n-tuple"
    refused(rows, GroupRows(other), one.data_fingerprint(), other.data_fingerprint())
    assert len(resumes(rows, GroupRows(groups(0)))) == 1
