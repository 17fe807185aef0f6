"""What reads one corpus's windows: :class:`StreamWindows` (``seq_len + 1`` tokens of the
epoch stream every ``seq_len``) and :class:`PackedWindows` (window ``w`` of a
best-fit-decreasing :class:`~lading.lm.packing.Packing`), both :class:`WindowReader` s.

A reader fills one window (``read``: its tokens and, when asked, each token's document in the
row, -1 for padding) or a batch of them (``read_many``: what the loader calls). A stream's
batch finds every window's pieces at once (:meth:`EpochStream.read_many`); a packed batch
reads window by window. A corpus built in shards and merged is read as one array where its
token files are joined in one range of addresses, else each piece from its part's own file,
the part found once an epoch (:func:`~lading.lm.parts.document_starts`). The epoch's plan, the
mixtures and the rest of a window-mode epoch are in :mod:`lading.lm.windows`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from lading.lm.boundaries import renumber
from lading.lm.corpus import TokenCorpus
from lading.lm.narrow import narrow
from lading.lm.packing import Packing
from lading.lm.parts import document_starts
from lading.lm.stream import EpochStream

Int64s = npt.NDArray[np.int64]  # window numbers, token rows, document ids


class WindowReader(Protocol):
    """The windows of one epoch. A reader whose windows share no work in a batch subclasses
    it and keeps :meth:`read_many`'s default: :meth:`read` of each window in turn."""

    n: int

    def read(self, window: int, tokens: Int64s, document_ids: Int64s | None) -> None:
        """Fill ``tokens`` (``seq_len + 1``) and, when asked, their document ids (-1: padding)."""

    def read_many(self, windows: Int64s, tokens: Int64s, document_ids: Int64s | None) -> None:
        """:meth:`read` of each of ``windows`` into its row of ``tokens`` (and of
        ``document_ids``, when asked): a batch."""
        for row, window in enumerate(np.asarray(windows).tolist()):
            self.read(window, tokens[row], None if document_ids is None else document_ids[row])


class StreamWindows:
    """Windows of ``bptt + 1`` tokens of an epoch stream, every ``bptt`` tokens."""

    def __init__(self, stream: EpochStream, bptt: int) -> None:
        self.stream, self.bptt = stream, bptt
        self.n = (stream.total - 1) // bptt

    def read(self, window: int, tokens: Int64s, document_ids: Int64s | None) -> None:
        self.stream.read(window * self.bptt, tokens)
        if document_ids is not None:
            document_ids[:] = renumber(self.stream.documents(window * self.bptt, len(tokens)))

    def read_many(self, windows: Int64s, tokens: Int64s, document_ids: Int64s | None) -> None:
        """:meth:`read` of a batch: every window's pieces found at once
        (:meth:`EpochStream.read_many`)."""
        starts = np.asarray(windows, dtype=np.int64) * self.bptt
        self.stream.read_many(starts, tokens)
        if document_ids is not None:
            width = tokens.shape[1]
            for row, start in enumerate(starts.tolist()):
                document_ids[row] = renumber(self.stream.documents(start, width))


class PackedWindows(WindowReader):
    """The windows of ``packing`` over ``documents`` of ``corpus`` (padded with ``pad_id``)."""

    def __init__(
        self,
        corpus: TokenCorpus,
        documents: Int64s,
        packing: Packing,
        pad_id: int,
    ) -> None:
        # the arrays read (one, or a merged corpus's parts where they are not joined in one)
        self.parts, part, start = document_starts(corpus.tokens, corpus.offsets, documents)
        # per document: its array (none kept where there is one) and start there, narrow
        self.doc_part = narrow(part) if part is not None and len(self.parts) > 1 else None
        self.doc_start = narrow(start, np.int32)
        self.packing, self.pad_id = packing, pad_id
        self.n = packing.windows
        self.where = where_of(corpus)  # what an error about its windows names

    def scores_nothing(self, eod_mask_loss: bool) -> bool:
        """Whether no window has a label to score: every piece one token (documents of their
        end-of-text token alone) and, under ``eod_mask_loss``, no label across documents
        either; without it, a window of one token in all."""
        p = self.packing
        if not len(p.length):
            return True
        if eod_mask_loss:
            return int(p.length.max()) < 2
        return p.tokens < 2

    def read(self, window: int, tokens: Int64s, document_ids: Int64s | None) -> None:
        p = self.packing
        doc_start, doc_part, parts = self.doc_start, self.doc_part, self.parts
        part, filled = parts[0], 0
        # a.item(i): a Python int at half the cost of int(a[i]) (~40 ns against ~80-100, four
        # a piece); a merged corpus's part, one more a piece (~1 us a batch of 8 windows)
        for segment, piece in enumerate(range(p.ptr.item(window), p.ptr.item(window + 1))):
            length = p.length.item(piece)
            document = p.document.item(piece)
            src = doc_start.item(document) + p.start.item(piece)
            if doc_part is not None:
                part = parts[doc_part.item(document)]
            tokens[filled : filled + length] = part[src : src + length]
            if document_ids is not None:
                document_ids[filled : filled + length] = segment
            filled += length
        tokens[filled:] = self.pad_id
        if document_ids is not None:
            document_ids[filled:] = -1


def where_of(corpus: TokenCorpus | str | os.PathLike[str]) -> str:
    """Where a corpus is, one spelling for each place: its URL without a trailing slash, or
    its resolved local path (what errors about its windows, or a mixture's members, name)."""
    if isinstance(corpus, TokenCorpus):
        url = getattr(corpus, "url", None)
        return url if isinstance(url, str) else str(Path(corpus.path).resolve())
    name = os.fspath(corpus)
    return name.rstrip("/") if "://" in name else str(Path(name).resolve())
