"""What a review of the local language-model workload found (each seen failing first).

- A WikiExtractor file (no suffix: ``text/AA/wiki_00``) re-saved with a UTF-8 byte order mark
  was read as plain text: its JSON syntax, or its ``<doc ...>`` tag lines, became the
  documents. The readers drop the mark; the sniffs that pick the format now do too.
- ``lading train lm`` whose held-out documents have no window stopped saying "the corpus
  holds no window" of a corpus of hundreds of windows; it now names the validation split.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest

from conftest import word_corpus, word_tokenizer, write
from lading.errors import EmptyEpochError
from lading.lm import LanguageModelLoader, Streams, TokenCorpus, TokenMixture, Windows
from lading.lm.texts import iter_texts
from lading.world import World

BOM = b"\xef\xbb\xbf"
ARTICLES = [("1", "Anarchism", "w1 w2 w3"), ("2", "Autism", "w4 w5")]


def test_a_suffixless_jsonl_file_with_a_byte_order_mark_reads_its_records(
    tmp_path: Path,
) -> None:
    body = "".join(
        json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in ARTICLES
    ).encode()
    plain, marked = tmp_path / "wiki_00", tmp_path / "wiki_01"
    plain.write_bytes(body)
    marked.write_bytes(BOM + body)
    assert list(iter_texts(marked)) == list(iter_texts(plain)) == ["w1 w2 w3", "w4 w5"]
    tokenizer = word_tokenizer([f"w{i}" for i in range(8)], tmp_path / "t.json")
    corpus = TokenCorpus.build(marked, tmp_path / "c", tokenizer, progress=False)
    assert len(corpus) == 2


def test_a_wikiextractor_file_with_a_byte_order_mark_reads_its_documents(
    tmp_path: Path,
) -> None:
    body = "".join(
        f'<doc id="{i}" url="http://x/{i}" title="{t}">\n{t}\n\n{x}\n</doc>\n'
        for i, t, x in ARTICLES
    ).encode()
    plain, marked = tmp_path / "wiki_00", tmp_path / "wiki_01"
    plain.write_bytes(body)
    marked.write_bytes(BOM + body)
    texts = list(iter_texts(marked))
    assert texts == list(iter_texts(plain)) and len(texts) == 2
    assert not any("<doc" in text for text in texts)


def test_documents_without_a_window_are_not_called_the_corpus(tmp_path: Path) -> None:
    corpus = word_corpus(tmp_path, docs=30, lengths=(5, 40), words=50, seed=3)
    short = [d for d in range(len(corpus)) if corpus.lengths()[d] < 20][:1]
    with pytest.raises(EmptyEpochError, match="documents= chose"):
        LanguageModelLoader(corpus, 2, Windows(32), documents=short, shuffle=False)


def test_train_lm_names_a_validation_split_without_a_window(tmp_path: Path) -> None:
    from distributed import run_cli

    texts = [" ".join([f"w{i % 7}"] * (400 if i % 10 == 0 else 3)) for i in range(60)]
    src = write(tmp_path / "docs.txt", "\n\n".join(texts) + "\n")
    tokenizer = word_tokenizer([f"w{i}" for i in range(7)], tmp_path / "t.json")
    TokenCorpus.build(src, tmp_path / "corpus", tokenizer, progress=False)
    argv = ["train", "lm", "--corpus", str(tmp_path / "corpus"), "--out", str(tmp_path / "r")]
    argv += ["--arch", "gpt", "--parallel", "none", "--steps", "2", "--batch-size", "2"]
    argv += ["--bptt", "32", "--emb", "8", "--heads", "2", "--layers", "1", "--seed", "0"]
    done = run_cli(argv, check=False)
    assert done.returncode == 2, done.stderr
    assert "the validation split holds no batch: --valid-fraction 0.02" in done.stderr
    assert "--valid-fraction 0" in done.stderr and "corpus holds no window" not in done.stderr


def test_a_validation_loss_past_what_exp_holds_is_an_infinite_perplexity(tmp_path: Path) -> None:
    """A run at a too high ``--lr`` whose loss stayed finite (~1,600 a token) raised
    ``OverflowError`` from ``math.exp`` at its last validation: a traceback, exit 1, no model
    and no summary. Its perplexity is ``inf`` now, its loss the finite mean."""
    import torch

    from lading.lm.model import LSTMLanguageModel
    from lading.lm.train import evaluate, perplexity
    from lading.world import World

    corpus = word_corpus(tmp_path, docs=20, lengths=(20, 40), words=50, seed=0)
    model = LSTMLanguageModel(corpus.vocab_size, 8, 8, 1, 0.0)
    with torch.no_grad():
        model.decoder.weight.copy_(1e4 * torch.randn_like(model.decoder.weight))
    valid = LanguageModelLoader(corpus, 2, Streams(8, jitter=None), world=World())
    assert evaluate(model, valid, torch.device("cpu"), 2) == float("inf")
    assert perplexity(2.0, 1.0) == pytest.approx(7.389056)
    assert math.isnan(perplexity(float("nan"), 1.0))  # a NaN loss is not an overflow


def test_lstm_validation_builds_no_autograd_graph(tmp_path: Path) -> None:
    """``evaluate`` runs under ``torch.no_grad``: the LSTM's state is carried from batch to
    batch undetached, so with autograd on its graph grew over the whole validation pass
    (a review caught the decorator moved onto a helper inserted above it)."""
    import torch

    from lading.lm.model import LSTMLanguageModel
    from lading.lm.train import evaluate

    corpus = word_corpus(tmp_path, docs=20, lengths=(20, 40), words=50, seed=0)
    model = LSTMLanguageModel(corpus.vocab_size, 8, 8, 1, 0.0)
    seen: list[bool] = []
    model.decoder.register_forward_hook(lambda m, i, o: seen.append(o.requires_grad))
    valid = LanguageModelLoader(corpus, 2, Streams(8, jitter=None), world=World())
    evaluate(model, valid, torch.device("cpu"), 3)
    assert seen and not any(seen)


def test_a_build_whose_every_document_was_skipped_says_so(tmp_path: Path) -> None:
    """``on_error="skip"`` over a file whose one document holds invalid UTF-8 said "holds no
    documents": the file holds one, skipped. The refusal names the skips and the first."""
    from lading.errors import SourceError

    src = tmp_path / "bad.txt"
    src.write_bytes(b"w1 w2 \xff w3\n")
    tokenizer = word_tokenizer([f"w{i}" for i in range(8)], tmp_path / "t.json")
    with pytest.raises(SourceError, match=r"holds no documents \(all 1 skipped as malformed; "
                       r"first: line 1 of .*bad\.txt.*UTF-8"):  # fmt: skip
        TokenCorpus.build(src, tmp_path / "c", tokenizer, split="file", on_error="skip",
                          progress=False)  # fmt: skip


