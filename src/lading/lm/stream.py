"""The epoch stream of a token corpus: documents permuted, concatenated, never materialised.

A position of the stream maps to (document, offset) through the cumulative lengths of the
permuted documents, one int64 per document, so reading any piece of a 4B-token stream costs a
binary search and a copy of the piece. The stream is a cycle: reads past its end continue
from its start.

Documents that follow each other in ``tokens.bin`` as they do in the stream (all of them when
the documents keep their stored order, ``shuffle=False`` or ``Windows(...,
shuffle_documents=False)``) are read as one *run*: a read copies one slice a run it meets, not
one a document, so a window of a stored-order stream is one slice (one range of a remote
corpus's ``tokens.bin``) however many documents it spans. :meth:`EpochStream.pieces` gives the
runs' token ranges many reads touch, computed at once with numpy (what a remote corpus's plan
asks, without reading).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from lading.lm.corpus import TokenCorpus
from lading.lm.parts import PartTokens
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
        self.tokens = corpus.tokens
        self.doc_start = offsets[docs].astype(np.int64)  # start of each document in tokens
        self.lengths = offsets[docs + 1].astype(np.int64) - self.doc_start
        self.cum_end = np.cumsum(self.lengths)  # stream position just past each document
        self.total = int(self.cum_end[-1]) if len(self.cum_end) else 0
        self.backwards = backwards
        # the runs (start in tokens, length, stream position past each): where none merge
        # (a shuffle) the documents' own arrays, so a shuffled stream costs no more memory
        self.run_start, self.run_len = _runs(self.doc_start, self.lengths)
        merged = len(self.run_start) != len(self.doc_start)
        self.run_cum = np.cumsum(self.run_len) if merged else self.cum_end
        if self.total < 2:
            raise ValueError(
                f"the {len(documents):,} document(s) read hold {self.total} token(s), fewer than "
                "2: nothing to predict (documents= selects which are read; all by default)"
            )

    def _read_forward(self, start: int, out: npt.NDArray[np.int64]) -> None:
        tokens = self.tokens
        span = tokens.span if isinstance(tokens, PartTokens) else None  # a merged corpus
        filled = 0
        for a, b in self._pieces_of(start % self.total, len(out)):
            out[filled : filled + b - a] = tokens[a:b] if span is None else span(a, b)
            filled += b - a

    def _pieces_of(self, pos: int, n: int) -> list[tuple[int, int]]:
        """The token ranges (runs' pieces) of forward stream positions ``[pos, pos + n)``."""
        cum, starts, lengths = self.run_cum, self.run_start, self.run_len
        k = int(np.searchsorted(cum, pos, side="right"))  # once: the rest is k + 1, k + 2…
        found, filled = [], 0
        while filled < n:
            length = int(lengths[k])
            in_run = pos - (int(cum[k]) - length)
            take = min(n - filled, length - in_run)
            src = int(starts[k]) + in_run
            found.append((src, src + take))
            filled += take
            pos += take
            k += 1
            if k == len(cum):  # wrap around to the start of the epoch stream
                k, pos = 0, 0
        return found

    def pieces(self, starts: npt.ArrayLike, n: int) -> npt.NDArray[np.int64]:
        """``[k, 3]``: (read, first token, end token) of every run piece that reads ``[s, s +
        n)`` of the stream touch, for each ``s`` of ``starts`` (read ``i`` is ``starts[i]``),
        in stream order within a read (a backward read's pieces, forward: it fills reversed).
        Reads that do not wrap are computed with numpy at once, nothing per piece."""
        at = np.asarray(starts, dtype=np.int64).reshape(-1)
        total = self.total
        if self.backwards:
            at = (total - at - n) % total
        pos = at % total
        cum, run_start = self.run_cum, self.run_start
        wraps = pos + n > total
        k0 = np.searchsorted(cum, pos, side="right")
        k1 = np.searchsorted(cum, pos + n - 1, side="right")
        k1 = np.where(wraps, k0, k1)
        count = k1 - k0 + 1
        read = np.repeat(np.arange(len(pos), dtype=np.int64), count)
        first = np.cumsum(count) - count
        k = np.repeat(k0 - first, count) + np.arange(int(count.sum()), dtype=np.int64)
        run_first = cum[k] - self.run_len[k]  # stream position of run k
        lo = np.maximum(run_first, pos[read])
        hi = np.minimum(cum[k], pos[read] + n)
        out = np.stack([read, run_start[k] + lo - run_first, run_start[k] + hi - run_first], 1)
        for i in np.flatnonzero(wraps).tolist():  # rare: a stream read past the epoch's end
            rows = [(i, a, b) for a, b in self._pieces_of(int(pos[i]), n)]
            out = np.concatenate([out[out[:, 0] != i], np.array(rows, dtype=np.int64)])
        if wraps.any():
            out = out[np.argsort(out[:, 0], kind="stable")]
        return out

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


def _runs(
    doc_start: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(start, length)`` in ``tokens`` of each run of stream-consecutive documents that are
    consecutive in ``tokens`` too (empty documents dropped): ``doc_start`` and ``lengths``
    themselves where none merge (a shuffle, but by chance)."""
    end = doc_start + lengths
    joins = (doc_start[1:] == end[:-1]) | (lengths[1:] == 0)
    if not joins.any() and (lengths > 0).all():
        return doc_start, lengths
    keep = lengths > 0
    start, end = doc_start[keep], end[keep]
    if not len(start):
        return start, end - start
    breaks = np.flatnonzero(start[1:] != end[:-1]) + 1
    first = np.concatenate([[0], breaks]).astype(np.int64)
    last = np.concatenate([breaks - 1, [len(start) - 1]]).astype(np.int64)
    return start[first], end[last] - start[first]
