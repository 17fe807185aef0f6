"""The LM loader's constructor: one options object per mode, and every old keyword refused.

``LanguageModelLoader(corpus, batch_size, sequence, ...)`` takes the shape of a sequence as one
of :class:`Streams`, :class:`Windows` or :class:`Packed`; each holds only what its mode reads,
so a field that meant something in one mode only cannot be passed to another. The batches are
those of the keyword constructor they replace: the digests below were computed by it (the
commit before this test) on the same corpus, for every mode and the options that change them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import word_corpus, write
from lading.errors import LoaderStateError
from lading.lm import LanguageModelLoader, Packed, Streams, TokenCorpus, TokenMixture, Windows
from lading.world import World

pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> TokenCorpus:
    """37 documents of 3..40 words (the corpus of test_lm.py)."""
    return word_corpus(
        tmp_path_factory.mktemp("options"), docs=37, lengths=(3, 40), words=500, seed=0
    )


def digest(loader: LanguageModelLoader) -> str:
    """Every tensor (and ``max_seqlen``) of epochs 0 and 1, hashed in order."""
    h = hashlib.sha256()
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        for batch in loader:
            for t in batch:
                h.update(str(t).encode() if isinstance(t, int) else np.asarray(t).tobytes())
    return h.hexdigest()[:16]


# (options, the digest the keyword constructor gave for the same settings), batch 3, rank 1 of 2;
# windows and packed computed again when the Feistel round function changed (their orders did)
SAME_BATCHES = {
    "streams": (Streams(7, jitter=(3, 9), backwards=True, chunk_batches=2), "23a799f2ebebf552"),
    "streams-fastai": (Streams(bptt=6), "b6991ca95f190bf6"),
    "windows": (Windows(8, backwards=True), "d946cc705e47a402"),
    "windows-boundaries": (
        Windows(8, boundaries=True, eod_mask_loss=False),
        "96bb702ab92c9669",
    ),
    "packed": (Packed(16), "a258798f14888dcf"),
    "packed-boundaries": (Packed(seq_len=16, boundaries=True), "6889c563b2568af9"),
}
SEEDS = {"streams": 5, "streams-fastai": 1, "windows": 2, "windows-boundaries": 2}


@pytest.mark.parametrize("case", sorted(SAME_BATCHES))
def test_options_give_the_batches_of_the_keyword_form(corpus: TokenCorpus, case: str) -> None:
    sequence, want = SAME_BATCHES[case]
    seed = SEEDS.get(case, 3)
    loader = LanguageModelLoader(corpus, 3, sequence, seed=seed, world=World(1, 2))
    assert loader.sequence is sequence and loader.mode == sequence.mode
    assert digest(loader) == want


def test_the_loader_reads_its_mode_from_the_options(corpus: TokenCorpus) -> None:
    modes = {
        LanguageModelLoader(corpus, 2, seq, world=World()).mode
        for seq in (Streams(5), Windows(5), Packed(5))
    }
    assert modes == {"streams", "windows", "packed"}


def test_an_unknown_keyword_is_pythons_error(corpus: TokenCorpus) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'shufle'"):
        LanguageModelLoader(corpus, 4, Streams(8), shufle=False)  # type: ignore[call-arg]


def test_drop_last_is_refused_naming_ladings_arguments(corpus: TokenCorpus) -> None:
    with pytest.raises(TypeError, match=r"drop_partial_batch=True.*equalize='truncate'"):
        LanguageModelLoader(corpus, 2, Streams(5), drop_last=True, world=World())


@pytest.mark.parametrize("sequence", [70, "streams", None, {"bptt": 70}])
def test_a_sequence_that_is_not_an_options_object(corpus: TokenCorpus, sequence: Any) -> None:
    with pytest.raises(TypeError, match=r"sequence= must be Streams\(\.\.\.\), Windows"):
        LanguageModelLoader(corpus, 8, sequence, world=World())


def test_the_keywords_after_the_sequence_are_keyword_only(corpus: TokenCorpus) -> None:
    with pytest.raises(TypeError):  # shuffle, seed and the rest are keyword-only
        LanguageModelLoader(corpus, 8, Streams(70), "fastai", True)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        (Streams, "boundaries"),
        (Streams, "eod_mask_loss"),
        (Streams, "seq_len"),
        (Windows, "bptt"),
        (Windows, "jitter"),
        (Windows, "chunk_batches"),
        (Packed, "backwards"),
        (Packed, "jitter"),
        (Packed, "chunk_batches"),
    ],
)
def test_a_mode_has_no_field_it_does_not_use(options: type, field: str) -> None:
    with pytest.raises(TypeError, match=field):
        options(8, **{field: 1})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Streams(0), r"Streams\(bptt=0\): bptt must be an int >= 1"),
        (lambda: Streams(True), r"bptt must be an int >= 1"),
        (lambda: Streams(8, jitter=(6, 4)), r"jitter must be 'fastai', None or \(low, high\)"),
        # lengths are whole tokens: (2.5, 4) drew rows of 2 (numpy truncates the low end),
        # and (True, 3) read as (1, 3); both were taken without a word
        (lambda: Streams(8, jitter=(2.5, 4)), r"jitter=\(2.5, 4\).*ints"),
        (lambda: Streams(8, jitter=(2, 4.9)), r"jitter=\(2, 4.9\).*ints"),
        (lambda: Streams(8, jitter=(True, 3)), r"jitter=\(True, 3\).*ints"),
        (lambda: Streams(8, chunk_batches=0), r"chunk_batches must be an int >= 1"),
        (lambda: Windows(-1), r"Windows\(seq_len=-1\): seq_len must be an int >= 1"),
        (lambda: Packed(2.5), r"seq_len must be an int >= 1"),
        (lambda: Windows(8, boundaries="yes"), r"boundaries must be True or False"),
    ],
)
def test_options_check_themselves(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_options_are_frozen_values() -> None:
    options = Streams(70)
    with pytest.raises(AttributeError):
        options.bptt = 35  # type: ignore[misc]
    assert options == Streams(bptt=70, jitter="fastai") and hash(options) == hash(Streams(70))


def test_streams_refuse_a_mixture(corpus: TokenCorpus) -> None:
    mixture = TokenMixture({corpus.path: 1.0})
    with pytest.raises(ValueError, match=r"TokenMixture needs independent windows: pass Windows"):
        LanguageModelLoader(mixture, 2, Streams(5), world=World())
    assert len(LanguageModelLoader(mixture, 2, Windows(5), world=World())) > 0


def test_a_mixture_refuses_corpora_of_another_tokenizer(
    corpus: TokenCorpus, tmp_path: Path
) -> None:
    """Ids mean words only under their tokenizer: a corpus of another vocabulary (here 50
    words: 52 ids against 502) is refused, naming both; one of the same tokenizer, other
    documents, mixes."""
    other = word_corpus(tmp_path / "fifty", docs=9, lengths=(3, 9), words=50, seed=1)
    with pytest.raises(ValueError, match=r"tokenized otherwise \(vocabularies of 502 and 52") as e:
        TokenMixture({corpus.path: 0.5, other.path: 0.5})
    assert str(corpus.path.resolve()) in str(e.value) and "fifty" in str(e.value)
    same = word_corpus(tmp_path / "same", docs=9, lengths=(3, 9), words=500, seed=2)
    mixture = TokenMixture({corpus.path: 0.5, same.path: 0.5})
    assert len(LanguageModelLoader(mixture, 2, Windows(5), world=World())) > 0


def test_a_mixture_compares_vocabularies_not_tokenizer_files(tmp_path: Path) -> None:
    """One vocabulary written twice (a post-processor added, as a Hugging Face tokenizer made
    from the file adds one: another SHA-256, the same ids) mixes; the same size with two
    tokens' ids swapped is refused, naming a token and both ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"<|endoftext|>": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(20)}}
    swapped = {**vocab, "w0": vocab["w1"], "w1": vocab["w0"]}
    text = write(tmp_path / "t.txt", "w0 w1 w2\n\nw3 w4 w5 w6\n")
    corpora = []
    for name, ids, post in (
        ("plain", vocab, False),
        ("post", vocab, True),
        ("swap", swapped, False),
    ):
        tok = Tokenizer(models.WordLevel(ids, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        if post:
            tok.post_processor = processors.TemplateProcessing(single="$A", special_tokens=[])
        tok.save(str(tmp_path / f"{name}.json"))
        corpora.append(TokenCorpus.build(text, tmp_path / name, tmp_path / f"{name}.json"))
    plain, post, swap = corpora
    assert plain.meta["recipe"]["tokenizer"] != post.meta["recipe"]["tokenizer"]
    assert len(LanguageModelLoader(TokenMixture({plain: 1, post: 1}), 1, Windows(3))) > 0
    with pytest.raises(ValueError, match=r"'w0' is id 2 against 3"):
        TokenMixture({plain: 1, swap: 1})
    extra = {**{k: v for k, v in vocab.items() if k != "w19"}, "w99": 21}  # (as many ids)
    tok = Tokenizer(models.WordLevel(extra, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "extra.json"))
    more = TokenCorpus.build(text, tmp_path / "extra", tmp_path / "extra.json")
    with pytest.raises(
        ValueError,
        match=r"'w19' is in the first's vocabulary \(id 21\), "
        r"not the second's",
    ):  # fmt: skip  (was: "is id 21 against None")
        TokenMixture({plain: 1, more: 1})


def test_the_options_survive_a_worker(corpus: TokenCorpus) -> None:
    def make(workers: int) -> LanguageModelLoader:
        sequence = Packed(8, boundaries=True)
        return LanguageModelLoader(corpus, 2, sequence, world=World(), seed=1, num_workers=workers)

    direct = [b.input_ids.tolist() for b in make(0)]
    assert [b.input_ids.tolist() for b in make(1)] == direct


def test_the_loader_method_is_one_keyword_now(corpus: TokenCorpus) -> None:
    moved = r"is now LanguageModelLoader\(\.\.\., num_workers=2\)"
    with pytest.raises(AttributeError, match=moved):
        LanguageModelLoader(corpus, 2, Streams(5), world=World()).loader(num_workers=2)


def test_the_names_are_exported() -> None:
    import lading.lm
    import lading.lm.modes

    assert {"Packed", "Streams", "Windows"} <= set(lading.lm.__all__)
    for name in ("Packed", "Streams", "Windows"):
        assert getattr(lading.lm, name) is getattr(lading.lm.modes, name)


@pytest.mark.parametrize("sequence", [Windows(6), Packed(6)])
def test_a_window_state_saved_under_bptt_still_loads(corpus: TokenCorpus, sequence: Any) -> None:
    """Window modes saved their window length under "bptt" in the state's fingerprint; it is
    "seq_len" now, and a state of before loads as the same position."""

    def make() -> LanguageModelLoader:
        return LanguageModelLoader(corpus, 2, sequence, world=World(), seed=4)

    head = make()
    head.set_epoch(1)
    for _ in zip(range(3), head):
        pass
    state = head.state_dict()
    assert state["fingerprint"]["seq_len"] == 6 and "bptt" not in state["fingerprint"]
    old = {**state, "fingerprint": {**state["fingerprint"]}}
    old["fingerprint"]["bptt"] = old["fingerprint"].pop("seq_len")
    resumed, want = make(), make()
    resumed.load_state_dict(old)
    want.load_state_dict(state)
    assert [b[0].tolist() for b in resumed] == [b[0].tolist() for b in want]
    other = {**old, "fingerprint": {**old["fingerprint"], "bptt": 7}}
    with pytest.raises(LoaderStateError, match="seq_len=7"):
        make().load_state_dict(other)


@pytest.mark.parametrize("sequence", [Windows(6), Packed(6), Streams(6)])
def test_a_state_of_the_first_window_order_is_refused(corpus: TokenCorpus, sequence: Any) -> None:
    """A state saved before the Feistel round function changed (no ``window_order`` in its
    fingerprint) names windows this lading draws elsewhere in the epoch: a window mode
    refuses it saying why and what to do (it resumed to other batches, some read twice,
    some never); streams, whose order is no Feistel order, resume it as before."""

    def make() -> LanguageModelLoader:
        return LanguageModelLoader(corpus, 2, sequence, world=World(), seed=4)

    head = make()
    batches = iter(head)
    for _ in range(3):
        next(batches)
    state = head.state_dict()
    rest = [b[0].tolist() for b in batches]
    assert ("window_order" in state["fingerprint"]) == (not isinstance(sequence, Streams))
    old = {**state, "fingerprint": dict(state["fingerprint"])}
    old["fingerprint"].pop("window_order", None)
    resumed = make()
    if isinstance(sequence, Streams):
        resumed.load_state_dict(old)
        assert [b[0].tolist() for b in resumed] == rest
        return
    with pytest.raises(LoaderStateError, match=r"other orders.*set_epoch"):
        resumed.load_state_dict(old)
    resumed.load_state_dict(state)
    assert [b[0].tolist() for b in resumed] == rest
    # saved at its epoch's end (a framework's checkpoint there), no order of it is left to
    # read: it resumes at the next epoch, as today's state does
    ended = head.state_dict()
    old_end = {**ended, "fingerprint": dict(ended["fingerprint"])}
    del old_end["fingerprint"]["window_order"]
    today, before = make(), make()
    today.load_state_dict(ended)
    before.load_state_dict(old_end)
    assert [b[0].tolist() for b in before] == [b[0].tolist() for b in today]
    assert before.state_dict()["epoch"] == ended["epoch"] + 1


def test_a_state_of_other_tokens_is_refused_the_same_corpus_resumes(tmp_path: Path) -> None:
    """A corpus rebuilt at the same path with other words (same documents, same token count:
    every size in the fingerprint agrees) refuses a state saved on the old tokens, naming the
    corpus, both content ids and the fix; the same corpus reopened resumes."""
    old = word_corpus(tmp_path, docs=12, lengths=(3, 20), words=300, seed=0)
    loader = LanguageModelLoader(old, 2, Streams(5), seed=3)
    batches = iter(loader)
    next(batches)
    state = loader.state_dict()
    same = LanguageModelLoader(TokenCorpus.open(old.path), 2, Streams(5), seed=3)
    same.load_state_dict(state)  # the same tokens: resumes
    assert np.array_equal(next(iter(same))[0].numpy(), next(batches)[0].numpy())
    src = tmp_path / "docs.txt"
    src.write_text(src.read_text().replace("w1", "w2"))  # other words, the same lengths
    new = TokenCorpus.build(src, old.path, tmp_path / "t.json", progress=False)
    assert new.content_id != old.content_id and new.n_tokens == old.n_tokens
    assert len(new) == len(old)
    resumed = LanguageModelLoader(new, 2, Streams(5), seed=3)
    with pytest.raises(LoaderStateError) as refused:
        resumed.load_state_dict(state)
    message = str(refused.value)
    assert str(old.path) in message and old.content_id in message and new.content_id in message
    assert "start the epoch without the state" in message
    before = {k: v for k, v in state["fingerprint"].items() if k != "content"}
    resumed.load_state_dict({**state, "fingerprint": before})  # saved before content was kept


def test_a_setting_left_at_its_default_is_named_so_when_a_resume_is_refused(
    corpus: TokenCorpus,
) -> None:
    """A fingerprint records ``shuffle_documents`` only when it is off: a state saved with
    the default, loaded with it off, was refused as "loader state has shuffle_documents=None",
    a value the user never gave."""
    saved = LanguageModelLoader(corpus, 2, Windows(8), seed=1)
    next(iter(saved))
    other = LanguageModelLoader(corpus, 2, Windows(8, shuffle_documents=False), seed=1)
    with pytest.raises(LoaderStateError) as refused:
        other.load_state_dict(saved.state_dict())
    text = str(refused.value)
    assert "shuffle_documents not set (the default), this loader False" in text
    assert "None" not in text


@pytest.mark.parametrize("sequence", [Streams(5), Windows(6), Packed(6)])
def test_a_state_of_other_documents_of_the_same_count_is_refused(
    corpus: TokenCorpus, sequence: Any
) -> None:
    """``documents=`` selects a split: a state saved reading documents 0-29 was resumed by a
    loader reading 1-30 (or 0-29 in another base order) without a word, since the
    fingerprint kept their count only, and the rest of its epoch read other windows (some of
    the saved split never, some of the other split's). Refused now, naming ``documents=``;
    the same selection, or the whole corpus given as ``documents=range(n)``, resumes."""
    n = len(corpus)

    def make(documents: Any) -> LanguageModelLoader:
        return LanguageModelLoader(corpus, 2, sequence, seed=2, documents=documents)

    saved = make(list(range(30)))
    batches = iter(saved)
    next(batches)
    state = saved.state_dict()
    rest = [b[0].tolist() for b in batches]
    for other in (list(range(1, 31)), list(range(29, -1, -1))):
        with pytest.raises(LoaderStateError, match=r"documents=.*of the saved run"):
            make(other).load_state_dict(state)
    same = make(np.arange(30))
    same.load_state_dict(state)
    assert [b[0].tolist() for b in same] == rest
    whole = make(None)
    next(iter(whole))
    make(range(n)).load_state_dict(whole.state_dict())  # all documents, in their order
    old = {**state, "fingerprint": dict(state["fingerprint"])}
    old["fingerprint"].pop("documents_digest", None)  # saved before the digest was kept
    resumed = make(list(range(30)))
    resumed.load_state_dict(old)
    assert [b[0].tolist() for b in resumed] == rest


@pytest.mark.parametrize("sequence", [Streams(5), Windows(6), Packed(6)])
def test_a_damaged_state_is_refused_naming_the_field(corpus: TokenCorpus, sequence: Any) -> None:
    """A state whose position is no position of this epoch (a checkpoint damaged or edited:
    a negative count, a base of positions past the epoch's end) was taken as it stood: a
    negative ``batches`` failed at the next batch with numpy's "boolean index did not match",
    a negative ``epoch`` with "expected non-negative integer", and a base running past the
    epoch with "cycle walking did not converge" (windows) or an epoch of millions of
    positions read round and round a 600-token corpus (streams). Each is refused when
    loaded, naming the field, what it holds and what it may hold."""
    import copy

    head = LanguageModelLoader(corpus, 2, sequence, seed=3)
    next(iter(head))
    state = head.state_dict()
    damaged: list[tuple[dict[str, Any], str]] = [
        ({"batches": -3}, r"batches=-3"),
        ({"epoch": -1}, r"epoch=-1"),
        ({"segment": -2}, r"segment=-2"),
        ({"batches": "two"}, r"batches='two'"),
        ({"segment": 1, "base": {"starts": [0], "stops": [10**7]}}, r"up to 10,000,000.* 0 to"),
        ({"segment": 1, "base": {"starts": [-4], "stops": [3]}}, r"base=.*-4"),
        ({"segment": 1, "base": {"starts": [0, 5], "stops": [3]}}, r"base"),
    ]
    for change, said in damaged:
        bad = copy.deepcopy(state)
        bad.update(change)
        with pytest.raises(LoaderStateError, match=said):
            LanguageModelLoader(corpus, 2, sequence, seed=3).load_state_dict(bad)
    fine = LanguageModelLoader(corpus, 2, sequence, seed=3)
    fine.load_state_dict(state)  # the state itself resumes, its ints of numpy's too
    assert fine.position().batches == 1
    fine.load_state_dict({**state, "batches": np.int64(1), "epoch": np.int32(0)})
    assert fine.position().batches == 1
