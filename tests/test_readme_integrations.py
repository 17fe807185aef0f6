"""The integrations guide's examples run as written, offline, in a folder `lading example` made,
and the distributed ones are real DDP: under ``torchrun --nproc_per_node 2`` on CPU (gloo) both
ranks end with the same weights, as they must when DDP averages the gradients.

Each ```python block of docs/integrations.md (one per framework, under its ``## `` heading) runs
in a fresh interpreter (see tests/readme_blocks.py); the other blocks of README.md and docs/:
tests/test_readme_examples.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from readme_blocks import blocks, run_block

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml

PAGE = "docs/integrations.md"
NEEDS = {
    "HF Trainer": ("transformers", "accelerate"),
    "sentence-transformers": ("sentence_transformers", "datasets"),
    "PyTerrier": ("pyterrier",),
    "HF datasets": ("datasets",),
    "PyTorch Lightning": ("lightning",),
    "Transformers4Rec / Merlin": ("pyarrow",),
}
FRAMEWORK_BLOCKS = {f"{PAGE}: {title} #1": title for title in NEEDS}
FAST: set[str] = set()  # each imports a framework and trains (T4R, the lightest: ~15 s): slow
# the models each distributed example trains, whose weights must agree over the ranks
DISTRIBUTED = {"HF Trainer": ("model",), "sentence-transformers": ("model", "reranker")}
DIGEST = """
import hashlib as _hashlib, json as _json, os as _os
def _digest(module):
    h = _hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode()); h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
_json.dump({n: _digest(globals()[n]) for n in %r},
           open(f"weights-{_os.environ.get('RANK', '0')}.json", "w"))
"""


def test_every_framework_has_one_example() -> None:
    text = (Path(__file__).resolve().parent.parent / PAGE).read_text()
    titles = [part.splitlines()[0].strip() for part in text.split("\n## ")[1:]]
    assert set(titles) == set(NEEDS)
    for title in titles:
        assert f"{PAGE}: {title} #2" not in blocks(), f"{PAGE} {title!r}: one block expected"
        assert blocks()[f"{PAGE}: {title} #1"].lang == "python"


def _needs(title: str) -> None:
    for module in NEEDS[title]:
        pytest.importorskip(module)


@pytest.mark.parametrize(
    "title",
    [t if t in FAST else pytest.param(t, marks=pytest.mark.slow) for t in sorted(NEEDS)],
)
def test_readme_example_runs(title: str, readme_example: Path, tmp_path: Path) -> None:
    _needs(title)
    run_block(blocks()[f"{PAGE}: {title} #1"], readme_example, tmp_path, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("title", sorted(DISTRIBUTED))
def test_readme_example_is_ddp_under_torchrun(
    title: str, readme_example: Path, tmp_path: Path
) -> None:
    """``torchrun --nproc_per_node 2 train.py`` with README's script: DDP on CPU too. Without
    ``use_cpu=True`` transformers ignores the gloo group on a CPU and each rank trains alone
    on its own share, ending with other weights."""
    _needs(title)
    names = DISTRIBUTED[title]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    work = run_block(
        blocks()[f"{PAGE}: {title} #1"],
        readme_example,
        tmp_path,
        append=DIGEST % (names,),
        prefix=launcher,
        timeout=600,
    )
    ranks = [json.loads((work / f"weights-{r}.json").read_text()) for r in (0, 1)]
    assert set(ranks[0]) == set(names)
    assert ranks[0] == ranks[1], "the two ranks ended with different weights: not DDP"
