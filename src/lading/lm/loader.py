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

In this process (``num_workers=0``), whole-epoch streams are read in bulk, many batches at a
time, and every batch is a view of an array no later batch overwrites (:mod:`lading.lm.batches`):
``list(loader)`` keeps every batch intact, as with a DataLoader. ``num_workers=2`` builds the
same batches in DataLoader workers instead (persistent ones too): every batch is asked for by a
key that says which batch of which segment it is; a worker reads its rows. ``device="cuda"``
holds the corpus on the GPU and reads whole-epoch streams there (:mod:`lading.lm.resident`).
The loader itself is the one loader of every workload (:class:`lading.loading.Loader`): it
counts the batches, keeps the position and saves it; the LM hands it a
:class:`~lading.lm.workload.LMWorkload`.

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
  Windows are dealt round-robin over the ranks by the same planner (``interleave``); under
  the locality shuffle each rank reads a run of positions instead (blocks of its own).
  ``shuffle_documents=False`` cuts the stream of the stored document order (each window one
  range of ``tokens.bin``); ``block_tokens`` shuffles blocks of it with locality
  (:mod:`lading.lm.blocks`).
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
the hidden state a row carries, are not (reset it: an old row has no counterpart). That holds
under ``equalize="pad"``; under ``"truncate"`` the new segment is truncated as an epoch is, so
that every rank reads as many batches: what does not fill the new layout (a few windows or a
few (input, target) pairs a stream) is left out of this epoch, as an uninterrupted epoch
leaves out its tail. One exception, the core's (:func:`lading.loading.plan.plan`): where
fewer positions are left than the new layout has readers (ranks, or streams: ranks x rows),
they are not dropped but padded to one a reader, so each of the ``n`` left is read about
``readers / n`` times this epoch (a resume near an epoch's end onto more readers loses no
position).
"""

from __future__ import annotations

from typing import Any

import numpy.typing as npt
import torch

from lading.device import ResidentTokens, to_device
from lading.lm.corpus import TokenCorpus
from lading.lm.modes import REGISTERED, Packed, SequenceOptions, Streams, Windows, mode_of
from lading.lm.remote_reads import remote_reads
from lading.lm.windows import TokenMixture
from lading.lm.workload import LMWorkload
from lading.loading.loader import Loader, Workers
from lading.loading.reading import Reading, refuse_drop_last
from lading.world import World

__all__ = ["MODES", "LanguageModelLoader", "Packed", "Streams", "Windows"]

MODES: tuple[str, ...] = tuple(REGISTERED)  # the registered modes' names (loader.mode)


class LanguageModelLoader(Loader):
    """Batches ``(x, y)`` of shape ``[batch_size, seq]`` from a :class:`TokenCorpus`.

    ``LanguageModelLoader(corpus, 64, Streams(70))``, ``(corpus, 16, Windows(512))`` or
    ``(corpus, 16, Packed(512, boundaries=True))``. The keywords are those of every lading
    loader (``lading.loader``, ``PartitionedParquet``), ``device`` and ``documents`` besides.

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
        num_workers, pin_memory, prefetch_factor, persistent_workers, multiprocessing_context:
            DataLoader workers build the batches (0: this process reads them, many at a time).
        read_ahead: with ``num_workers=0``, batches built ahead on a thread while a step runs
            (:mod:`lading.loading.read_ahead`); default 2 for a remote corpus (its batches are read
            through the node cache one at a time), else 0.
        device: hold the corpus's tokens on this device and read whole-epoch streams there
            (in this process only).
        resident: the corpus already on a device (shared with another loader, e.g. the
            validation loader's); implies ``device``.
        drop_last: refused with a TypeError naming lading's two arguments for it.

    Attributes:
        sequence: the options given; ``mode`` is their registered name.
        max_seq: the longest batch row, in (input, target) pairs.
    """

    def __init__(
        self,
        corpus: TokenCorpus | TokenMixture,
        batch_size: int,
        sequence: SequenceOptions,
        *,
        shuffle: bool = True,
        seed: int = 0,
        equalize: str = "pad",
        drop_partial_batch: bool = False,
        documents: npt.ArrayLike | None = None,
        world: World | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch_factor: int | None = None,
        persistent_workers: bool | None = None,
        multiprocessing_context: str | None = None,
        read_ahead: int | None = None,
        device: torch.device | str | None = None,
        resident: ResidentTokens | None = None,
        drop_last: None = None,
    ) -> None:
        refuse_drop_last(drop_last, "LanguageModelLoader")
        reading = Reading.of(batch_size, shuffle, seed, equalize, drop_partial_batch, world)
        mode = mode_of(sequence)
        workers = Workers(
            num_workers, pin_memory, prefetch_factor, persistent_workers, multiprocessing_context
        )
        workload = LMWorkload(
            corpus, mode, reading, documents, on_device(corpus, device, resident, workers)
        )
        reads = remote_reads(workload, num_workers)  # remote: reads planned (None: local)
        announce = None if reads is None else reads.announce
        # a remote batch is ~5-10 ms of reads through the node cache: built beside the step
        remote_batches = reads is not None and workload.resident is None
        workers = (
            workers.for_remote(read_ahead, repr(corpus))
            if remote_batches
            else workers.with_read_ahead(read_ahead, default=0)
        )
        if workload.resident is not None and workers.read_ahead:
            raise ValueError(
                f"read_ahead={workers.read_ahead} with the corpus on {workload.resident.device}: "
                "batches are built there, in this process's CUDA stream order, not on a "
                "thread; drop read_ahead (or device=, to build them on the host)"
            )
        super().__init__(reads or workload, workers, announce=announce)
        self._lm, self.corpus, self.sequence = workload, corpus, sequence

    @property
    def mode(self) -> str:
        """The registered name of the sequence's mode: ``"streams"``, ``"windows"``, ..."""
        return self._lm.mode.name

    @property
    def epochs_alike(self) -> bool:
        """Whether every epoch has as many batches as the first: not with jittered
        ``Streams`` (the default), whose lengths each epoch draws from (seed, epoch), so its
        batch count differs an epoch (:meth:`~lading.loading.Loader.batches_in`)."""
        return getattr(self.sequence, "jitter", None) is None

    @property
    def max_seq(self) -> int:
        """The longest batch row, in (input, target) pairs."""
        return self._lm.max_seq

    @property
    def documents(self) -> npt.NDArray[Any]:
        """The documents read, in their base order."""
        return self._lm.documents

    @property
    def resident(self) -> ResidentTokens | None:
        """The corpus's tokens on the device, with ``device=``; else None."""
        return self._lm.resident

    def packing_stats(self) -> dict[str, Any]:
        """``Packed``: windows, pieces, tokens and padding (``padding_fraction`` of the token
        slots), summed over a mixture's corpora."""
        return self._lm.packing_stats()


def check_resident(corpus: TokenCorpus, resident: ResidentTokens) -> None:
    """Refuse ``resident`` tokens copied from another corpus than ``corpus`` (its gathers
    would read that corpus's tokens, clamped, without a word), naming both."""
    other = resident.content is not None and resident.content != corpus.content_id
    if other or len(resident) != len(corpus) or resident.tokens.numel() != corpus.n_tokens:
        raise ValueError(
            f"resident= holds the tokens of another corpus ({len(resident):,} documents, "
            f"{resident.tokens.numel():,} tokens) than {corpus!r} ({len(corpus):,} documents, "
            f"{corpus.n_tokens:,} tokens): pass to_device({corpus!r}, device), or device="
        )


def on_device(
    corpus: TokenCorpus | TokenMixture,
    device: torch.device | str | None,
    resident: ResidentTokens | None,
    workers: Workers,
) -> ResidentTokens | None:
    """The corpus's tokens on ``device`` (copied once, or ``resident`` as given), or None."""
    if device is None and resident is None:
        return None
    if workers.num_workers:
        raise ValueError(
            f"device= builds batches on the device in this process; num_workers="
            f"{workers.num_workers} DataLoader workers cannot share its tensors: pass "
            "num_workers=0 with device=, or leave device= out to read in workers"
        )
    if isinstance(corpus, TokenMixture):
        raise ValueError("device= holds one TokenCorpus on the device, not a TokenMixture")
    if workers.pin_memory:
        raise ValueError(
            "pin_memory=True pins batches built on the CPU; with device= (or resident=) they "
            "are built on the device: leave pin_memory out"
        )
    if resident is not None:
        check_resident(corpus, resident)
        return resident
    assert device is not None
    return to_device(corpus, device)
