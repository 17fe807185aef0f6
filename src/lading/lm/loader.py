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
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from lading.lm.corpus import TokenCorpus
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

    def _seq_lengths(self, epoch: int, positions: int) -> list[int]:
        """Lengths of the epoch's batches: they add up to ``positions`` (the last is cut)."""
        rng = np.random.default_rng([self.seed, epoch, 1])
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
            per_rank = (
                windows // self.world.world_size
                if self.drop_last
                else -(-windows // self.world.world_size)
            )
            batches = (
                per_rank // self.batch_size if self.drop_last else -(-per_rank // self.batch_size)
            )
            return _Plan(epoch, index, 0, [], batches, windows, per_rank)
        if self.drop_last:
            length = (index.total - 1) // streams
        else:
            length = -(-(index.total - 1) // streams)
        if length < 1:
            raise ValueError(
                f"{index.total} tokens cannot fill {streams} streams "
                f"(world_size x batch_size); use a smaller batch_size"
            )
        seqs = self._seq_lengths(epoch, length)
        return _Plan(epoch, index, length, seqs, len(seqs), 0, 0)

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
        self.epoch, self.batch = epoch, 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        plan = self._plan_for(self.epoch)
        if self.mode == "windows":
            yield from self._iter_windows(plan)
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

    def _iter_windows(self, plan: _Plan) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        width = self.bptt + 1
        buf = self._buffer[:, :width]
        world = self.world
        while self.batch < plan.batches:
            lo = self.batch * self.batch_size
            slots = np.arange(lo, min(lo + self.batch_size, plan.per_rank), dtype=np.int64)
            flat = slots * world.world_size + world.rank  # round-robin over ranks
            flat = flat % plan.windows  # padding wraps to the first windows
            key = (self.seed, plan.epoch) if self.shuffle else None
            order = feistel_permutation(flat, plan.windows, key) if key else flat
            for row, window in enumerate(order.tolist()):
                self._read(plan.index, window * self.bptt, buf[row])
            rows = len(order)
            self.batch += 1
            yield torch.from_numpy(buf[:rows, :-1]), torch.from_numpy(buf[:rows, 1:])

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """Epoch and next batch, with what fixes the plan (checked on load)."""
        return {
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
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` left off: the next batch is the one after the saved one."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"loader state version {state.get('version')}, expected {STATE_VERSION}"
            )
        mine = self.state_dict()
        for key in (
            "seed",
            "batch_size",
            "bptt",
            "world_size",
            "mode",
            "backwards",
            "documents",
            "tokens",
        ):
            if state[key] != mine[key]:
                raise ValueError(
                    f"loader state has {key}={state[key]!r}, this loader "
                    f"{mine[key]!r}; resume with the settings of the saved run"
                )
        self.epoch, self.batch = int(state["epoch"]), int(state["batch"])


@dataclass
class _Plan:
    epoch: int
    index: _Epoch
    length: int  # positions per stream (streams mode)
    seqs: list[int]
    batches: int
    windows: int  # windows mode
    per_rank: int


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
