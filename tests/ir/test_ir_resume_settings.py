"""A resume of ``lading train cross-encoder`` (or ``lm``) with other data settings names the flag.

The loader's state knows the groups only by a digest: ``--resume --group-size 4`` of a run
at 8 was refused as "saved on the dataset 'fbc663…', this loader reads '7dd3c5…'", advising
to delete the state's fingerprint (a resume onto other groups, unsaid)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

pytestmark = pytest.mark.e2e  # the CLI trains: see the e2e marker in pyproject.toml


def test_a_resume_with_another_group_size_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lading.bench.synth import synth
    from lading.cli import main

    made = synth("passages", 200, tmp_path / "c", queries=10)
    out = tmp_path / "run"
    common = ["train", "cross-encoder", "--parallel", "none", "--out", str(out),
              "--corpus", str(made.corpus), "--queries", str(made.queries),
              "--qrels", str(made.qrels), "--negatives", str(made.run), "--max-length", "64",
              "--max-query-length", "16", "--batch-size", "2",
              "--checkpoint-every", "1"]  # fmt: skip
    assert main([*common, "--steps", "2", "--group-size", "4"]) == 0
    capsys.readouterr()
    assert main([*common, "--steps", "4", "--group-size", "3", "--resume"]) != 0
    err = capsys.readouterr().err
    assert "--group-size: 4 there, 3 now" in err and "another --out" in err, err
    assert "fingerprint['data']" not in err, err  # (the digest's advice: a wrong resume)
    assert main([*common, "--steps", "4", "--group-size", "4", "--seed", "1", "--resume"]) != 0
    err = capsys.readouterr().err  # (the groups' digest holds the seed: was told as the data)
    assert "seed: 0 there, 1 now" in err and "another --out" in err, err
    assert main([*common, "--steps", "3", "--group-size", "4", "--resume"]) == 0  # as saved


def test_a_resume_of_lading_train_lm_with_another_seed_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The LM's validation split is drawn from ``--seed``: a resume with another was refused
    as "other documents than this loader's documents= ... pass the documents= of the saved
    run", which the CLI has no flag for."""
    pytest.importorskip("tokenizers")
    from conftest import word_corpus
    from lading.cli import main

    corpus = word_corpus(tmp_path / "c", docs=60, lengths=(20, 60), words=50, seed=0)
    common = ["train", "lm", "--corpus", str(corpus.path), "--out", str(tmp_path / "run"),
              "--batch-size", "4", "--bptt", "8", "--emb", "16", "--hidden", "16",
              "--layers", "1", "--parallel", "none", "--log-every", "0",
              "--checkpoint-every", "1"]  # fmt: skip
    assert main([*common, "--steps", "2"]) == 0
    capsys.readouterr()
    assert main([*common, "--steps", "4", "--seed", "3", "--resume"]) != 0
    err = capsys.readouterr().err
    assert "seed: 0 there, 3 now" in err and "another --out" in err, err
