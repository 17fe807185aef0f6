"""A language-model corpus on the GPU: LM stream batches gathered there from positions.

``LanguageModelLoader(..., device="cuda")`` is the same loader in every respect that matters
for training and resume (the same plan, position, state, layout and fingerprint: its states and
a host loader's are interchangeable); only where the tokens are read differs. For whole-epoch
streams, the main training path, each batch is read on the device from the stream position of
every row (:class:`ResidentStream`, :func:`device_streams`): nothing but the row starts crosses
the bus. Windows and the segments after an elastic resume are read on the host (the step's
``.to(device)`` copies them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt
import torch

from lading.device import ResidentTokens
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


def device_streams(
    stream: ResidentStream, seg: LMSegment, first: int, first_stream: int, rows: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches ``first …`` of whole-epoch streams read on the device: row ``r`` of batch ``b``
    is stream ``first_stream + r`` at its offset of batch ``b``; ``seq + 1`` tokens are read
    there, and only the row starts cross the bus."""
    length = seg.plan.each
    starts = torch.arange(first_stream, first_stream + rows, dtype=torch.int64) * length
    offset = seg.offset(first)
    for seq in seg.seqs[first : seg.batches]:
        x = stream.read(starts + offset, seq + 1)
        offset += seq
        yield x[:, :seq], x[:, 1 : seq + 1]


def ResidentLanguageModelLoader(*args: Any, **kwargs: Any) -> NoReturn:  # noqa: N802
    """Gone: a loader on a device is ``LanguageModelLoader(..., device=...)``."""
    raise TypeError(
        "ResidentLanguageModelLoader(corpus, batch_size, sequence, device=d) is now "
        "LanguageModelLoader(corpus, batch_size, sequence, device=d): on a device is one "
        "keyword of the one LM loader (resident= shares tokens already there)"
    )
