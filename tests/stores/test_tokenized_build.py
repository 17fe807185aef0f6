"""A tokenized build asks the tokenizer for ids only (issue 40 item 7: HF datasets' map built
1M passages in 0.76x lading's time with the same tokenizer) and stores exactly the ids
``encode_batch`` gives, batch boundaries and ``max_length`` included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lading
from conftest import files_open_under, write
from lading.stores.building import build as build_module

WORDS = [f"w{i}" for i in range(300)]


class Recording:
    """A ``tokenizers.Tokenizer`` that notes which batch encoder the build calls."""

    def __init__(self, tok: Any, calls: list[str]) -> None:
        self._tok, self._calls = tok, calls

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._tok, name)
        if name.startswith("encode_batch"):
            self._calls.append(name)
        return found


def test_the_build_takes_ids_without_offsets_and_stores_encode_batchs_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from lading.stores.tokens import load_tokenizer, train_tokenizer

    rng = np.random.default_rng(5)
    texts = [
        " ".join(rng.choice(WORDS, int(rng.integers(0, 60)))) + (" Ünïcödé!" if i % 7 else "")
        for i in range(2100)  # more than two batches of 1,024
    ]
    src = write(tmp_path / "c.tsv", "".join(f"d{i}\t{t}\n" for i, t in enumerate(texts)))
    tok = train_tokenizer(texts[:200], "wordpiece", 400)
    path = tmp_path / "tok.json"
    tok.save(str(path))
    calls: list[str] = []
    monkeypatch.setattr(
        build_module, "load_tokenizer", lambda spec: Recording(load_tokenizer(spec), calls)
    )
    store = lading.build_store(src, tmp_path / "s", tokenizer=path, progress=False)
    cut = lading.build_store(src, tmp_path / "cut", tokenizer=path, max_length=9, progress=False)
    if hasattr(tokenizers.Tokenizer, "encode_batch_fast"):  # tokenizers 0.20 and later
        assert calls and set(calls) == {"encode_batch_fast"}, calls  # before: encode_batch
    want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    ids = [f"d{i}" for i in range(len(texts))]
    assert [t.tolist() for t in store.tokens_many(ids)] == want
    assert [t.tolist() for t in cut.tokens_many(ids)] == [w[:9] for w in want]


def test_a_build_that_fails_leaves_no_file_open_and_no_thread(tmp_path: Path) -> None:
    """A malformed line stops a tokenized build after its writers and encoder started: every
    file the build opened is closed and its threads end when the error is raised, not when
    the garbage collector gets to them (a process that retries builds ran out of descriptors)."""
    import threading

    pytest.importorskip("tokenizers")
    from lading.errors import SourceError
    from lading.stores.tokens import train_tokenizer

    texts = [f"passage {i} about topic {i % 13}" for i in range(5000)]
    tok = train_tokenizer(texts[:200], "wordpiece", 400)
    tok.save(str(tmp_path / "tok.json"))
    lines = [f"{i}\t{t}\n" for i, t in enumerate(texts)] + ["bad line without a tab\n"]
    write(tmp_path / "src.tsv", "".join(lines))

    with pytest.raises(SourceError, match="line 5001") as caught:
        lading.build_store(
            tmp_path / "src.tsv", tmp_path / "s", tokenizer=tmp_path / "tok.json", progress=False
        )
    assert files_open_under(tmp_path) == []  # while the error (and its frames) is still held
    names = [t.name for t in threading.enumerate()]
    assert not [n for n in names if n.startswith(("lading-write", "lading-tokenize"))], names
    assert caught.value.line == 5001
