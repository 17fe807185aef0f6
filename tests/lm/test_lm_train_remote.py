"""``train_lm`` on a token corpus in object storage (the local S3, 30 ms a request): a config
naming the corpus's URL trains to the very losses of the local corpus's run, through the node
cache the environment names; a URL made into a ``Path`` (one slash lost) is refused naming the
fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import node_cache_from_env, word_corpus
from lading.errors import LadingError
from lading.testing import LocalS3

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

BUCKET = "lm-train-remote"
TINY: dict[str, Any] = {
    "batch_size": 3, "bptt": 8, "emb": 16, "layers": 1, "steps": 3,
    "valid_fraction": 0.1, "eval_every": 2, "eval_batches": 2, "parallel": "none", "log_every": 1,
    "progress": False,
}  # fmt: skip


@pytest.fixture(scope="module")
def corpus(s3: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A tiny local corpus and the URL it was built into."""
    from lading.lm import TokenCorpus

    folder = tmp_path_factory.mktemp("lm-train-remote")
    local = word_corpus(folder / "a", docs=40, lengths=(5, 30), words=200, seed=0)
    s3.make_bucket(BUCKET)
    url = f"s3://{BUCKET}/corpora/a"
    TokenCorpus.build(folder / "a" / "docs.txt", url, local.tokenizer(), cache=folder / "build")
    return local.path, url


@pytest.fixture
def node_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return node_cache_from_env(tmp_path, monkeypatch, "1M")


def losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "log.jsonl").read_text().splitlines()]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("arch", ["lstm", "gpt"])
def test_a_url_trains_to_the_local_corpus_losses(
    corpus: tuple[Path, str], node_cache: Path, s3: LocalS3, tmp_path: Path, arch: str
) -> None:
    """The same steps, losses and validation perplexities as the local corpus, with a
    validation loader over the same corpus read between steps 2 and 3; the tokens came by GETs
    into the node cache ``$LADING_CACHE`` names (LSTM streams; GPT packed windows with
    document boundaries)."""
    from lading.lm.train import LMConfig, train_lm

    local, url = corpus
    extra = {"arch": arch, **({"heads": 2, "packed": True} if arch == "gpt" else {"hidden": 16})}
    want = train_lm(LMConfig(corpus=local, out=tmp_path / "local", **TINY, **extra))
    s3.reset()
    got = train_lm(LMConfig(corpus=url, out=tmp_path / "remote", **TINY, **extra))
    assert s3.stats()["gets"] > 0 and any(node_cache.iterdir())
    assert len(losses(tmp_path / "remote")) == TINY["steps"]
    assert losses(tmp_path / "remote") == losses(tmp_path / "local")
    assert got["valid_ppl"] == want["valid_ppl"]
    assert got["evaluations"] == want["evaluations"] and len(got["evaluations"]) == 1
    assert got["train_documents"] == want["train_documents"]
    assert got["config"]["corpus"] == url  # the summary names the URL, not a mangled path


def test_a_url_made_into_a_path_is_refused_naming_the_string(tmp_path: Path) -> None:
    """``Path("s3://b/x")`` is ``s3:/b/x``: without a check it was opened as a local folder
    (\"s3:/b/x is not a lading token corpus: no such directory\")."""
    from lading.lm.train import LMConfig

    with pytest.raises(LadingError, match=r"corpus='s3://bucket/corpora/wiki'"):
        LMConfig(corpus=Path("s3://bucket/corpora/wiki"), out=tmp_path)
