"""``train_lm`` (the LSTM) resumed in-process equals the uninterrupted run, also with the
``break_continuity`` ablation, whose row shuffles come of a generator of their own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import kept_model, word_corpus

pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 documents of 5..40 words: a few dozen batches of 4 streams of 8 tokens."""
    folder = tmp_path_factory.mktemp("lm_resume")
    return word_corpus(folder, docs=60, lengths=(5, 40), words=50, seed=5).path


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread: the reduction order is then the data's alone (test_lm_train)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def config(corpus: Path, out: Path, **kw: Any) -> Any:
    from lading.lm.train import LMConfig

    fields = dict(
        corpus=corpus, out=out, batch_size=4, bptt=8, emb=16, hidden=16, layers=1,
        dropout=0.0, parallel="none", log_every=1, valid_fraction=0.1, progress=False,
    )  # fmt: skip
    return LMConfig(**{**fields, **kw})


def losses(out: Path) -> dict[int, float]:
    lines = (out / "log.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines)}


def test_break_continuity_resumes_exactly(corpus: Path, tmp_path: Path) -> None:
    """The rows' shuffle generator is checkpointed: a fresh one from the seed replayed the
    first shuffles after a resume (26 of 40 losses differed in the review's run)."""
    from lading.lm.train import train_lm

    train_lm(config(corpus, tmp_path / "ref", steps=12, break_continuity=True))
    train_lm(config(corpus, tmp_path / "cut", steps=7, checkpoint_every=1, break_continuity=True))
    train_lm(config(corpus, tmp_path / "cut", steps=12, resume=True, break_continuity=True))
    want, got = losses(tmp_path / "ref"), losses(tmp_path / "cut")
    assert sorted(want) == list(range(1, 13)) and got == want


@pytest.mark.parametrize("log_every", [5, 0])
def test_eval_every_is_kept_whatever_log_every(
    corpus: Path, tmp_path: Path, log_every: int
) -> None:
    """A validation every ``eval_every`` steps, whether or not the step logs: they ran only
    at steps that were also log steps (none with ``log_every=0``); in log.jsonl, one on a
    step that logs is in its record, another in a record of its own."""
    from lading.lm.train import train_lm

    out = tmp_path / "run"
    summary = train_lm(config(corpus, out, steps=12, eval_every=3, log_every=log_every))
    assert [e["step"] for e in summary["evaluations"]] == [3, 6, 9, 12]
    if log_every:
        records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records if "valid_ppl" in r] == [3, 6, 9, 12]
        assert [r["step"] for r in records if "loss" in r] == [5, 10, 12]


@pytest.mark.parametrize("arch", ["lstm", "gpt"])
def test_a_resumed_summary_keeps_the_evaluations_made_before_the_checkpoint(
    corpus: Path, tmp_path: Path, arch: str
) -> None:
    """``summary.json``'s evaluations listed only those of the process that wrote it: a run
    resumed at step 7 said ``[9, 12]`` where the uninterrupted one said ``[3, 6, 9, 12]``,
    and resuming a finished run said ``[]``. They travel in the checkpoint now."""
    from lading.lm.train import train_lm

    kw: dict[str, Any] = {"eval_every": 3, "arch": arch}
    if arch == "gpt":
        kw["hidden"] = 256
    want = train_lm(config(corpus, tmp_path / "ref", steps=12, **kw))["evaluations"]
    assert [e["step"] for e in want] == [3, 6, 9, 12]
    cut = tmp_path / "cut"
    train_lm(config(corpus, cut, steps=7, checkpoint_every=1, **kw))
    assert train_lm(config(corpus, cut, steps=12, resume=True, **kw))["evaluations"] == want
    again = train_lm(config(corpus, cut, steps=12, resume=True, **kw))  # nothing left to train
    assert again["evaluations"] == want
    assert json.loads((cut / "summary.json").read_text())["evaluations"] == want


