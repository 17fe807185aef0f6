"""The language-model workload of the one loader: plans kept, batches built, bulk reads.

:class:`LMWorkload` holds what fixes an LM epoch (the corpus or mixture, the documents, the
mode made from the sequence options, the :class:`~lading.loading.reading.Reading` settings) and
answers the loader (:class:`lading.loading.Loader`) for any position it is asked about: how
many batches, their keys, one batch, and for whole-epoch streams in this process a bulk read of
many batches at a time (:func:`~lading.lm.batches.chunked_streams`, or on a device
:func:`~lading.lm.resident.device_streams`). The mode plans a segment once; the plan is kept
while the loader stays in that segment. (Over 400 lines: one class, every answer the loader
asks of an LM epoch; split, its halves would each reach into the other's plans.)
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.device import ResidentTokens
from lading.errors import LoaderStateError
from lading.lm.batches import Batch, chunked_streams
from lading.lm.corpus import TokenCorpus
from lading.lm.modes import Mode
from lading.lm.modes.base import ManyReads
from lading.lm.narrow import all_documents, narrow
from lading.lm.resident import ResidentStream, device_streams
from lading.lm.segment import LMSegment, SegmentBatchKey
from lading.lm.stream import EpochStream
from lading.lm.windows import EpochWindows, TokenMixture
from lading.loading.order import FEISTEL_ROUND
from lading.loading.reading import Reading
from lading.loading.runs import Runs
from lading.loading.segment import Segment
from lading.loading.state import Cursor, base_of, check_position
from lading.loading.workload import SegmentWorkload

Base = tuple[tuple[int, ...], tuple[int, ...]]  # an elastic segment's base, as a key holds it


def check_documents(documents: npt.ArrayLike, count: int) -> npt.NDArray[np.signedinteger[Any]]:
    """``documents`` as int32 (int64 from 2**31 documents) when each is a document of a corpus
    of ``count``, given once; else a ValueError naming the first that is not (before: numpy's
    IndexError, or for a negative number an error blaming the corpus), or the first repeated."""
    given = np.asarray(documents)
    shown = given.tolist() if given.size <= 8 else [*given[:8].tolist(), "..."]
    if given.ndim != 1 or (given.size and not np.issubdtype(given.dtype, np.integer)):
        mask = given.dtype == np.bool_  # (a mask of the documents to read: say how)
        hint = "; for a mask of the documents to read, pass np.flatnonzero(mask)" if mask else ""
        raise ValueError(
            f"documents= must be a flat list of document numbers (ints), got {shown!r}{hint}"
        )
    bad = given[(given < 0) | (given >= count)]
    if bad.size:
        raise ValueError(
            f"documents={shown!r}: {int(bad[0])} is not a document of this corpus (0 to "
            f"{count - 1}); pass document numbers in that range"
        )
    ordered = np.sort(given, kind="stable")
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if repeated.size:  # (a split drawn with replacement, two splits joined that overlap)
        first = int(repeated[0])
        raise ValueError(
            f"documents={shown!r}: document {first} is given "
            f"{int(np.count_nonzero(given == first))} times ({repeated.size} repeats in all): "
            "its tokens would be read that many times an epoch, as a parquet file given twice "
            "is refused; pass each document once (np.unique(documents))"
        )
    return narrow(given.astype(np.int64, copy=False), np.int32)


def documents_digest(documents: npt.NDArray[np.signedinteger[Any]], count: int) -> str:
    """What a state records of ``documents=`` (of a corpus of ``count``): ``"all"`` for every
    document in its stored order (the default, however it was given), else a BLAKE2b of the
    document numbers in order: another split, or the same one in another base order, is other
    epochs of the same size (~0.13 s for 3.2M documents, once a loader)."""
    if len(documents) == count and np.array_equal(documents, np.arange(count)):
        return "all"
    numbers = np.ascontiguousarray(documents, dtype="<i8")
    return hashlib.blake2b(numbers.tobytes(), digest_size=16).hexdigest()


def base_key(base: Runs | None) -> Base | None:
    """A segment's base as plain tuples (what a batch key carries to a worker)."""
    return None if base is None else (tuple(base.starts.tolist()), tuple(base.stops.tolist()))


