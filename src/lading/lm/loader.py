"""LanguageModelLoader: token streams in O(batch x bptt) memory that keep BPTT continuity.

Each epoch the documents are permuted from ``(seed, epoch)``, the same on every rank. Their
concatenation, the epoch stream, is never built: a position in it maps to (document, offset)
through the cumulative lengths of the permuted documents (one int64 per document). The stream
is cut into ``world_size * batch_size`` contiguous streams; rank ``k`` reads streams
``k*batch_size … (k+1)*batch_size - 1``, one per batch row, so row ``r`` of batch ``t+1`` starts
exactly where row ``r`` of batch ``t`` ended and an RNN's hidden state carries over (the point
of the fastai thread). Streams have ``ceil(T / (world_size * batch_size))`` positions; the last
ones wrap around to the start of the epoch stream, so every token is used and every rank takes
the same number of batches (``equalize="truncate"`` drops the tail instead). The cut is the
loader core's planner (:mod:`lading.loading.plan`) with one reader per stream.

Batches are views of one ``(batch_size, chunk)`` int64 buffer, filled in bulk a chunk of stream
at a time: ``x = buf[:, o:o+L]`` and ``y = buf[:, o+1:o+L+1]``, as cheap as slicing a
pre-batchified tensor, without the tensor. They stay valid until the next batch is asked for;
``.to(device)`` (or ``.clone()``) them to keep them.

Sequence lengths vary per batch (``bptt_jitter="fastai"``: ``bptt`` with probability 0.95, else
``bptt / 2``, then ``max(5, int(normal(that, 5)))``, capped at ``bptt + 25``; or a uniform
``(low, high)`` range; or ``None`` for fixed) from ``(seed, epoch)``, identical on all ranks.

``mode="windows"`` serves independent ``seq_len + 1`` windows of the same epoch stream in an
order shuffled by ``(seed, epoch)`` and dealt to ranks (Megatron/nanoGPT style, for
transformers); the order is a keyed Feistel permutation computed per index, so even it costs
nothing proportional to the token count. Windows are dealt round-robin over the ranks by the
same planner (``interleave``).

A checkpoint can be resumed on another number of processes or with another batch size
(*elastic*). What is left of the epoch is known exactly: in ``"windows"`` mode a suffix of the
window order; in ``"streams"`` mode, the unread end of every stream, kept as runs of stream
positions (:class:`lading.split.Runs`, two integers per stream). Both are the core's one
mechanism (:mod:`lading.loading.state`): what is left becomes the base of a new segment of the
epoch, planned over the new streams (or ranks), so each remaining position is predicted
exactly once more this epoch. Across the change the set of
(input, target) pairs is bitwise that of the uninterrupted epoch; the rows that hold them, and
the hidden state a row carries, are not (reset it: an old row has no counterpart).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from lading.lm.corpus import TokenCorpus
from lading.loading import state as loader_state
from lading.loading.order import Salt, feistel_permutation, generator, permutation
from lading.loading.plan import Plan, batch_count, check_equalize, plan
from lading.loading.state import Cursor
from lading.split import Runs
from lading.world import World

__all__ = ["MODES", "LanguageModelLoader", "feistel_permutation"]

MODES: tuple[str, ...] = ("streams", "windows")
_JITTER_CAP = 25  # fastai's normal(bptt, 5) exceeds bptt + 25 with probability < 1e-6
Jitter = str | tuple[int, int] | None


@dataclass
class _Epoch:
    """The epoch stream's index: permuted documents and their cumulative lengths."""

    doc_start: npt.NDArray[np.int64]  # start of each permuted document in corpus.tokens
    lengths: npt.NDArray[np.int64]
    cum_end: npt.NDArray[np.int64]  # stream position just past each permuted document
    total: int


@dataclass
class _Segment:
    """The plan of one segment of an epoch under one layout."""

    index: _Epoch
    n: int  # positions of the epoch: predicted tokens ("streams") or windows ("windows")
    base: Runs  # the positions this segment reads
    plan: Plan  # one reader per stream ("streams") or per rank ("windows")
    seqs: list[int]  # "streams": the length of each batch
    batches: int


def _max_seq(bptt: int, jitter: Jitter, mode: str) -> int:
    if mode == "windows" or jitter is None:
        return bptt
    if jitter == "fastai":
        return bptt + _JITTER_CAP
    assert isinstance(jitter, tuple)
    return int(jitter[1])


def _jitter_of(value: Any) -> Jitter:
    """A jitter as saved in JSON (a list for a range) back to its argument form."""
    return (int(value[0]), int(value[1])) if isinstance(value, list) else value


