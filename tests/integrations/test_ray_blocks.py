"""What Ray hands a sink's write tasks besides rows: a dataset repartitioned into more blocks
than rows gives tasks empty blocks with no columns (Ray's own ``write_parquet`` writes such a
dataset whole). The sinks' two phases are driven in this process (no Ray cluster)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import lading
from conftest import word_tokenizer

pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")
WORDS = ["alpha", "beta", "gamma"]


def commit(sink: object, tasks: list[list[object]]) -> None:
    """Drive a sink as Ray does: start, one write a task (its blocks), complete."""
    sink.on_write_start()  # type: ignore[attr-defined]
    returns = [sink.write(blocks, SimpleNamespace(task_idx=i)) for i, blocks in enumerate(tasks)]  # type: ignore[attr-defined]
    sink.on_write_complete(SimpleNamespace(write_returns=returns))  # type: ignore[attr-defined]


def test_empty_blocks_without_columns_are_written_as_nothing(tmp_path: Path) -> None:
    """Before, the store sink raised pyarrow's ``KeyError: Field "id" does not exist`` and the
    token sink "no column 'text' (columns: []); pass text_column=...", failing the job."""
    from lading.integrations.ray import LadingDatasink
    from lading.integrations.ray_tokens import LadingTokenDatasink
    from lading.lm import TokenCorpus

    rows = pa.table({"id": ["d0", "d1", "d2"], "text": ["alpha beta", "gamma", "beta beta"]})
    empty = pa.table({})
    commit(LadingDatasink(tmp_path / "s"), [[rows.slice(0, 2)], [empty], [rows.slice(2)], [empty]])
    store = lading.open_store(tmp_path / "s")
    assert store.get_many(["d0", "d1", "d2"]) == ["alpha beta", "gamma", "beta beta"]
    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    commit(LadingTokenDatasink(tmp_path / "c", tok), [[rows], [empty, empty]])
    assert len(TokenCorpus.open(tmp_path / "c")) == 3


def test_a_store_sink_missing_its_id_or_text_column_names_the_columns_and_the_fix(
    tmp_path: Path,
) -> None:
    """Before: pyarrow's bare ``KeyError: 'Field "id" does not exist in schema'``."""
    from lading.errors import SourceError
    from lading.integrations.ray import LadingDatasink

    rows = pa.table({"docid": ["d0"], "text": ["alpha"]})
    with pytest.raises(SourceError, match=r"no column 'id' \(columns: \['docid', 'text'\]\); "):
        commit(LadingDatasink(tmp_path / "s"), [[rows]])
    commit(LadingDatasink(tmp_path / "s", id_column="docid"), [[rows]])
    assert lading.open_store(tmp_path / "s").get_many(["d0"]) == ["alpha"]


@pytest.mark.parametrize(("option", "value"), [("on_error", "ignore"), ("duplicates", "fist")])
def test_a_store_sink_refuses_an_unknown_option_when_made(
    tmp_path: Path, option: str, value: str
) -> None:
    """Before, ``LadingDatasink(dest, on_error="ignore")`` was accepted: the driver made the
    build folder and every Ray write task then failed on its first rows with "unknown on_error
    'ignore'" (the token sink refuses such a value when it is made)."""
    from lading.integrations.ray import LadingDatasink

    with pytest.raises(ValueError, match=rf"LadingDatasink\({option}={value!r}\).*choose from"):
        LadingDatasink(tmp_path / "s", **{option: value})  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()


def test_an_id_in_two_tasks_is_refused_naming_both_tasks_or_kept_once(tmp_path: Path) -> None:
    """Before, the refusal said "duplicate id 'a' in shard 0 (its row 0, read from None) and
    shard 1 (its row 0, read from None)": no word of which Ray write tasks. With
    ``duplicates="first"``/``"last"`` (a folder) one of them is kept, as within a task."""
    from lading.errors import StoreFormatError
    from lading.integrations.ray import LadingDatasink

    one, two = (
        pa.table({"id": ["a", "b"], "text": ["x", "y"]}),
        pa.table({"id": ["a"], "text": ["z"]}),
    )
    with pytest.raises(StoreFormatError, match="duplicate id 'a'") as e:
        commit(LadingDatasink(tmp_path / "s"), [[one], [two]])
    assert "ray write task 0" in str(e.value) and "ray write task 1" in str(e.value)
    assert "None" not in str(e.value)
    for keep, text in (("first", "x"), ("last", "z")):
        commit(LadingDatasink(tmp_path / keep, duplicates=keep), [[one], [two]])  # type: ignore[arg-type]
        store = lading.open_store(tmp_path / keep)
        assert len(store) == 2 and store["a"] == text
