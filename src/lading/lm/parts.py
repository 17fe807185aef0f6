"""A token corpus built in shards reads each shard's ``tokens.bin`` in place: one token count
over several files, no concatenation.

A one-process build has one token file; ``lading lm merge`` (:mod:`lading.lm.merge`) commits
a snapshot whose manifest lists ``parts`` (each shard's directory, documents and tokens, in
document order) and writes nothing else: each part's ``tokens.bin`` and ``tokens.off`` are
read in place, the offsets shifted by the tokens of the parts before (:class:`PartOffsets`).
Documents never span parts, so every slice the LM modes take (a piece of one document) lies
in one file. A local corpus's files are mapped into one range of addresses
(:mod:`lading.lm.joined`): the modes slice that one array at each document's place in it
(:func:`document_starts`), as they slice a one-file corpus's map. Where they are not (a remote
corpus's token files, a platform that cannot), they find each document's part once an epoch
(:meth:`PartOffsets.spans`) and slice that part's file. :class:`PartTokens` serves
``tokens[a:b]`` for everyone else, copying only a slice that crosses a part's end.
"""

from __future__ import annotations

import bisect
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.disk import OFFSET_DTYPE, MappedFile
from lading.disk.ragged import first_descent
from lading.errors import StoreFormatError
from lading.lm.corpus_format import OFFSETS, TOKENS
from lading.lm.joined import join_files


class PartTokens:
    """Several token arrays (memory maps, or remote token files) read as one: ``tokens[a:b]``,
    ``tokens[i]``, ``len``, ``dtype``; ``bases[k]`` is where part ``k`` starts.

    ``joined``, where the parts are local files mapped into one range of addresses
    (:func:`~lading.lm.joined.join_files`; each part a view of it): that one array, part ``k``
    from ``joined_starts[k]`` in it, what the LM modes slice a document's tokens from as from
    a one-file corpus's map. None otherwise (remote token files, or a platform that cannot).
    """

    ndim = 1

    def __init__(
        self,
        parts: list[Any],
        dtype: np.dtype[Any],
        joined: tuple[npt.NDArray[Any], npt.NDArray[np.int64]] | None = None,
    ) -> None:
        self.parts, self.dtype = parts, dtype
        self.joined: npt.NDArray[Any] | None = None if joined is None else joined[0]
        self.joined_starts: npt.NDArray[np.int64] | None = None if joined is None else joined[1]
        sizes = [len(p) for p in parts]
        self.bases = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._starts = self.bases[:-1].tolist()
        self._ends = self.bases[1:].tolist()  # Python ints: a slice compares no numpy scalar
        self.n = int(self.bases[-1])

    def __len__(self) -> int:
        return self.n

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    @property
    def nbytes(self) -> int:
        return self.n * self.dtype.itemsize

    def __getitem__(self, index: slice | int) -> Any:
        if isinstance(index, slice):
            start, stop = index.start, index.stop
            if (
                index.step is not None
                or start is None
                or stop is None
                or not 0 <= start <= stop <= self.n
            ):  # the general case; the LM modes' plain [a:b] skips it (measured: 0.8x)
                start, stop, stride = index.indices(self.n)
                if stride != 1:
                    return self.concatenated()[index]
                stop = max(start, stop)
            k = bisect.bisect_right(self._starts, start) - 1
            base = self._starts[k]
            if stop <= self._ends[k]:  # one part: a view of its file
                return self.parts[k][start - base : stop - base]
            pieces = []  # crosses a part's end: a copy of the pieces
            while start < stop:
                end = min(stop, int(self.bases[k + 1]))
                pieces.append(np.asarray(self.parts[k][start - base : end - base]))
                start, k = end, k + 1
                base = int(self.bases[k]) if k < len(self.parts) else 0
            return np.concatenate(pieces).astype(self.dtype, copy=False)
        if isinstance(index, (int, np.integer)):
            at = int(index) + (self.n if int(index) < 0 else 0)
            if not 0 <= at < self.n:
                raise IndexError(f"token {int(index)} is out of range [0, {self.n})")
            return self[at : at + 1][0]
        return self.concatenated()[index]

    def span(self, start: int, stop: int) -> Any:
        """``self[start:stop]`` for ``0 <= start <= stop <= len``, without parsing a slice: a
        view of one part's file when it lies in one (every piece of a document does)."""
        k = bisect.bisect_right(self._starts, start) - 1
        base = self._starts[k]
        if stop <= self._ends[k]:
            return self.parts[k][start - base : stop - base]
        return self[start:stop]

    def concatenated(self) -> npt.NDArray[Any]:
        """Every token back to back, in memory (a copy)."""
        return np.concatenate([np.asarray(p) for p in self.parts]).astype(self.dtype, copy=False)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.concatenated()
        return out if dtype is None else out.astype(dtype, copy=False)


