"""``lading rerank --use-tokens/--no-use-tokens`` (default: what the model folder says), and
``lading bench --passages`` refused beside ``--corpus``, which it would not size."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import tiny_reranker, write
from lading.cli import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A model folder (2-layer BERT and its WordPiece tokenizer of 200 ids) and a store of
    its documents tokenized by another tokenizer (150 ids)."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    import lading
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    made = tiny_reranker(tmp_path_factory.mktemp("rerank_flags"))
    tmp = made["tmp"]
    texts = [line.split("\t")[1] for line in (tmp / "docs.tsv").read_text().splitlines()]
    other = save_tokenizer(train_tokenizer(texts, "wordpiece", 150), tmp / "other.json")
    made["other_store"] = lading.build_store(
        tmp / "docs.tsv", tmp / "other_store", tokenizer=other, progress=False
    )
    made["queries"] = write(tmp / "q.tsv", "q1\tw1 w2 w3\nq2\tw4 w5\n")
    made["run"] = write(tmp / "in.run", "q1\td1\t1\nq1\td2\t2\nq2\td3\t1\nq2\td4\t2\n")
    return made


def _folder(tiny: dict[str, Any], where: Path, **inputs: Any) -> Path:
    folder = where / "model"
    tiny["model"].save(folder, {"max_length": 64, "max_query_length": 16, **inputs})
    (folder / "tokenizer.json").write_bytes(Path(tiny["tokenizer"]).read_bytes())
    return folder


def _rerank(
    tiny: dict[str, Any], folder: Path, out: Path, *flags: str, store: str = "other_store"
) -> int:
    return main(["rerank", "--model", str(folder), "--store", str(tiny[store].path),
                 "--queries", str(tiny["queries"]), "--run", str(tiny["run"]),
                 "--out", str(out), *flags])  # fmt: skip


def test_lading_rerank_takes_no_use_tokens(
    tiny: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model trained with ``lading train cross-encoder --no-use-tokens`` on a store
    tokenized by another tokenizer could not rerank on that store: ``lading rerank`` had no
    --no-use-tokens, and its refusal named the flag of ``lading train cross-encoder``."""
    folder = _folder(tiny, tmp_path)
    out = tmp_path / "out.trec"
    assert _rerank(tiny, folder, out) == 2
    err = capsys.readouterr().err
    assert err.startswith("lading rerank: ") and "another tokenizer" in err
    assert "pass --no-use-tokens to tokenize" in err  # the flag of this command
    assert "train cross-encoder --no-use-tokens" not in err and not out.exists()  # (was)
    assert _rerank(tiny, folder, out, "--no-use-tokens") == 0, capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 4


def test_lading_rerank_defaults_to_what_the_model_folder_says(
    tiny: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model folder whose lading.json says use_tokens false reranks from the text without
    the flag; --use-tokens overrides it (and is refused here: the store's tokens are
    another tokenizer's). One that says true reranks on a store without tokens too (tokens
    and text give the same rows)."""
    folder = _folder(tiny, tmp_path, use_tokens=False)
    assert json.loads((folder / "lading.json").read_text())["use_tokens"] is False
    out = tmp_path / "out.trec"
    assert _rerank(tiny, folder, out) == 0, capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 4
    out.unlink()
    assert _rerank(tiny, folder, out, "--use-tokens") == 2
    assert "another tokenizer" in capsys.readouterr().err and not out.exists()
    # trained on tokens: read where the store has them, its text where it has none
    on_tokens = _folder(tiny, tmp_path / "on_tokens", use_tokens=True)
    assert _rerank(tiny, on_tokens, out, store="store") == 0, capsys.readouterr().err


def test_bench_refuses_passages_beside_a_corpus(tmp_path: Path) -> None:
    """``lading bench --corpus X --passages N`` benched every document of X, --passages
    (the size of the synthetic collection) silently ignored; it is refused as the synthetic
    collection's other flags are refused without --corpus."""
    pytest.importorskip("torch")
    from lading.cli import bench_plan, build_parser

    corpus = write(tmp_path / "docs.tsv", "".join(f"d{i}\tword{i} text\n" for i in range(20)))
    queries = write(tmp_path / "q.tsv", "q1\tword1\n")
    qrels = write(tmp_path / "qrels.txt", "q1 0 d1 1\n")
    flags = ["bench", "--corpus", str(corpus), "--queries", str(queries), "--qrels", str(qrels)]
    bench_plan(build_parser().parse_args(flags))  # the corpus alone plans
    with pytest.raises(
        ValueError, match=r"--passages 10 given with --corpus .*leave --passages out"
    ):
        bench_plan(build_parser().parse_args([*flags, "--passages", "10"]))
