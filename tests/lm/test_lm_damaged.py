"""A token corpus whose offsets are out of order is refused at open, naming the file and the fix
(issue 50 item 4): the open's spot checksums read a file's first and last 4 KiB only, so offsets
swapped in the middle opened, and the first read of those documents failed in numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import word_corpus
from lading.errors import StoreFormatError
from lading.lm import TokenCorpus


def test_offsets_out_of_order_are_refused_at_open(tmp_path: Path) -> None:
    corpus = word_corpus(tmp_path, docs=1500, lengths=(1, 4), words=20, seed=0)
    path = corpus.path
    files = list(path.rglob("tokens.off"))
    assert len(files) == 1
    offsets = np.fromfile(files[0], dtype=np.uint64)
    middle = len(offsets) // 2  # 8 B an offset: far from the first and last 4 KiB
    assert 4096 < middle * 8 < offsets.nbytes - 4096 - 16
    offsets[middle], offsets[middle + 1] = offsets[middle + 1] + 5, offsets[middle] - 5
    offsets.tofile(files[0])
    with pytest.raises(StoreFormatError) as caught:
        TokenCorpus.open(path)
    message = str(caught.value)
    assert "tokens.off" in message and "not in order" in message and "rebuild" in message
    assert f"document {middle}" in message or f"documents {middle}" in message


@pytest.mark.parametrize("dtype", [">u2", "<i8", "|u1", "float32"])
def test_a_manifest_dtype_no_build_writes_is_refused_naming_it(tmp_path: Path, dtype: str) -> None:
    """A local corpus's meta.json said ">u2" (byte-swapped): it opened and every id read
    wrong (the hostile-manifest fuzz found it at LADING_FUZZ_SEED=160492089); the remote
    reader refused it already. Now both name the field."""
    import json

    corpus = word_corpus(tmp_path, docs=12, lengths=(2, 12), words=50, seed=3)
    meta_path = corpus.path / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["dtype"] = dtype
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(StoreFormatError, match="dtype"):
        TokenCorpus.open(corpus.path, on_stale="ignore")
