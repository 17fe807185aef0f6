"""The README's framework examples run as written, on real data (ADI, YOOCHOOSE), offline.

Each ```python block of the section "Inside the frameworks you train with" runs in a fresh
interpreter, in a folder holding what the section says it holds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from integration_data import adi, hf_tokenizer_dir

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml

SECTION = "## Inside the frameworks you train with"
NEEDS = {
    "HF Trainer": ("transformers", "accelerate"),
    "sentence-transformers": ("sentence_transformers", "datasets"),
    "PyTerrier": ("pyterrier",),
    "HF datasets": ("datasets",),
    "PyTorch Lightning": ("lightning",),
    "Transformers4Rec / Merlin": ("pyarrow",),
}


def examples() -> dict[str, str]:
    """Subsection title -> its python block."""
    text = (REPO / "README.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    found = {}
    for part in section.split("\n### ")[1:]:
        title = part.splitlines()[0].strip()
        blocks = re.findall(r"```python\n(.*?)```", part, re.S)
        assert len(blocks) == 1, f"README subsection {title!r}: expected one python block"
        found[title] = blocks[0]
    return found


def test_every_framework_has_an_example() -> None:
    assert set(examples()) == set(NEEDS)


@pytest.mark.parametrize("title", sorted(NEEDS))
def test_readme_example_runs(title: str, data_dir: Path, tmp_path: Path) -> None:
    for module in NEEDS[title]:
        pytest.importorskip(module)
    work = tmp_path / "work"
    work.mkdir()
    if title.startswith("Transformers4Rec"):
        days = data_dir / "recsys/yoochoose_t4r_preproc_sessions_by_day"
        if not days.is_dir():
            pytest.skip(f"{days} not found")
        for day in ("178", "179"):
            (work / day).symlink_to(days / day)
    else:
        data = adi(data_dir, tmp_path)
        for name in ("docs.tsv", "docs.jsonl", "queries.tsv", "qrels.txt", "bm25.run"):
            shutil.copy(data.folder / name, work / name)
        shutil.copy(data.tokenizer, work / "tokenizer.json")
        if title == "sentence-transformers":
            from transformers import BertModel

            from lading.ir.model import tiny_bert_config

            folder = hf_tokenizer_dir(data.tokenizer, work / "tiny-bert")
            BertModel(tiny_bert_config(800, max_position=128)).save_pretrained(folder)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(tmp_path / "hf-datasets"),
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", examples()[title]],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"README example {title!r} failed:\n{done.stderr[-4000:]}"