class LanguageModelLoader:
    """Batches ``(x, y)`` of shape ``[batch_size, seq]`` from a :class:`TokenCorpus`.

    Args:
        corpus: the tokenized corpus.
        batch_size: rows per batch on this rank.
        bptt: target sequence length (``mode="streams"``); the window length in ``"windows"``.
        bptt_jitter: ``"fastai"``, ``None`` (fixed) or a ``(low, high)`` uniform range.
        shuffle: permute documents (and windows) each epoch.
        backwards: read every stream from its end to its start (for backward LMs).
        seed: with the epoch, fixes every order and length.
        drop_last: deprecated; ``True`` is ``equalize="truncate", drop_partial_batch=True``.
        world: rank and world size (default: detected; the global rank).
        mode: ``"streams"`` (continuity across batches) or ``"windows"``.
        documents: use only these documents (e.g. a training split), in this base order.
        chunk_batches: how many batches of stream the buffer holds between refills.
        equalize: ``"pad"`` (wrap around to fill the last streams or windows) or
            ``"truncate"`` (drop the epoch's tail).
        drop_partial_batch: ``"windows"`` mode: leave out a rank's last, partial batch.
    """

    kind = "lm"

    def __init__(
        self,
        corpus: TokenCorpus,
        batch_size: int,
        bptt: int,
        bptt_jitter: Jitter = "fastai",
        shuffle: bool = True,
        backwards: bool = False,
        seed: int = 0,
        drop_last: bool | None = None,
        world: World | None = None,
        mode: str = "streams",
        documents: npt.ArrayLike | None = None,
        chunk_batches: int = 128,
        *,
        equalize: str = "pad",
        drop_partial_batch: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {sorted(MODES)}")
        if batch_size < 1 or bptt < 1:
            raise ValueError(f"batch_size and bptt must be >= 1, got {batch_size}, {bptt}")
        if bptt_jitter not in ("fastai", None) and not (
            isinstance(bptt_jitter, tuple)
            and len(bptt_jitter) == 2
            and 1 <= bptt_jitter[0] <= bptt_jitter[1]
        ):
            raise ValueError(
                f"bptt_jitter must be 'fastai', None or (low, high), got {bptt_jitter!r}"
            )
        if drop_last is not None:
            warnings.warn(
                "LanguageModelLoader(drop_last=...) is deprecated: pass equalize='truncate' "
                "and drop_partial_batch=True (drop_last=True) or nothing (drop_last=False)",
                DeprecationWarning,
                stacklevel=2,
            )
            if drop_last:
                equalize, drop_partial_batch = "truncate", True
        self.corpus, self.batch_size, self.bptt = corpus, batch_size, bptt
        self.jitter, self.shuffle, self.backwards = bptt_jitter, shuffle, backwards
        self.seed, self.mode = seed, mode
        self.equalize, self.drop_partial_batch = check_equalize(equalize), drop_partial_batch
        self.world = world or World.detect()
        self.documents = (
            np.arange(len(corpus), dtype=np.int64)
            if documents is None
            else np.asarray(documents, dtype=np.int64)
        )
        self.max_seq = _max_seq(bptt, bptt_jitter, mode)
        width = self.max_seq * max(1, chunk_batches) + 1
        self._buffer = np.zeros((batch_size, width), dtype=np.int64)
        self.cursor = Cursor()
        self._segment: _Segment | None = None

    # ------------------------------------------------------------------ planning

    def _epoch_index(self, epoch: int) -> _Epoch:
        order = permutation(
            len(self.documents), self.seed, Salt.DOCUMENT_ORDER, epoch, shuffle=self.shuffle
        )
        docs = self.documents[order]
        offsets = self.corpus.offsets
        starts = offsets[docs].astype(np.int64)
        lengths = offsets[docs + 1].astype(np.int64) - starts
        cum_end = np.cumsum(lengths)
        total = int(cum_end[-1]) if len(cum_end) else 0
        if total < 2:
            raise ValueError("the corpus has fewer than 2 tokens: nothing to predict")
        return _Epoch(starts, lengths, cum_end, total)

    def _seq_lengths(self, cursor: Cursor, positions: int, bptt: int, jitter: Jitter) -> list[int]:
        """Lengths of the segment's batches: they add up to ``positions`` (the last is cut)."""
        rng = generator(self.seed, Salt.SEQ_LENGTHS, cursor.epoch, cursor.segment)
        cap = _max_seq(bptt, jitter, "streams")
        out, pos = [], 0
        while pos < positions:
            if jitter is None:
                length = bptt
            elif jitter == "fastai":
                base = bptt if rng.random() < 0.95 else bptt / 2
                length = min(max(5, int(rng.normal(base, 5))), cap)
            else:
                assert isinstance(jitter, tuple)
                length = int(rng.integers(jitter[0], jitter[1] + 1))
            length = min(length, positions - pos)
            out.append(length)
            pos += length
        return out

    def _plan_segment(self, cursor: Cursor, layout: Mapping[str, Any]) -> _Segment:
        """The plan of ``cursor``'s segment under ``layout`` (this run's or a saved one)."""
        index = self._epoch_index(cursor.epoch)
        world_size, batch_size = int(layout["world_size"]), int(layout["batch_size"])
        resumed = cursor.segment > 0
        if self.mode == "windows":
            n = (index.total - 1) // self.bptt
            base = cursor.base_or_whole(n)
            p = plan(len(base), world_size, self.equalize, interleave=True, resumed=resumed)
            batches = batch_count(p.each, batch_size, self.drop_partial_batch)
            return _Segment(index, n, base, p, [], batches)
        n = index.total - 1
        base = cursor.base_or_whole(n)
        streams = world_size * batch_size
        p = plan(len(base), streams, self.equalize, resumed=resumed)
        if p.each < 1 and len(base):
            raise ValueError(
                f"{len(base)} tokens cannot fill {streams} streams "
                "(world_size x batch_size); use a smaller batch_size or equalize='pad'"
            )
        bptt, jitter = int(layout["bptt"]), _jitter_of(layout["jitter"])
        seqs = self._seq_lengths(cursor, p.each, bptt, jitter)
        return _Segment(index, n, base, p, seqs, len(seqs))

    def _current(self) -> _Segment:
        if self._segment is None:
            self._segment = self._plan_segment(self.cursor, self.layout())
        return self._segment

    # ------------------------------------------------------------------ reading

    def _read_forward(self, index: _Epoch, start: int, out: npt.NDArray[np.int64]) -> None:
        """Epoch-stream tokens ``[start, start + len(out))``, wrapping at the end, into ``out``."""
        tokens, total, n = self.corpus.tokens, index.total, len(out)
        cum_end, lengths, doc_start = index.cum_end, index.lengths, index.doc_start
        pos = start % total
        k = int(np.searchsorted(cum_end, pos, side="right"))  # once: the rest is k + 1, k + 2…
        filled = 0
        while filled < n:
            length = int(lengths[k])
            in_doc = pos - (int(cum_end[k]) - length)
            take = min(n - filled, length - in_doc)
            src = int(doc_start[k]) + in_doc
            out[filled : filled + take] = tokens[src : src + take]
            filled += take
            pos += take
            k += 1
            if k == len(cum_end):  # wrap around to the start of the epoch stream
                k, pos = 0, 0

    def _read(self, index: _Epoch, start: int, out: npt.NDArray[np.int64]) -> None:
        if not self.backwards:
            self._read_forward(index, start, out)
            return
        n, total = len(out), index.total
        # the reversed stream's [start, start+n) is the forward stream's [T-start-n, T-start)
        self._read_forward(index, (total - start - n) % total, out)
        out[:] = out[::-1].copy()

    # ------------------------------------------------------------------ iteration

    def __len__(self) -> int:
        """Batches left in the current epoch (the same on every rank)."""
        return self._current().batches - self.cursor.batches

    @property
    def epoch(self) -> int:
        return self.cursor.epoch

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first batch."""
        self.cursor.start_epoch(epoch)
        self._segment = None

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        segment = self._current()
        if self.mode == "windows":
            yield from self._iter_windows(segment)
        elif self.cursor.base is None:
            yield from self._iter_streams(segment)
        else:
            yield from self._iter_rest(segment)

    def _iter_streams(self, seg: _Segment) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        buf, cursor, length = self._buffer, self.cursor, seg.plan.each
        first_stream = self.world.rank * self.batch_size
        offset = sum(seg.seqs[: cursor.batches])  # stream position of the next batch
        base, filled = offset, 0  # buffer column 0 holds stream position `base`
        while cursor.batches < seg.batches:
            seq = seg.seqs[cursor.batches]
            if offset - base + seq + 1 > filled:
                keep = filled - (offset - base) if filled else 0
                if keep > 0:
                    buf[:, :keep] = buf[:, offset - base : filled].copy()
                want = min(buf.shape[1], length + 1 - offset)
                for row in range(self.batch_size):
                    start = (first_stream + row) * length + offset + keep
                    self._read(seg.index, start, buf[row, keep:want])
                base, filled = offset, want
            col = offset - base
            cursor.batches += 1
            offset += seq
            # numpy slicing + from_numpy measured faster than slicing a torch view of the buffer
            yield (
                torch.from_numpy(buf[:, col : col + seq]),
                torch.from_numpy(buf[:, col + 1 : col + seq + 1]),
            )

    def _iter_rest(self, seg: _Segment) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Streams cut from what an elastic resume found left of the epoch.

        Stream position ``q`` of stream ``s`` is position ``s * length + q`` of the remainder
        (wrapping past its end); inputs and targets are read separately, since the next
        remaining position is not always the next token of the epoch stream.
        """
        rest, cursor, length = seg.base, self.cursor, seg.plan.each
        x = np.zeros((self.batch_size, self.max_seq), dtype=np.int64)
        y = np.zeros_like(x)
        offset = sum(seg.seqs[: cursor.batches])
        first_stream = self.world.rank * self.batch_size
        while cursor.batches < seg.batches:
            seq = seg.seqs[cursor.batches]
            for row in range(self.batch_size):
                begin = (first_stream + row) * length + offset
                filled = 0
                while filled < seq:  # at most one wrap: the fill is shorter than one stream
                    at = (begin + filled) % len(rest)
                    runs = rest.slice(at, at + seq - filled)
                    for start, stop in zip(runs.starts.tolist(), runs.stops.tolist()):
                        self._read(seg.index, start, x[row, filled : filled + stop - start])
                        self._read(seg.index, start + 1, y[row, filled : filled + stop - start])
                        filled += stop - start
            cursor.batches += 1
            offset += seq
            yield torch.from_numpy(x[:, :seq]), torch.from_numpy(y[:, :seq])

    def _iter_windows(self, seg: _Segment) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        buf, cursor = self._buffer[:, : self.bptt + 1], self.cursor
        share = seg.base.within(seg.plan.positions(self.world.rank))
        take = self._taken(seg, self.batch_size, seg.batches)
        while cursor.batches < seg.batches:
            lo = cursor.batches * self.batch_size
            slots = share.slice(lo, min(lo + self.batch_size, take)).positions()
            order = (
                feistel_permutation(slots, seg.n, self.seed, cursor.epoch)
                if self.shuffle
                else slots
            )
            for row, window in enumerate(order.tolist()):
                self._read(seg.index, window * self.bptt, buf[row])
            rows = len(order)
            cursor.batches += 1
            yield torch.from_numpy(buf[:rows, :-1]), torch.from_numpy(buf[:rows, 1:])

    # ------------------------------------------------------------------ state

    def _taken(self, seg: _Segment, batch_size: int, batches: int) -> int:
        """Positions each reader of ``seg`` has read after ``batches`` batches."""
        if self.mode == "streams":
            return sum(seg.seqs[:batches])
        each = seg.plan.each
        if self.drop_partial_batch:
            each = batch_count(each, batch_size, True) * batch_size
        return min(batches * batch_size, each)

    def layout(self) -> dict[str, Any]:
        """What fixes who reads what; another layout on resume is an elastic resume."""
        layout: dict[str, Any] = {
            "world_size": self.world.world_size,
            "batch_size": self.batch_size,
        }
        if self.mode == "streams":
            layout["bptt"] = self.bptt
            layout["jitter"] = list(self.jitter) if isinstance(self.jitter, tuple) else self.jitter
        return layout

    def fingerprint(self) -> dict[str, Any]:
        """What fixes the corpus and its orders; a state must match it to be resumed."""
        fingerprint: dict[str, Any] = {
            "mode": self.mode,
            "seed": self.seed,
            "backwards": self.backwards,
            "documents": len(self.documents),
            "tokens": self.corpus.n_tokens,
            "shuffle": self.shuffle,
            "equalize": self.equalize,
            "drop_partial_batch": self.drop_partial_batch,
        }
        if self.mode == "windows":
            fingerprint["bptt"] = self.bptt
        return fingerprint

    def unread(self, layout: Mapping[str, Any], cursor: Cursor) -> Runs:
        """Epoch positions (stream positions or window-order positions) not read under
        ``layout`` at ``cursor``: the end of every stream (or rank's windows) and the tail
        ``truncate`` left out."""
        seg = self._plan_segment(cursor, layout)
        done = self._taken(seg, int(layout["batch_size"]), cursor.batches)
        return seg.base.within(seg.plan.unread([Runs([0], [done])] * seg.plan.readers))

    def consumed(self) -> int:
        seg = self._current()
        return self._taken(seg, self.batch_size, self.cursor.batches) * seg.plan.readers

    def state_dict(self) -> dict[str, Any]:
        """The one loader state (:mod:`lading.loading.state`)."""
        return loader_state.state_dict(
            self.kind, self.cursor, self.layout(), self.fingerprint(), self.consumed()
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` left off: the next batch is the one after the saved one.

        With the saved world size and batch size the batches are bitwise those the
        uninterrupted run would have yielded; with others, what was left of the epoch is
        dealt over this run's streams (see the module docstring).

        Raises:
            LoaderStateError: the state belongs to another corpus, mode or order.
        """
        self.cursor = loader_state.restore(
            state, self.kind, self.layout(), self.fingerprint(), self.unread
        )
        self._segment = None
