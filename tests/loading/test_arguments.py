"""A loader refuses a bad argument when it is made, in one line naming the argument and the fix.

Before, some were accepted and refused only while iterating (parquet ``list_columns={"l": 0}``,
``pad="middle"``), or refused in another library's words (numpy's IndexError for an LM document
past the corpus, a TypeError about ``<`` for ``batch_size=None``), or blamed the corpus for a
negative document number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lading
from conftest import word_corpus
from contracts import Numbers
from lading.world import World


@pytest.mark.parametrize("size", [None, "4", 2.5, True, 0, -3])
def test_a_map_loader_names_a_bad_batch_size(size: object) -> None:
    with pytest.raises((TypeError, ValueError)) as e:
        lading.loader(Numbers(8), size, world=World())  # type: ignore[arg-type]
    message = str(e.value)
    assert f"batch_size={size!r}" in message and "int >= 1" in message, message
    assert "\n" not in message


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> lading.lm.TokenCorpus:
    folder = tmp_path_factory.mktemp("forty")
    return word_corpus(folder, docs=40, lengths=(3, 9), words=30, seed=1)


@pytest.mark.parametrize(
    ("documents", "says"),
    [
        ([0, 40], r"documents=\[0, 40\]: 40 is not a document of this corpus \(0 to 39\)"),
        ([-1, 3], r"documents=\[-1, 3\]: -1 is not a document of this corpus \(0 to 39\)"),
        ([[0, 1]], r"documents= must be a flat list of document numbers"),
        ([], r"the 0 document\(s\) read hold 0 token\(s\).*documents= selects"),
        # (read that many times an epoch, where a parquet file given twice is refused)
        ([1, 1, 2], r"documents=\[1, 1, 2\]: document 1 is given 2 times \(1 repeats in all\)"),
        ([5, 3, 5, 3, 5], r"document 3 is given 2 times \(3 repeats in all\).*np.unique"),
    ],
)
def test_lm_documents_outside_the_corpus_are_named(
    corpus: lading.lm.TokenCorpus, documents: list[int], says: str
) -> None:
    from lading.lm import LanguageModelLoader, Streams

    assert len(corpus) == 40
    with pytest.raises(ValueError, match=says) as e:
        LanguageModelLoader(corpus, 2, Streams(4), documents=documents, world=World())
    assert "\n" not in str(e.value)
    ok = LanguageModelLoader(corpus, 2, Streams(4), documents=[0, 39], world=World())
    assert len(ok) >= 1


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "s.parquet"
    items = pa.array([[i, i + 1] for i in range(8)], pa.list_(pa.int64()))
    pq.write_table(pa.table({"id": np.arange(8), "l": items}), path)
    return path


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"list_columns": {"l": 0}}, r"list_columns=\{'l': 0\}: a list column's length must be"),
        ({"list_columns": {"l": "5"}}, r"list_columns=\{'l': '5'\}: a list column's length"),
        ({"list_columns": {"l": 2}, "pad": "middle"}, r"pad='middle'.*'left' or 'right'"),
    ],
)
def test_parquet_list_options_are_refused_when_made(
    sessions: Path, kwargs: dict[str, object], says: str
) -> None:
    from lading.tabular import PartitionedParquet

    with pytest.raises(ValueError, match=says) as e:
        PartitionedParquet(sessions, batch_size=2, world=World(), **kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


def three_loaders(corpus: lading.lm.TokenCorpus, sessions: Path) -> dict[str, Any]:
    """``make(**settings)`` of each of the three loaders, batch size 2 on rank 1 of 2."""
    from lading.lm import LanguageModelLoader, Windows
    from lading.tabular import PartitionedParquet

    return {
        "map": lambda **kw: lading.loader(Numbers(8), 2, **kw),
        "lm": lambda **kw: LanguageModelLoader(corpus, 2, Windows(3), **kw),
        "parquet": lambda **kw: PartitionedParquet(sessions, 2, columns=["id"], **kw),
    }


def test_the_three_loaders_keep_the_settings_they_were_given(
    corpus: lading.lm.TokenCorpus, sessions: Path
) -> None:
    """Settings other than the defaults come back by the same names from every loader (numpy
    numbers as Python's: they go into JSON states)."""
    world = World(1, 2)
    given = {
        "seed": np.int64(7),
        "shuffle": np.bool_(False),
        "equalize": "truncate",
        "drop_partial_batch": True,
        "world": world,
    }
    for name, make in three_loaders(corpus, sessions).items():
        made = make(**given)
        got = {key: getattr(made, key) for key in [*given, "batch_size"]}
        assert got == {**given, "batch_size": 2}, name
        assert type(made.seed) is int and type(made.shuffle) is bool, name
        assert made.state_dict()["fingerprint"]["seed"] == 7, name


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ({"shuffle": "no"}, r"shuffle='no': shuffle must be True or False"),
        ({"drop_partial_batch": 1}, r"drop_partial_batch=1: drop_partial_batch must be True or"),
        ({"seed": "1"}, r"seed='1': seed must be an int"),
        ({"seed": None}, r"seed=None: seed must be an int"),
        ({"seed": -1}, r"seed=-1: seed must be an int >= 0"),
        ({"equalize": "even"}, r"unknown equalize 'even'; choose from \['pad', 'truncate'\]"),
        ({"world": 2}, r"world=2: pass a lading.World"),
        ({"drop_last": True}, r"\(drop_last=...\) is not a lading argument"),
    ],
)
def test_the_three_loaders_refuse_a_bad_setting_alike(
    corpus: lading.lm.TokenCorpus, sessions: Path, setting: dict[str, Any], says: str
) -> None:
    """One record checks the settings of every loader: the same refusal, in one line, from each
    (before, ``shuffle="no"`` read as true and a bad ``world`` failed later, differently)."""
    for name, make in three_loaders(corpus, sessions).items():
        with pytest.raises((TypeError, ValueError), match=says) as e:
            make(**setting)
        assert "\n" not in str(e.value), name