def test_an_empty_text_is_left_out_and_counted_not_a_document_of_eos_alone(
    tmp_path: Path,
) -> None:
    """A JSONL record of ``"text": ""`` became a document of the end-of-text token alone
    (``"   "``, of white-space tokens and EOS), uncounted; a blank-line split never makes
    one. Both are left out now, counted in an EmptyTextWarning, in a sharded build too."""
    from lading.errors import EmptyTextWarning

    tokenizer = word_tokenizer(["a", "b", "c"], tmp_path / "tok.json")
    records = ["a b", "", "   ", "c", "\t"]
    source = write(tmp_path / "d.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in records))
    with pytest.warns(EmptyTextWarning, match="left out 3 document"):
        corpus = TokenCorpus.build(source, tmp_path / "c", tokenizer, progress=False)
    assert [corpus.document(i).tolist() for i in range(len(corpus))] == [[2, 3, 0], [4, 0]]
    with pytest.warns(EmptyTextWarning):
        for i in range(2):
            TokenCorpus.build_shard(source, tmp_path / "s", (i, 2), tokenizer, progress=False)
    merged = TokenCorpus.merge(tmp_path / "s")
    assert merged.content_id == corpus.content_id and len(merged) == 2


def test_a_mixture_of_members_ending_their_documents_otherwise_is_warned(
    tmp_path: Path,
) -> None:
    """A member built without an end-of-text token beside one built with it mixed without a
    word: the model learns document ends from one member only (a review's find)."""
    words = ["alpha", "beta", "gamma"]
    tok = word_tokenizer(words, tmp_path / "tok.json")
    src = write(
        tmp_path / "a.jsonl", "".join(f'{{"text": "alpha beta gamma {i}"}}\n' for i in range(8))
    )
    with_end = TokenCorpus.build(src, tmp_path / "with", tok, progress=False)
    without = TokenCorpus.build(src, tmp_path / "without", tok, append_eos=False, progress=False)
    with pytest.warns(UserWarning, match=r"end their documents otherwise.*has none.*--no-eos"):
        TokenMixture({with_end: 0.5, without: 0.5})
    also = TokenCorpus.build(src, tmp_path / "also", tok, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # members that agree: nothing said
        TokenMixture({with_end: 0.5, also: 0.5})
