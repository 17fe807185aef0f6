"""A token corpus's content id is what a reader sees, not how the files lie: a one-process build
and a merge of any number of shards of the same inputs share it, so a loader state saved on one
resumes on the other (it was refused as "rebuilt from other text"); other tokens, lengths or
tokenizer give another.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import pytest
from test_lm_shards import inputs

from lading.lm import LanguageModelLoader, TokenCorpus, Windows
from lading.lm.content import crc32_combine

pytest.importorskip("tokenizers")


def test_crc32_combine_is_the_crc32_of_the_two_back_to_back() -> None:
    seed = int(os.environ.get("LADING_TEST_SEED", "5"))
    print(f"LADING_TEST_SEED={seed}")
    rng = np.random.default_rng(seed)
    for _ in range(50):
        a = rng.bytes(int(rng.integers(0, 3000)))
        b = rng.bytes(int(rng.integers(0, 3000)))
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_a_state_saved_on_one_build_resumes_on_a_merge_of_shards(tmp_path: Path) -> None:
    src, tok = inputs(tmp_path), tmp_path / "t.json"
    one = TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    merged = {}
    for n in (2, 3):
        for i in range(n):
            TokenCorpus.build_shard(src, tmp_path / f"n{n}", (i, n), tok, progress=False)
        merged[n] = TokenCorpus.merge(tmp_path / f"n{n}")
        assert merged[n].content_id == one.content_id
    saved = LanguageModelLoader(one, 4, Windows(16), seed=1)
    batches = iter(saved)
    next(batches)
    state = saved.state_dict()
    for corpus in merged.values():
        resumed = LanguageModelLoader(corpus, 4, Windows(16), seed=1)
        resumed.load_state_dict(state)
        assert np.array_equal(next(iter(resumed))[0].numpy(), next(iter(_at(one, state)))[0])
    # a state saved before the id was the tokens' (the files' id) still resumes
    old = {**state, "fingerprint": {**state["fingerprint"], "content": [one.files_content_id]}}
    LanguageModelLoader(one, 4, Windows(16), seed=1).load_state_dict(old)


def _at(corpus: TokenCorpus, state: dict[str, object]) -> LanguageModelLoader:
    loader = LanguageModelLoader(corpus, 4, Windows(16), seed=1)
    loader.load_state_dict(state)
    return loader


def test_other_lengths_or_another_tokenizer_give_another_id(tmp_path: Path) -> None:
    """The same tokens cut into other documents (no end-of-text id between them) or the
    same ids from another tokenizer file are other data."""
    from conftest import word_tokenizer

    words = ["alpha", "beta", "gamma", "delta"]
    tok = word_tokenizer(words, tmp_path / "t.json")
    (tmp_path / "a.txt").write_text("alpha beta\n\ngamma delta\n")
    (tmp_path / "b.txt").write_text("alpha\n\nbeta gamma delta\n")
    a = TokenCorpus.build(tmp_path / "a.txt", tmp_path / "a", tok, False, progress=False)
    b = TokenCorpus.build(tmp_path / "b.txt", tmp_path / "b", tok, False, progress=False)
    assert np.array_equal(a.token_arrays()[0], b.token_arrays()[0])
    assert a.content_id != b.content_id
    other = word_tokenizer([*words, "epsilon"], tmp_path / "u.json")
    c = TokenCorpus.build(tmp_path / "a.txt", tmp_path / "c", other, False, progress=False)
    assert np.array_equal(a.token_arrays()[0], c.token_arrays()[0])
    assert a.content_id != c.content_id


def test_a_version_1_corpus_has_an_id_and_a_state(tmp_path: Path) -> None:
    """A version 1 corpus (its files at the top, no ``dir``): its id was a ``KeyError``, and
    with it every ``state_dict``."""
    import json
    import shutil

    from conftest import word_tokenizer

    tok = word_tokenizer(["alpha", "beta", "gamma"], tmp_path / "t.json")
    (tmp_path / "a.txt").write_text("alpha beta\n\ngamma\n")
    built = TokenCorpus.build(tmp_path / "a.txt", tmp_path / "c", tok, progress=False)
    root, want = tmp_path / "c", built.content_id
    meta = json.loads((root / "meta.json").read_text())
    for f in (root / meta["dir"]).iterdir():  # laid out as version 1 wrote it
        shutil.move(str(f), root / f.name)
    (root / meta["dir"]).rmdir()
    meta["files"] = {k.split("/", 1)[1]: v for k, v in meta["files"].items()}
    for k in ("dir", "snapshot", "history"):
        meta.pop(k, None)
    meta["version"] = 1
    (root / "meta.json").write_text(json.dumps(meta))
    old = TokenCorpus.open(root)
    assert old.content_id == want  # the same tokens, lengths and tokenizer
    loader = LanguageModelLoader(old, 1, Windows(2), seed=1)
    next(iter(loader))
    assert loader.state_dict()["fingerprint"]["content"] == [want]