def test_the_three_loaders_refuse_a_negative_epoch_at_set_epoch(
    corpus: lading.lm.TokenCorpus, sessions: Path
) -> None:
    """``set_epoch(-1)`` is refused where it is called (was: accepted, and the next pass failed
    inside numpy with "expected non-negative integer")."""
    for name, make in three_loaders(corpus, sessions).items():
        loader = make()
        with pytest.raises(ValueError, match=r"set_epoch\(-1\): an epoch is an int >= 0"):
            loader.set_epoch(-1)
        assert loader.epoch == 0, name


def test_numpy_integers_give_a_state_that_is_json(
    corpus: lading.lm.TokenCorpus, sessions: Path
) -> None:
    """numpy integers (a config read with numpy, a sweep's ``np.arange``) are taken as
    Python's where a loader or its world is made: the state a checkpoint writes with
    ``json.dumps`` holds no ``np.int64`` (was: "Object of type int64 is not JSON
    serializable" at the first checkpoint, hours into a run)."""
    import json

    from lading.lm import LanguageModelLoader, TokenMixture, Windows
    from lading.tabular import PartitionedParquet

    world = World(np.int64(1), np.int64(2), np.int64(0), np.int64(1))
    assert (type(world.rank), type(world.world_size), type(world.local_rank)) == (int, int, int)
    mixture = TokenMixture({corpus: 1.0}, windows=np.int64(40))
    assert type(mixture.windows) is int
    made = [
        lading.loader(Numbers(8), 2, world=world),
        LanguageModelLoader(mixture, 2, Windows(3), world=World()),
        PartitionedParquet(sessions, 2, columns=["id"], buffer_rows=np.int64(4), world=world),
    ]
    for loader in made:
        next(iter(loader))
        state = loader.state_dict()
        assert json.loads(json.dumps(state)) == state


@pytest.mark.parametrize(
    ("buffer_rows", "error"),
    [(-5, ValueError), (0, ValueError), (2.5, TypeError), ("8", TypeError), (True, TypeError)],
)
def test_parquet_buffer_rows_is_refused_when_made(
    sessions: Path, buffer_rows: object, error: type[Exception]
) -> None:
    """A ``buffer_rows`` that is not an int >= 1 (nor None, the default) is refused naming it,
    when the loader is made (was: -5 and 2.5 failed at the first batch inside pyarrow or with
    an IndexError, and 0 read as the default)."""
    from lading.tabular import PartitionedParquet

    bad: Any = buffer_rows
    with pytest.raises(error, match=rf"buffer_rows={buffer_rows!r}: .*an int >= 1") as e:
        PartitionedParquet(sessions, 2, columns=["id"], buffer_rows=bad, world=World())
    assert "\n" not in str(e.value)
    fine = PartitionedParquet(sessions, 2, columns=["id"], buffer_rows=3, world=World())
    assert fine.buffer_rows == 4  # rounded up to whole batches


