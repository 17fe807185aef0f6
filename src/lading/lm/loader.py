"""LanguageModelLoader: token streams in O(batch x bptt) memory that keep BPTT continuity.

Each epoch the documents are permuted from ``(seed, epoch)``, the same on every rank. Their
concatenation, the epoch stream, is never built: a position in it maps to (document, offset)
through the cumulative lengths of the permuted documents (one int64 per document). The stream
is cut into ``world_size * batch_size`` contiguous streams; rank ``k`` reads streams
``k*batch_size … (k+1)*batch_size - 1``, one per batch row, so row ``r`` of batch ``t+1`` starts
exactly where row ``r`` of batch ``t`` ended and an RNN's hidden state carries over (the point
of the fastai thread). The epoch stream is read as a cycle of ``T`` (input, target) pairs: its
last token, an end-of-document, predicts its first, as every end-of-document predicts the
start of the next document. Streams have ``ceil(T / (world_size * batch_size))`` positions; the
last ones wrap around to the start of the epoch stream, so every token is used and every rank
takes the same number of batches (``equalize="truncate"`` drops the tail instead). The cut is
the loader core's planner (:mod:`lading.loading.plan`) with one reader per stream.

In this process, whole-epoch streams are read in bulk, many batches at a time, and every batch is
a view of an array no later batch overwrites (:mod:`lading.lm.batches`): ``list(loader)`` keeps
every batch intact, as with a DataLoader.
:meth:`LanguageModelLoader.loader` builds the same batches in DataLoader workers instead
(persistent ones too): every batch is asked for by a key that says which batch of which segment
it is; a worker reads its rows.

The shape of a sequence is one options object, each holding only what its mode reads
(:mod:`lading.lm.modes`, one module per mode):

- ``Streams(bptt, jitter="fastai", backwards=False, chunk_batches=128)``: the streams above.
  Sequence lengths vary per batch (``jitter="fastai"``: ``bptt`` with probability 0.95, else
  ``bptt / 2``, then ``max(5, int(normal(that, 5)))``, capped at ``bptt + 25``; or a uniform
  ``(low, high)`` range; or ``None`` for fixed) from ``(seed, epoch)``, identical on all ranks.
- ``Windows(seq_len, boundaries=False, eod_mask_loss=True, backwards=False)``: independent
  ``seq_len + 1`` windows of the same epoch stream in an order shuffled by ``(seed, epoch)``
  and dealt to ranks (Megatron/nanoGPT style, for transformers); the order is a keyed Feistel
  permutation computed per index, so even it costs nothing proportional to the token count.
  Windows are dealt round-robin over the ranks by the same planner (``interleave``).
- ``Packed(seq_len, boundaries=False, eod_mask_loss=True)``: windows of ``seq_len + 1``
  tokens into which whole documents were packed by best-fit decreasing
  (:mod:`lading.lm.packing`): no document is cut unless it is longer than a window, and the
  rest of a window is padding (:meth:`packing_stats`), labelled ``IGNORE_INDEX`` (-100, what
  ``cross_entropy`` skips) in ``(x, y)`` batches, as are the starts of documents with
  ``eod_mask_loss`` (the default). The packed windows are the epoch's positions, planned,
  shuffled and resumed exactly like windows.

A :class:`~lading.lm.windows.TokenMixture` in place of the corpus mixes several corpora by
weight in either window mode. ``boundaries=True`` makes every batch a
:class:`~lading.lm.boundaries.DocumentBatch` (position ids restarting at each document,
``cu_seqlens``, document ids for the attention mask, a loss mask) instead of ``(x, y)``.

A checkpoint can be resumed on another number of processes or with another batch size
(*elastic*). What is left of the epoch is known exactly: in a window mode a suffix of the
window order; in streams, the unread end of every stream, kept as runs of stream
positions (:class:`lading.loading.runs.Runs`, two integers per stream). Both are the core's one
mechanism (:mod:`lading.loading.state`): what is left becomes the base of a new segment of the
epoch, planned over the new streams (or ranks), so each remaining position is predicted
exactly once more this epoch. Across the change the set of
(input, target) pairs is bitwise that of the uninterrupted epoch; the rows that hold them, and
the hidden state a row carries, are not (reset it: an old row has no counterpart).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt
import torch

from lading.lm.batches import Batch, chunked_streams
from lading.lm.corpus import TokenCorpus
from lading.lm.modes import REGISTERED, Packed, SequenceOptions, Streams, Windows, mode_of
from lading.lm.modes.moved import refuse_moved
from lading.lm.segment import LMSegment, SegmentBatchKey
from lading.lm.stream import EpochStream
from lading.lm.windows import EpochWindows, TokenMixture
from lading.loading.loader import BatchKeyed
from lading.loading.plan import (
    check_batch_size,
    check_equalize,
    refuse_drop_last,
)
from lading.loading.runs import Runs
from lading.loading.source import StatefulSource
from lading.loading.state import Cursor
from lading.world import World

__all__ = ["MODES", "LanguageModelLoader", "Packed", "Streams", "Windows"]

MODES: tuple[str, ...] = tuple(REGISTERED)  # the registered modes' names (loader.mode)
# sequence= has no default; this one lets an old keyword-only call (bptt=70) reach the
# TypeError that names its new spelling instead of Python's "missing argument"
_REQUIRED: Any = None


def check_documents(documents: npt.ArrayLike, count: int) -> npt.NDArray[np.int64]:
    """``documents`` as int64 when each is a document of a corpus of ``count``; else a
    ValueError naming the first that is not (before: numpy's IndexError, or for a negative
    number an error blaming the corpus)."""
    given = np.asarray(documents)
    shown = given.tolist() if given.size <= 8 else [*given[:8].tolist(), "..."]
    if given.ndim != 1 or (given.size and not np.issubdtype(given.dtype, np.integer)):
        raise ValueError(
            f"documents= must be a flat list of document numbers (ints), got {shown!r}"
        )
    bad = given[(given < 0) | (given >= count)]
    if bad.size:
        raise ValueError(
            f"documents={shown!r}: {int(bad[0])} is not a document of this corpus (0 to "
            f"{count - 1}); pass document numbers in that range"
        )
    return given.astype(np.int64)


def _same_position(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """(cursor, epoch, segment, base) equal: the same objects, the same numbers."""
    return a[0] is b[0] and a[1] == b[1] and a[2] == b[2] and a[3] is b[3]


class LanguageModelLoader(BatchKeyed, StatefulSource):
    """Batches ``(x, y)`` of shape ``[batch_size, seq]`` from a :class:`TokenCorpus`.

    ``LanguageModelLoader(corpus, 64, Streams(70))``, ``(corpus, 16, Windows(512))`` or
    ``(corpus, 16, Packed(512, boundaries=True))``. The batching keywords are those of every
    lading loader.

    Args:
        corpus: the tokenized corpus, or a :class:`TokenMixture` of several (window modes).
        batch_size: rows per batch on this rank.
        sequence: the shape of a sequence and how the epoch is read: :class:`Streams`,
            :class:`Windows` or :class:`Packed` (each holds only what its mode reads).
        shuffle: permute documents (and windows) each epoch.
        seed: with the epoch, fixes every order and length.
        equalize: ``"pad"`` (wrap around to fill the last streams or windows) or
            ``"truncate"`` (drop the epoch's tail).
        drop_partial_batch: leave out a rank's last, partial batch (window modes).
        documents: use only these documents (e.g. a training split), in this base order.
        world: rank and world size (default: detected; the global rank).
        drop_last: refused with a TypeError naming lading's two arguments for it.
        **moved: none taken: the keywords that moved into ``sequence`` (``bptt``, ``mode``,
            ``bptt_jitter``, ``backwards``, ``chunk_batches``, ``boundaries``,
            ``eod_mask_loss``) are refused with a TypeError that writes out the new call.

    Attributes:
        sequence: the options given; ``mode`` is their registered name.
        max_seq: the longest batch row, in (input, target) pairs.
    """

    kind = "lm"

    def __init__(
        self,
        corpus: TokenCorpus | TokenMixture,
        batch_size: int,
        sequence: SequenceOptions = _REQUIRED,
        *,
        shuffle: bool = True,
        seed: int = 0,
        equalize: str = "pad",
        drop_partial_batch: bool = False,
        documents: npt.ArrayLike | None = None,
        world: World | None = None,
        drop_last: None = None,
        **moved: NoReturn,  # none taken: a type checker flags an old keyword as well
    ) -> None:
        refuse_moved(moved, "LanguageModelLoader")
        refuse_drop_last(drop_last, "LanguageModelLoader")
        self._mode = mode_of(sequence)
        self._mode.check(corpus)
        if isinstance(corpus, TokenMixture) and documents is not None:
            raise ValueError("documents= selects from one corpus; a TokenMixture takes them all")
        batch_size = check_batch_size(batch_size)
        self.corpus, self.batch_size, self.sequence = corpus, batch_size, sequence
        self.shuffle, self.seed = shuffle, seed
        self.equalize, self.drop_partial_batch = check_equalize(equalize), drop_partial_batch
        self.world = world or World.detect()
        parts = corpus.corpora if isinstance(corpus, TokenMixture) else [corpus]
        self.documents = (
            np.arange(len(parts[0]), dtype=np.int64)
            if documents is None
            else check_documents(documents, len(parts[0]))
        )
        length, backwards = self._mode.length(self), self._mode.backwards(self)
        self._windows = EpochWindows(
            corpus, self.documents, self.mode, length, seed, shuffle, backwards
        )
        self.max_seq = self._mode.max_seq(self)
        chunk_batches = sequence.chunk_batches if isinstance(sequence, Streams) else 1
        # the shape of each chunk of stream read at once (streams, in-process)
        self._chunk = (batch_size, self.max_seq * chunk_batches + 1)
        self.cursor = Cursor()
        # the plan of the cursor's segment, with the cursor state it was made for
        self._segment: tuple[tuple[Any, ...], LMSegment] | None = None
        self._keyed: tuple[tuple[int, int], LMSegment] | None = None  # planned for keys
        self._check_epoch()

    @property
    def mode(self) -> str:
        """The registered name of the sequence's mode: ``"streams"``, ``"windows"``, ..."""
        return self._mode.name

    def _check_epoch(self) -> None:
        """Refuse settings whose first epoch has no batch, as every lading loader does."""
        self._mode.check_epoch(self)

    def __getstate__(self) -> dict[str, Any]:
        """What a DataLoader worker gets: no buffer, no plan (an epoch stream holds the token
        map, which would be pickled as a copy of the corpus); the corpus pickles as its path."""
        state = dict(self.__dict__)
        state["_segment"] = state["_keyed"] = None
        return state

    # ------------------------------------------------------------------ planning

    def _stream(self, epoch: int) -> EpochStream:
        return EpochStream(
            self._windows.parts[0][0],
            self.documents,
            self.seed,
            epoch,
            self.shuffle,
            self._mode.backwards(self),
        )

    def packing_stats(self) -> dict[str, Any]:
        """``Packed``: windows, pieces, tokens and padding (``padding_fraction`` of the token
        slots), summed over a mixture's corpora."""
        return self._mode.packing_stats(self)

    def _plan_segment(self, cursor: Cursor, layout: Mapping[str, Any]) -> LMSegment:
        """The plan of ``cursor``'s segment under ``layout`` (this run's or a saved one)."""
        return self._mode.plan(self, cursor, layout)

    def _current(self) -> LMSegment:
        """The plan of the cursor's segment, kept while the cursor stays in that segment.

        The cache is checked against the cursor itself (the object, its epoch, segment and
        base), not only cleared by the loader's own methods: a wrapper that restores a state
        (ResumableLoader, DCP) replaces the cursor, and a stale plan would read another epoch.
        """
        cursor, cached = self.cursor, self._segment
        key = (cursor, cursor.epoch, cursor.segment, cursor.base)
        if cached is None or not _same_position(cached[0], key):
            cached = self._segment = (key, self._plan_segment(cursor, self.layout()))
        return cached[1]

    # ------------------------------------------------------------------ iteration

    def __len__(self) -> int:
        """Batches left in the current epoch (the same on every rank)."""
        return self._current().batches - self.cursor.batches

    def epoch_length(self) -> int:
        """Batches of the current epoch (segment) on this rank, read and left."""
        return self._current().batches

    @property
    def epoch(self) -> int:
        return self.cursor.epoch

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first batch."""
        self.cursor.start_epoch(epoch)
        self._segment = None

    def __iter__(self) -> Iterator[Batch]:
        segment, cursor = self._current(), self.cursor
        if self._mode.bulk and cursor.base is None:
            yield from self._iter_streams(segment)
            return
        while cursor.batches < segment.batches:
            # a fresh array per batch: the batch handed out is a view of it, never reused
            x = np.empty((self.batch_size, self.max_seq + 1), dtype=np.int64)
            batch = self._build(segment, cursor, cursor.batches, x)
            cursor.batches += 1
            yield batch

    def _iter_streams(self, seg: LMSegment) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Whole-epoch streams, read a chunk of many batches at a time (a GPU-resident loader
        reads them on the device instead)."""
        return chunked_streams(seg, self.cursor, self._first_stream, self._chunk)

    @property
    def _first_stream(self) -> int:
        """The first of this rank's streams ("streams" mode: one per batch row)."""
        return self.world.rank * self.batch_size

    def _build(self, seg: LMSegment, cursor: Cursor, batch: int, x: npt.NDArray[np.int64]) -> Batch:
        """Batch ``batch`` of ``seg``, read row by row into ``x`` (``[batch_size, seq + 1]``)."""
        return self._mode.build(self, seg, cursor, batch, x)

    # ------------------------------------------------------------------ DataLoader workers
    # ``loader(num_workers)`` (from BatchKeyed) builds batches in workers: worth it when batches
    # are large or far apart in the corpus (windows over a network filesystem); in-process
    # iteration is faster for small RNN batches.

    def batches(self) -> int:
        """Batches this rank yields in the current segment of the epoch."""
        return self._current().batches

    def keys(self) -> Iterator[SegmentBatchKey]:
        """Keys of this rank's batches from the cursor on (see :meth:`loader`)."""
        cursor, base = self.cursor, self.cursor.base
        saved = None if base is None else (tuple(base.starts.tolist()), tuple(base.stops.tolist()))
        for batch in range(cursor.batches, self._current().batches):
            yield SegmentBatchKey(cursor.epoch, cursor.segment, batch, saved)

    def __getitem__(self, key: SegmentBatchKey) -> Batch:
        """The batch ``key`` names, in fresh arrays (it leaves the worker process)."""
        base = None if key.base is None else Runs(*key.base)
        cursor = Cursor(key.epoch, key.segment, base, key.batch)
        if self._keyed is None or self._keyed[0] != (key.epoch, key.segment):
            self._keyed = ((key.epoch, key.segment), self._plan_segment(cursor, self.layout()))
        x = np.empty((self.batch_size, self.max_seq + 1), dtype=np.int64)
        return self._build(self._keyed[1], cursor, key.batch, x)

    # ------------------------------------------------------------------ state

    def layout(self) -> dict[str, Any]:
        """What fixes who reads what; another layout on resume is an elastic resume."""
        return {
            "world_size": self.world.world_size,
            "batch_size": self.batch_size,
            **self._mode.layout(self),
        }

    def fingerprint(self) -> dict[str, Any]:
        """What fixes the corpus and its orders; a state must match it to be resumed."""
        fingerprint: dict[str, Any] = {
            "mode": self.mode,
            "seed": self.seed,
            "backwards": self._mode.backwards(self),
            "documents": len(self.documents),
            "tokens": sum(corpus.n_tokens for corpus, _ in self._windows.parts),
            "shuffle": self.shuffle,
            "equalize": self.equalize,
            "drop_partial_batch": self.drop_partial_batch,
        }
        fingerprint.update(self._mode.fingerprint(self))
        if isinstance(self.corpus, TokenMixture):
            fingerprint.update(self.corpus.fingerprint())
        return fingerprint

    def unread(self, layout: Mapping[str, Any], cursor: Cursor) -> Runs:
        """Epoch positions (stream positions or window-order positions) not read under
        ``layout`` at ``cursor``: the end of every stream (or rank's windows) and the tail
        ``truncate`` left out."""
        seg = self._plan_segment(cursor, layout)
        return seg.core.unread_after(cursor.batches)

    def consumed(self) -> int:
        seg = self._current().core
        return seg.read_after(self.cursor.batches) * seg.readers

    def _cursor_moved(self) -> None:
        self._segment = None  # the plan belonged to the old cursor
