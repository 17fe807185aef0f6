"""Token corpora in a bucket, as a review found them: a mixture of URLs closes the corpora it
opened itself, ``lading inspect`` of a corpus merged in the bucket says how long its build took
(or ``-``), and a loader state refused on a remote corpus names the URL the user opened."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import files_open_under, word_tokenizer, write
from lading.errors import LoaderStateError
from lading.lm import LanguageModelLoader, TokenCorpus, TokenMixture, Windows
from lading.testing import LocalS3

pytest.importorskip("tokenizers")

WORDS = [f"w{i}" for i in range(200)]


def source(folder: Path, seed: int, docs: int = 40, jsonl: bool = False) -> Path:
    """``docs`` documents of random words in ``folder/docs.txt`` (blank-line separated), or
    in ``folder/docs.jsonl`` (a record a line: what shards cut)."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, int(rng.integers(3, 25)))) for _ in range(docs)]
    if jsonl:
        return write(folder / "docs.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts))
    return write(folder / "docs.txt", "\n\n".join(texts) + "\n")


def tokenizer(folder: Path) -> Path:
    return word_tokenizer(WORDS, folder / "t.json")


def built(url: str, folder: Path, seed: int) -> str:
    """A corpus of ``seed``'s documents at ``url``; the URL."""
    tok = tokenizer(folder)
    TokenCorpus.build(
        source(folder / f"src-{seed}", seed), url, tok, cache=folder / "build", progress=False
    ).close()
    return url


def test_a_mixture_of_urls_closes_the_corpora_it_opened(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    a = built(f"s3://{bucket}/a", tmp_path, 0)
    b = built(f"s3://{bucket}/b", tmp_path, 1)
    node = tmp_path / "node"
    with TokenMixture({a: 0.6, b: 0.4}, cache=node, cache_bytes="1M") as mixture:
        with LanguageModelLoader(mixture, 2, Windows(8), seed=1) as loader:
            assert next(iter(loader)) is not None
        assert files_open_under(node), "the members read through the node cache"
    assert files_open_under(node) == []
    mixture.close()  # twice: nothing more to do

    # close() too; a corpus the caller passed as an object stays the caller's, open
    mine = TokenCorpus.open(b, cache=tmp_path / "mine", cache_bytes="1M")
    mixture = TokenMixture({a: 1.0, mine: 1.0}, cache=node, cache_bytes="1M")
    with LanguageModelLoader(mixture, 2, Windows(8), seed=1) as loader:
        assert next(iter(loader)) is not None
    mixture.close()
    assert files_open_under(node) == []
    assert [len(mine.document(i)) for i in range(len(mine))]  # still open: it reads
    mine.close()


def test_inspect_of_a_corpus_merged_in_a_bucket_says_its_build_time(
    s3: LocalS3,
    bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lading.cli import main
    from lading.cli.stores import _corpus_lines, describe

    url, tok = f"s3://{bucket}/sh", tokenizer(tmp_path)
    src = source(tmp_path / "src", 2, jsonl=True)
    for i in range(2):
        TokenCorpus.build_shard(src, url, (i, 2), tok, cache=tmp_path / f"w{i}", progress=False)
    merged = TokenCorpus.merge(url, cache=tmp_path / "m")
    merged.close()
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cli"))
    assert main(["inspect", url]) == 0
    out = capsys.readouterr().out
    assert "None" not in out, out
    line = next(line for line in out.splitlines() if line.startswith("build"))
    assert line.split()[1].endswith("s,") and line.endswith("skipped 0"), line
    assert isinstance(merged.meta.get("seconds"), float | int), merged.meta  # as a local merge
    # a manifest without the figure (a corpus merged in a bucket before it was recorded)
    info = describe(url)
    info["build"]["seconds"] = None
    assert "build      -, skipped 0" in _corpus_lines(info)


def test_a_refused_state_names_the_url_of_a_remote_corpus(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    a = built(f"s3://{bucket}/a", tmp_path, 0)
    b = built(f"s3://{bucket}/b", tmp_path, 1)
    one = TokenCorpus.open(a, cache=tmp_path / "node", cache_bytes="1M")
    other = TokenCorpus.open(b, cache=tmp_path / "node", cache_bytes="1M")
    with LanguageModelLoader(one, 2, Windows(8), seed=1) as loader:
        next(iter(loader))
        state = loader.state_dict()
    with pytest.raises(LoaderStateError) as refused:
        LanguageModelLoader(other, 2, Windows(8), seed=1).load_state_dict(state)
    text = str(refused.value)
    assert f"other tokens than token corpus {b} holds now" in text, text
    assert str(tmp_path) not in text, text  # not the node's staged copy

    # a mixture's members listed in another order: named by their URLs too
    with LanguageModelLoader(TokenMixture({one: 1.0, other: 1.0}), 2, Windows(8)) as loader:
        next(iter(loader))
        state = loader.state_dict()
    swapped = LanguageModelLoader(TokenMixture({other: 1.0, one: 1.0}), 2, Windows(8))
    with pytest.raises(LoaderStateError) as reordered:
        swapped.load_state_dict(state)
    text = str(reordered.value)
    assert f"(saved: {a}, {b}; now: {b}, {a})" in text, text
    assert str(tmp_path) not in text, text
    one.close()
    other.close()


def test_a_loader_resumed_after_an_outage_reads_again_at_once(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """An outage (503s past every retry) ends a pass; the server recovers and the loop
    resumes the same loader from its state. The window's GETs that failed were still held
    for their reads, and each resume raised one of them again ("failed 4 times", though no
    GET failed now): 8 resumes before one read to the end. Now a failed GET is not held:
    the read sends it again, and so is one that fails under the resumed read after the
    server came back, its last attempt sent before (tests/remote/test_plane_joined.py)."""
    from lading.errors import RemoteReadError

    url, tok = f"s3://{bucket}/outage", tokenizer(tmp_path)
    texts = source(tmp_path / "src", 2, docs=300)
    TokenCorpus.build(texts, url, tok, cache=tmp_path / "build", progress=False).close()
    local = TokenCorpus.build(texts, tmp_path / "local", tok, progress=False)
    want = [_plain(b) for b in LanguageModelLoader(local, 3, Windows(16), seed=1)]
    corpus = TokenCorpus.open(url, cache=tmp_path / "node", cache_bytes="1K")
    loader = LanguageModelLoader(corpus, 3, Windows(16), seed=1)  # read_ahead=2: the default
    got = []
    with pytest.raises(RemoteReadError):
        for i, batch in enumerate(loader):
            got.append(_plain(batch))
            if i == 3:
                s3.fault("outage/", 10**6, "error", status=503)
    s3.reset()  # the outage ends (GETs sent in it may still be in their last attempt)
    loader.load_state_dict(loader.state_dict())
    got += [_plain(b) for b in loader]  # (raised the outage's error again, here)
    assert got == want
    loader.close()
    corpus.close()


def _plain(batch: Any) -> list[Any]:
    return [part.tolist() for part in batch]