class PartOffsets:
    """The ``n + 1`` offsets of a corpus built in shards, read from each part's own
    ``tokens.off`` in place (each counts from its part's first token): ``offsets[i]``,
    ``offsets[array]``, ``offsets[a:b]``, ``len``; a gather is a copy (the LM modes gather a
    document's start once per epoch, as from one array)."""

    ndim = 1
    dtype = np.dtype(np.uint64)

    def __init__(
        self,
        parts: list[Any],
        token_bases: npt.NDArray[np.int64],
        joined: tuple[npt.NDArray[Any], npt.NDArray[np.int64]] | None = None,
    ) -> None:
        """``joined``: the parts' offsets mapped into one array and where each part's start
        in it (:func:`mapped_each`), where they were: a gather is then one numpy pass over
        the documents, not a pass a part (a pass a part cost ~0.6 ms an epoch at 200 parts,
        ~4 % of a 4,000-document epoch)."""
        self.parts = parts
        self._joined = joined
        documents = [len(p) - 1 for p in parts]
        self.doc_bases = np.concatenate([[0], np.cumsum(documents)]).astype(np.int64)
        self._doc_starts = self.doc_bases[:-1].tolist()
        self.token_bases = token_bases.astype(np.uint64)
        self.n = int(self.doc_bases[-1]) + 1

    def __len__(self) -> int:
        return self.n

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, (int, np.integer)):
            at = int(index) + (self.n if int(index) < 0 else 0)
            if not 0 <= at < self.n:
                raise IndexError(f"offset {int(index)} is out of range [0, {self.n})")
            k = min(bisect.bisect_right(self._doc_starts, at) - 1, len(self.parts) - 1)
            return self.token_bases[k] + self.parts[k][at - self._doc_starts[k]]
        if isinstance(index, slice):
            index = np.arange(*index.indices(self.n))
        rows = np.asarray(index, dtype=np.int64)
        if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= self.n):
            raise IndexError(f"offsets out of range [0, {self.n})")
        part = np.searchsorted(self.doc_bases[1:-1], rows, side="right")
        local = rows - self.doc_bases[part]
        if self._joined is not None:
            whole, starts = self._joined
            return whole[starts[part] + local] + self.token_bases[part]
        out = np.empty(rows.shape, dtype=np.uint64)
        flat, local_flat = out.reshape(-1), local.reshape(-1)
        for k, mine in enumerate(by_part(part.reshape(-1), len(self.parts))):
            if len(mine):
                flat[mine] = self.parts[k][local_flat[mine]] + self.token_bases[k]
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[0 : self.n]
        return out if dtype is None else out.astype(dtype, copy=False)

    def spans(
        self, documents: npt.ArrayLike
    ) -> tuple[npt.NDArray[np.signedinteger[Any]], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(part, first token, end token) of each of ``documents``, the tokens counted in its
        part's own file (``PartTokens.parts[part][first:end]`` is the document): what the
        epoch stream reads, found once. Documents in ascending order (every document, a
        split) are read a part at a time, each part's offsets sliced in order; in another
        order, gathered part by part as :meth:`__getitem__` does.

        Raises:
            IndexError: a document out of range.
        """
        rows = np.asarray(documents).reshape(-1)  # (int32 documents are not copied wider)
        if rows.dtype.kind != "i":
            rows = rows.astype(np.int64)
        if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= self.n - 1):
            raise IndexError(f"documents out of range [0, {self.n - 1})")
        part_dtype = np.int16 if len(self.parts) < 2**15 else np.int32
        if self._joined is not None:
            whole, starts = self._joined
            of = np.searchsorted(self.doc_bases[1:-1], rows, side="right")
            at = starts[of] + (rows - self.doc_bases[of])
            first, end = whole[at].astype(np.int64), whole[at + 1].astype(np.int64)
            return of.astype(part_dtype), first, end
        part = np.empty(len(rows), dtype=part_dtype)
        first = np.empty(len(rows), dtype=np.int64)
        end = np.empty(len(rows), dtype=np.int64)
        groups: list[Any]  # the rows of each part: a slice of them, or their indices
        if rows.size < 2 or bool((rows[1:] >= rows[:-1]).all()):
            cuts = [0, *np.searchsorted(rows, self.doc_bases[1:-1]).tolist(), len(rows)]
            groups = [slice(a, b) for a, b in itertools.pairwise(cuts)]
        else:
            of = np.searchsorted(self.doc_bases[1:-1], rows, side="right")
            groups = by_part(of, len(self.parts))
        for k, (offsets, at) in enumerate(zip(self.parts, groups)):
            local = rows[at] - self.doc_bases[k]
            if not len(local):
                continue
            part[at] = k
            first[at] = offsets[local]
            end[at] = offsets[local + 1]
        return part, first, end


def by_part(of: npt.NDArray[np.integer[Any]], parts: int) -> list[npt.NDArray[np.intp]]:
    """The positions of ``of`` (each row's part) that hold each of ``parts`` parts, in order:
    one sort, not a pass over every row a part (a thousand parts made that 1,000 passes)."""
    order = np.argsort(of, kind="stable")
    cuts = np.searchsorted(of[order], np.arange(parts + 1)).tolist()
    return [order[a:b] for a, b in itertools.pairwise(cuts)]


def mapped_each(
    paths: list[Path], dtype: np.dtype[Any]
) -> tuple[list[npt.NDArray[Any]], tuple[npt.NDArray[Any], npt.NDArray[np.int64]] | None]:
    """Each file of ``paths`` as an array of ``dtype``: views of one range of addresses
    (:func:`~lading.lm.joined.join_files`: one array to slice, as a one-file corpus's), else
    a map of each; and (the joined array, where each file starts in it), or None where the
    files were mapped one by one."""
    joined = join_files(paths, dtype)
    if joined is None:
        return [MappedFile(path).array(dtype) for path in paths], None
    whole, starts, counts = joined
    views = [whole[a : a + n] for a, n in zip(starts.tolist(), counts)]
    return views, (whole, starts)


def part_offsets(root: Path, meta: dict[str, Any], tokens: PartTokens) -> PartOffsets:
    """The offsets of a corpus built in shards (local, or a bucket's staged copy): each
    part's ``tokens.off`` mapped, checked to hold its documents, to run from 0 to its token
    count and never to go down (:func:`~lading.disk.ragged.first_descent`, a part's file at a
    time: the offsets as one are then in order too, with no copy of them made to check).

    Raises:
        StoreFormatError: a part's offsets do not describe its tokens, naming its file and
            the first document (counted in the corpus) out of order.
    """
    paths = [root / part["dir"] / OFFSETS for part in meta["parts"]]
    arrays, first_document = [], 0
    mapped, joined = mapped_each(paths, OFFSET_DTYPE)
    for part, count, path, offsets in zip(
        meta["parts"], np.diff(tokens.bases).tolist(), paths, mapped
    ):
        n = len(offsets)
        if n != part["documents"] + 1 or int(offsets[-1]) != count or int(offsets[0]) != 0:
            # (a part starting past 0 ran the document before it into this part's tokens)
            raise StoreFormatError(
                f"{path} ({n:,} offsets, from {int(offsets[0]) if n else None}) does not "
                f"describe the part's {part['documents']:,} documents of {count:,} tokens "
                "from 0; rebuild the corpus"
            )
        i = first_descent(offsets)
        if i >= 0:
            raise StoreFormatError(
                f"{path} is not in order: document {first_document + i} of the corpus ends at "
                f"{int(offsets[i + 1])} of its part, before it starts at {int(offsets[i])}; the "
                "file is damaged, rebuild the corpus (`lading lm build ... --shard`, merge)"
            )
        arrays.append(offsets)
        first_document += n - 1
    return PartOffsets(arrays, tokens.bases, joined)


def token_parts(root: Path, meta: dict[str, Any], dtype: np.dtype[Any]) -> Any:
    """The tokens a local corpus's manifest names: the map of ``<dir>/tokens.bin``, or a
    :class:`PartTokens` over every part's (a corpus built in shards), each checked to hold
    the tokens the manifest says.

    Raises:
        StoreFormatError: a part's file does not hold the tokens its entry says.
    """
    parts = meta.get("parts")
    if not parts:
        return MappedFile(root / meta.get("dir", "") / TOKENS).array(dtype)
    paths = [root / part["dir"] / TOKENS for part in parts]
    mapped, joined = mapped_each(paths, dtype)
    arrays = []
    for part, path, array in zip(parts, paths, mapped):
        if len(array) != part["tokens"]:
            raise StoreFormatError(
                f"{path} holds {len(array):,} tokens, the manifest says "
                f"{part['tokens']:,}; rebuild the corpus (`lading lm build ... --shard`, merge)"
            )
        arrays.append(array)
    return PartTokens(arrays, dtype, joined)


def document_starts(
    tokens: Any, offsets: Any, documents: npt.NDArray[np.signedinteger[Any]]
) -> tuple[list[Any], npt.NDArray[np.signedinteger[Any]] | None, npt.NDArray[np.int64]]:
    """(the token arrays the LM modes slice, the array of each of ``documents`` (None: the
    one), its first token there) for a corpus's ``tokens`` and ``offsets``: a one-file corpus's
    map; a merged corpus's parts joined in one array (:attr:`PartTokens.joined`), each
    document's place in it; else its parts, each document's part and start in that part's
    file (:meth:`PartOffsets.spans`)."""
    if not isinstance(offsets, PartOffsets) or not isinstance(tokens, PartTokens):
        return [tokens], None, np.asarray(offsets[documents], np.int64)
    part, first, _ = offsets.spans(documents)
    if tokens.joined is None or tokens.joined_starts is None:
        return tokens.parts, part, first
    return [tokens.joined], None, first + tokens.joined_starts[part]
