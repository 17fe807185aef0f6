"""A feature whose package is not installed says, in one line, which extra brings it: what a
user meets after ``pip install lading`` with some extras only. Each test hides the package
(``sys.modules[name] = None`` makes its import fail, as a missing one does); before, these
were bare ``ModuleNotFoundError`` s deep inside, a server that "did not start", or a
checkpoint that failed only after the steps up to it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def hide(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def fresh(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """Let ``module`` be imported again (its import-time checks run anew)."""
    monkeypatch.delitem(sys.modules, module, raising=False)


def test_s3_without_obstore_falls_back_to_fsspec_and_without_either_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pyproject promises fsspec/s3fs as the fallback: without obstore, ``auto`` picked it
    anyway (the check imported lading's module, not obstore) and failed on its import."""
    pytest.importorskip("s3fs")
    from lading.remote.clients import open_client

    hide(monkeypatch, "obstore")
    assert open_client("s3://bucket/prefix").backend == "fsspec"
    with pytest.raises(ImportError, match=r"pip install 'lading\[remote\]'"):
        open_client("s3://bucket/prefix", backend="obstore")
    import fsspec  # noqa: F401  # (its registry module, shadowed by its mapping of the same name)

    loaded = sys.modules["fsspec.registry"]._registry
    hide(monkeypatch, "s3fs")
    for scheme in ("s3", "s3a"):  # (a class fsspec already loaded would be used again)
        monkeypatch.delitem(loaded, scheme, raising=False)
    with pytest.raises(ImportError, match=r"pip install 'lading\[remote\]'") as caught:
        open_client("s3://bucket/prefix")
    assert "s3fs" in str(caught.value)


def test_parquet_without_pyarrow_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from lading.tabular import PartitionedParquet, repartition

    hide(monkeypatch, "pyarrow", "pyarrow.parquet")
    with pytest.raises(ImportError, match=r"pip install 'lading\[parquet\]'"):
        PartitionedParquet(tmp_path, 8)
    with pytest.raises(ImportError, match=r"pip install 'lading\[parquet\]'"):
        repartition(tmp_path, tmp_path / "out")


def test_the_local_s3_without_its_server_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from lading.testing import LocalS3

    hide(monkeypatch, "aiohttp")
    with pytest.raises(ImportError, match=r"(?s)aiohttp.*pip install 'lading\[s3local\]'"):
        LocalS3().__enter__()


@pytest.mark.parametrize(
    ("module", "package", "extra"),
    [
        ("lading.integrations.hf_trainer", "transformers", "trainer"),
        ("lading.integrations.sentence_transformers", "sentence_transformers", "st"),
        ("lading.integrations.pyterrier", "pyterrier", "pyterrier"),
    ],
)
def test_an_integration_without_its_framework_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, package: str, extra: str
) -> None:
    import importlib

    fresh(monkeypatch, module)
    if module.endswith("sentence_transformers"):
        fresh(monkeypatch, "lading.integrations.hf_trainer")  # (it imports this one first)
    hide(monkeypatch, package)
    with pytest.raises(ImportError, match=rf"pip install 'lading\[{extra}\]'"):
        importlib.import_module(module)


def test_checkpoints_without_safetensors_are_refused_before_the_first_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lading.train.checkpoint import need_safetensors

    need_safetensors()  # installed here: nothing to say
    hide(monkeypatch, "safetensors")
    with pytest.raises(ImportError, match=r"pip install 'lading\[train\]'"):
        need_safetensors()


def test_a_run_that_saves_its_model_without_safetensors_is_refused_before_it_trains(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A review: `lading train lm` and `train sessions` with `lading` or `lading[parquet]`
    alone ran every step, then failed to save the model ("No module named 'safetensors'"),
    the run wasted; the check before training (the model's folder) now asks for it too."""
    from lading.train.weights import check_replaceable

    check_replaceable(tmp_path / "out" / "model")  # installed here: nothing to say
    hide(monkeypatch, "safetensors")
    with pytest.raises(ImportError, match=r"the trained model \(.*\) needs safetensors") as e:
        check_replaceable(tmp_path / "out" / "model")
    assert "pip install 'lading[train]'" in str(e.value)


def test_a_max_length_past_the_models_positions_is_refused_naming_both() -> None:
    """The example's tiny-bert has 128 positions; ``--max-length`` defaults to 512 and failed
    deep in the embeddings ("size of tensor a (136) must match ... (128)")."""
    pytest.importorskip("transformers")
    from lading.ir.model import CrossEncoder, check_positions, tiny_bert_config

    model = CrossEncoder.from_config(tiny_bert_config(100, 128))
    check_positions(model, 128, "tiny-bert")
    with pytest.raises(ValueError, match=r"max_length=512 .* 128 positions .* tiny-bert"):
        check_positions(model, 512, "tiny-bert")


def test_rerank_refuses_a_max_length_past_the_models_positions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lading rerank` with the example's tiny-bert (128 positions) and the default
    ``--max-length 512`` was a traceback from deep in the embeddings after the store, queries
    and run were read; refused in one line naming the flag, before any of them is read (the
    store here is a folder that is no store), as `lading train` refuses it. The API's
    ``rerank`` alike."""
    pytest.importorskip("transformers")
    from lading.cli import main
    from lading.ir import rerank
    from lading.ir.model import CrossEncoder, tiny_bert_config

    model = CrossEncoder.from_config(tiny_bert_config(100, 128))
    model.save(tmp_path / "m")
    (tmp_path / "q.tsv").write_text("1\tq\n")
    code = main(["rerank", "--model", str(tmp_path / "m"), "--store", str(tmp_path / "m"),
                 "--queries", str(tmp_path / "q.tsv"), "--run", str(tmp_path / "q.tsv"),
                 "--out", str(tmp_path / "r.run")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert "--max-length 512 is longer than the 128 positions" in err, err
    assert "pass --max-length 128" in err and not (tmp_path / "r.run").exists(), err
    with pytest.raises(ValueError, match=r"max_length=512 .* 128 positions .* max_length=128"):
        rerank(model, None, {"1": "q"}, {"1": ["d"]}, None)  # type: ignore[arg-type]
