"""The epoch stream of a token corpus: documents permuted, concatenated, never materialised.

A position of the stream maps to (document, offset) through the cumulative lengths of the
permuted documents (an int64 per document, beside its start and length, int32 where they
fit), so reading any piece of a 4B-token stream costs a binary search and a copy of the
piece. The stream is a cycle: reads past its end continue from its start.

Documents that follow each other in ``tokens.bin`` as they do in the stream (all of them when
the documents keep their stored order, ``shuffle=False`` or ``Windows(...,
shuffle_documents=False)``) are read as one *run*: a read copies one slice a run it meets, not
one a document, so a window of a stored-order stream is one slice (one range of a remote
corpus's ``tokens.bin``) however many documents it spans. :meth:`EpochStream.pieces` gives the
runs' token ranges many reads touch, computed at once with numpy (what a remote corpus's plan
asks, without reading).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.lm.corpus import TokenCorpus
from lading.lm.narrow import narrow
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
        del order
        offsets = corpus.offsets
        self.tokens = corpus.tokens
        doc_start = _int64(offsets[docs])  # start of each document in tokens
        end = _int64(offsets[docs + 1])
        del docs
        lengths = narrow(end - doc_start, np.int32)
        del end
        self.cum_end = np.cumsum(lengths, dtype=np.int64)  # stream position past each document
        self.total = int(self.cum_end[-1]) if len(self.cum_end) else 0
        self.backwards = backwards
        # the runs (start in tokens, length, stream position past each): where few merge (a
        # shuffle) the documents' own arrays, so a shuffled stream costs no more memory; the
        # per-document arrays are not kept where runs replace them (the stored order)
        run_start, self.run_len = _runs(doc_start, lengths)
        self.run_start = narrow(run_start, np.int32)
        merged = len(self.run_start) != len(doc_start)
        self.run_cum = np.cumsum(self.run_len, dtype=np.int64) if merged else self.cum_end
        del doc_start, lengths
        if self.total < 2:
            raise ValueError(
                f"the {len(documents):,} document(s) read hold {self.total} token(s), fewer than "
                "2: nothing to predict (documents= selects which are read; all by default)"
            )

    @property
    def doc_start(self) -> npt.NDArray[np.signedinteger[Any]]:
        """Where each run of the stream starts in the tokens: each document's start, or where
        stream-consecutive documents lie back to back in the tokens, their run's (the token
        ranges of the stream in its order, what a device copy reads)."""
        return self.run_start

    @property
    def lengths(self) -> npt.NDArray[np.signedinteger[Any]]:
        """The tokens of each range of :attr:`doc_start`."""
        return self.run_len

    def _read_forward(self, start: int, out: npt.NDArray[np.int64]) -> None:
        tokens = self.tokens
        pieces = self._pieces_of(start % self.total, len(out))
        filled = 0
        if not isinstance(tokens, PartTokens):
            for a, b in pieces:
                out[filled : filled + b - a] = tokens[a:b]
                filled += b - a
            return
        # a merged corpus: each piece's part found here, not by a call a piece (PartTokens.span
        # cost ~0.9x the one-file read); a run across parts' ends is read by span
        parts, starts, ends = tokens.parts, tokens._starts, tokens._ends
        for a, b in pieces:
            k = bisect_right(starts, a) - 1
            base = starts[k]
            out[filled : filled + b - a] = (
                parts[k][a - base : b - base] if b <= ends[k] else tokens.span(a, b)
            )
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
    doc_start: npt.NDArray[np.int64], lengths: npt.NDArray[np.signedinteger[Any]]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.signedinteger[Any]]]:
    """``(start, length)`` in ``tokens`` of each run of stream-consecutive documents that are
    consecutive in ``tokens`` too (empty documents dropped): ``doc_start`` and ``lengths``
    themselves where no document is empty and merging would leave more than half as many
    runs as documents (a shuffle: the few that merge by chance are read as two slices, where
    three new arrays of the documents' size would cost more memory than they save reads)."""
    end = doc_start + lengths
    joins = (doc_start[1:] == end[:-1]) | (lengths[1:] == 0)
    nonempty = bool((lengths > 0).all())
    if 2 * int(joins.sum()) < len(lengths) and nonempty:
        return doc_start, lengths
    del joins
    start = doc_start
    if not nonempty:
        keep = lengths > 0
        start, end = doc_start[keep], end[keep]
    if not len(start):
        return start, end - start
    breaks = np.flatnonzero(start[1:] != end[:-1]) + 1
    first = np.concatenate([[0], breaks]).astype(np.int64)
    last = np.concatenate([breaks - 1, [len(start) - 1]]).astype(np.int64)
    return start[first], narrow(end[last] - start[first], np.int32)


def _int64(offsets: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Token offsets as int64: uint64 ones (below 2**63, file positions) viewed, not copied."""
    found = np.asarray(offsets)
    return found.view(np.int64) if found.dtype == np.uint64 else found.astype(np.int64)
