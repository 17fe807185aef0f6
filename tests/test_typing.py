"""A user's type checker sees lading's real signatures, lazily imported names included.

``lading.loader`` and ``lading.DevicePrefetcher`` are imported on first use (so ``import
lading`` does not import torch); typed as the module ``__getattr__``'s ``object`` they made every
``lading.loader(...)`` call in a user's code a mypy error ("object" not callable).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # mypy in a subprocess (~25 s): run by .ci/run, beside its own mypy

USER_CODE = """
import lading
from lading.lm import LanguageModelLoader, Packed, Streams, TokenCorpus
from lading.tabular import PartitionedParquet

data = lading.loader(list(range(10)), 2, shuffle=False)
first: int = len(data)
state: dict = data.state_dict()
ahead = lading.DevicePrefetcher(data, "cpu", depth=2)
store = lading.open_store("store")
text: str = store["7"]
lm: type = LanguageModelLoader
streams = LanguageModelLoader(TokenCorpus.open("c"), 8, Streams(70, jitter=None), seed=1)
packed = LanguageModelLoader(TokenCorpus.open("c"), 8, Packed(512, boundaries=True))
parquet: type = PartitionedParquet
parse = lading.ParseOptions(columns=["id", "url", "text"], keep_fields=["url"])
built: lading.PackedStore = lading.build_store("c.tsv", "s", parse=parse)
lading.loader(list(range(10)), batch_size="two")  # wrong on purpose: must be reported
LanguageModelLoader(TokenCorpus.open("c"), 8, bptt=70)  # no such keyword: must be reported
"""


def test_mypy_sees_the_lazy_names_with_their_signatures(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    script = tmp_path / "user.py"
    script.write_text(USER_CODE)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2, done.stdout  # only the wrong calls, nothing about lazy names
    assert 'Argument "batch_size" to "loader"' in errors[0], errors[0]
    assert 'Unexpected keyword argument "bptt" for "LanguageModelLoader"' in errors[1], errors[1]