def _named(corpus: TokenCorpus) -> str:
    """A corpus as an error names it: the URL it was opened from (not the node's staged copy
    it reads), else its path."""
    return corpus.url or str(corpus.path)


class LMWorkload(SegmentWorkload):
    """Batches of a token corpus (or mixture) as ``mode`` reads them; see the module docstring.

    Args:
        corpus: the tokenized corpus, or a :class:`TokenMixture` (window modes).
        mode: the registered mode made from the loader's sequence options.
        reading: batch size, ranks, seed, shuffle, equalize, drop_partial_batch.
        documents: the documents read, in their base order (default: all).
        resident: the corpus's tokens on a device: whole-epoch streams are read there.
    """

    kind = "lm"

    def __init__(
        self,
        corpus: TokenCorpus | TokenMixture,
        mode: Mode,
        reading: Reading,
        documents: npt.ArrayLike | None = None,
        resident: ResidentTokens | None = None,
    ) -> None:
        mode.check(corpus)
        if isinstance(corpus, TokenMixture) and documents is not None:
            raise ValueError("documents= selects from one corpus; a TokenMixture takes them all")
        self.corpus, self.mode, self.reading, self.resident = corpus, mode, reading, resident
        first = corpus.corpora[0] if isinstance(corpus, TokenMixture) else corpus
        self.documents = (  # int32 below 2**31 documents: 4 bytes a document, every process
            all_documents(len(first))
            if documents is None
            else check_documents(documents, len(first))
        )
        # which documents, in which base order (the fingerprint's "documents" is their count)
        self.documents_digest = (
            "all" if documents is None else documents_digest(self.documents, len(first))
        )
        self.data = EpochWindows(
            corpus,
            self.documents,
            mode.name,
            mode.length(),
            reading.seed,
            reading.shuffle,
            mode.backwards(),
            shuffle_documents=mode.shuffles_documents(),
        )
        self.max_seq = mode.max_seq()
        # the shape of each chunk of stream read at once (streams, in this process)
        self.chunk = (reading.batch_size, self.max_seq * mode.chunk_batches() + 1)
        # the last two plans made, with their (epoch, segment, base), the newest last: the
        # position's, and one more for the next epoch's keys (announced ahead to a remote store)
        self._kept: list[tuple[tuple[int, int, Base | None], LMSegment]] = []
        self._on_device: tuple[LMSegment, ResidentStream] | None = None
        mode.check_epoch(self.planned(Cursor()), reading)

    def __getstate__(self) -> dict[str, Any]:
        """What a DataLoader worker gets: no plan (an epoch stream holds the token map, which
        would be pickled as a copy of the corpus); the corpus pickles as its path."""
        return {**self.__dict__, "_kept": [], "_on_device": None}

    # ------------------------------------------------------------------ planning

    def segment(self, cursor: Cursor, layout: Mapping[str, Any] | None = None) -> Segment:
        """The core's segment of :meth:`planned` (batches, unread, consumed follow from it)."""
        return self.planned(cursor, layout).core

    def planned(self, cursor: Cursor, layout: Mapping[str, Any] | None = None) -> LMSegment:
        """The plan of ``cursor``'s segment under ``layout`` (default: this run's, and then the
        plan is kept while the position stays in that segment)."""
        if layout is not None:
            view = self.mode.view(self.data, cursor.epoch)
            return self.mode.plan(view, cursor, layout, self.reading)
        return self._kept_plan(cursor.epoch, cursor.segment, base_key(cursor.base), cursor)

    def _kept_plan(
        self, epoch: int, segment: int, base: Base | None, cursor: Cursor | None = None
    ) -> LMSegment:
        """This run's plan of the segment (``epoch``, ``segment``, ``base``): the one kept, or
        a new one (made for ``cursor``, or for a cursor at the segment's start)."""
        for was, planned in reversed(self._kept):
            if was[0] == epoch and was[1] == segment and (was[2] is base or was[2] == base):
                return planned
        if cursor is None:
            cursor = Cursor(epoch, segment, None if base is None else Runs(*base))
        view = self.mode.view(self.data, epoch)
        planned = self.mode.plan(view, cursor, self.layout(), self.reading)
        self._kept = [*self._kept[-1:], ((epoch, segment, base), planned)]
        return planned

    def batches(self, cursor: Cursor) -> int:
        """Batches each rank yields in ``cursor``'s segment (the kept plan's, read once)."""
        return self.planned(cursor).batches

    def keys(self, cursor: Cursor) -> Iterator[SegmentBatchKey]:
        base = base_key(cursor.base)
        for batch in range(cursor.batches, self.planned(cursor).batches):
            yield SegmentBatchKey(cursor.epoch, cursor.segment, batch, base)

    def build(self, key: SegmentBatchKey) -> Batch:
        """The batch ``key`` names, in fresh arrays (it may leave a worker process)."""
        seg = self._kept_plan(key.epoch, key.segment, key.base)
        x = np.empty((self.reading.batch_size, self.max_seq + 1), dtype=np.int64)
        return self.mode.build(seg, key, x, self.reading)

    def reads(self, key: SegmentBatchKey) -> npt.NDArray[np.int64] | None:
        """``[k, 3]``: (corpus, first token, end token) of each token range batch ``key``
        reads, from the plan (no token read); None where the mode cannot say (build it)."""
        seg = self._kept_plan(key.epoch, key.segment, key.base)
        return self.mode.reads(seg, key, self.reading)

    def plan_keys(self, keys: list[SegmentBatchKey]) -> None:
        """Prepare the reads of ``keys`` at once (a remote corpus's plan asks of each next)."""
        groups: dict[tuple[int, int, Base | None], list[int]] = {}
        for key in keys:
            groups.setdefault((key.epoch, key.segment, key.base), []).append(key.batch)
        for (epoch, segment, base), batches in groups.items():
            seg = self._kept_plan(epoch, segment, base)
            self.mode.plan_orders(seg, batches, epoch, self.reading)

    def fetches(self, key: SegmentBatchKey) -> npt.NDArray[np.int64] | None:
        """As :meth:`reads`, what a remote corpus should fetch for batch ``key``: whole
        blocks under the locality shuffle (``Windows(block_tokens=...)``)."""
        seg = self._kept_plan(key.epoch, key.segment, key.base)
        return self.mode.fetches(seg, key, self.reading)

    def reads_many(self, keys: list[SegmentBatchKey]) -> ManyReads | None:
        """:meth:`reads` of ``keys`` at once: which key (its index in ``keys``) reads each
        range, and the ranges; None where the mode cannot say."""
        return self._many(keys, self.mode.reads_many)

    def node_reads_many(self, keys: list[SegmentBatchKey]) -> ManyReads | None:
        """:meth:`reads_many` of ``keys`` by every other rank, where the whole world is on this
        node (``world_size == local_world_size``: one cache), for a remote corpus's plan
        (:mod:`lading.remote.whole`); None on one rank, many nodes, or a mode that cannot say."""
        world = self.reading.world
        if world.world_size == 1 or world.world_size != world.local_world_size:
            return None
        whiches, rows = [], []
        for rank in sorted(set(range(world.world_size)) - {world.rank}):
            on = dataclasses.replace(world, rank=rank, local_rank=rank)
            other = dataclasses.replace(self.reading, world=on)

            def of(
                seg: LMSegment, ks: list[SegmentBatchKey], _: Reading, o: Reading = other
            ) -> Any:
                return self.mode.reads_many(seg, ks, o)

            found = self._many(keys, of)
            if found is None:
                return None
            whiches.append(found[0])
            rows.append(found[1])
        return np.concatenate(whiches), np.concatenate(rows)

    def fetches_many(self, keys: list[SegmentBatchKey]) -> ManyReads | None:
        """:meth:`fetches` of ``keys`` at once, as :meth:`reads_many`."""
        return self._many(keys, self.mode.fetches_many)

    def _many(
        self,
        keys: list[SegmentBatchKey],
        of: Callable[[LMSegment, list[SegmentBatchKey], Reading], ManyReads | None],
    ) -> ManyReads | None:
        """``of`` asked of each segment's keys, the answers put together."""
        groups: dict[tuple[int, int, Base | None], list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault((key.epoch, key.segment, key.base), []).append(i)
        whiches, rows = [], []
        for (epoch, segment, base), mine in groups.items():
            seg = self._kept_plan(epoch, segment, base)
            found = of(seg, [keys[i] for i in mine], self.reading)
            if found is None:
                return None
            whiches.append(np.asarray(mine, dtype=np.int64)[found[0]])
            rows.append(found[1])
        if not rows:
            return np.empty(0, dtype=np.int64), np.empty((0, 3), dtype=np.int64)
        return np.concatenate(whiches), np.concatenate(rows)

    def bulk(self, cursor: Cursor) -> Iterator[Batch] | None:
        """Whole-epoch streams read many batches at a time (on the device with ``resident``);
        None for windows and after an elastic resume (batch by batch)."""
        if not self.mode.bulk or cursor.base is not None:
            return None
        seg = self.planned(cursor)
        first_stream = self.reading.rank * self.reading.batch_size
        if self.resident is not None:
            stream = self._device_stream(seg)
            return device_streams(stream, seg, cursor.batches, first_stream, self.chunk[0])
        return chunked_streams(seg, cursor.batches, first_stream, self.chunk)

    def _device_stream(self, seg: LMSegment) -> ResidentStream:
        """The segment's epoch stream on the device (its document order copied once); keyed by
        the segment object itself, held here, as an id() could be reused by the next one."""
        if self._on_device is None or self._on_device[0] is not seg:
            stream = seg.stream
            assert stream is not None and self.resident is not None  # streams, on a device
            made = ResidentStream(self.resident, stream.doc_start, stream.lengths, stream.backwards)
            self._on_device = (seg, made)
        return self._on_device[1]

    # ------------------------------------------------------------------ state

    def layout(self) -> dict[str, Any]:
        """What fixes who reads what; another layout on resume is an elastic resume."""
        return {**self.reading.layout(), **self.mode.layout()}

    def fingerprint(self) -> dict[str, Any]:
        """What fixes the corpus and its orders; a state must match it to be resumed."""
        reading = self.reading
        found: dict[str, Any] = {
            "mode": self.mode.name,
            **reading.fingerprint(),
            "backwards": self.mode.backwards(),
            "documents": len(self.documents),
            "documents_digest": self.documents_digest,
            "tokens": sum(corpus.n_tokens for corpus, _ in self.data.parts),
        }
        found.update(self.mode.fingerprint())
        if self._feistel():
            found["window_order"] = FEISTEL_ROUND
        if isinstance(self.corpus, TokenMixture):
            found.update(self.corpus.fingerprint())
            if not reading.shuffle:  # drawn once (before: each epoch); states of then refused
                found["mixture_draw"] = "once"
        # the tokens themselves (each corpus's snapshot content, from the manifest it pinned):
        # a corpus rebuilt from other text with the same sizes is other data
        found["content"] = [corpus.content_id for corpus, _ in self.data.parts]
        return found

    def saved_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """``state`` with its fingerprint in today's keys (a window mode's ``bptt`` read as
        ``seq_len``), its documents (:meth:`saved_documents`) and its corpora's content
        checked (:meth:`saved_content`)."""
        check_position(state)
        self._check_base(state)
        saved = self.mode.saved_fingerprint(state.get("fingerprint", {}), state.get("layout", {}))
        saved = self.saved_documents(saved)
        if self._feistel() and saved.get("window_order") != FEISTEL_ROUND:
            if self._saved_at_its_end(state):  # none of its epoch's order is left to read
                saved = {**saved, "window_order": FEISTEL_ROUND}
                return {**state, "fingerprint": self.saved_content(saved)}
            raise LoaderStateError(
                "the loader state was saved by a lading whose shuffle of windows drew other "
                "orders (its permutations of a few dozen windows stayed near the stored order): "
                "the batches left in its epoch are not the ones this lading draws. Start the "
                "epoch without the state (set_epoch), or resume with the lading that saved it"
            )
        return {**state, "fingerprint": self.saved_content(saved)}

    def _check_base(self, state: Mapping[str, Any]) -> None:
        """Refuse a state whose base (what an elastic resume left of its epoch) runs past
        this epoch's positions (its stream's tokens, or its windows): read round and round
        the epoch, or through no window. Raises :class:`LoaderStateError` naming both."""
        base = base_of(state.get("base"))
        if base is None or not len(base.stops):
            return
        view = self.mode.view(self.data, int(state["epoch"]))
        n = view.total if isinstance(view, EpochStream) else view.n
        last = int(np.max(base.stops))
        if last > n:
            what = "tokens of its stream" if isinstance(view, EpochStream) else "windows"
            raise LoaderStateError(
                f"loader state has base positions up to {last:,}, but epoch "
                f"{state['epoch']} has {n:,} {what} (positions 0 to {n - 1:,}): the state is "
                "damaged, or of another corpus; resume from another checkpoint or start the "
                "epoch without it"
            )

    def _saved_at_its_end(self, state: Mapping[str, Any]) -> bool:
        """Whether ``state`` was saved with its epoch's segment read to the end (a framework's
        checkpoint at an epoch's end): it resumes at the next epoch, whose order is today's."""
        try:
            base = base_of(state["base"])
            cursor = Cursor(int(state["epoch"]), int(state["segment"]), base, int(state["batches"]))
            return self.ended(state["layout"], cursor)
        except (KeyError, TypeError, ValueError):  # not a state: the loader's check says so
            return False

    def _feistel(self) -> bool:
        """Whether the windows are read in a Feistel order (shuffled windows, packed or
        mixed; streams shuffle documents by a permutation drawn whole)."""
        return self.reading.shuffle and self.mode.name != "streams"

    def saved_documents(self, saved: Mapping[str, Any]) -> dict[str, Any]:
        """``saved`` (a state's fingerprint) if it read the documents this workload reads, in
        the same base order; a state saved before the digest was recorded is checked by the
        count alone, as it was then.

        Raises:
            LoaderStateError: another ``documents=`` selection or order (of the same count: a
                count that differs is named by the fingerprint's comparison).
        """
        found = dict(saved)
        was = found.setdefault("documents_digest", self.documents_digest)
        same_count = found.get("documents") == len(self.documents)
        if was != self.documents_digest and same_count:
            said = {"all": "every document of the corpus in its stored order (the default)"}
            raise LoaderStateError(
                f"the loader state was saved reading other documents than this loader's "
                f"documents= ({len(self.documents):,} documents either way; saved: "
                f"{said.get(was, f'selection {was}')}, now: "
                f"{said.get(self.documents_digest, f'selection {self.documents_digest}')}): "
                "another split, or the same documents in another order, reads other windows. "
                "Pass the documents= of the saved run, or start the epoch without the state"
            )
        return found

    def saved_content(self, saved: Mapping[str, Any]) -> dict[str, Any]:
        """``saved`` (a state's fingerprint) if its corpora hold the tokens this workload
        reads, in today's ids; a state saved before the content was recorded is taken as this
        content, one saved with the files' id of this very snapshot (before the id was the
        tokens') as the tokens' id.

        Raises:
            LoaderStateError: a corpus's content differs, naming its path, both ids and the fix.
        """
        found = dict(saved)
        now = [corpus.content_id for corpus, _ in self.data.parts]
        was = found.setdefault("content", now)
        if not isinstance(was, list) or len(was) != len(now):
            return found  # another corpus count: the sizes' comparison names it
        if was != now and sorted(map(str, was)) == sorted(now):
            paths = {content: _named(corpus) for corpus, content in zip(self.corpora(), now)}
            raise LoaderStateError(
                "the loader state was saved on a TokenMixture of these corpora listed in "
                f"another order (saved: {', '.join(paths[c] for c in was)}; now: "
                f"{', '.join(paths[c] for c in now)}): the order fixes which corpus each "
                "position of the epoch draws from. List the corpora (and their weights) in the "
                "saved run's order, or start the epoch without the state"
            )
        for (corpus, _), old, new in zip(self.data.parts, was, now):
            if old not in (new, corpus.files_content_id):  # (the id states had before)
                raise LoaderStateError(
                    f"the loader state was saved on other tokens than token corpus "
                    f"{_named(corpus)} holds now (content {old}, now {new}, snapshot "
                    f"{corpus.snapshot}): the corpus was rebuilt from other text or with another "
                    "tokenizer (not in another number of shards: that keeps the id). Resume on "
                    "the corpus the state was saved with, or start the epoch without the state"
                )
        found["content"] = now
        return found

    def corpora(self) -> list[TokenCorpus]:
        """The corpora read, in order (one, or a mixture's)."""
        return [corpus for corpus, _ in self.data.parts]

    def packing_stats(self) -> dict[str, Any]:
        """``Packed``: windows, pieces, tokens and padding, summed over a mixture's corpora."""
        return self.mode.packing_stats(self.data)
