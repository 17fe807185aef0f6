"""``LMConfig`` refuses the options of the other ``arch``: each was once accepted and ignored.

``break_continuity`` and ``hidden`` belong to the LSTM; ``heads``, ``packed`` and
``document_mask`` to the GPT. An option left at its default is no choice and is never
refused. Config-level and command-line-level only: nothing is trained here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")


def config(tmp_path: Path, **kw: Any) -> Any:
    from lading.lm.train import LMConfig

    return LMConfig(corpus=tmp_path, out=tmp_path / "out", **kw)


@pytest.mark.parametrize(
    ("arch", "options", "named"),
    [
        ("gpt", {"break_continuity": True}, ["break_continuity=True"]),
        ("gpt", {"hidden": 512}, ["hidden=512"]),
        ("lstm", {"heads": 3}, ["heads=3"]),
        ("lstm", {"packed": True}, ["packed=True"]),
        ("lstm", {"document_mask": False}, ["document_mask=False"]),
        (
            "lstm",
            {"packed": True, "document_mask": False, "heads": 3},
            ["heads=3", "packed=True", "document_mask=False"],
        ),
    ],
)
def test_an_option_of_the_other_arch_is_refused(
    arch: str, options: dict[str, Any], named: list[str], tmp_path: Path
) -> None:
    other = "lstm" if arch == "gpt" else "gpt"
    with pytest.raises(ValueError) as e:
        config(tmp_path, arch=arch, **options)
    message = str(e.value)
    assert f"arch={arch!r}" in message and f"arch={other!r}" in message
    assert all(n in message for n in named), message


@pytest.mark.parametrize(
    ("arch", "options"),
    [
        ("lstm", {}),
        ("gpt", {}),
        ("lstm", {"heads": 4, "packed": False, "document_mask": True}),  # the defaults
        ("gpt", {"hidden": 256, "break_continuity": False}),
        ("lstm", {"hidden": 64, "break_continuity": True}),
        ("gpt", {"heads": 2, "packed": True, "document_mask": False}),
    ],
)
def test_defaults_and_options_of_the_arch_are_taken(
    arch: str, options: dict[str, Any], tmp_path: Path
) -> None:
    made = config(tmp_path, arch=arch, **options)
    assert made.arch == arch


def test_an_unknown_arch_is_refused_by_the_config(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"arch 'rnn'.*'lstm' or 'gpt'"):
        config(tmp_path, arch="rnn")


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--arch", "gpt", "--heads", "2", "--break-continuity"], ["--break-continuity"]),
        (
            ["--arch", "lstm", "--packed", "--no-document-mask", "--heads", "3"],
            ["--heads 3", "--packed", "--no-document-mask"],
        ),
        (["--packed"], ["--packed"]),  # --arch left out: the LSTM
    ],
)
def test_the_command_names_the_flags_and_the_arch_that_takes_them(
    flags: list[str], named: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lading.cli import main

    argv = ["train", "lm", "--corpus", str(tmp_path), "--out", str(tmp_path / "out"), *flags]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("lading train lm: --arch "), error
    assert all(n in error for n in named), error
    assert "=" not in error and "False" not in error and "True" not in error, error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fraction", [1.0, 1.5, -0.1])
def test_a_valid_fraction_outside_0_to_1_is_refused(tmp_path: Path, fraction: float) -> None:
    """``--valid-fraction 1.5`` was taken: every document went to validation, and the error
    that followed named ``documents=``, a keyword the command line never shows."""
    with pytest.raises(ValueError, match=rf"--valid-fraction {fraction:g}: .* below 1"):
        config(tmp_path, valid_fraction=fraction)


def test_a_split_that_leaves_nothing_to_train_on_names_valid_fraction() -> None:
    """A corpus of one document at the default 0.02 held that document out (at least one is
    held out): the loader then said "documents= selects which are read"."""
    from lading.lm.train import split_documents

    with pytest.raises(ValueError, match=r"holds out 1 of the corpus's 1 document.*0 to train"):
        split_documents(1, 0.02, 0)
    train, valid = split_documents(1, 0.0, 0)
    assert train.tolist() == [0] and valid.tolist() == []
    train, valid = split_documents(3, 0.02, 0)
    assert len(train) == 2 and len(valid) == 1


def test_a_run_without_a_validation_split_says_so_not_perplexity_nan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--valid-fraction 0`` ended "validation perplexity nan", a diverged run's look."""
    pytest.importorskip("tokenizers")
    from conftest import word_corpus
    from lading.cli import main

    corpus = word_corpus(tmp_path / "c", docs=20, lengths=(20, 40), words=30, seed=0)
    out = tmp_path / "run"
    code = main(["train", "lm", "--corpus", str(corpus.path), "--out", str(out),
                 "--batch-size", "4", "--bptt", "8", "--emb", "8", "--hidden", "8",
                 "--layers", "1", "--steps", "2", "--valid-fraction", "0",
                 "--parallel", "none", "--log-every", "0"])  # fmt: skip
    said = capsys.readouterr().out
    assert code == 0 and f"{out}: 2 steps, no validation split (--valid-fraction 0)" in said, said
    assert "nan" not in said