def test_epochs_train_each_epochs_own_batches(corpus: Path, tmp_path: Path) -> None:
    """``epochs=2`` of jittered streams (the LSTM's default) trains epochs 0 and 1 to their
    ends, each of its own length (38 and 35 batches here): the steps were epoch 0's length
    times two (1081 + 1015 batches, then 66 of a third epoch, in the review's run)."""
    from lading.lm import LanguageModelLoader, Streams, TokenCorpus
    from lading.lm.train import split_documents, train_lm

    summary = train_lm(config(corpus, tmp_path / "run", epochs=2))
    train_docs, _ = split_documents(len(TokenCorpus.open(corpus)), 0.1, 0)
    loader = LanguageModelLoader(TokenCorpus.open(corpus), 4, Streams(8), documents=train_docs)
    lengths = [loader.batches_in(e) for e in (0, 1)]
    assert lengths[0] != lengths[1]  # the corpus and seed make the case
    lines = (tmp_path / "run" / "log.jsonl").read_text().splitlines()
    epochs = [json.loads(line)["epoch"] for line in lines]
    assert summary["steps"] == sum(lengths)
    assert (epochs.count(0), epochs.count(1), epochs.count(2)) == (*lengths, 0)


def test_a_resume_of_another_model_shape_is_refused_naming_the_setting(
    corpus: Path, tmp_path: Path
) -> None:
    """GPT heads change no weight's shape: a checkpoint of 2 heads resumed with 4 trained on,
    its attention learned for another split (a reviewer). The settings that make the model
    are saved in the checkpoint; one that differs is refused, naming it and both values; the
    same settings resume."""
    from lading.lm.train import train_lm

    out = tmp_path / "run"
    gpt = {"arch": "gpt", "hidden": 256, "heads": 2, "checkpoint_every": 2}  # (hidden: lstm)
    train_lm(config(corpus, out, steps=2, **gpt))
    with pytest.raises(ValueError, match=r"heads.*2.*4.*--out"):
        train_lm(config(corpus, out, steps=4, resume=True, **{**gpt, "heads": 4}))
    assert train_lm(config(corpus, out, steps=4, resume=True, **gpt))["resumed"]["step"] == 2


@pytest.mark.parametrize("arch", ["lstm", "gpt"])
def test_the_trained_model_is_kept_in_out_model_and_loads_back(
    corpus: Path, tmp_path: Path, arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, without --checkpoint-every OUT held only log.jsonl and summary.json: the
    trained weights were lost. Now OUT/model holds model.safetensors and config.json (what
    rebuilds the model), named in the summary; the model loaded back computes what the
    trained one does."""
    import lading.lm.train as train

    made: list[torch.nn.Module] = []
    kind = "GPTLanguageModel" if arch == "gpt" else "LSTMLanguageModel"
    real = getattr(train, kind)

    def making(*args: Any, **kwargs: Any) -> torch.nn.Module:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(train, kind, making)
    out = tmp_path / "run"
    extra = {"heads": 2, "hidden": 256} if arch == "gpt" else {}  # (hidden: lstm)
    summary = train.train_lm(config(corpus, out, steps=3, arch=arch, **extra))
    folder, saved = kept_model(out, summary)
    assert saved["arch"] == arch and saved["vocab_size"] > 0
    monkeypatch.undo()
    loaded = train.load_lm(folder)
    assert type(loaded) is real
    trained = made[0].eval()
    x = torch.randint(0, saved["vocab_size"], (2, 8))
    with torch.no_grad():
        want, got = trained(x), loaded.eval()(x)
    if arch == "lstm":
        want, got = want[0], got[0]
    assert torch.equal(want, got)
    assert not list(out.glob("model.*"))  # no temporary left beside it


def test_a_run_replaces_its_model_and_refuses_a_folder_it_did_not_write(
    corpus: Path, tmp_path: Path
) -> None:
    """A second run into the same OUT replaces OUT/model; an OUT/model lading did not write
    is refused before any step (not after the training), and a folder without the meta.json
    written last (a save cut short) does not load."""
    from lading.lm.train import load_lm, train_lm

    out = tmp_path / "run"
    train_lm(config(corpus, out, steps=1))
    train_lm(config(corpus, out, steps=2, emb=8, hidden=8))
    assert load_lm(out / "model").embedding.weight.shape[1] == 8
    mine = tmp_path / "mine"
    (mine / "model").mkdir(parents=True)
    (mine / "model" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"model.*not a lading directory"):
        train_lm(config(corpus, mine, steps=1))
    assert not (mine / "log.jsonl").exists()
    (out / "model" / "meta.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"no meta\.json.*train lm"):
        load_lm(out / "model")
