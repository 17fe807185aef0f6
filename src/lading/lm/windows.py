"""What a window-mode epoch is made of: stream windows, packed windows, or a weighted mixture.

A *window source* numbers the windows of one epoch ``0 … n-1`` and fills window ``w`` (its
``seq_len + 1`` tokens and, per token, its document in the row: see
:mod:`lading.lm.boundaries`). The loader core plans those ``n`` positions over the ranks,
shuffles them, checkpoints and resumes them; a workload only says what a position holds.

- :class:`StreamWindows`: ``seq_len + 1`` tokens of the epoch stream from ``w * seq_len``
  (consecutive windows share one token, so every pair is predicted once);
- :class:`PackedWindows`: window ``w`` of a best-fit-decreasing :class:`Packing`
  (these two, one corpus's readers, are in :mod:`lading.lm.readers`);
- :class:`MixedWindows`: a :class:`TokenMixture`'s epoch. Its ``n`` positions hold
  ``count[i]`` windows of corpus ``i`` (largest-remainder rounding of ``weight[i] * n``),
  spread evenly over the positions (:func:`smooth_schedule`); the ``j``-th of corpus ``i`` is
  that corpus's window ``feistel(j mod n_i)`` in a permutation keyed by ``(epoch, i, j //
  n_i)``, a subsample without repeats when the corpus has more windows than its count, whole
  passes plus one subsample when it has fewer. The loader's shuffled order then mixes the
  corpora: the realised proportions over an epoch are the counts (within ``1 / n`` of the
  weights), and over short runs at least as even as a uniform shuffle. With ``shuffle=False``
  the windows are those drawn for epoch 0, every epoch, in the schedule's order: the same
  batches each epoch (which windows a corpus gives still depends on the seed).
"""

from __future__ import annotations

import functools
import numbers
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.errors import EmptyEpochError
from lading.lm.corpus import TokenCorpus
from lading.lm.narrow import all_documents
from lading.lm.packing import Packing, pack
from lading.lm.readers import PackedWindows, StreamWindows, WindowReader, where_of
from lading.lm.stream import EpochStream
from lading.loading.order import Salt, feistel_keyed, feistel_value, round_keys_of


def window_reads(
    windows: WindowReader, order: npt.NDArray[np.int64], width: int
) -> npt.NDArray[np.int64] | None:
    """``[k, 3]``: (corpus, first token, end token) of the token ranges windows ``order`` of
    ``windows`` read (``width`` tokens a window), computed with numpy from the plan; None for
    a window source that cannot say."""
    found = indexed_window_reads(windows, order, width)
    return None if found is None else found[1]


