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
asks, without reading), and :meth:`EpochStream.read_many` reads many windows at once the same
way, a Python step a piece and nothing else.

A corpus built in shards and merged (:mod:`lading.lm.parts`) is read as one array where its
token files are mapped into one range of addresses (:mod:`lading.lm.joined`), each document at
its place in it: the one-file path, the same Python steps a piece. Where they are not, each
run keeps its part beside its start in that part's file, found once an epoch (a run never
crosses a part's end), and a piece is a slice of its part's file. :attr:`EpochStream.doc_start`
and :meth:`EpochStream.pieces` give positions in the corpus's token count either way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from lading.lm.corpus import TokenCorpus
from lading.lm.narrow import narrow
from lading.lm.parts import PartOffsets, PartTokens
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
        offsets, tokens = corpus.offsets, corpus.tokens
        # the token arrays read (the one file, a merged corpus's parts joined in one array, or
        # its parts), and for a merged corpus where its parts start in the corpus (bases) and
        # in the joined array (joined_starts, None where they are not joined)
        self.files: list[Any] = [tokens]
        self.bases = self.joined_starts = None
        part = None
        if isinstance(offsets, PartOffsets) and isinstance(tokens, PartTokens):
            # each document's part and span in its file, found in the documents' own order
            # (ascending: each part's offsets in turn), then put in the stream's
            part, doc_start, end = offsets.spans(documents)
            self.bases = tokens.bases
            if tokens.joined is not None and tokens.joined_starts is not None:
                shift = tokens.joined_starts[part]  # the place in the one array
                doc_start += shift
                end += shift
                del shift
                part, self.files = None, [tokens.joined]
                self.joined_starts = tokens.joined_starts
            else:
                self.files = tokens.parts
            end -= doc_start
            lengths = narrow(end, np.int32)[order]
            doc_start = doc_start[order]
            part = None if part is None else part[order]
        else:
            docs = documents[order]
            doc_start = _int64(offsets[docs])  # start of each document in tokens
            end = _int64(offsets[docs + 1])
            del docs
            end -= doc_start
            lengths = narrow(end, np.int32)
        del end, order
        self.cum_end = np.cumsum(lengths, dtype=np.int64)  # stream position past each document
        self.total = int(self.cum_end[-1]) if len(self.cum_end) else 0
        self.backwards = backwards
        # the runs (start in their file, length, stream position past each, part): where few
        # merge (a shuffle) the documents' own arrays, so a shuffled stream costs no more
        # memory; the per-document arrays are not kept where runs replace them (stored order)
        run_from, self.run_len, self.run_part = _runs(doc_start, lengths, part)
        self.run_from = narrow(run_from, np.int32)
        fewer = len(self.run_from) != len(doc_start)
        self.run_cum = np.cumsum(self.run_len, dtype=np.int64) if fewer else self.cum_end
        del doc_start, lengths, part
        if self.total < 2:
            raise ValueError(
                f"the {len(documents):,} document(s) read hold {self.total} token(s), fewer than "
                "2: nothing to predict (documents= selects which are read; all by default)"
            )

    @property
    def doc_start(self) -> npt.NDArray[np.signedinteger[Any]]:
        """Where each run of the stream starts in the corpus's tokens: each document's start,
        or where stream-consecutive documents lie back to back in one file, their run's (the
        token ranges of the stream in its order, what a device copy reads)."""
        return self._start(slice(None))

    @property
    def lengths(self) -> npt.NDArray[np.signedinteger[Any]]:
        """The tokens of each range of :attr:`doc_start`."""
        return self.run_len

    def _start(self, runs: Any) -> npt.NDArray[np.signedinteger[Any]]:
        """Where runs ``runs`` start in the corpus's token count (across its parts)."""
        return self._shift(self.run_from[runs], runs)

    def _shift(self, at: Any, runs: Any) -> Any:
        """Positions ``at`` in the files of runs ``runs`` as positions in the corpus's token
        count: the same in a one-file corpus; in a merged one, past its part's base (less
        where the part starts in the joined array, where it is joined)."""
        if self.bases is None:
            return at
        if self.run_part is not None:
            return at + self.bases[self.run_part[runs]]
        if self.joined_starts is None:
            return at
        starts = self.joined_starts  # a run's part: the last to start at or before it
        part = np.searchsorted(starts, self.run_from[runs], side="right") - 1
        return at + (self.bases[part] - starts[part])

    def _read_forward(self, start: int, out: npt.NDArray[np.int64]) -> None:
        pieces = self._pieces_of(start % self.total, len(out))
        files, part, filled = self.files, self.run_part, 0
        if part is None:
            tokens = files[0]
            for _, a, b in pieces:
                out[filled : filled + b - a] = tokens[a:b]
                filled += b - a
            return
        for k, a, b in pieces:  # a merged corpus: the piece's part, kept with its run
            out[filled : filled + b - a] = files[part[k]][a:b]
            filled += b - a

    def _pieces_of(self, pos: int, n: int) -> list[tuple[int, int, int]]:
        """(run, first token, end token in the run's file) of each piece of forward stream
        positions ``[pos, pos + n)``."""
        cum, starts, lengths = self.run_cum, self.run_from, self.run_len
        k = int(np.searchsorted(cum, pos, side="right"))  # once: the rest is k + 1, k + 2…
        found, filled = [], 0
        while filled < n:
            length = int(lengths[k])
            in_run = pos - (int(cum[k]) - length)
            take = min(n - filled, length - in_run)
            src = int(starts[k]) + in_run
            found.append((k, src, src + take))
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
        pos = self._forward(starts, n)
        wraps = pos + n > self.total
        k, first, take, count = self._cut(pos, n, wraps)
        read = np.repeat(np.arange(len(pos), dtype=np.int64), count)
        a = self._start(k) + first
        out = np.stack([read, a, a + take], 1)
        for i in np.flatnonzero(wraps).tolist():  # rare: a stream read past the epoch's end
            found = self._pieces_of(int(pos[i]), n)
            rows = [(i, *self._global(run, lo, hi)) for run, lo, hi in found]
            out = np.concatenate([out[out[:, 0] != i], np.array(rows, dtype=np.int64)])
        if wraps.any():
            out = out[np.argsort(out[:, 0], kind="stable")]
        return out

    def read_many(self, starts: npt.ArrayLike, out: npt.NDArray[np.int64]) -> None:
        """:meth:`read` of stream tokens ``[s, s + width)`` into row ``i`` of ``out`` (``[len,
        width]``) for each ``s`` of ``starts``: the pieces of every read found at once with
        numpy (:meth:`pieces`' way), then one slice a piece. Reads that wrap, or an ``out``
        that is not one block of memory, are read one by one."""
        rows, n = out.shape
        pos = self._forward(starts, n)
        if not rows or not out.flags.c_contiguous or bool((pos + n > self.total).any()):
            for row, start in enumerate(np.asarray(starts).reshape(-1).tolist()):
                self.read(start, out[row])
            return
        k, first, take, _ = self._cut(pos, n)
        src = (self.run_from[k] + first).tolist()
        end = np.cumsum(take).tolist()  # in ``out`` seen flat: each read fills its row in turn
        flat = out.reshape(-1)
        if self.run_part is None:
            tokens = self.files[0]
            for a, t, e in zip(src, take.tolist(), end):
                flat[e - t : e] = tokens[a : a + t]
        else:  # a merged corpus: each piece from its run's part's file (the part looked up in
            # the loop: a map of the parts, or the file of each, cost ~0.4 us a batch more)
            files = self.files
            for f, a, t, e in zip(self.run_part[k].tolist(), src, take.tolist(), end):
                flat[e - t : e] = files[f][a : a + t]
        if self.backwards:
            out[:] = out[:, ::-1].copy()

    def _forward(self, starts: npt.ArrayLike, n: int) -> npt.NDArray[np.int64]:
        """Where forward reads of ``n`` tokens start for reads ``[s, s + n)`` of ``starts``
        (a backward read's piece is the forward stream's, reversed), within the cycle."""
        at = np.asarray(starts, dtype=np.int64).reshape(-1)
        total = self.total
        if self.backwards:
            at = total - at - n
        return at % total

    def _cut(
        self, pos: npt.NDArray[np.int64], n: int, wraps: npt.NDArray[np.bool_] | None = None
    ) -> tuple[
        npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]
    ]:
        """(run, first token within the run, tokens taken) of every piece of the forward
        reads ``[p, p + n)`` of ``pos``, read by read in stream order, and the pieces of each
        read; a read of ``wraps`` gets one placeholder piece (read it by :meth:`_pieces_of`)."""
        cum = self.run_cum
        k0 = cum.searchsorted(pos, side="right")
        k1 = cum.searchsorted(pos + (n - 1), side="right")
        if wraps is not None:
            k1 = np.where(wraps, k0, k1)
        count = k1 - k0 + 1
        first = np.cumsum(count) - count
        k = np.repeat(k0 - first, count) + np.arange(int(count.sum()), dtype=np.int64)
        end = cum[k]
        run_first = end - self.run_len[k]  # stream position of run k
        at = np.repeat(pos, count)
        lo = np.maximum(run_first, at)
        return k, lo - run_first, np.minimum(end, at + n) - lo, count

    def _global(self, run: int, a: int, b: int) -> tuple[int, int]:
        """``(a, b)`` in run ``run``'s file as positions in the corpus's token count."""
        shift = int(self._shift(np.zeros(1, dtype=np.int64), np.array([run]))[0])
        return a + shift, b + shift

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
    doc_start: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.signedinteger[Any]],
    part: npt.NDArray[np.signedinteger[Any]] | None,
) -> tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.signedinteger[Any]],
    npt.NDArray[np.signedinteger[Any]] | None,
]:
    """``(start, length, part)`` of each run of stream-consecutive documents that are
    consecutive in one token file too (empty documents dropped; ``doc_start`` counts in the
    file of each document's ``part``, None for a one-file corpus): ``doc_start``, ``lengths``
    and ``part`` themselves where no document is empty and merging would leave more than half
    as many runs as documents (a shuffle: the few that merge by chance are read as two
    slices, where three new arrays of the documents' size would cost more memory than they
    save reads). A run ends at its part's end: the next part's first document is another
    file's."""
    end = doc_start + lengths
    joins = doc_start[1:] == end[:-1]
    if part is not None:
        joins &= part[1:] == part[:-1]
    joins |= lengths[1:] == 0
    nonempty = bool((lengths > 0).all())
    if 2 * int(joins.sum()) < len(lengths) and nonempty:
        return doc_start, lengths, part
    del joins
    start = doc_start
    if not nonempty:
        keep = lengths > 0
        start, end = doc_start[keep], end[keep]
        part = None if part is None else part[keep]
    if not len(start):
        return start, end - start, part
    cut = start[1:] != end[:-1]
    if part is not None:
        cut |= part[1:] != part[:-1]
    breaks = np.flatnonzero(cut) + 1
    first = np.concatenate([[0], breaks]).astype(np.int64)
    last = np.concatenate([breaks - 1, [len(start) - 1]]).astype(np.int64)
    runs = narrow(end[last] - start[first], np.int32)
    return start[first], runs, None if part is None else part[first]


def _int64(offsets: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Token offsets as int64: uint64 ones (below 2**63, file positions) viewed, not copied."""
    found = np.asarray(offsets)
    return found.view(np.int64) if found.dtype == np.uint64 else found.astype(np.int64)