@pytest.mark.parametrize("epoch", [1.7, True, "2", None])
def test_set_epoch_refuses_what_is_not_an_int(epoch: object) -> None:
    """``set_epoch`` of a float (was: truncated, 1.7 read epoch 1), a bool (read as epoch 1)
    or a str (was: a TypeError about ``<``) is refused naming set_epoch and what it takes."""
    loader = lading.loader(Numbers(8), 2, world=World())
    with pytest.raises(TypeError, match=rf"set_epoch\({epoch!r}\): an epoch is an int >= 0"):
        loader.set_epoch(epoch)  # type: ignore[arg-type]
    assert loader.epoch == 0
    loader.set_epoch(np.int64(2))  # numpy's ints are ints
    assert loader.epoch == 2 and type(loader.epoch) is int


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"pin_memory": "no"}, TypeError, r"pin_memory='no': pin_memory must be True or False"),
        ({"pin_memory": 1}, TypeError, r"pin_memory=1: pin_memory must be True or False"),
        (
            {"num_workers": 1, "prefetch_factor": 0},
            ValueError,
            r"prefetch_factor=0: .*an int >= 1",
        ),
        ({"num_workers": 1, "prefetch_factor": 1.5}, TypeError, r"prefetch_factor=1.5: "),
        ({"prefetch_factor": 4}, ValueError, r"prefetch_factor=4 with num_workers=0: "),
        (
            {"persistent_workers": True},
            ValueError,
            r"persistent_workers=True with num_workers=0: ",
        ),
        ({"num_workers": 1, "persistent_workers": "yes"}, TypeError, r"persistent_workers='yes'"),
        ({"num_workers": 1, "read_ahead": 2}, ValueError, r"read_ahead=2 with num_workers=1: "),
    ],
)
def test_worker_options_that_would_be_ignored_are_refused(
    corpus: lading.lm.TokenCorpus,
    sessions: Path,
    kwargs: dict[str, Any],
    error: type[Exception],
    says: str,
) -> None:
    """Worker options of the wrong type, or that the loader would ignore, are refused by every
    loader when it is made (was: ``pin_memory="no"`` pinned, being truthy; ``prefetch_factor=0``
    ran as 2; ``persistent_workers`` and ``prefetch_factor`` without workers, which a
    DataLoader refuses, and ``read_ahead`` with workers, which only applies without them,
    were accepted and ignored)."""
    for name, make in three_loaders(corpus, sessions).items():
        with pytest.raises(error, match=says) as e:
            make(world=World(), **kwargs)
        assert "\n" not in str(e.value), name


def test_worker_options_at_their_defaults_or_given_alike_are_taken() -> None:
    """What a DataLoader takes is taken: ``persistent_workers=False`` and ``read_ahead=0``
    without effect, numpy's ints and bools as Python's; and a default ``read_ahead`` (2 for
    data read from object storage) never trips the refusal of ``read_ahead`` with workers: it
    is 0 there (the warning against workers still says so)."""
    from lading.loading.workers import Workers

    made = lading.loader(
        Numbers(8), 2, world=World(), persistent_workers=False, read_ahead=0, num_workers=0
    )
    assert made.workers.read_ahead == 0 and made.workers.persistent_workers is False
    pin: Any = np.bool_(False)
    workers = Workers(np.int64(2), pin, np.int64(3), True, None, 0)
    assert (type(workers.num_workers), type(workers.prefetch_factor)) == (int, int)
    assert type(workers.pin_memory) is bool
    with pytest.warns(UserWarning, match="is read from object storage with num_workers=2"):
        remote = Workers(num_workers=2).for_remote(None, "s3://bucket/data")
    assert remote.read_ahead == 0
    assert Workers().for_remote(None, "s3://bucket/data").read_ahead == 2
    with pytest.raises(ValueError, match=r"read_ahead=2 with num_workers=2: "):
        Workers(num_workers=2).with_read_ahead(2, default=0)


@pytest.mark.parametrize("windows", [2.5, True, "40", 0])
def test_a_mixture_refuses_windows_that_are_not_a_count(
    corpus: lading.lm.TokenCorpus, windows: object
) -> None:
    """``TokenMixture(windows=...)`` takes an int >= 1 (numpy's too, a bool is not one) or
    None, and refuses anything else naming it."""
    from lading.lm import TokenMixture

    with pytest.raises(ValueError, match=rf"TokenMixture\(windows={windows!r}\): .* int >= 1"):
        TokenMixture({corpus: 1.0}, windows=windows)  # type: ignore[arg-type]


@pytest.mark.parametrize(("weight", "fix"), [(0.0, True), (-1.0, False), (float("nan"), False)])
def test_a_mixture_weight_not_above_0_names_its_member(
    corpus: lading.lm.TokenCorpus, tmp_path: Path, weight: float, fix: bool
) -> None:
    """A weight of 0 (an ablation) was refused as "mixture weights must be finite and > 0,
    got [1.0, 0.0]", naming neither the member nor the fix."""
    from lading.lm import TokenMixture

    other = word_corpus(tmp_path / "other", docs=10, lengths=(3, 9), words=30, seed=2)
    with pytest.raises(ValueError, match=r"must be finite and > 0") as e:
        TokenMixture({corpus: 1.0, other: weight})
    said = str(e.value)
    assert repr(other) in said and f"has {weight:g}" in said, said
    assert ("leave it out of the mixture" in said) == fix, said


def test_a_boolean_mask_as_documents_names_flatnonzero(corpus: lading.lm.TokenCorpus) -> None:
    from lading.lm import LanguageModelLoader, Streams

    mask = np.arange(40) % 2 == 0
    with pytest.raises(ValueError, match=r"flat list of .*pass np.flatnonzero\(mask\)"):
        LanguageModelLoader(corpus, 2, Streams(4), documents=mask, world=World())
    ok = LanguageModelLoader(corpus, 2, Streams(4), documents=np.flatnonzero(mask), world=World())
    assert len(ok) >= 1