def indexed_window_reads(
    windows: WindowReader, order: npt.NDArray[np.int64], width: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """As :func:`window_reads`, with which window of ``order`` (its index there) reads each
    range: the reads of many batches' windows at once (a remote corpus's plan of an epoch)."""
    order = np.asarray(order, dtype=np.int64)
    if isinstance(windows, StreamWindows):
        found = windows.stream.pieces(order * windows.bptt, width)
        which = found[:, 0].copy()
        found[:, 0] = 0
        return which, found
    if isinstance(windows, PackedWindows):
        p = windows.packing
        first, last = p.ptr[order].astype(np.int64), p.ptr[order + 1].astype(np.int64)
        count = last - first
        starts = np.cumsum(count) - count
        piece = np.repeat(first - starts, count) + np.arange(int(count.sum()), dtype=np.int64)
        src = windows.doc_start[p.document[piece]].astype(np.int64) + p.start[piece]
        which = np.repeat(np.arange(len(order), dtype=np.int64), count)
        return which, np.stack([np.zeros_like(src), src, src + p.length[piece].astype(np.int64)], 1)
    if isinstance(windows, MixedWindows):
        corpus_of, inner = windows.locate_many(order)
        whiches, parts = [], []
        for corpus in np.unique(corpus_of).tolist():
            mine = np.flatnonzero(corpus_of == corpus)
            member = indexed_window_reads(windows.members[corpus], inner[mine], width)
            if member is None:
                return None
            member[1][:, 0] = corpus
            whiches.append(mine[member[0]])
            parts.append(member[1])
        if not parts:
            return np.empty(0, dtype=np.int64), np.empty((0, 3), dtype=np.int64)
        return np.concatenate(whiches), np.concatenate(parts)
    return None


class TokenMixture:
    """Several token corpora read in proportion to weights: ``TokenMixture({a: 0.7, b: 0.3})``.

    Args:
        weights: corpus (a :class:`TokenCorpus` or its path) -> weight (> 0; normalised).
        windows: windows in one epoch of the mixture (default: all windows of all corpora,
            so each corpus is up- or down-sampled around its own size).
        cache, cache_bytes, storage_options: the node cache and client of the corpora given
            as object-store URLs (``{"s3://bucket/a": 0.7, "local/b": 0.3}``; see
            :meth:`TokenCorpus.open`).

    Pass it as the corpus of a ``LanguageModelLoader`` reading ``Windows(...)`` or
    ``Packed(...)``; weights are shares of the epoch's windows (of its tokens, with ``Windows``).

    The corpora given as paths or URLs are opened by the mixture, so they are its own to close:
    :meth:`close` (or ``with TokenMixture(...) as mixture:``) closes them (a URL's node cache
    let go: its files and threads), as a loader leaves open the mixture it reads. A corpus
    passed as a :class:`TokenCorpus` stays the caller's, open.

    Raises:
        ValueError: no corpus, a weight that is not > 0, one corpus named twice, or corpora
            whose ids mean other tokens (another tokenizer or vocabulary size).
    """

    def __init__(
        self,
        weights: Mapping[TokenCorpus | str | os.PathLike[str], float],
        windows: int | None = None,
        *,
        cache: str | os.PathLike[str] | None = None,
        cache_bytes: int | str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not weights:
            raise ValueError("TokenMixture needs at least one corpus")
        raw = np.array([float(w) for w in weights.values()])
        if not np.all(raw > 0) or not np.all(np.isfinite(raw)):
            bad = int(np.flatnonzero(~(raw > 0) | ~np.isfinite(raw))[0])
            member = list(weights)[bad]
            named = repr(member) if isinstance(member, TokenCorpus) else os.fspath(member)
            fix = " (to read none of it, leave it out of the mixture)" if raw[bad] == 0 else ""
            raise ValueError(
                f"mixture weights must be finite and > 0, got {raw.tolist()}: {named} has "
                f"{raw[bad]:g}{fix}"
            )
        whole = isinstance(windows, numbers.Integral) and not isinstance(windows, bool)
        if windows is not None and (not whole or windows < 1):
            raise ValueError(
                f"TokenMixture(windows={windows!r}): windows (of one epoch of the mixture) must "
                "be an int >= 1, or None for all windows of all corpora"
            )
        # refused before a member is opened: an open makes the node cache folder, at its cap
        _refuse_twice([where_of(c) for c in weights], list(weights.values()))
        self.corpora: list[TokenCorpus] = []
        opened: list[TokenCorpus] = []  # by this call
        try:
            for c in weights:
                if not isinstance(c, TokenCorpus):
                    c = TokenCorpus.open(
                        c, cache=cache, cache_bytes=cache_bytes, storage_options=storage_options
                    )
                    opened.append(c)
                self.corpora.append(c)
            _refuse_twice([where_of(c) for c in self.corpora], list(weights.values()))
            _refuse_other_ids(self.corpora)
            _warn_other_ends(self.corpora)
        except BaseException:
            for corpus in opened:  # (what the caller passed open stays theirs)
                corpus.close()
            raise
        self._opened = opened  # its own to close
        self.weights = raw / raw.sum()
        # Python's int: it goes into the fingerprint of every state, saved as JSON
        self.windows = None if windows is None else int(windows)

    def close(self) -> None:
        """Close the corpora this mixture opened itself (those it was given as paths or URLs:
        a remote one's GETs stopped, its node cache let go); those passed as
        :class:`TokenCorpus` objects stay open, the caller's. A second call does nothing."""
        opened, self._opened = self._opened, []
        for corpus in opened:
            corpus.close()

    def __enter__(self) -> TokenMixture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def counts(self, sizes: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Windows each corpus gives one epoch, given each corpus's own window count."""
        total = int(np.sum(sizes)) if self.windows is None else self.windows
        exact = self.weights * total
        counts = np.floor(exact).astype(np.int64)
        short = total - int(counts.sum())
        counts[np.argsort(-(exact - counts), kind="stable")[:short]] += 1  # largest remainders
        return counts

    def fingerprint(self) -> dict[str, Any]:
        return {
            "weights": [round(float(w), 12) for w in self.weights],
            "corpora_tokens": [c.n_tokens for c in self.corpora],
            "corpora_documents": [len(c) for c in self.corpora],
            "mixture_windows": self.windows,
            "mixture_schedule": "smooth",  # positions spread evenly (before: one block each)
        }


def _refuse_twice(places: list[str], weights: list[float]) -> None:
    """One corpus given twice (``places``: each member's :func:`_where`: by two spellings of
    its path, or opened twice) would be read as two, its windows drawn twice over: refused,
    naming it and the fix."""
    seen: dict[str, int] = {}
    for i, where in enumerate(places):
        if where in seen:
            j = seen[where]
            raise ValueError(
                f"TokenMixture names the corpus {where} twice (weights {weights[j]} and "
                f"{weights[i]}); give it once, with the sum of its weights "
                f"({float(weights[j]) + float(weights[i])})"
            )
        seen[where] = i


def _refuse_other_ids(corpora: list[TokenCorpus]) -> None:
    """Token ids mean words only under the tokenizer that made them: corpora whose
    vocabularies differ (another size, or another token behind an id) would mix ids of other
    meanings in one batch, without an error. Refused, naming both. Two definitions of one
    vocabulary (the same ``tokenizer.json``, one through a Hugging Face tokenizer that adds a
    post-processor or an added-token entry: another SHA-256) mix."""
    first = corpora[0]
    for other in corpora[1:]:
        if first.vocab_size != other.vocab_size:
            why = f"vocabularies of {first.vocab_size:,} and {other.vocab_size:,} ids"
        elif _sha(first) == _sha(other) or (why := _other_tokens(first, other)) == "":
            continue
        raise ValueError(
            f"TokenMixture: {where_of(first)} and {where_of(other)} were tokenized otherwise "
            f"({why}): their ids mean other tokens; build every corpus of a mixture with the "
            f"same tokenizer"
        )


def _warn_other_ends(corpora: list[TokenCorpus]) -> None:
    """Warn where the members end their documents otherwise: one built without an
    end-of-text token (``append_eos=False``, ``lading lm build --no-eos``) beside one built
    with it, or two with other ids. A model trained on the mixture then learns document ends
    from some members only, and a window of the other runs from one document into the next
    with nothing between; said once, naming both members and the fix."""
    first = corpora[0]
    for other in corpora[1:]:
        if other.eos_id == first.eos_id:
            continue
        said = [
            f"{where_of(c)} "
            + ("has none" if c.eos_id is None else f"ends them with id {c.eos_id}")
            for c in (first, other)
        ]
        warnings.warn(
            f"TokenMixture: its members end their documents otherwise ({said[0]}, {said[1]}): "
            "a model trained on it learns where a document ends from some members only; "
            "build every member with the same end-of-text token (append_eos=, --no-eos)",
            UserWarning,
            stacklevel=3,
        )
        return


def _sha(corpus: TokenCorpus) -> str | None:
    recipe = corpus.meta.get("recipe")
    sha = recipe.get("tokenizer") if isinstance(recipe, dict) else None
    return sha if isinstance(sha, str) else None


def _other_tokens(a: TokenCorpus, b: TokenCorpus) -> str:
    """Where the two corpora's tokenizers (kept beside their tokens) give an id to another
    token: the first such token, said; "" where every token has the same id in both (or a
    tokenizer is not there to read: the sizes agreed)."""
    try:
        ours, theirs = (c.tokenizer().get_vocab(with_added_tokens=True) for c in (a, b))
    except (OSError, ValueError, AttributeError, ImportError):
        return ""
    for token in sorted(ours.keys() ^ theirs.keys()) or sorted(ours):
        mine, other = ours.get(token), theirs.get(token)
        if mine != other:
            named = f"tokenizers {(_sha(a) or '?')[:12]} and {(_sha(b) or '?')[:12]}: {token!r}"
            if mine is None or other is None:  # in one vocabulary only
                has, lacks = ("second's", "first's") if mine is None else ("first's", "second's")
                found = other if mine is None else mine
                return f"{named} is in the {has} vocabulary (id {found}), not the {lacks}"
            return f"{named} is id {mine} against {other}"
    return ""


@functools.lru_cache(maxsize=8)
def smooth_schedule(counts: tuple[int, ...]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """(corpus, rank within that corpus) of every position of a mixture of ``counts`` windows.

    The ``j``-th window of corpus ``i`` sits at the virtual time ``(j + 1/2) / counts[i]``, and
    positions are those times in order (ties by corpus): every run of consecutive positions
    holds each corpus within about one window of its weight, so however the loader's order
    groups nearby positions, short runs of it mix the corpora at least as evenly as a uniform
    shuffle would (measured in benchmarks/bench_lm_mixture.py). Two small integers per window
    of the epoch, kept for the counts last asked for.
    """
    live = [(i, c) for i, c in enumerate(counts) if c]
    times = np.concatenate([(2 * np.arange(c) + 1) / (2 * c) for _, c in live])
    corpus = np.concatenate([np.full(c, i, dtype=np.int32) for i, c in live])
    rank = np.concatenate([np.arange(c, dtype=np.int64) for _, c in live])
    order = np.lexsort((corpus, times))
    corpus_of, rank_of = corpus[order], rank[order]
    corpus_of.setflags(write=False)
    rank_of.setflags(write=False)
    return corpus_of, rank_of


class MixedWindows(WindowReader):
    """The epoch of a :class:`TokenMixture`: ``counts[i]`` windows of source ``i``, every
    source drawn from holding one at least (:func:`refuse_short_members`)."""

    def __init__(
        self, members: list[WindowReader], counts: npt.NDArray[np.int64], seed: int, epoch: int
    ) -> None:
        self.members, self.counts, self.seed, self.epoch = members, counts, seed, epoch
        self.corpus_of, self.rank_of = smooth_schedule(tuple(int(c) for c in counts))
        self.n = int(counts.sum())

    def locate(self, position: int) -> tuple[int, int]:
        """(corpus, window of that corpus) at mixture position ``position``."""
        i, j = int(self.corpus_of[position]), int(self.rank_of[position])
        size = self.members[i].n
        key = (int(Salt.MIXTURE_ORDER), self.epoch, i, j // size)
        return i, feistel_value(j % size, size, self.seed, *key)

    def locate_many(
        self, positions: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """:meth:`locate` of every one of ``positions`` at once (a plan of an epoch): each
        corpus's windows through one Feistel pass, every pass over it under its own keys
        (:func:`~lading.loading.order.feistel_keyed`), where a window at a time cost ~37 us."""
        at = np.asarray(positions, dtype=np.int64)
        corpus_of = self.corpus_of[at].astype(np.int64)
        rank = self.rank_of[at].astype(np.int64)
        inner = np.empty(len(at), dtype=np.int64)
        for i in np.unique(corpus_of).tolist():
            mine = np.flatnonzero(corpus_of == i)
            size = self.members[i].n
            passes, value = np.divmod(rank[mine], size)
            groups, which = np.unique(passes, return_inverse=True)
            salt = int(Salt.MIXTURE_ORDER)
            keys = [round_keys_of(self.seed, salt, self.epoch, i, g) for g in groups.tolist()]
            each = np.array(keys, dtype=np.uint64).T[:, which]
            inner[mine] = feistel_keyed(value, size, each)
        return corpus_of, inner

    def read(
        self, window: int, tokens: npt.NDArray[np.int64], document_ids: npt.NDArray[np.int64] | None
    ) -> None:
        corpus, inner = self.locate(window)
        self.members[corpus].read(inner, tokens, document_ids)


def refuse_short_members(
    corpora: list[TokenCorpus],
    members: list[WindowReader],
    counts: npt.NDArray[np.int64],
    seq_len: int,
) -> None:
    """Refuse a mixture whose epoch draws windows from a corpus that holds none (too short
    for one window of ``seq_len + 1`` tokens), as that corpus alone is refused
    (:class:`EmptyEpochError`, a ``ValueError`` too): naming each such corpus, its tokens,
    and the fixes."""
    short = [
        f"{where_of(corpus)} ({corpus.n_tokens:,} tokens)"
        for corpus, member, count in zip(corpora, members, counts)
        if count and not member.n
    ]
    if short:
        which = "corpus" if len(short) == 1 else "corpora"
        holds, it = ("holds", "it") if len(short) == 1 else ("hold", "them")
        raise EmptyEpochError(
            f"TokenMixture {which} {', '.join(short)} {holds} no window of seq_len + 1 = "
            f"{seq_len + 1} tokens; use a smaller seq_len, or leave {it} out of the mixture"
        )


class EpochWindows:
    """What every epoch of one loader reads: its stream ("streams") or its window source
    ("windows"/"packed", a mixture or not).

    A packing depends on the seed only, so it is computed once per corpus and kept (a few
    narrow integers per piece); it is pickled with the rest, so a spawned DataLoader worker
    gets it rather than packing again (the packer's loop over every piece, and its
    transient arrays, once per worker). The epoch's reader is not: it holds the token map.
    """

    def __init__(
        self,
        corpus: TokenCorpus | TokenMixture,
        documents: npt.NDArray[np.int64],
        mode: str,
        bptt: int,
        seed: int,
        shuffle: bool,
        backwards: bool,
        *,
        shuffle_documents: bool = True,
    ) -> None:
        self.mixture = corpus if isinstance(corpus, TokenMixture) else None
        self.parts: list[
            tuple[TokenCorpus, npt.NDArray[np.signedinteger[Any]]]
        ]  # corpus, documents read
        if isinstance(corpus, TokenMixture):
            self.parts = [(c, all_documents(len(c))) for c in corpus.corpora]
        else:
            self.parts = [(corpus, documents)]
        self.mode, self.bptt, self.seed = mode, bptt, seed
        self.shuffle, self.backwards = shuffle, backwards
        self.shuffle_documents = shuffle_documents  # window modes: documents permuted too
        self._packings: dict[int, Packing] = {}
        self._epoch: tuple[int, WindowReader] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_epoch": None}

    def packing(self, part: int) -> Packing:
        """The packing of corpus ``part``, into windows of ``bptt + 1`` tokens."""
        if part not in self._packings:
            corpus, documents = self.parts[part]
            self._packings[part] = pack(corpus.lengths()[documents], self.bptt + 1, self.seed)
        return self._packings[part]

    def stream(self, epoch: int) -> EpochStream:
        """The epoch stream of ``epoch`` (of the one corpus: streams read no mixture)."""
        corpus, documents = self.parts[0]
        return EpochStream(corpus, documents, self.seed, epoch, self.shuffle, self.backwards)

    def _part(self, part: int, epoch: int) -> WindowReader:
        corpus, documents = self.parts[part]
        if self.mode == "packed":
            pad = corpus.eos_id if corpus.eos_id is not None else 0
            return PackedWindows(corpus, documents, self.packing(part), pad)
        permuted = self.shuffle and self.shuffle_documents
        stream = EpochStream(corpus, documents, self.seed, epoch, permuted, self.backwards)
        return StreamWindows(stream, self.bptt)

    def of_epoch(self, epoch: int) -> WindowReader:
        """The windows of ``epoch`` (the last one asked for is kept)."""
        if self._epoch is None or self._epoch[0] != epoch:
            members = [self._part(i, epoch) for i in range(len(self.parts))]
            if self.mixture is not None:
                counts = self.mixture.counts([s.n for s in members])
                corpora = [corpus for corpus, _ in self.parts]
                refuse_short_members(corpora, members, counts, self.bptt)
                # unshuffled, every epoch reads the windows drawn for epoch 0, in one order
                # (the seed still picks a down-sampled corpus's windows): the same batches
                draw = epoch if self.shuffle else 0
                self._epoch = (epoch, MixedWindows(members, counts, self.seed, draw))
            else:
                self._epoch = (epoch, members[0])
        return self._epoch[1]

    def packing_stats(self) -> dict[str, Any]:
        """Windows, pieces, tokens and padding of the packing, summed over the corpora."""
        parts = [self.packing(i).stats() for i in range(len(self.parts))]
        keys = ("windows", "pieces", "split_documents", "tokens", "padding")
        total: dict[str, Any] = {k: sum(p[k] for p in parts) for k in keys}
        slots = total["windows"] * (self.bptt + 1)
        total["capacity"] = self.bptt + 1
        total["padding_fraction"] = total["padding"] / slots if slots else 0.0
        return total
