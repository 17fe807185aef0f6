"""A resume of ``lading train cross-encoder`` with other data settings names the flag.

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
    assert main([*common, "--steps", "3", "--group-size", "4", "--resume"]) == 0  # as saved
