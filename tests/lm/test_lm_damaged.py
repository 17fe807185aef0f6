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


def _merged(tmp_path: Path, docs: int = 3000) -> tuple[TokenCorpus, Path]:
    """A corpus built in 2 shards of a JSONL of ``docs`` short documents (cut between the
    shards) and merged; the second part's ``tokens.off``."""
    import json

    from conftest import word_tokenizer, write

    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(20)]
    lines = [json.dumps({"text": " ".join(rng.choice(words, 3))}) for _ in range(docs)]
    src = write(tmp_path / "docs.jsonl", "\n".join(lines) + "\n")
    tokenizer = word_tokenizer(words, tmp_path / "t.json")
    for i in range(2):
        TokenCorpus.build_shard(src, tmp_path / "c", (i, 2), tokenizer, progress=False)
    merged = TokenCorpus.merge(tmp_path / "c")
    second = merged.path / merged.meta["parts"][1]["dir"] / "tokens.off"
    return merged, second


def _respot(corpus: TokenCorpus, changed: Path) -> None:
    """Record ``changed``'s spot checksum in the manifests, as if it had been built so: what
    is left for the open to find is the offsets themselves."""
    import json

    from lading.disk.snapshot import spot_crc32

    name = changed.relative_to(corpus.path).as_posix()
    for manifest in (corpus.path / "meta.json", corpus.path / corpus.snapshot / "manifest.json"):
        meta = json.loads(manifest.read_text())
        meta["files"][name]["spot_crc32"] = spot_crc32(changed)
        manifest.write_text(json.dumps(meta))


def test_a_part_of_a_merged_corpus_that_starts_past_0_is_refused(tmp_path: Path) -> None:
    """A part's first offset is 0 by construction; one that is not ran the part before's
    last document into this part's first tokens, and the corpus opened (seen on the old
    code: every offset still ascending). Now the part's file is named."""
    merged, second = _merged(tmp_path)
    offsets = np.fromfile(second, dtype=np.uint64)
    offsets[0] = 1  # documents are 3 tokens: still in order
    offsets.tofile(second)
    _respot(merged, second)
    with pytest.raises(StoreFormatError) as caught:
        TokenCorpus.open(merged.path, on_stale="ignore")
    message = str(caught.value)
    assert str(second) in message and "from 0" in message and "rebuild" in message


def test_a_part_of_a_merged_corpus_out_of_order_is_refused_naming_its_file(
    tmp_path: Path,
) -> None:
    """Offsets out of order in the middle of the second part (past the spots the open reads)
    are refused naming that part's file and the document, counted in the corpus."""
    merged, second = _merged(tmp_path)
    first_part = merged.meta["parts"][0]["documents"]
    offsets = np.fromfile(second, dtype=np.uint64)
    middle = len(offsets) // 2
    assert 4096 < middle * 8 < offsets.nbytes - 4096 - 16
    offsets[middle], offsets[middle + 1] = offsets[middle + 1] + 5, offsets[middle] - 5
    offsets.tofile(second)
    with pytest.raises(StoreFormatError) as caught:
        TokenCorpus.open(merged.path, on_stale="ignore")
    message = str(caught.value)
    assert str(second) in message and "not in order" in message and "rebuild" in message
    assert f"document {first_part + middle} of the corpus" in message
