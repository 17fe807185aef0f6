"""A language-model loader whose corpus lives on the GPU: batches gathered there from positions.

:class:`ResidentLanguageModelLoader` is a :class:`~lading.lm.LanguageModelLoader` in every
respect that matters for training and resume (the same plan, cursor, state, layout and
fingerprint: its states and the host loader's are interchangeable); only where the tokens are
read differs. For whole-epoch streams, the main training path, each batch is read on the device
from the stream position of every row (:class:`ResidentStream`): nothing but the
row starts crosses the bus. Windows and the segments after an elastic resume are read on the
host as by the parent class (the step's ``.to(device)`` copies them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from lading.device import ResidentTokens, to_device
from lading.lm.corpus import TokenCorpus
from lading.lm.loader import LanguageModelLoader
from lading.lm.modes import SequenceOptions
from lading.lm.segment import LMSegment


class ResidentStream:
    """An LM epoch stream read on the device: documents (given by their start and length in
    the resident tokens, in epoch order) concatenated into a cycle.

    Args:
        resident: the corpus's tokens on the device.
        doc_start, lengths: per document of the epoch, in order (host arrays; copied once).
        backwards: read the stream from its end to its start.
    """

    def __init__(
        self,
        resident: ResidentTokens,
        doc_start: npt.NDArray[np.int64],
        lengths: npt.NDArray[np.int64],
        backwards: bool = False,
    ) -> None:
        device = resident.device
        self.resident, self.backwards = resident, backwards
        self.doc_start = torch.from_numpy(np.asarray(doc_start, dtype=np.int64)).to(device)
        self.lengths = torch.from_numpy(np.asarray(lengths, dtype=np.int64)).to(device)
        self.cum_end = torch.cumsum(self.lengths, 0)
        self.total = int(np.sum(lengths))
        if self.total < 1:
            raise ValueError("the epoch stream holds no tokens")

    def read(self, starts: torch.Tensor | npt.ArrayLike, n: int) -> torch.Tensor:
        """int64 ``[rows, n]``: row ``r`` is stream positions ``[starts[r], starts[r] + n)``,
        wrapping at the end of the stream (what ``EpochStream.read`` gives, row by row)."""
        device = self.resident.device
        begin = torch.as_tensor(starts, dtype=torch.int64).to(device)
        total = self.total
        if self.backwards:  # reversed [s, s+n) is forward [T-s-n, T-s), read back to front
            begin = (total - begin - n) % total
        pos = (begin[:, None] + torch.arange(n, device=device)) % total
        k = torch.searchsorted(self.cum_end, pos, right=True)
        src = self.doc_start[k] + pos - (self.cum_end[k] - self.lengths[k])
        out = self.resident.take(src)
        return out.flip(1) if self.backwards else out


class ResidentLanguageModelLoader(LanguageModelLoader):
    """A :class:`LanguageModelLoader` over ``corpus`` with its tokens on ``device``.

    Args:
        corpus: the tokenized corpus.
        batch_size, sequence: as for :class:`LanguageModelLoader` (and every other keyword).
        device: where the tokens go (once, at construction) and the batches are built.
        resident: the corpus already on the device (shared with another loader, e.g. the
            validation loader); default: copied from ``corpus``.
    """

    def __init__(
        self,
        corpus: TokenCorpus,
        batch_size: int,
        sequence: SequenceOptions,
        *,
        device: torch.device | str,
        resident: ResidentTokens | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(corpus, batch_size, sequence, **kwargs)
        self.resident = resident if resident is not None else to_device(corpus, device)
        # keyed by the segment object itself, held here: an id() could be reused by the next
        # epoch's segment once this one is freed, and that epoch would read this one's order
        self._on_device: tuple[LMSegment, ResidentStream] | None = None

    def loader(self, *args: Any, **kwargs: Any) -> Any:
        """Not available: a GPU-resident loader reads in the training process."""
        raise ValueError(
            "a GPU-resident loader builds batches on the device in-process; DataLoader workers "
            "cannot share its device tensors (use LanguageModelLoader(...).loader() instead)"
        )

    def _device_stream(self, seg: LMSegment) -> ResidentStream:
        """The segment's epoch stream on the device (its document order copied once)."""
        if self._on_device is None or self._on_device[0] is not seg:
            stream = seg.stream
            assert stream is not None  # streams mode: the only mode read on the device
            on_device = ResidentStream(
                self.resident, stream.doc_start, stream.lengths, stream.backwards
            )
            self._on_device = (seg, on_device)
        return self._on_device[1]

    def _iter_streams(self, seg: LMSegment) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Whole-epoch streams: row ``r`` of batch ``b`` is stream ``rank * batch_size + r``
        at its offset of batch ``b``; read ``seq + 1`` tokens there, on the device."""
        stream, cursor, length = self._device_stream(seg), self.cursor, seg.plan.each
        first = self.world.rank * self.batch_size
        rows = torch.arange(first, first + self.batch_size, dtype=torch.int64)
        offset = seg.offset(cursor.batches)
        while cursor.batches < seg.batches:
            seq = seg.seqs[cursor.batches]
            x = stream.read(rows * length + offset, seq + 1)
            cursor.batches += 1
            offset += seq
            yield x[:, :seq], x[:, 1 : seq + 1]
