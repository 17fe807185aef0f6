"""Every loader refuses alike settings that give every rank an epoch of no batch.

Under DDP, zero batches is zero optimizer steps on every rank and no error: the run "trains"
and nothing is learned. The map-style loader, the three LM modes and partitioned parquet all
refuse when made, with an EmptyEpochError naming the numbers and what to change.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lading
from conftest import word_tokenizer, write
from contracts import Numbers
from lading.errors import EmptyEpochError
from lading.lm import LanguageModelLoader, Packed, Streams, TokenCorpus, Windows
from lading.tabular import PartitionedParquet
from lading.world import World


def test_map_loader_truncate_over_fewer_items_than_ranks() -> None:
    with pytest.raises(EmptyEpochError, match=r"3 samples cannot give each of 4 .*equalize='pad'"):
        lading.loader(Numbers(3), batch_size=2, equalize="truncate", world=World(1, 4))
    # padding gives every rank one sample; truncate over enough samples is fine
    assert len(list(lading.loader(Numbers(3), 2, world=World(1, 4), collate_fn=list))) == 1
    assert len(lading.loader(Numbers(8), 2, equalize="truncate", world=World(1, 4))) == 1


def test_map_loader_empty_dataset_and_dropped_partial_batch() -> None:
    with pytest.raises(EmptyEpochError, match="there are no samples"):
        lading.loader(Numbers(0), batch_size=2, world=World())
    with pytest.raises(EmptyEpochError, match=r"gets 3 samples, fewer than batch_size=4"):
        lading.loader(Numbers(6), batch_size=4, drop_partial_batch=True, world=World(0, 2))


@pytest.fixture
def small_corpus(tmp_path: Path) -> TokenCorpus:
    words = [f"w{i}" for i in range(20)]
    src = write(tmp_path / "docs.txt", "w1 w2 w3\n\nw4 w5\n")  # 7 tokens with end-of-text
    return TokenCorpus.build(src, tmp_path / "c", word_tokenizer(words, tmp_path / "t.json"))


def test_windows_longer_than_the_corpus(small_corpus: TokenCorpus) -> None:
    with pytest.raises(EmptyEpochError, match=r"no window of seq_len \+ 1 = 17 tokens"):
        LanguageModelLoader(small_corpus, 2, Windows(16), world=World())
    assert len(LanguageModelLoader(small_corpus, 2, Windows(3), world=World())) == 1


def test_a_mixture_member_shorter_than_a_window_is_refused_as_alone(
    small_corpus: TokenCorpus, tmp_path: Path
) -> None:
    """A TokenMixture member without one window of seq_len + 1 tokens is refused as that
    corpus alone is (an EmptyEpochError, a ValueError too), naming it, the tokens a window
    needs and the fixes (it was a bare ValueError naming the member by its index)."""
    words = [f"w{i}" for i in range(20)]
    text = "\n\n".join(" ".join(words[: 5 + i]) for i in range(10)) + "\n"
    src = write(tmp_path / "big.txt", text)
    big = TokenCorpus.build(src, tmp_path / "big", tmp_path / "t.json", progress=False)
    mixture = lading.lm.TokenMixture({big: 0.5, small_corpus: 0.5})
    with pytest.raises(EmptyEpochError) as caught:
        LanguageModelLoader(mixture, 2, Windows(16), world=World())
    said = str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert str(small_corpus.path.resolve()) in said and str(big.path.resolve()) not in said
    assert "no window of seq_len + 1 = 17 tokens" in said and "7 tokens" in said
    assert "use a smaller seq_len" in said and "leave it out of the mixture" in said
    assert len(LanguageModelLoader(mixture, 2, Windows(6), world=World())) > 0


def test_lm_modes_refuse_alike(small_corpus: TokenCorpus) -> None:
    with pytest.raises(EmptyEpochError, match=r"7 tokens cannot fill 16 streams"):
        LanguageModelLoader(small_corpus, 8, Streams(4), equalize="truncate", world=World(0, 2))
    with pytest.raises(EmptyEpochError, match=r"windows cannot give each of 8 readers"):
        LanguageModelLoader(small_corpus, 1, Windows(2), equalize="truncate", world=World(0, 8))
    packed = LanguageModelLoader(small_corpus, 1, Packed(4), world=World(0, 2))
    assert len(packed) >= 1  # two documents, padded to two windows: one each


def test_packed_refuses_documents_with_nothing_to_score(
    small_corpus: TokenCorpus, tmp_path: Path
) -> None:
    """Documents of one token each (built from empty texts, their end-of-text token alone,
    before empty texts were left out; one word without EOS here) hold no (input, target)
    pair: packed, every label was IGNORE_INDEX and every loss NaN, without an error. Refused
    as streams and windows refuse nothing to predict, naming the corpus (a mixture's member)
    and why; a label across documents (eod_mask_loss=False) is one to score."""
    src = write(tmp_path / "empty.jsonl", '{"text": "w1"}\n' * 6)
    empty = TokenCorpus.build(
        src, tmp_path / "empty", tmp_path / "t.json", append_eos=False, progress=False
    )
    assert empty.lengths().tolist() == [1] * 6
    for packed in (Packed(4), Packed(4, boundaries=True)):
        with pytest.raises(EmptyEpochError, match="nothing to predict") as caught:
            LanguageModelLoader(empty, 2, packed, world=World())
        assert str(empty.path.resolve()) in str(caught.value)
        assert "1 token" in str(caught.value) and isinstance(caught.value, ValueError)
    mixture = lading.lm.TokenMixture({small_corpus: 0.5, empty: 0.5})
    with pytest.raises(EmptyEpochError, match="nothing to predict") as caught:
        LanguageModelLoader(mixture, 2, Packed(4), world=World())
    assert str(empty.path.resolve()) in str(caught.value)
    assert str(small_corpus.path.resolve()) not in str(caught.value)
    scored = LanguageModelLoader(empty, 2, Packed(4, eod_mask_loss=False), world=World())
    assert sum(int((y != -100).sum()) for _, y in scored) > 0


def test_packed_names_documents_that_hold_no_token_as_such(
    small_corpus: TokenCorpus, tmp_path: Path
) -> None:
    """Packed over documents holding no token at all (``documents=[]``; empty texts built with
    ``append_eos=False`` were such documents before empty texts were left out) was refused
    as "every document read is 1 token (its end-of-text token alone)" or "hold 1 token in
    all": a count that was not so, about a token that was not there. It names the documents
    and their 0 tokens now, as streams and windows do."""
    cases = [(small_corpus, [], 0)]
    for corpus, documents, count in cases:
        for packed in (Packed(4), Packed(4, eod_mask_loss=False)):
            with pytest.raises(EmptyEpochError, match="nothing to predict") as caught:
                LanguageModelLoader(corpus, 1, packed, documents=documents, world=World())
            said = str(caught.value)
            assert f"the {count} document(s) read hold 0 tokens" in said, said
            assert "1 token" not in said


def test_parquet_refuses_alike(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"x": np.arange(3)}), path)
    with pytest.raises(EmptyEpochError, match=r"3 rows cannot give each of 4 readers"):
        PartitionedParquet(path, batch_size=1, equalize="truncate", world=World(0, 4))
    with pytest.raises(EmptyEpochError, match=r"fewer than batch_size=8"):
        PartitionedParquet(path, batch_size=8, drop_partial_batch=True, world=World())


def test_dataloader_drop_last_is_refused_naming_the_two_arguments(
    small_corpus: TokenCorpus, tmp_path: Path
) -> None:
    # DataLoader's drop_last means two things under DDP; lading names them apart and refuses
    # the DataLoader name rather than guess (it was a deprecated alias with two meanings)
    fix = r"drop_last=\.\.\.\) is not a lading argument: pass drop_partial_batch=True"
    with pytest.raises(TypeError, match=r"lading\.loader\(" + fix):
        lading.loader(Numbers(8), 2, drop_last=True, world=World())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"LanguageModelLoader\(" + fix):
        LanguageModelLoader(small_corpus, 1, Streams(2), drop_last=False)  # type: ignore[arg-type]
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    pq.write_table(pa.table({"x": list(range(8))}), tmp_path / "x.parquet")
    from lading.tabular import PartitionedParquet

    with pytest.raises(TypeError, match=r"PartitionedParquet\(" + fix):
        PartitionedParquet(tmp_path / "x.parquet", batch_size=2, drop_last=True)  # type: ignore[arg-type]
