"""Document boundaries, packing and mixtures of the LM loader, against reconstructions.

Every corpus here is made of unique words: word ``w`` has token id ``w + 2`` and belongs to a
known document, 0 is the end of a document (and the padding id). From the token ids alone the
tests rebuild which document every token of a window belongs to, independently of the loader's
own bookkeeping, and check positions, cu_seqlens, masks, loss masks and packing against it.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conftest import word_tokenizer, write
from lading.world import World

pytest.importorskip("tokenizers")

EOS = 0


class Docs:
    """A corpus of documents of unique words, with the reverse map word -> document."""

    def __init__(
        self,
        tmp: Path,
        lengths: list[int],
        name: str = "c",
        first_word: int = 0,
        vocabulary: int | None = None,
    ):
        """Documents of ``lengths`` words from word ``first_word`` on, tokenized by a word
        tokenizer of ``vocabulary`` words (default: up to the last word used; the corpora of
        a mixture share one, as a mixture requires)."""
        from lading.lm import TokenCorpus

        self.lengths = lengths  # words per document (each also ends with EOS)
        total = first_word + sum(lengths)
        words = [f"w{i}" for i in range(max(total, vocabulary or 0))]
        self.doc_of = np.full(total + 2, -1, dtype=np.int64)  # token id -> document
        self.last_word = set()
        texts, at = [], first_word
        for d, n in enumerate(lengths):
            texts.append(" ".join(words[at : at + n]))
            self.doc_of[at + 2 : at + n + 2] = d
            self.last_word.add(at + n + 1)
            at += n
        src = write(tmp / f"{name}.txt", "\n\n".join(texts) + "\n")
        tok = word_tokenizer(words, tmp / f"{name}.json")
        self.corpus = TokenCorpus.build(src, tmp / name, tok, progress=False)
        assert len(self.corpus) == len(lengths)

    def owners(self, row: list[int]) -> list[int]:
        """Document of every token of a window (-1: padding), from the ids alone."""
        out: list[int] = []
        for i, t in enumerate(row):
            if t != EOS:
                out.append(int(self.doc_of[t]))
            elif i == 0:
                out.append(-2)  # a window opening on an end-of-document: its own segment
            elif row[i - 1] in self.last_word:
                out.append(out[-1])  # the EOS right after a document's last word
            else:
                out.append(-1)  # padding
        return out


def segments_of(owners: list[int]) -> list[int]:
    """Owners as segment numbers 0, 1, … in order (padding stays -1)."""
    seg, out, prev = -1, [], None
    for o in owners:
        if o != prev:
            seg += 1
            prev = o
        out.append(-1 if o == -1 else seg)
    return out


def positions_of(owners: list[int]) -> list[int]:
    out: list[int] = []
    for i, o in enumerate(owners):
        out.append(out[-1] + 1 if i and owners[i - 1] == o else 0)
    return out


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Docs:
    rng = np.random.default_rng(5)
    lengths = [int(n) for n in rng.integers(1, 30, 40)] + [1, 60]  # one shorter, one longer
    return Docs(tmp_path_factory.mktemp("docs"), lengths)


def loader(
    data: Any,
    mode: str,
    batch: int = 4,
    seq_len: int = 12,
    *,
    boundaries: bool = False,
    eod_mask_loss: bool = True,
    **kw: Any,
) -> Any:
    """A loader of ``mode`` ("windows" or "packed") with seed 7, in one process by default."""
    from lading.lm import LanguageModelLoader, Packed, Windows

    world = kw.pop("world", World())
    shape = {"windows": Windows, "packed": Packed}[mode]
    sequence = shape(seq_len, boundaries=boundaries, eod_mask_loss=eod_mask_loss)
    return LanguageModelLoader(data, batch, sequence, world=world, seed=7, **kw)


@pytest.mark.parametrize("mode", ["windows", "packed"])
@pytest.mark.parametrize("eod_mask_loss", [False, True])
def test_boundaries_match_reconstruction(docs: Docs, mode: str, eod_mask_loss: bool) -> None:
    data = loader(docs.corpus, mode, boundaries=True, eod_mask_loss=eod_mask_loss)
    for epoch in (0, 1):
        data.set_epoch(epoch)
        for b in data:
            window = torch.cat([b.input_ids, b.labels[:, -1:]], dim=1).tolist()
            flat_starts = []
            for r, row in enumerate(window):
                owners = docs.owners(row)
                seg = segments_of(owners)
                assert b.input_ids[r].tolist() == row[:-1] and b.labels[r].tolist() == row[1:]
                assert b.document_ids[r].tolist() == seg[:-1]
                assert b.position_ids[r].tolist() == positions_of(owners)[:-1]
                scored = [
                    a != -1 and c != -1 and (a == c or not eod_mask_loss)
                    for a, c in itertools.pairwise(owners)
                ]
                assert b.loss_mask[r].tolist() == [float(s) for s in scored]
                starts = [i for i in range(len(row) - 1) if i == 0 or seg[i] != seg[i - 1]]
                flat_starts += [r * (len(row) - 1) + i for i in starts]
            rows, length = b.input_ids.shape
            assert b.cu_seqlens.dtype == torch.int32
            assert b.cu_seqlens.tolist() == [*flat_starts, rows * length]
            assert b.max_seqlen == int(np.diff(b.cu_seqlens.numpy()).max())


@pytest.mark.parametrize("mode", ["windows", "packed"])
def test_no_token_attends_across_documents(docs: Docs, mode: str) -> None:
    from lading.lm.boundaries import attention_mask, document_mask_mod

    b = next(iter(loader(docs.corpus, mode, boundaries=True)))
    mask = b.attention_mask()
    rows, length = b.input_ids.shape
    assert mask.shape == (rows, 1, length, length) and mask.dtype == torch.bool
    for r in range(rows):
        seg = segments_of(docs.owners([*b.input_ids[r].tolist(), b.labels[r, -1].item()]))
        for i in range(length):
            allowed = [j <= i and seg[j] == seg[i] for j in range(length)]
            assert mask[r, 0, i].tolist() == allowed
    q_idx = torch.arange(length)[:, None]
    kv_idx = torch.arange(length)[None, :]
    mod = document_mask_mod(b.document_ids)
    for r in range(rows):
        assert torch.equal(mod(torch.tensor(r), torch.tensor(0), q_idx, kv_idx), mask[r, 0])
    # SDPA with the mask equals causal attention run on every document alone
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(rows, 2, length, 8, generator=gen) for _ in range(3))
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=attention_mask(b.document_ids)
    )
    cu = b.cu_seqlens.tolist()
    for lo, hi in itertools.pairwise(cu):
        r, a, z = lo // length, lo % length, lo % length + hi - lo
        alone = torch.nn.functional.scaled_dot_product_attention(
            q[r : r + 1, :, a:z], k[r : r + 1, :, a:z], v[r : r + 1, :, a:z], is_causal=True
        )
        torch.testing.assert_close(out[r : r + 1, :, a:z], alone)


def test_packing_cuts_no_document_and_loses_no_token(docs: Docs) -> None:
    bptt = 12
    data = loader(docs.corpus, "packed", batch=5, seq_len=bptt, shuffle=False)
    pairs: Counter[tuple[int, int]] = Counter()
    windows_of_doc: dict[int, set[int]] = {}
    seen_tokens: set[int] = set()
    windows = 0
    for x, y in data:
        for row_x, row_y in zip(x.tolist(), y.tolist()):
            last = EOS if row_y[-1] == -100 else row_y[-1]  # padding is labelled -100
            row = [*row_x, last]
            owners = docs.owners(row)
            # a label is -100 exactly where the token it names is padding or starts another
            # document (eod_mask_loss, the default)
            starts = [b < 0 or a != b for a, b in itertools.pairwise(owners)]
            assert [y == -100 for y in row_y] == starts
            for i, (t, o) in enumerate(zip(row, owners)):
                if o >= 0:
                    windows_of_doc.setdefault(o, set()).add(windows)
                    if t != EOS:
                        seen_tokens.add(t)
                if i + 1 < len(row) and o >= 0 and owners[i + 1] == o:
                    pairs[(t, row[i + 1])] += 1
            windows += 1
    stats = data.packing_stats()
    assert windows == stats["windows"]  # one process, no padding rows: every window once
    # every word, every within-document pair exactly once
    assert seen_tokens == set(range(2, sum(docs.lengths) + 2))
    expected = Counter()
    for d in range(len(docs.lengths)):
        ids = [t for t in range(len(docs.doc_of)) if docs.doc_of[t] == d] + [EOS]
        expected.update(itertools.pairwise(ids))
    assert pairs == expected
    for d, n in enumerate(docs.lengths):  # a document that fits one window is never cut
        if n + 1 <= bptt + 1:
            assert len(windows_of_doc[d]) == 1, f"document {d} of {n + 1} tokens was cut"
    assert stats["padding"] == stats["windows"] * (bptt + 1) - stats["tokens"]
    assert stats["split_documents"] == sum(n + 1 > bptt + 1 for n in docs.lengths)


def test_best_fit_decreasing_properties(rng: Any) -> None:
    from lading.lm.packing import pack

    lengths = [rng.randrange(0, 70) for _ in range(300)]
    capacity = 33
    p = pack(lengths, capacity, seed=rng.randrange(1000))
    used = np.add.reduceat(p.length, p.ptr[:-1]) if p.windows else np.array([])
    assert (used <= capacity).all() and (p.length >= 1).all()
    # best fit never opens a window the other windows could have shared: any two together
    # hold more than one window's worth
    two = np.sort(used)[:2]
    assert two.sum() > capacity
    # the pieces tile every document (overlapping by one token where a document was cut)
    for d, n in enumerate(lengths):
        mine = np.flatnonzero(p.document == d)
        starts = np.sort(p.start[mine])
        if n == 0:
            assert len(mine) == 0
            continue
        assert starts[0] == 0 and (np.diff(starts) == capacity - 1).all()
        assert max(p.start[mine] + p.length[mine]) == n
    assert p.windows >= -(-sum(lengths) // capacity)


def test_packed_order_is_deterministic_per_seed_and_epoch(docs: Docs) -> None:
    def first_tokens(epoch: int, seed: int = 7) -> list[int]:
        from lading.lm import LanguageModelLoader, Packed

        data = LanguageModelLoader(docs.corpus, 4, Packed(12), seed=seed, world=World())
        data.set_epoch(epoch)
        return [int(t) for x, _ in data for t in x[:, 0]]

    assert first_tokens(0) == first_tokens(0)
    assert first_tokens(0) != first_tokens(1)
    assert sorted(first_tokens(0)) == sorted(first_tokens(1))  # the same windows, reordered


@pytest.fixture(scope="module")
def mixture_parts(tmp_path_factory: pytest.TempPathFactory) -> list[Docs]:
    tmp = tmp_path_factory.mktemp("mix")
    rng = np.random.default_rng(11)
    every = [[int(n) for n in rng.integers(3, 25, count)] for count in (30, 12, 50)]
    vocabulary = sum(map(sum, every))  # one tokenizer for the three
    parts, first = [], 0
    for name, lengths in zip(("a", "b", "c"), every, strict=True):
        parts.append(Docs(tmp, lengths, name, first_word=first, vocabulary=vocabulary))
        first += sum(lengths)
    return parts


def corpus_of(parts: list[Docs], token: int) -> int:
    """Which corpus a window comes from: the first word-token of a row names it."""
    for i, p in enumerate(parts):
        if token < len(p.doc_of) and p.doc_of[token] >= 0:
            return i
    raise AssertionError(f"token {token} belongs to no corpus")


@pytest.mark.parametrize("mode", ["windows", "packed"])
def test_mixture_proportions_within_one_percent(mixture_parts: list[Docs], mode: str) -> None:
    from lading.lm.windows import TokenMixture

    weights = (0.5, 0.2, 0.3)  # b is small: upsampled several times; c is downsampled
    mixture = TokenMixture({p.corpus: w for p, w in zip(mixture_parts, weights)}, windows=400)
    counts: Counter[int] = Counter()
    per_rank = []
    for rank in range(2):
        data = loader(mixture, mode, batch=8, seq_len=6, world=World(rank, 2), equalize="truncate")
        data.set_epoch(3)
        rows = [row for x, _ in data for row in x.tolist()]
        per_rank.append(len(rows))
        for row in rows:
            counts[corpus_of(mixture_parts, next(t for t in row if t != EOS))] += 1
    assert per_rank[0] == per_rank[1] == 200
    for i, w in enumerate(weights):
        assert abs(counts[i] / 400 - w) <= 0.01, (counts, weights)


def test_mixture_is_deterministic_and_refuses_other_weights(mixture_parts: list[Docs]) -> None:
    from lading.lm.windows import TokenMixture
    from lading.loading import LoaderStateError

    parts = {p.corpus: 1.0 for p in mixture_parts}
    a = loader(TokenMixture(parts), "windows", seq_len=6)
    b = loader(TokenMixture(parts), "windows", seq_len=6)
    assert all(torch.equal(x1, x2) for (x1, _), (x2, _) in zip(a, b))
    other = loader(TokenMixture({**parts, mixture_parts[0].corpus: 2.0}), "windows", seq_len=6)
    with pytest.raises(LoaderStateError, match="weights"):
        other.load_state_dict(a.state_dict())


def test_a_mixture_listing_its_corpora_in_another_order_is_refused_saying_so(
    mixture_parts: list[Docs],
) -> None:
    """A state of ``TokenMixture({a: 1, b: 1})`` loaded by ``TokenMixture({b: 1, a: 1})`` (the
    same corpora, untouched) was refused as "saved on other tokens than token corpus b holds
    now: the corpus was rebuilt from other text", sending the user to rebuild or hunt for a
    changed corpus. The message now says the mixture lists its corpora in another order."""
    from lading.lm.windows import TokenMixture
    from lading.loading import LoaderStateError

    a, b = mixture_parts[0].corpus, mixture_parts[1].corpus
    saved = loader(TokenMixture({a: 1.0, b: 1.0}), "windows", seq_len=6)
    next(iter(saved))
    other = loader(TokenMixture({b: 1.0, a: 1.0}), "windows", seq_len=6)
    with pytest.raises(LoaderStateError) as refused:
        other.load_state_dict(saved.state_dict())
    message = str(refused.value)
    assert "rebuilt" not in message
    assert "another order" in message and message.index(str(a.path)) < message.index(str(b.path))


def test_invalid_combinations_are_refused(docs: Docs) -> None:
    from lading.lm import LanguageModelLoader, Streams
    from lading.lm.windows import TokenMixture

    with pytest.raises(ValueError, match=r"TokenMixture needs independent windows"):
        LanguageModelLoader(TokenMixture({docs.corpus: 1.0}), 2, Streams(12), world=World())
    with pytest.raises(ValueError, match="> 0"):
        TokenMixture({docs.corpus: 0.0})
    # windows= counts windows: 2.5 failed in the loader with "slice indices must be
    # integers", "10" with "'<' not supported", and True was taken as 1 window
    for windows in (2.5, "10", True, 0):
        with pytest.raises(ValueError, match=rf"TokenMixture\(windows={windows!r}\).*int >= 1"):
            TokenMixture({docs.corpus: 1.0}, windows=windows)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="packing_stats"):
        loader(docs.corpus, "windows").packing_stats()


@pytest.fixture(scope="module")
def repetitive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Documents of 40 recurring words: something a tiny model can learn in a few steps."""
    from lading.lm import TokenCorpus

    tmp = tmp_path_factory.mktemp("rep")
    rng = np.random.default_rng(0)
    words = [f"v{i}" for i in range(40)]
    texts = [
        " ".join(rng.choice(words[: int(rng.integers(5, 40))], rng.integers(5, 40)))
        for _ in range(120)
    ]
    src = write(tmp / "rep.txt", "\n\n".join(texts) + "\n")
    return TokenCorpus.build(
        src, tmp / "rep", word_tokenizer(words, tmp / "t.json"), progress=False
    ).path


