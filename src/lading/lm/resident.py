"""A language-model loader whose corpus lives on the GPU: batches gathered there from positions.

:class:`ResidentLanguageModelLoader` is a :class:`~lading.lm.LanguageModelLoader` in every
respect that matters for training and resume (the same plan, cursor, state, layout and
fingerprint: its states and the host loader's are interchangeable); only where the tokens are
read differs. For whole-epoch streams, the main training path, each batch is read on the device
from the stream position of every row (:class:`lading.device.ResidentStream`): nothing but the
row starts crosses the bus. Windows and the segments after an elastic resume are read on the
host as by the parent class (the step's ``.to(device)`` copies them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from lading.device import ResidentStream, ResidentTokens, to_device
from lading.lm.corpus import TokenCorpus
from lading.lm.loader import LanguageModelLoader
from lading.lm.segment import Segment


class ResidentLanguageModelLoader(LanguageModelLoader):
    """A :class:`LanguageModelLoader` over ``corpus`` with its tokens on ``device``.

    Args:
        corpus: the tokenized corpus.
        batch_size, bptt: as for :class:`LanguageModelLoader` (and every other keyword).
        device: where the tokens go (once, at construction) and the batches are built.
        resident: the corpus already on the device (shared with another loader, e.g. the
            validation loader); default: copied from ``corpus``.
    """

    def __init__(
        self,
        corpus: TokenCorpus,
        batch_size: int,
        bptt: int,
        *args: Any,
        device: torch.device | str,
        resident: ResidentTokens | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(corpus, batch_size, bptt, *args, **kwargs)
        self.resident = resident if resident is not None else to_device(corpus, device)
        # keyed by the segment object itself, held here: an id() could be reused by the next
        # epoch's segment once this one is freed, and that epoch would read this one's order
        self._on_device: tuple[Segment, ResidentStream] | None = None

    def loader(self, *args: Any, **kwargs: Any) -> Any:
        """Not available: a GPU-resident loader reads in the training process."""
        raise ValueError(
            "a GPU-resident loader builds batches on the device in-process; DataLoader workers "
            "cannot share its device tensors (use LanguageModelLoader(...).loader() instead)"
        )

    def _device_stream(self, seg: Segment) -> ResidentStream:
        """The segment's epoch stream on the device (its document order copied once)."""
        if self._on_device is None or self._on_device[0] is not seg:
            stream = seg.stream
            assert stream is not None  # streams mode: the only mode read on the device
            on_device = ResidentStream(
                self.resident, stream.doc_start, stream.lengths, stream.backwards
            )
            self._on_device = (seg, on_device)
        return self._on_device[1]

    def _iter_streams(self, seg: Segment) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
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
