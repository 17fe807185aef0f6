"""TrainingGroups: (query, relevant document, negatives) for ranker training, resampled per epoch.

Item ``i`` is one (query, relevant document) pair plus ``group_size - 1`` negatives. Negatives
come from a named policy and are drawn from a generator seeded with ``(seed, epoch, i)``: the
same on every rank and worker, different every epoch, never a document judged relevant, and
distinct (a group is ``group_size`` different documents; a group_size the store cannot fill so
is refused when the groups are made).

Memory: documents are kept as integer codes (the store's row codes, see
:meth:`~lading.stores.base.DocStore.find_rows`), candidates as one ragged int64 array. Per query
that is 8 bytes a candidate; MS MARCO's 500k training queries with depth-100 runs cost ~400 MB
once, shared by every worker forked from the process that built it.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.loading.hooks import EpochIndex
from lading.loading.order import Salt, generator
from lading.stores.base import DocStore, store_identity

SAMPLING: tuple[str, ...] = ("random", "run", "run+random")
ON_MISSING: tuple[str, ...] = ("raise", "skip")
MIN_JUDGED_STORED = 0.05
"""The least share of the judged (query, document) pairs a store must hold (under
``on_missing="skip"``): a store holding fewer is of another collection than the qrels, the
few ids it shares with them a coincidence (numeric ids of two collections)."""


class GroupsWarning(UserWarning):
    """What building :class:`TrainingGroups` left out, or where negatives fall back to random
    draws: one line of counts, each with its first id and the file that id came from."""


@dataclass(frozen=True)
class GroupsReport:
    """What building the groups left out, so nothing is dropped silently: queries judged with
    no relevant document, with no text, or whose relevant documents are none of them in the
    store (``queries_without_relevant_in_store``, under ``on_missing="skip"``); judged and run
    documents not in the store. ``queries_without_candidates``: queries trained on whose run
    gives no negative (``queries_not_in_run`` of them are not in the run at all; the others'
    top ``depth`` documents are relevant or not in the store): under the ``"run"`` policies
    their negatives are all drawn at random. ``judged_pairs``: the judged (query, document)
    pairs looked up in the store. ``first``: the first id of each count, by cause.
    ``relevant_missing_from_store``: of ``judged_missing_from_store``, those judged at or above
    ``min_relevance`` (the others were never positives)."""

    pairs: int
    queries: int
    queries_without_relevant: int
    queries_without_text: int
    judged_missing_from_store: int
    run_docs_missing_from_store: int
    queries_without_relevant_in_store: int = 0
    queries_without_candidates: int = 0
    queries_not_in_run: int = 0
    judged_pairs: int = 0
    first: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)
    relevant_missing_from_store: int = 0


class TrainingGroups:
    """A map-style dataset of training groups for cross-encoders and other rankers.

    Args:
        store: the documents (any :class:`DocStore`; one with an id index of its own, such as
            the packed store, keeps it light: others build an id-to-row dict once).
        queries: query id → text.
        qrels: query id → {doc id → relevance}.
        negatives: ranked candidates per query (a TREC run, hard negatives); needed for the
            ``"run"`` policies.
        group_size: documents per group: 1 relevant + ``group_size - 1`` negatives.
        sampling: ``"run"`` (from the top ``depth`` of the run), ``"random"`` (uniform over the
            store: the study's choice) or ``"run+random"`` (half each). When a query's run has
            too few candidates, the rest are drawn at random.
        depth: how far down the run negatives may come from.
        min_relevance: judgements at or above this count as relevant (TREC DL passages use 2).
        seed: with the epoch and the item, fixes every draw.
        on_missing: a judged or run document absent from the store is an error (``"raise"``)
            or is left out and counted in :attr:`report` (``"skip"``), said in one
            :class:`GroupsWarning` line.
        min_judged_stored: under ``"skip"``, a store holding fewer than this share of the
            judged (query, document) pairs is refused (:data:`MIN_JUDGED_STORED`, 5%: a store
            of another collection); 0 trains on whatever pairs it holds.
        sources: the files ``queries``, ``qrels`` and ``negatives`` were read from (those
            keys), named in errors and warnings.

    Under the ``"run"`` policies, a run of none of the queries trained on (or none of whose
    top ``depth`` documents is a negative in the store) is refused: every negative would be
    random. Where only some queries have no run negative, a :class:`GroupsWarning` says how
    many (:attr:`GroupsReport.queries_without_candidates`) and the first.

    Items are dicts: ``qid``, ``query``, ``doc_ids`` (relevant first), ``doc_codes``.
    """

    epoch_aware = True  # see lading.loading.hooks.EpochIndex

    def __init__(
        self,
        store: DocStore,
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
        negatives: Mapping[str, Sequence[str]] | None = None,
        group_size: int = 8,
        sampling: str = "run",
        depth: int = 100,
        min_relevance: int = 1,
        seed: int = 0,
        on_missing: str = "raise",
        min_judged_stored: float = MIN_JUDGED_STORED,
        sources: Mapping[str, str] | None = None,
    ) -> None:
        if sampling not in SAMPLING:
            raise ValueError(f"unknown sampling {sampling!r}; choose from {sorted(SAMPLING)}")
        if on_missing not in ON_MISSING:
            raise ValueError(f"unknown on_missing {on_missing!r}; choose from {sorted(ON_MISSING)}")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        if sampling != "random" and negatives is None:
            raise ValueError(f"sampling={sampling!r} needs negatives= (a run or hard negatives)")
        self.store, self.doc_count = store, len(store)
        self.group_size, self.sampling, self.depth = group_size, sampling, depth
        self.seed, self.epoch = seed, 0
        self._fingerprint: str | None = None
        self._ranks_fingerprint: str | None = None
        self.min_judged_stored = min_judged_stored
        self.sources = {
            "queries": "the queries",
            "qrels": "the qrels",
            "negatives": "the run",
            **(sources or {}),
            "store": repr(store),
        }
        self._build(queries, qrels, negatives or {}, min_relevance, on_missing)

    def _build(
        self,
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
        negatives: Mapping[str, Sequence[str]],
        min_relevance: int,
        on_missing: str,
    ) -> None:
        qids: list[str] = []
        texts: list[str] = []
        pair_query: list[int] = []
        pair_doc: list[int] = []
        judged_parts: list[npt.NDArray[np.int64]] = []
        cand_parts: list[npt.NDArray[np.int64]] = []
        no_relevant = no_text = missing_judged = missing_run = none_stored = 0
        no_candidates = not_in_run = judged_pairs = missing_relevant = 0
        first_missing = ("", "")  # (query, document) of the first run document not stored
        first_left_out: dict[str, str] = {}  # why a query was left out -> the first such query
        first: dict[str, tuple[str, ...]] = {}  # a count of the report -> its first ids
        tightest = ("", -1)  # the query with the most relevant documents, and their count
        for qid, judged in qrels.items():
            relevant = [d for d, rel in judged.items() if rel >= min_relevance]
            if not relevant:
                no_relevant += 1
                first_left_out.setdefault("no relevant", qid)
                continue
            if qid not in queries:
                if on_missing == "raise":
                    raise KeyError(
                        f"query {qid!r} is judged but has no text in the queries; "
                        "pass on_missing='skip' to leave such queries out"
                    )
                no_text += 1
                first_left_out.setdefault("no text", qid)
                continue
            judged_ids = list(judged)
            codes = self.store.find_rows(judged_ids)
            judged_pairs += len(judged_ids)
            absent = [judged_ids[i] for i in np.flatnonzero(codes < 0)]
            if absent:
                if on_missing == "raise":
                    raise KeyError(
                        f"query {qid!r}: judged document {absent[0]!r} is not in "
                        f"{self.store!r} ({len(absent)} such); pass "
                        "on_missing='skip' to leave them out"
                    )
                missing_judged += len(absent)
                missing_relevant += sum(judged[d] >= min_relevance for d in absent)
                first.setdefault("judged missing", (absent[0], qid))
            is_relevant = np.array([judged[d] >= min_relevance for d in judged_ids])
            relevant_codes = codes[(codes >= 0) & is_relevant]
            if len(relevant_codes) == 0:  # (all of them absent: skipped above)
                none_stored += 1
                first_left_out.setdefault("none stored", qid)
                continue
            run_codes, missing = self._run_codes(negatives.get(qid, ()), relevant_codes)
            if missing and not missing_run:
                first_missing = (qid, missing[0])
            missing_run += len(missing)
            if not len(run_codes):
                no_candidates += 1
                first.setdefault("without candidates", (qid,))
                if qid not in negatives:
                    not_in_run += 1
                    first.setdefault("not in run", (qid,))
            if len(relevant_codes) > tightest[1]:
                tightest = (qid, len(relevant_codes))
            q = len(qids)
            qids.append(qid)
            texts.append(queries[qid])
            pair_query.extend([q] * len(relevant_codes))
            pair_doc.extend(relevant_codes.tolist())
            judged_parts.append(np.sort(relevant_codes))
            cand_parts.append(run_codes)
        if missing_run and on_missing == "raise":
            raise KeyError(
                f"{missing_run} run documents are not in {self.store!r}, the first "
                f"{first_missing[1]!r} of query {first_missing[0]!r}; pass on_missing='skip' "
                "to leave them out"
            )
        if not pair_query:
            counts = {"no relevant": no_relevant, "no text": no_text, "none stored": none_stored}
            raise ValueError(_nothing_to_train(len(qrels), counts, first_left_out, min_relevance))
        first.update({why: (q,) for why, q in first_left_out.items()})
        if missing_run:
            first["run missing"] = first_missing[::-1]
        self.report = GroupsReport(
            len(pair_query),
            len(qids),
            no_relevant,
            no_text,
            missing_judged,
            missing_run,
            none_stored,
            no_candidates,
            not_in_run,
            judged_pairs,
            first,
            missing_relevant,
        )
        self._check_stored(self.report)
        self._check_candidates(self.report, negatives)
        self._check_group_size(*tightest)
        self.qids, self.query_texts = qids, texts
        text_ids: dict[str, int] = {}  # equal texts of two query ids are one query in a batch
        self._query_text_id = np.array(
            [text_ids.setdefault(t, len(text_ids)) for t in texts], dtype=np.int64
        )
        self._pair_query = np.array(pair_query, dtype=np.int64)
        self._pair_doc = np.array(pair_doc, dtype=np.int64)
        self._relevant, self._relevant_off = _ragged(judged_parts)
        self._cands, self._cands_off = _ragged(cand_parts)
        said = [_left_out_line(self.report, self.sources, min_relevance)]
        if self.sampling != "random":
            said.append(_fallback_line(self.report, self.sources, self.depth))
        for line in said:
            if line:
                warnings.warn(line, GroupsWarning, stacklevel=3)

    def _check_stored(self, report: GroupsReport) -> None:
        """Refuse a store holding under ``min_judged_stored`` of the judged pairs: one of
        another collection, sharing a few ids with the qrels by accident."""
        present = report.judged_pairs - report.judged_missing_from_store
        if not report.judged_pairs or present >= self.min_judged_stored * report.judged_pairs:
            return
        doc, qid = report.first["judged missing"]
        raise ValueError(
            f"only {present:,} of {report.judged_pairs:,} judged (query, document) pairs of "
            f"{self.sources['qrels']} are in {self.sources['store']}, under the "
            f"{self.min_judged_stored:.0%} a store of the judged collection holds (the first "
            f"absent: {doc!r} of query {qid!r}): the ids it shares with the qrels are a "
            "coincidence of two collections: pass the store (--store, --corpus) of the "
            "collection the qrels (--qrels) judge"
        )

    def _check_candidates(self, report: GroupsReport, run: Mapping[str, Sequence[str]]) -> None:
        """Under the ``"run"`` policies, refuse a run that gives no query trained on a
        negative: every negative would be drawn at random, the run's policy in name only."""
        if self.sampling == "random" or report.queries_without_candidates < report.queries:
            return
        name, qrels = self.sources["negatives"], self.sources["qrels"]
        ours = report.first["without candidates"][0]
        theirs = next(iter(run), None)
        if report.queries_not_in_run == report.queries:
            why = (
                f"none of the {report.queries:,} judged queries to train on ({qrels}, first "
                f"{ours!r}) is in {name}, whose {len(run):,} queries are others"
                + (f" (first {theirs!r})" if theirs is not None else "")
            )
        else:
            why = (
                f"none of the {report.queries:,} judged queries to train on ({qrels}, first "
                f"{ours!r}) has a negative in the top {self.depth} of {name}: "
                f"{report.queries_not_in_run:,} are not in it, the others' documents there "
                f"are relevant or not in {self.sources['store']}"
            )
        raise ValueError(
            f"sampling={self.sampling!r} takes negatives from the run, but {why}: pass the run "
            "of these queries (and their collection), or sampling='random' for negatives "
            "drawn at random from the store"
        )

    def _run_codes(
        self, run: Sequence[str], relevant: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], list[str]]:
        """Store codes of a query's first ``depth`` run documents, each once and none of its
        ``relevant`` codes; and those of its run documents the store lacks, in run order."""
        ids = list(run)[: self.depth]
        codes = self.store.find_rows(ids) if ids else np.empty(0, np.int64)
        excluded = set(relevant.tolist())
        kept = [c for c in dict.fromkeys(codes[codes >= 0].tolist()) if c not in excluded]
        return np.array(kept, dtype=np.int64), [ids[i] for i in np.flatnonzero(codes < 0)]

    def _check_group_size(self, qid: str, relevant: int) -> None:
        """Refuse a group_size the store cannot fill with distinct documents for query ``qid``
        (the one with the most relevant documents, none of which may be a negative)."""
        free = self.doc_count - relevant
        if self.group_size - 1 > free:
            raise ValueError(
                f"group_size={self.group_size} needs {self.group_size - 1} distinct negatives "
                f"a group, but the store has {self.doc_count} documents and query {qid!r} has "
                f"{relevant} relevant among them, leaving {free}: pass group_size={free + 1} "
                "or less, or a store of more documents"
            )

    def __len__(self) -> int:
        return len(self._pair_query)

    def set_epoch(self, epoch: int) -> None:
        """Negatives of ``epoch`` (for items given as plain ints)."""
        self.epoch = epoch

    def __getitem__(self, item: int | EpochIndex) -> dict[str, Any]:
        epoch, i = (item.epoch, item.item) if isinstance(item, EpochIndex) else (self.epoch, item)
        if not 0 <= i < len(self):
            raise IndexError(f"item {i} outside [0, {len(self)})")
        q = int(self._pair_query[i])
        codes = self.group_codes(i, epoch)
        return {
            "qid": self.qids[q],
            "query": self.query_texts[q],
            "doc_ids": self.store.ids_at(codes),
            "doc_codes": codes,
        }

    def group_codes(self, i: int, epoch: int) -> npt.NDArray[np.int64]:
        """Document codes of item ``i``'s group in ``epoch``: relevant first, then negatives."""
        codes = np.empty(self.group_size, dtype=np.int64)
        codes[0] = self._pair_doc[i]
        q = int(self._pair_query[i])
        codes[1:] = self.negatives(q, generator(self.seed, Salt.NEGATIVES, epoch, i))
        return codes

    def prefetch(self, batches: Sequence[Sequence[Any]], first_step: int, now: int) -> None:
        """Tell the store which documents the groups of ``batches`` (the loader's keys, see
        :mod:`lading.loading.announce`) hold, when the store takes such hints (a remote
        store's ``prefetch_rows``): the same draws :meth:`__getitem__` will make."""
        hint = getattr(self.store, "prefetch_rows", None)
        if callable(hint):
            hint(self._batch_rows(batches), first_step, now)

    def plan(
        self, batches: Sequence[Sequence[Any]], first_step: int, steps: Sequence[int] | None = None
    ) -> None:
        """Hand the store the documents of the batches ahead (a remote store's ``plan_rows``:
        what its node cache keeps), batch ``j`` read at ``steps[j]`` (``first_step + j``)."""
        hint = getattr(self.store, "plan_rows", None)
        if callable(hint):
            hint(self._batch_rows(batches), first_step, steps=steps)

    def settle(self, timeout: float) -> None:
        """Wait, at most ``timeout`` seconds, until the documents :meth:`prefetch` asked the
        store for are fetched (a remote store's ``settle``; a loader that closes calls it)."""
        settle = getattr(self.store, "settle", None)
        if callable(settle):
            settle(timeout)

    def _batch_rows(self, batches: Sequence[Sequence[Any]]) -> list[npt.NDArray[np.int64]]:
        """Each batch's document codes, its groups back to back (what the batch reads)."""
        rows = []
        for batch in batches:
            keys = [k if isinstance(k, EpochIndex) else EpochIndex(self.epoch, k) for k in batch]
            codes = [self.group_codes(int(k.item), k.epoch) for k in keys]
            rows.append(np.concatenate(codes) if codes else np.empty(0, dtype=np.int64))
        return rows

    @property
    def remote_url(self) -> str | None:
        """The store's URL where it is in object storage (:mod:`lading.loading.hooks`: a loader
        made with DataLoader workers warns, :class:`~lading.loading.hooks.Hooks` checks it is
        a string), else None."""
        url: str | None = getattr(self.store, "remote_url", None)
        return url

    def ranks_fingerprint(self) -> str:
        """What every rank's groups hold alike where they read the same data with the same
        settings (:mod:`lading.loading.agree` compares it): the sampling settings, the queries
        and the judged and candidate documents by row, not the store's identity (each node
        may build its own copy). Ranks of another group size, seed or run are refused."""
        if self._ranks_fingerprint is None:
            settings = [len(self.store), self.group_size, self.sampling, self.depth, self.seed]
            digest = hashlib.sha256(json.dumps([settings, self.qids, self.query_texts]).encode())
            for array in (self._pair_query, self._pair_doc, self._relevant, self._cands):
                digest.update(np.ascontiguousarray(array).tobytes())
            self._ranks_fingerprint = digest.hexdigest()
        return self._ranks_fingerprint

    def data_fingerprint(self) -> str:
        """A digest of what the groups hold (computed once): the store's content (a lading
        directory's file checksums; else its type and size), the queries' texts, the
        judged and candidate documents by row, and the sampling settings. ``lading.loader``
        puts it in its state, so a state of other groups of the same count is refused, and
        ``groups_to_dataset`` in its cache key, so a rebuilt store is not served stale."""
        if self._fingerprint is None:
            digest = hashlib.sha256(json.dumps(store_identity(self.store)).encode())
            settings = [self.group_size, self.sampling, self.depth, self.seed]
            digest.update(json.dumps([settings, self.qids, self.query_texts]).encode())
            for array in (self._pair_query, self._pair_doc, self._relevant, self._cands):
                digest.update(np.ascontiguousarray(array).tobytes())
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    def duplicate_keys(self, items: npt.NDArray[np.int64], epoch: int) -> npt.NDArray[np.int64]:
        """What no two groups of a batch may share, one row per item of ``epoch``.

        Row: ``-1 - t`` for the query text ``t`` (texts, not ids: two ids of one text are one
        query), then the group's document codes (relevant first, then the negatives ``epoch``
        draws for the item, the very draws :meth:`__getitem__` makes). Codes are store rows,
        so two rows holding the same text count as different documents. Used by
        ``lading.loader(..., batching="no_duplicates")``.
        """
        out = np.empty((len(items), 1 + self.group_size), dtype=np.int64)
        for row, i in enumerate(np.asarray(items, dtype=np.int64).tolist()):
            q = int(self._pair_query[i])
            out[row, 0] = -1 - self._query_text_id[q]
            out[row, 1:] = self.group_codes(i, epoch)
        return out

    def negatives(self, q: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """``group_size - 1`` distinct negative codes for query ``q`` under the policy."""
        need = self.group_size - 1
        if need == 0:
            return np.empty(0, dtype=np.int64)
        run = self._cands[self._cands_off[q] : self._cands_off[q + 1]]
        from_run = {"run": need, "random": 0, "run+random": -(-need // 2)}[self.sampling]
        take = min(from_run, len(run))
        picked = run[rng.choice(len(run), size=take, replace=False)] if take else run[:0]
        relevant = self._relevant[self._relevant_off[q] : self._relevant_off[q + 1]]
        excluded = np.union1d(relevant, picked) if take else relevant  # sorted, distinct
        rest = _random_excluding(rng, self.doc_count, need - take, excluded)
        return np.concatenate([picked, rest])


def _left_out_line(report: GroupsReport, sources: Mapping[str, str], min_relevance: int) -> str:
    """What the groups left out, in one line ("" for nothing): each count with what it means
    and its first id, the file that id came from named."""
    first = report.first
    said = []
    if report.queries_without_relevant:
        said.append(
            f"{_count(report.queries_without_relevant, 'judged query', 'judged queries')} with "
            f"no judgement at or above min_relevance={min_relevance} (first "
            f"{first['no relevant'][0]!r})"
        )
    if report.queries_without_text:
        said.append(
            f"{_count(report.queries_without_text, 'judged query', 'judged queries')} with no "
            f"text in {sources['queries']} (first {first['no text'][0]!r})"
        )
    if report.judged_missing_from_store:
        n, relevant = report.judged_missing_from_store, report.relevant_missing_from_store
        said.append(
            _missing_line(
                n, "judged document", sources["qrels"], sources["store"], first["judged missing"]
            )
            + (
                f", {relevant:,} of them relevant at min_relevance={min_relevance}, "
                f"{n - relevant:,} judged below it (never positives)"
                if relevant < n
                else ""
            )
        )
    if report.queries_without_relevant_in_store:
        said.append(
            f"{_count(report.queries_without_relevant_in_store, 'query', 'queries')} with none "
            f"of its relevant documents in the store (first {first['none stored'][0]!r})"
        )
    if report.run_docs_missing_from_store:
        said.append(
            _missing_line(
                report.run_docs_missing_from_store,
                "run document",
                sources["negatives"],
                "the store",
                first["run missing"],
            )
        )
    if not said:
        return ""
    return (
        f"training groups left out {'; '.join(said)}; training on "
        f"{_count(report.pairs, '(query, relevant document) pair')} of "
        f"{_count(report.queries, 'query', 'queries')}"
    )


def _missing_line(n: int, what: str, named_in: str, store: str, first: tuple[str, ...]) -> str:
    """One cause of :func:`_left_out_line`: ``n`` documents that the file ``named_in`` names
    and ``store`` lacks, with the first of them and its query (``first``: document, query)."""
    doc, qid = first
    return f"{_count(n, what)} of {named_in} not in {store} (first {doc!r} of query {qid!r})"


def _fallback_line(report: GroupsReport, sources: Mapping[str, str], depth: int) -> str:
    """The queries whose run gives no negative, in one line ("" for none): theirs are drawn
    at random, whatever the policy."""
    n = report.queries_without_candidates
    if not n:
        return ""
    name, not_in = sources["negatives"], report.queries_not_in_run
    parts = []
    if not_in:
        parts.append(f"{not_in:,} not in it, first {report.first['not in run'][0]!r}")
    if n - not_in:
        parts.append(
            f"{n - not_in:,} whose top {depth} there are relevant or not in the store"
            + ("" if not_in else f", first {report.first['without candidates'][0]!r}")
        )
    return (
        f"{n:,} of {_count(report.queries, 'query', 'queries')} trained on have no negative in "
        f"the top {depth} of {name} ({'; '.join(parts)}): their negatives are drawn at random "
        "from the store"
    )


def _count(n: int, one: str, many: str | None = None) -> str:
    """``"1 judged document"``, ``"2 judged documents"``."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def _nothing_to_train(
    judged: int, counts: Mapping[str, int], first: Mapping[str, str], min_relevance: int
) -> str:
    """Why no (query, relevant document) pair is left: how many judged queries each cause
    left out and the first of them (the report's counts, which a raise would never show)."""
    if not judged:
        return "nothing to train on: the qrels judge no query; pass the qrels of the queries"
    said = {
        "no relevant": ("has no judgement", "have no judgement")[counts["no relevant"] > 1]
        + f" at or above min_relevance={min_relevance}",
        "no text": ("has", "have")[counts["no text"] > 1] + " no text in the queries",
        "none stored": ("has none of its", "have none of their")[counts["none stored"] > 1]
        + " relevant documents in the store",
    }
    causes = [
        f"{counts[why]} {words} (first {first[why]!r})"
        for why, words in said.items()
        if counts[why]
    ]
    fixes = []
    if counts["no relevant"]:
        fixes.append("lower min_relevance to a grade the qrels give")
    if counts["no text"] or counts["none stored"]:
        fixes.append(
            "pass the queries, qrels and store of one collection, their ids spelled alike "
            "('01' is not '1')"
        )
    return f"nothing to train on: of {judged} judged queries, {'; '.join(causes)}: " + (
        ", or ".join(fixes)
    )


def _random_excluding(
    rng: np.random.Generator, count: int, k: int, excluded: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """``k`` distinct codes uniform over ``[0, count)`` avoiding the sorted ``excluded``.

    Drawn with replacement and redrawn where a code is excluded or taken twice: with 8.8M
    passages and 7 draws a redraw is rare, and the draws are those a plain
    ``rng.integers`` makes. When ``k`` is a large share of what is free (a small store) the
    draw is from the free codes directly, without replacement.
    """
    if k == 0:
        return np.empty(0, dtype=np.int64)
    free = count - len(excluded)
    if free <= 0:
        raise ValueError("every document of the store is relevant: no negative to draw")
    if 4 * k > free:  # redrawing would mostly redraw: choose among the free codes instead
        codes = np.setdiff1d(np.arange(count, dtype=np.int64), excluded, assume_unique=True)
        return rng.choice(codes, size=k, replace=False)
    out = rng.integers(0, count, k)
    for _ in range(1000):
        # excluded is sorted and small: a binary search beats np.isin's setup for 7 draws
        pos = np.minimum(np.searchsorted(excluded, out), len(excluded) - 1)
        bad = excluded[pos] == out if len(excluded) else np.zeros(k, dtype=bool)
        bad |= _repeats(out)
        if not bad.any():
            return out
        out[bad] = rng.integers(0, count, int(bad.sum()))
    raise RuntimeError("could not draw negatives outside the relevant documents")


def _repeats(codes: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """True at every occurrence of a code after its first."""
    order = np.argsort(codes, kind="stable")
    ranked = codes[order]
    seen = np.zeros(len(codes), dtype=bool)
    seen[order[1:]] = ranked[1:] == ranked[:-1]
    return seen


def _ragged(
    parts: list[npt.NDArray[np.int64]],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    lengths = np.array([len(p) for p in parts], dtype=np.int64)
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    return data.astype(np.int64), offsets