def gpt_config(corpus: Path, out: Path, **kw: Any) -> Any:
    from lading.lm.train import LMConfig

    fields = dict(
        corpus=corpus, out=out, arch="gpt", batch_size=4, bptt=16, emb=32, layers=1, heads=2,
        dropout=0.0, parallel="none", log_every=1, valid_fraction=0.1, progress=False,
    )  # fmt: skip
    return LMConfig(**{**fields, **kw})


@pytest.mark.e2e  # whole training runs (lading train lm --arch gpt); packed in the slow set
@pytest.mark.parametrize("packed", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_gpt_trains_end_to_end(repetitive: Path, tmp_path: Path, packed: bool) -> None:
    from lading.lm.train import train_lm

    first = train_lm(gpt_config(repetitive, tmp_path / "a", steps=2, packed=packed))
    config = gpt_config(repetitive, tmp_path / "b", steps=40, packed=packed, log_every=20)
    later = train_lm(config)
    assert later["valid_ppl"] < first["valid_ppl"] < 43  # learning; better than uniform
    assert (later["packing"] is not None) == packed


@pytest.mark.slow  # three whole training runs (~9 s: the default run stays under 10 minutes)
@pytest.mark.e2e
def test_gpt_resumed_run_equals_uninterrupted(repetitive: Path, tmp_path: Path) -> None:
    import json

    from lading.lm.train import train_lm

    train_lm(gpt_config(repetitive, tmp_path / "ref", steps=12, packed=True))
    cut = gpt_config(repetitive, tmp_path / "cut", steps=7, packed=True, checkpoint_every=1)
    train_lm(cut)
    train_lm(gpt_config(repetitive, tmp_path / "cut", steps=12, packed=True, resume=True))

    def losses(path: Path) -> dict[int, float]:
        lines = (path / "log.jsonl").read_text().splitlines()
        return {r["step"]: r["loss"] for r in map(json.loads, lines)}

    want, got = losses(tmp_path / "ref"), losses(tmp_path / "cut")
    assert sorted(want) == list(range(1, 13)) and got == want


def test_cli_gpt_flags_reach_the_run(repetitive: Path, tmp_path: Path) -> None:
    import json

    from lading.cli import main

    args = ["train", "lm", "--corpus", str(repetitive), "--out", str(tmp_path / "cli")]
    args += ["--arch", "gpt", "--packed", "--no-document-mask", "--heads", "2", "--emb", "16"]
    args += ["--layers", "1", "--bptt", "8", "--batch-size", "2", "--steps", "3"]
    assert main([*args, "--parallel", "none", "--log-every", "3"]) == 0
    summary = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert summary["arch"] == "gpt" and summary["document_mask"] is False
    assert summary["packing"]["capacity"] == 9 and summary["steps"] == 3


@pytest.mark.parametrize("split", ["blank", "line", "file", "wikiextractor"])
def test_a_crlf_file_gives_the_texts_of_its_lf_twin(tmp_path: Path, split: str) -> None:
    """Windows line ends go as Unix ones do, whatever the split (``"file"``, and WikiExtractor
    bodies, kept the ``\\r`` of every line: the same text saved on Windows tokenized
    differently); a lone CR inside a line is text, kept as elsewhere."""
    from lading.lm.texts import iter_texts

    text = "line one\nline two\n\n  a lone \r CR\nlast\n"
    if split == "wikiextractor":
        text = f'<doc id="1" title="t">\n{text}</doc>\n'
    lf, crlf = tmp_path / "lf.txt", tmp_path / "crlf.txt"
    lf.write_bytes(text.encode())
    crlf.write_bytes(text.replace("\n", "\r\n").encode())
    how = "blank" if split == "wikiextractor" else split
    want = list(iter_texts(lf, how))
    assert list(iter_texts(crlf, how)) == want
    assert all("\r\n" not in t for t in want) and any(" \r CR" in t for t in want)


def test_plain_text_keeps_indentation(tmp_path: Path) -> None:
    from lading.lm.texts import iter_texts

    code = "def f(x):\n    return x\n\n  two spaces\n\tand a tab\n   \nlast\r\n"
    path = tmp_path / "code.txt"
    path.write_bytes(code.encode())
    assert list(iter_texts(path)) == [
        "def f(x):\n    return x",
        "  two spaces\n\tand a tab",
        "last",
    ]
    assert list(iter_texts(path, split="line")) == [
        "def f(x):", "    return x", "  two spaces", "\tand a tab", "last"
    ]  # fmt: skip


BAD_TEXT = b"good line\nnext\n\nbad \xff line\nsame doc\n\nlast\n"
# what each split keeps of BAD_TEXT under on_error="skip": the document holding line 4 goes
KEPT = {"blank": ["good line\nnext", "last"], "line": ["good line", "next", "same doc", "last"]}


def test_an_empty_source_is_a_source_error_naming_it(tmp_path: Path) -> None:
    """A review: a source of no documents raised a bare ValueError, not a LadingError."""
    from lading.errors import SourceError
    from lading.lm import TokenCorpus

    empty = write(tmp_path / "empty.txt", "\n\n")
    tok = word_tokenizer(["a"], tmp_path / "t.json")
    with pytest.raises(SourceError, match=r"empty\.txt: holds no documents"):
        TokenCorpus.build(empty, tmp_path / "corpus", tok, progress=False)
    assert not (tmp_path / "corpus" / "meta.json").exists()


@pytest.mark.parametrize("split", ["blank", "line", "file"])
def test_invalid_utf8_in_plain_text_is_named_with_the_fix_or_its_document_skipped(
    tmp_path: Path, split: str
) -> None:
    """A line of invalid UTF-8 in a text file: named with the fix (it named no fix), or, with
    on_error="skip", the document it is in (its paragraph, its line, its file) is skipped and
    counted as a malformed JSONL record is (it raised under skip)."""
    from lading.errors import SourceError
    from lading.lm.texts import Skips, iter_texts

    path = tmp_path / "bad.txt"
    path.write_bytes(BAD_TEXT)
    with pytest.raises(SourceError) as caught:
        list(iter_texts(path, split))
    assert str(caught.value) == (
        f"line 4 of {path}: invalid UTF-8 at byte 4 of the line (b'\\xff'); re-encode the file "
        "as UTF-8, or pass on_error='skip' to skip the document it is in"
    )
    skipped = Skips()
    assert list(iter_texts(path, split, on_error="skip", skipped=skipped)) == KEPT.get(split, [])
    assert skipped == Skips(
        1, [f"line 4 of {path}: invalid UTF-8 at byte 4 of the line (b'\\xff')"]
    )


def test_invalid_utf8_in_a_wikiextractor_document_skips_that_document(tmp_path: Path) -> None:
    from lading.lm.texts import Skips, iter_texts

    path = tmp_path / "wiki_00"
    path.write_bytes(
        b'<doc id="1">\none\n</doc>\n<doc id="2">\nbad \xff\n</doc>\n<doc id="3">\nthree\n</doc>\n'
    )
    skipped = Skips()
    assert list(iter_texts(path, on_error="skip", skipped=skipped)) == ["one", "three"]
    assert skipped.count == 1 and skipped.examples[0].startswith(f"line 5 of {path}: invalid")


def test_lm_build_skips_a_document_of_invalid_utf8_in_one_process_and_in_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from conftest import word_tokenizer
    from lading.cli import main
    from lading.lm import TokenCorpus

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text('{"text": "same line"}\n' * 40)  # (cut; a text file: whole)
    (src / "bad.txt").write_bytes(BAD_TEXT)
    tok = word_tokenizer(["good", "line", "next", "same", "doc", "last"], tmp_path / "t.json")
    args = ["lm", "build", str(src), str(tmp_path / "c"), "--tokenizer", str(tok), "--quiet"]
    assert main(args) == 2
    said = capsys.readouterr().err
    assert "line 4 of" in said and "re-encode the file as UTF-8, or pass --on-error skip" in said
    assert main([*args, "--on-error", "skip"]) == 0
    assert "skipped 1 malformed record(s); first: line 4 of" in capsys.readouterr().out
    one = TokenCorpus.open(tmp_path / "c")
    shards = [*args[:3], str(tmp_path / "s"), *args[4:], "--on-error", "skip"]
    for i in range(2):
        assert main([*shards, "--shard", f"{i}/2"]) == 0
    assert main(["lm", "merge", str(tmp_path / "s")]) == 0
    merged = TokenCorpus.open(tmp_path / "s")
    assert len(one) == len(merged) == 42 and one.meta["skipped"] == merged.meta["skipped"] == 1


@pytest.mark.parametrize("mode", ["windows", "packed"])
def test_unshuffled_mixture_reads_the_same_batches_every_epoch(
    mixture_parts: list[Docs], mode: str
) -> None:
    """``shuffle=False`` gives the same batches each epoch (it drew other windows, in another
    order, every epoch), as an unshuffled DataLoader does; the seed still picks which windows
    a down-sampled corpus gives, so two seeds differ (what the Trainer's seed check sees)."""
    from lading.lm import LanguageModelLoader, Packed, Windows
    from lading.lm.windows import TokenMixture

    weights = {p.corpus: w for p, w in zip(mixture_parts, (0.5, 0.2, 0.3))}
    shape = {"windows": Windows, "packed": Packed}[mode]

    def rows(seed: int, shuffle: bool, epochs: int) -> list[list[list[int]]]:
        made = LanguageModelLoader(
            TokenMixture(weights, windows=120), 4, shape(6), shuffle=shuffle, seed=seed,
            world=World(),
        )  # fmt: skip
        return [[x.tolist() for x, _ in made] for _ in range(epochs)]

    plain = rows(7, False, 3)
    assert plain[0] == plain[1] == plain[2] and plain[0]
    assert rows(8, False, 1)[0] != plain[0]  # the seed picks the windows
    shuffled = rows(7, True, 2)
    assert shuffled[0] != shuffled[1]  # shuffled, each epoch draws anew


JSON_LINES = '{"id": "12", "url": "https://w/12", "text": "Anarchism is"}\n{"text": "Autism is"}\n'


@pytest.mark.parametrize(
    "name", ["c4-train.00000-of-01024.json.gz", "owt.ndjson", "owt.ndjson.zst", "wiki_00"]
)
def test_json_lines_of_any_name_are_records(tmp_path: Path, name: str) -> None:
    """JSON lines named as C4 ships them (``.json.gz``), ``.ndjson`` (a store build reads it
    as JSONL) or with no suffix (WikiExtractor ``--json``'s ``text/AA/wiki_00``) give each
    record's text: they were read as plain text, one document of JSON syntax (keys, urls)
    tokenized into the corpus, with no error."""
    import gzip

    from lading.lm.texts import iter_texts

    path = tmp_path / name
    body = JSON_LINES.encode()
    if name.endswith(".gz"):
        body = gzip.compress(body)
    elif name.endswith(".zst"):
        zstandard = pytest.importorskip("zstandard")
        body = zstandard.ZstdCompressor().compress(body)
    path.write_bytes(body)
    assert list(iter_texts(path)) == ["Anarchism is", "Autism is"]
    assert list(iter_texts(tmp_path)) == ["Anarchism is", "Autism is"]  # in a folder too


def test_plain_text_that_only_looks_like_json_stays_text(tmp_path: Path) -> None:
    """A text file whose first line opens with a brace but is no JSON object (code, a
    template) is plain text, as before."""
    from lading.lm.texts import iter_texts

    path = tmp_path / "code"
    path.write_text("{ not json }\nsecond line\n\n[1, 2]\n")
    assert list(iter_texts(path)) == ["{ not json }\nsecond line", "[1, 2]"]


def test_json_lines_without_a_suffix_build_in_shards_as_in_one_process(tmp_path: Path) -> None:
    """A WikiExtractor ``--json`` folder (files with no suffix) builds in shards the corpus a
    one-process build makes, each record's text a document."""
    from lading.lm import TokenCorpus

    words = ["alpha", "beta", "gamma", "delta"]
    tok = word_tokenizer(words, tmp_path / "t.json")
    texts = [f"{words[i % 4]} {words[(i + 1) % 4]}" for i in range(40)]
    lines = "".join(json.dumps({"title": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    write(tmp_path / "text" / "AA" / "wiki_00", lines)
    write(tmp_path / "text" / "AB" / "wiki_00", lines)
    one = TokenCorpus.build(tmp_path / "text", tmp_path / "one", tok, progress=False)
    assert len(one) == 80
    assert one.document(0).tolist() == [words.index("alpha") + 2, words.index("beta") + 2, 0]
    for i in range(3):
        TokenCorpus.build_shard(tmp_path / "text", tmp_path / "s", (i, 3), tok, progress=False)
    merged = TokenCorpus.merge(tmp_path / "s")
    assert [merged.document(d).tolist() for d in range(80)] == [
        one.document(d).tolist() for d in range(80)
    ]


def test_text_outside_wikiextractor_blocks_is_named_or_counted(tmp_path: Path) -> None:
    """Lines between WikiExtractor's ``<doc>`` blocks (a cut or concatenated file) are no
    document's: a SourceError names the first with the fix, or, under on_error="skip", each
    run of them is counted (they were dropped without a word)."""
    from lading.errors import SourceError
    from lading.lm.texts import Skips, iter_texts

    path = tmp_path / "wiki_00"
    path.write_text(
        '<doc id="1" title="A">\nAlpha text.\n</doc>\n\nstray one\nstray two\n'
        '<doc id="2" title="B">\nBeta text.\n</doc>\nstray three\n'
    )
    with pytest.raises(SourceError, match=r"line 5 of .*wiki_00: text outside a <doc> block"):
        list(iter_texts(path))
    skipped = Skips()
    assert list(iter_texts(path, on_error="skip", skipped=skipped)) == [
        "Alpha text.",
        "Beta text.",
    ]
    assert skipped.count == 2 and skipped.examples[0].startswith(f"line 5 of {path}: text outside")


@pytest.mark.parametrize(
    ("text", "line", "why"),
    [
        (
            '<doc id="1" title="A">\nAlpha.\n<doc id="2" title="B">\nBeta.\n</doc>\n',
            3,
            r"<doc> inside the <doc> of line 1",
        ),
        (
            '<doc id="2" title="B">\nBeta.\n</doc>\n<doc id="1" title="A">\nAlpha.\n',
            4,
            "<doc> has no </doc> before the end of the file",
        ),
    ],
    ids=["nested", "cut"],
)
def test_a_cut_wikiextractor_block_is_named_with_the_fix_or_counted(
    tmp_path: Path, text: str, line: int, why: str
) -> None:
    """A review: a ``<doc>`` block cut or nested (a truncated or joined file) stopped the
    build under on_error="skip" too, with no fix named, where a cut JSONL line is counted.
    Raised naming line and fix; under "skip" the cut block is counted and the rest read."""
    from lading.errors import SourceError
    from lading.lm.texts import Skips, iter_texts

    path = tmp_path / "wiki_00"
    path.write_text(text)
    with pytest.raises(SourceError, match=rf"line {line} of .*wiki_00: {why}.*on_error='skip'"):
        list(iter_texts(path))
    skipped = Skips()
    assert list(iter_texts(path, on_error="skip", skipped=skipped)) == ["Beta."]
    assert skipped.count == 1 and skipped.examples[0].startswith(f"line {line} of {path}: ")


def test_a_text_file_opening_with_a_json_line_is_read_as_text(tmp_path: Path) -> None:
    """A review: notes.txt whose first line is a JSON object was taken for JSON records (its
    prose "no text field", or under on_error="skip" all of it left out). A name that says
    plain text is read as text; a file of no suffix is still sniffed (WikiExtractor --json's
    wiki_00)."""
    from lading.lm.texts import iter_texts

    notes = tmp_path / "notes.txt"
    notes.write_text('{"name": "config", "version": 2}\nFirst paragraph.\n\nSecond one.\n')
    assert list(iter_texts(notes)) == [
        '{"name": "config", "version": 2}\nFirst paragraph.',
        "Second one.",
    ]
    wiki = tmp_path / "wiki_00"
    wiki.write_text('{"id": "1", "text": "Alpha."}\n{"id": "2", "text": "Beta."}\n')
    assert list(iter_texts(wiki)) == ["Alpha.", "Beta."]


def test_the_files_of_hidden_folders_are_not_documents(tmp_path: Path) -> None:
    """A review: a dataset repository cloned with git fed its ``.git`` hooks and config into
    the corpus (125 of 130 documents), and a notebook's ``.ipynb_checkpoints`` copy was read
    twice: only a file's own name was checked for a leading dot. Hidden folders are left out
    with all below them, at any depth; the corpus reads only the data (and its sharded build
    lists the same files)."""
    from lading.lm import TokenCorpus
    from lading.lm.texts import folder_files

    folder = tmp_path / "repo"
    write(folder / "train.txt", "one two\n\nthree four\n")
    write(folder / "sub" / "more.txt", "one four\n")
    write(folder / ".git" / "hooks" / "pre-commit.sample", "#!/bin/sh\n\necho two\n")
    write(folder / ".git" / "config", "[core]\n")
    write(folder / ".ipynb_checkpoints" / "train-checkpoint.txt", "one two\n")
    write(folder / "sub" / ".cache" / "log.txt", "three\n")
    write(folder / ".notes.txt", "four\n")
    assert [p.relative_to(folder).as_posix() for p in folder_files(folder)] == [
        "sub/more.txt", "train.txt"
    ]  # fmt: skip
    tok = word_tokenizer(["one", "two", "three", "four"], tmp_path / "t.json")
    corpus = TokenCorpus.build(folder, tmp_path / "corpus", tok, progress=False)
    assert len(corpus) == 3


@pytest.mark.parametrize("kind", ["parquet", "xz", "utf-16"])
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_file_that_is_not_text_is_refused_naming_what_it_looks_like(
    tmp_path: Path, kind: str, on_error: str
) -> None:
    """A review: a parquet file (or an ``.xz`` one, a compression lading does not read) was
    read as plain text; the error suggested ``on_error='skip'``, under which its runs of valid
    UTF-8 became 106 documents with NUL bytes in them. Refused in both modes, naming the
    file, what it looks like and the fix."""
    import lzma

    from lading.errors import SourceError
    from lading.lm import TokenCorpus

    if kind == "parquet":
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        path = tmp_path / "b.parquet"
        pq.write_table(pa.table({"text": ["one two"] * 5}), path, compression="none")
        fix = "build a lading store from it"
    elif kind == "xz":
        path = tmp_path / "c.txt.xz"
        path.write_bytes(lzma.compress(b"one two\n\ntwo one\n"))
        fix = r"decompress it \(xz -d\)"
    else:  # Notepad's "Unicode": it was named a binary file to leave out (a diff review)
        path = tmp_path / "notes.txt"
        path.write_bytes("one two\n\ntwo one\n".encode("utf-16"))
        fix = "text saved as UTF-16: re-encode it as UTF-8"
    tok = word_tokenizer(["one", "two"], tmp_path / "t.json")
    with pytest.raises(SourceError, match=rf"{path.name}: is not text .*{fix}"):
        TokenCorpus.build(path, tmp_path / "corpus", tok, on_error=on_error, progress=False)


def test_a_folders_readme_and_licence_are_not_documents(tmp_path: Path) -> None:
    """A review: `lading lm build` of WikiText-2's folder took its README for 2 documents."""
    from lading.lm import TokenCorpus

    folder = tmp_path / "wikitext"
    write(folder / "train.txt", "one two\n\nthree four\n")
    write(folder / "README", "About this dataset\n\nIts licence\n")
    write(folder / "LICENSE.txt", "licence words\n")
    write(folder / "sub" / "README.md", "# notes\n")
    write(folder / "sub" / "guide.md", "one four\n")  # a corpus of markdown is one: read
    tok = word_tokenizer(["one", "two", "three", "four"], tmp_path / "t.json")
    corpus = TokenCorpus.build(folder, tmp_path / "corpus", tok, progress=False)
    assert len(corpus) == 3
