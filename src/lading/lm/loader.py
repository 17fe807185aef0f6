"""LanguageModelLoader: token streams in O(batch x bptt) memory that keep BPTT continuity.

Each epoch the documents are permuted from ``(seed, epoch)``, the same on every rank. Their
concatenation, the epoch stream, is never built: a position in it maps to (document, offset)
through the cumulative lengths of the permuted documents (one int64 per document). The stream
is cut into ``world_size * batch_size`` contiguous streams; rank ``k`` reads streams
``k*batch_size … (k+1)*batch_size - 1``, one per batch row, so row ``r`` of batch ``t+1`` starts
exactly where row ``r`` of batch ``t`` ended and an RNN's hidden state carries over (the point
of the fastai thread). Streams have ``ceil(T / (world_size * batch_size))`` positions; the last
ones wrap around to the start of the epoch stream, so every token is used and every rank takes
the same number of batches (``drop_last=True`` drops the tail instead).

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
nothing proportional to the token count.

A checkpoint can be resumed on another number of processes or with another batch size
(*elastic*). What is left of the epoch is known exactly: in ``"windows"`` mode a suffix of the
window order; in ``"streams"`` mode, the unread end of every stream, kept as runs of stream
positions (:class:`lading.split.Runs`, two integers per stream). The new ranks cut the
concatenation of those runs into their own streams (or deal the remaining windows), so each
remaining position is predicted exactly once more this epoch. Across the change the set of
(input, target) pairs is bitwise that of the uninterrupted epoch; the rows that hold them, and
the hidden state a row carries, are not (reset it: an old row has no counterpart).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from lading.lm.corpus import TokenCorpus
from lading.split import Runs
from lading.world import World

MODES: tuple[str, ...] = ("streams", "windows")
STATE_VERSION = 1
_JITTER_CAP = 25  # fastai's normal(bptt, 5) exceeds bptt + 25 with probability < 1e-6


@dataclass
class _Epoch:
    """The epoch stream's index: permuted documents and their cumulative lengths."""

    doc_start: npt.NDArray[np.int64]  # start of each permuted document in corpus.tokens
    lengths: npt.NDArray[np.int64]
    cum_end: npt.NDArray[np.int64]  # stream position just past each permuted document
    total: int


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
        drop_last: drop the epoch's tail instead of wrapping around to fill it.
        world: rank and world size (default: detected; the global rank).
        mode: ``"streams"`` (continuity across batches) or ``"windows"``.
        documents: use only these documents (e.g. a training split), in this base order.
        chunk_batches: how many batches of stream the buffer holds between refills.
    """

    def __init__(
        self,
        corpus: TokenCorpus,
        batch_size: int,
        bptt: int,
        bptt_jitter: str | tuple[int, int] | None = "fastai",
        shuffle: bool = True,
        backwards: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        world: World | None = None,
        mode: str = "streams",
        documents: npt.ArrayLike | None = None,
        chunk_batches: int = 128,
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
        self.corpus, self.batch_size, self.bptt = corpus, batch_size, bptt
        self.jitter, self.shuffle, self.backwards = bptt_jitter, shuffle, backwards
        self.seed, self.drop_last, self.mode = seed, drop_last, mode
        self.world = world or World.detect()
        self.documents = (
            np.arange(len(corpus), dtype=np.int64)
            if documents is None
            else np.asarray(documents, dtype=np.int64)
        )
        self.max_seq = self._max_seq()
        width = self.max_seq * max(1, chunk_batches) + 1
        self._buffer = np.zeros((batch_size, width), dtype=np.int64)
        self._scratch = np.zeros(width, dtype=np.int64)
        self.epoch, self.batch = 0, 0  # next batch to yield
        # after an elastic resume: what was left of the epoch, as epoch-stream positions
        # ("streams") or as the number of windows already read ("windows")
        self._rest: Runs | None = None
        self._windows_done = 0
        self._plan: _Plan | None = None

    # ------------------------------------------------------------------ planning

    def _max_seq(self) -> int:
        if self.mode == "windows" or self.jitter is None:
            return self.bptt
        if self.jitter == "fastai":
            return self.bptt + _JITTER_CAP
        assert isinstance(self.jitter, tuple)
        return int(self.jitter[1])

    def _epoch_index(self, epoch: int) -> _Epoch:
        docs = self.documents
        if self.shuffle:
            docs = docs[np.random.default_rng([self.seed, epoch, 0]).permutation(len(docs))]
        offsets = self.corpus.offsets
        starts = offsets[docs].astype(np.int64)
        lengths = offsets[docs + 1].astype(np.int64) - starts
        cum_end = np.cumsum(lengths)
        total = int(cum_end[-1]) if len(cum_end) else 0
        if total < 2:
            raise ValueError("the corpus has fewer than 2 tokens: nothing to predict")
        return _Epoch(starts, lengths, cum_end, total)

    def _seq_lengths(self, epoch: int, positions: int, resumed: int = 0) -> list[int]:
        """Lengths of the epoch's batches: they add up to ``positions`` (the last is cut)."""
        key = [self.seed, epoch, 1] if resumed == 0 else [self.seed, epoch, 1, resumed]
        rng = np.random.default_rng(key)
        out, pos = [], 0
        while pos < positions:
            if self.jitter is None:
                length = self.bptt
            elif self.jitter == "fastai":
                base = self.bptt if rng.random() < 0.95 else self.bptt / 2
                length = min(max(5, int(rng.normal(base, 5))), self.max_seq)
            else:
                assert isinstance(self.jitter, tuple)
                low, high = self.jitter
                length = int(rng.integers(low, high + 1))
            length = min(length, positions - pos)
            out.append(length)
            pos += length
        return out

    def _make_plan(self, epoch: int) -> _Plan:
        index = self._epoch_index(epoch)
        streams = self.world.world_size * self.batch_size
        if self.mode == "windows":
            windows = (index.total - 1) // self.bptt
            left = max(0, windows - self._windows_done)
            world_size = self.world.world_size
            per_rank = left // world_size if self.drop_last else -(-left // world_size)
            batches = (
                per_rank // self.batch_size if self.drop_last else -(-per_rank // self.batch_size)
            )
            return _Plan(epoch, index, 0, [], batches, windows, per_rank)
        positions = index.total - 1 if self._rest is None else len(self._rest)
        if positions == 0:  # an elastic resume found the epoch already read
            return _Plan(epoch, index, 0, [], 0, 0, 0, self._rest)
        length = positions // streams if self.drop_last else -(-positions // streams)
        if length < 1:
            raise ValueError(
                f"{positions} tokens cannot fill {streams} streams "
                f"(world_size x batch_size); use a smaller batch_size"
            )
        resumed = 0 if self._rest is None else len(self._rest.starts)
        seqs = self._seq_lengths(epoch, length, resumed)
        return _Plan(epoch, index, length, seqs, len(seqs), 0, 0, self._rest)

    def _plan_for(self, epoch: int) -> _Plan:
        if self._plan is None or self._plan.epoch != epoch:
            self._plan = self._make_plan(epoch)
        return self._plan

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
        return self._plan_for(self.epoch).batches - self.batch

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first batch."""
        if (self._rest is not None or self._windows_done) and epoch != self.epoch:
            self._plan = None  # the elastic remainder belonged to the previous epoch
        self.epoch, self.batch = epoch, 0
        self._rest, self._windows_done = None, 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        plan = self._plan_for(self.epoch)
        if self.mode == "windows":
            yield from self._iter_windows(plan)
        elif plan.rest is not None:
            yield from self._iter_rest(plan)
        else:
            yield from self._iter_streams(plan)

    def _iter_streams(self, plan: _Plan) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        buf = self._buffer
        first_stream = self.world.rank * self.batch_size
        offset = sum(plan.seqs[: self.batch])  # stream position of the next batch
        base, filled = offset, 0  # buffer column 0 holds stream position `base`
        while self.batch < plan.batches:
            length = plan.seqs[self.batch]
            if offset - base + length + 1 > filled:
                keep = filled - (offset - base) if filled else 0
                if keep > 0:
                    buf[:, :keep] = buf[:, offset - base : filled].copy()
                want = min(buf.shape[1], plan.length + 1 - offset)
                for row in range(self.batch_size):
                    start = (first_stream + row) * plan.length + offset + keep
                    self._read(plan.index, start, buf[row, keep:want])
                base, filled = offset, want
            col = offset - base
            self.batch += 1
            offset += length
            # numpy slicing + from_numpy measured faster than slicing a torch view of the buffer
            yield (
                torch.from_numpy(buf[:, col : col + length]),
                torch.from_numpy(buf[:, col + 1 : col + length + 1]),
            )

    def _iter_rest(self, plan: _Plan) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Streams cut from what an elastic resume found left of the epoch.

        Stream position ``q`` of stream ``s`` is position ``s * length + q`` of the remainder
        (wrapping past its end); inputs and targets are read separately, since the next
        remaining position is not always the next token of the epoch stream.
        """
        rest = plan.rest
        assert rest is not None
        x = np.zeros((self.batch_size, self.max_seq), dtype=np.int64)
        y = np.zeros_like(x)
        offset = sum(plan.seqs[: self.batch])
        first_stream = self.world.rank * self.batch_size
        while self.batch < plan.batches:
            length = plan.seqs[self.batch]
            for row in range(self.batch_size):
                begin = (first_stream + row) * plan.length + offset
                filled = 0
                while filled < length:  # at most one wrap: the fill is shorter than one stream
                    at = (begin + filled) % len(rest)
                    runs = rest.slice(at, at + length - filled)
                    for start, stop in zip(runs.starts.tolist(), runs.stops.tolist()):
                        self._read(plan.index, start, x[row, filled : filled + stop - start])
                        self._read(plan.index, start + 1, y[row, filled : filled + stop - start])
                        filled += stop - start
            self.batch += 1
            offset += length
            yield torch.from_numpy(x[:, :length]), torch.from_numpy(y[:, :length])

    def _iter_windows(self, plan: _Plan) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        width = self.bptt + 1
        buf = self._buffer[:, :width]
        world = self.world
        while self.batch < plan.batches:
            lo = self.batch * self.batch_size
            slots = np.arange(lo, min(lo + self.batch_size, plan.per_rank), dtype=np.int64)
            # round-robin over ranks, after the windows read before an elastic resume
            flat = self._windows_done + slots * world.world_size + world.rank
            flat = flat % plan.windows  # padding wraps to the first windows
            key = (self.seed, plan.epoch) if self.shuffle else None
            order = feistel_permutation(flat, plan.windows, key) if key else flat
            for row, window in enumerate(order.tolist()):
                self._read(plan.index, window * self.bptt, buf[row])
            rows = len(order)
            self.batch += 1
            yield torch.from_numpy(buf[:rows, :-1]), torch.from_numpy(buf[:rows, 1:])

    # ------------------------------------------------------------------ state

    def _remaining(self) -> Runs:
        """Epoch-stream positions (``"streams"``) not yet read: the end of every stream, and
        the tail that ``drop_last`` would have left out."""
        plan = self._plan_for(self.epoch)
        offset = sum(plan.seqs[: self.batch])
        rest = plan.rest if plan.rest is not None else Runs.whole(plan.index.total - 1)
        streams = self.world.world_size * self.batch_size
        firsts = np.arange(streams, dtype=np.int64) * plan.length
        inner = Runs(
            np.append(firsts + offset, streams * plan.length),
            np.append(np.minimum(firsts + plan.length, len(rest)), len(rest)),
        )
        return rest.within(inner)

    def state_dict(self) -> dict[str, Any]:
        """Epoch and next batch, what fixes the plan (checked on load), and what is left of
        the epoch in a form any world size can resume from."""
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "batch": self.batch,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "bptt": self.bptt,
            "world_size": self.world.world_size,
            "mode": self.mode,
            "backwards": self.backwards,
            "documents": len(self.documents),
            "tokens": self.corpus.n_tokens,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "jitter": list(self.jitter) if isinstance(self.jitter, tuple) else self.jitter,
        }
        if self.mode == "windows":
            plan = self._plan_for(self.epoch)
            read = self._windows_done + self.batch * self.batch_size * self.world.world_size
            state["windows_done"] = self._windows_done
            state["windows_read"] = min(read, plan.windows)
        else:
            based, left = self._rest, self._remaining()
            state["based_on"] = _runs_state(based) if based is not None else None
            state["remaining"] = _runs_state(left)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` left off: the next batch is the one after the saved one.

        With the saved world size and batch size the batches are bitwise those the
        uninterrupted run would have yielded; with others, what was left of the epoch is
        dealt over this run's streams (see the module docstring).

        Raises:
            ValueError: the state belongs to another corpus, mode or order.
        """
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"loader state version {state.get('version')}, expected {STATE_VERSION}"
            )
        mine = self.state_dict()
        same = ["seed", "mode", "backwards", "documents", "tokens", "shuffle", "drop_last"]
        if self.mode == "windows":
            same.append("bptt")
        for key in same:
            if state.get(key) != mine[key]:
                raise ValueError(
                    f"loader state has {key}={state.get(key)!r}, this loader "
                    f"{mine[key]!r}; resume with the settings of the saved run"
                )
        self._plan = None
        self.epoch = int(state["epoch"])
        layout = ("world_size", "batch_size", "bptt", "jitter")
        if all(state[key] == mine[key] for key in layout):  # the saved layout, bitwise
            self.batch = int(state["batch"])
            if self.mode == "windows":
                self._windows_done, self._rest = int(state["windows_done"]), None
            else:
                based = state["based_on"]
                self._rest = _runs_from(based) if based is not None else None
            return
        self.batch = 0  # elastic: a new layout over what is left
        if self.mode == "windows":
            self._windows_done, self._rest = int(state["windows_read"]), None
        else:
            self._rest, self._windows_done = _runs_from(state["remaining"]), 0


def _runs_state(runs: Runs) -> dict[str, list[int]]:
    return {"starts": runs.starts.tolist(), "stops": runs.stops.tolist()}


def _runs_from(state: dict[str, list[int]]) -> Runs:
    return Runs(state["starts"], state["stops"])


@dataclass
class _Plan:
    epoch: int
    index: _Epoch
    length: int  # positions per stream (streams mode)
    seqs: list[int]
    batches: int
    windows: int  # windows mode
    per_rank: int
    rest: Runs | None = None  # streams mode after an elastic resume: what is left to read


_MASK32 = np.uint64(0xFFFFFFFF)


def feistel_permutation(
    index: npt.NDArray[np.int64], n: int, key: tuple[int, ...]
) -> npt.NDArray[np.int64]:
    """A keyed bijection of ``[0, n)`` evaluated at ``index``: shuffles without an n-array.

    A 4-round Feistel network permutes ``[0, 4**k)`` (the smallest power of 4 >= n); values
    landing outside ``[0, n)`` are fed through again (cycle walking) until they land inside.
    """
    bits = max(2, int(np.ceil(np.log2(max(n, 2)))))
    bits += bits % 2
    half = bits // 2
    mask = np.uint64((1 << half) - 1)
    round_keys = np.random.default_rng([*list(key), 65045]).integers(0, 2**32, 4, dtype=np.uint64)
    out = index.astype(np.uint64)
    todo = np.ones(len(out), dtype=bool)
    result = out.copy()
    for _ in range(1000):  # each pass leaves a value outside with probability < 3/4
        x = result[todo]
        left, right = x >> np.uint64(half), x & mask
        for k in round_keys:
            f = (right * np.uint64(0x9E3779B1) + k) & _MASK32
            f ^= f >> np.uint64(15)
            f = (f * np.uint64(0x85EBCA6B)) & _MASK32
            left, right = right, (left ^ f) & mask
        x = (left << np.uint64(half)) | right
        result[todo] = x
        todo &= result >= np.uint64(n)
        if not todo.any():
            return result.astype(np.int64)
    raise RuntimeError("cycle walking did not converge")  # pragma: no cover
