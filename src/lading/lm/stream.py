"""The epoch stream of a token corpus: documents permuted, concatenated, never materialised.

A position of the stream maps to (document, offset) through the cumulative lengths of the
permuted documents, one int64 per document, so reading any piece of a 4B-token stream costs a
binary search and a copy of the piece. The stream is a cycle: reads past its end continue
from its start.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from lading.lm.corpus import TokenCorpus
from lading.lm.parts import locate
from lading.loading.order import Salt, permutation


class EpochStream:
    """The documents ``documents`` of ``corpus`` in the order of ``(seed, epoch)``.

    Args:
        corpus: the tokenized corpus (memory-mapped).
        documents: the documents to use (a training split), in their base order.
        seed, epoch, shuffle: the permutation of the documents.
        backwards: read the stream from its end to its start.
    """

    def __init__(
        self,
        corpus: TokenCorpus,
        documents: npt.NDArray[np.int64],
        seed: int,
        epoch: int,
        shuffle: bool,
        backwards: bool,
    ) -> None:
        order = permutation(len(documents), seed, Salt.DOCUMENT_ORDER, epoch, shuffle=shuffle)
        docs = documents[order]
        offsets = corpus.offsets
        self.parts, bases = corpus.parts()  # the token files (one per shard of a merged corpus)
        starts = offsets[docs].astype(np.int64)  # start of each document in the corpus
        self.lengths = offsets[docs + 1].astype(np.int64) - starts
        # each document's file and start there: a piece of a document is a slice of one file
        self.doc_part, self.doc_start = locate(bases, starts)
        self.cum_end = np.cumsum(self.lengths)  # stream position just past each document
        self.total = int(self.cum_end[-1]) if len(self.cum_end) else 0
        self.backwards = backwards
        if self.total < 2:
            raise ValueError("the corpus has fewer than 2 tokens: nothing to predict")

    def _read_forward(self, start: int, out: npt.NDArray[np.int64]) -> None:
        parts, doc_part, cum_end, lengths, doc_start = (
            self.parts,
            self.doc_part,
            self.cum_end,
            self.lengths,
            self.doc_start,
        )
        pos, n, filled = start % self.total, len(out), 0
        k = int(np.searchsorted(cum_end, pos, side="right"))  # once: the rest is k + 1, k + 2…
        while filled < n:
            length = int(lengths[k])
            in_doc = pos - (int(cum_end[k]) - length)
            take = min(n - filled, length - in_doc)
            src = int(doc_start[k]) + in_doc
            out[filled : filled + take] = parts[doc_part[k]][src : src + take]
            filled += take
            pos += take
            k += 1
            if k == len(cum_end):  # wrap around to the start of the epoch stream
                k, pos = 0, 0

    def read(self, start: int, out: npt.NDArray[np.int64]) -> None:
        """Stream tokens ``[start, start + len(out))`` (wrapping at the end) into ``out``."""
        if not self.backwards:
            self._read_forward(start, out)
            return
        n, total = len(out), self.total
        # the reversed stream's [start, start+n) is the forward stream's [T-start-n, T-start)
        self._read_forward((total - start - n) % total, out)
        out[:] = out[::-1].copy()

    def documents(self, start: int, n: int) -> npt.NDArray[np.int64]:
        """A document number for every stream token ``[start, start + n)``, wrapping like
        :meth:`read`: the index in this epoch's order, plus one cycle of documents per wrap
        (so a wrap always starts a new document, even in a one-document corpus)."""
        if self.backwards:  # the reversed stream's piece is the forward one's, reversed
            at = (self.total - start - n) + np.arange(n, dtype=np.int64)
        else:
            at = start + np.arange(n, dtype=np.int64)
        cycle = np.floor_divide(at, self.total)
        number = np.searchsorted(self.cum_end, at - cycle * self.total, side="right")
        number = number + cycle * len(self.cum_end)
        return number[::-1] if self.backwards else number
