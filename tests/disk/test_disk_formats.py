"""Each on-disk format has its own version: bumping one leaves the others readable, and a version
this lading cannot read is refused naming the file, the version found and the one expected."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import lading
from conftest import word_tokenizer, write
from lading.disk import FORMATS, UnsupportedVersionError, check_version, read_meta
from lading.errors import StoreFormatError

pytest.importorskip("tokenizers")


def bump(monkeypatch: pytest.MonkeyPatch, name: str, version: int, *older: int) -> None:
    """Make this lading write ``version`` of format ``name`` and read only it and ``older``."""
    fmt = dataclasses.replace(FORMATS[name], version=version, readable=frozenset({version, *older}))
    monkeypatch.setitem(FORMATS, name, fmt)


@pytest.fixture
def built(tmp_path: Path, tiny_tsv: Path) -> dict[str, Path]:
    """One directory of each format that has a meta.json, all written at version 1."""
    from lading.lm import TokenCorpus

    words = ["alpha", "beta", "gamma"]
    src = write(tmp_path / "docs.txt", "alpha beta\n\ngamma alpha beta\n")
    TokenCorpus.build(src, tmp_path / "corpus", word_tokenizer(words, tmp_path / "t.json"))
    lading.build_store(tiny_tsv, tmp_path / "store", progress=False)
    lading.OffsetStore.build(tiny_tsv, tmp_path / "offsets")
    return {
        "corpus": tmp_path / "corpus",
        "store": tmp_path / "store",
        "offsets": tmp_path / "offsets",
    }


def version_of(directory: Path) -> int:
    return int(json.loads((directory / "meta.json").read_text())["version"])


def test_bumping_the_store_version_leaves_corpora_and_offsets_readable(
    built: dict[str, Path], tmp_path: Path, tiny_tsv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lading.lm import TokenCorpus

    bump(monkeypatch, "lading.packed", 3)  # a new layout that no longer reads version 2
    assert len(TokenCorpus.open(built["corpus"])) == 2
    assert lading.OffsetStore(tmp_path / "offsets")["7"] == "seven"
    meta = built["store"] / "meta.json"
    with pytest.raises(UnsupportedVersionError) as caught:
        lading.open_store(built["store"])
    message = str(caught.value)
    assert str(meta) in message and "Unsupported store version: 2. Expected 3" in message
    assert "lading build" in message
    # a build under the new version writes it, and replaces the old store
    store = lading.build_store(tiny_tsv, tmp_path / "store", progress=False)
    assert version_of(tmp_path / "store") == 3 and store["7"] == "seven"
    assert version_of(built["corpus"]) == 2


def test_bumping_the_corpus_version_keeps_reading_old_corpora_and_stores(
    built: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lading.lm import TokenCorpus

    bump(monkeypatch, "lading.tokens", 3, 2)  # writes 3, still reads 2
    assert version_of(built["corpus"]) == 2 and len(TokenCorpus.open(built["corpus"])) == 2
    assert lading.open_store(built["store"])["7"] == "seven"
    src = write(tmp_path / "more.txt", "beta\n\ngamma\n\nalpha\n")
    fresh = TokenCorpus.build(src, tmp_path / "c2", tmp_path / "t.json", progress=False)
    assert version_of(tmp_path / "c2") == 3 and len(fresh) == 3


def test_a_too_new_version_names_the_file_and_what_to_do(built: dict[str, Path]) -> None:
    from lading.lm import TokenCorpus

    meta_path = built["corpus"] / "meta.json"
    meta = json.loads(meta_path.read_text())
    # version 3 is a corpus built in shards (lading.lm.parts): 4 is the first too new
    meta_path.write_text(json.dumps({**meta, "version": 4}))
    with pytest.raises(StoreFormatError) as caught:
        TokenCorpus.open(built["corpus"])
    message = str(caught.value)
    assert message.startswith(f"{meta_path}: Unsupported token corpus version: 4. Expected 2")
    assert "newer lading" in message and "lading lm build" in message
    meta_path.write_text(json.dumps({**meta, "version": "2"}))  # not an int: not version 2
    with pytest.raises(UnsupportedVersionError, match=r"version: '2'\. Expected 2"):
        TokenCorpus.open(built["corpus"])


def test_checkpoints_have_their_own_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    from lading.train import checkpoint

    checkpoint.save({"w": torch.arange(3), "step": 4}, tmp_path / "ckpt")
    bump(monkeypatch, "lading.packed", 5)
    assert checkpoint.load(tmp_path / "ckpt")["step"] == 4
    bump(monkeypatch, "lading.train.checkpoint", 2)
    with pytest.raises(ValueError, match=r"ckpt/meta\.json: Unsupported checkpoint version: 1"):
        checkpoint.load(tmp_path / "ckpt")


def test_unknown_formats_and_versions() -> None:
    with pytest.raises(KeyError, match=r"no on-disk format 'lading\.nope'"):
        read_meta(".", "lading.nope")
    assert check_version("lading.packed", 1, "x") == 1  # version 1 opens as one snapshot
    assert check_version("lading.packed", 2, "x") == 2
    assert check_version("lading.packed", 3, "x") == 3  # a merge under string ids (hash-ids)
    for found in (0, True, None, 1.0, 4):
        with pytest.raises(UnsupportedVersionError, match=f"x: Unsupported store version: {found}"):
            check_version("lading.packed", found, "x")
    with pytest.raises(ValueError, match="must be among the readable"):
        dataclasses.replace(FORMATS["lading.packed"], version=4)
