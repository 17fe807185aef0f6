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
