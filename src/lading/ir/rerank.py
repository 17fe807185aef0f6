"""Rerank a run with a trained cross-encoder, and score runs with the ir-measures library."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from lading.errors import SkippedRecordsWarning, UnrankedQueriesWarning, missing_package
from lading.ir.collate import CrossEncoderCollator
from lading.ir.model import CrossEncoder, check_positions
from lading.stores.base import DocStore
from lading.stores.tokens import describe_tokenizer, load_tokenizer

DEFAULT_MEASURES: tuple[str, ...] = ("nDCG@10", "RR@10", "R@100")


class Reranked(dict[str, dict[str, float]]):
    """{qid: {docid: score}} of :func:`rerank`, plus ``left_out``: the run's queries it did
    not rerank under ``on_missing="skip"`` (no text, or none of the top ``depth`` documents
    in the store), in run order. :func:`evaluate` keeps them out of its means."""

    def __init__(self) -> None:
        super().__init__()
        self.left_out: list[str] = []


@torch.no_grad()
def rerank(
    model: CrossEncoder,
    store: DocStore,
    queries: Mapping[str, str],
    run: Mapping[str, Sequence[str]],
    tokenizer: Any,
    *,
    depth: int = 100,
    batch_size: int = 64,
    max_length: int = 512,
    max_query_length: int = 64,
    device: str | torch.device = "cpu",
    on_missing: str = "raise",
    use_tokens: bool | None = None,
) -> Reranked:
    """Scores of the top ``depth`` documents of each query's run: {qid: {docid: score}}.

    ``max_query_length``: query tokens kept, as the model was trained with (its
    ``lading.json`` says, for a model of ``lading train cross-encoder``). A run query with no
    text in ``queries``, or a document of a query's top ``depth`` not in ``store``, is an
    error naming how many and the first; ``on_missing="skip"`` leaves them out, counted in a
    :class:`~lading.errors.SkippedRecordsWarning` (a reranked query then ranks fewer
    documents than the run's top ``depth``). The queries not reranked at all (no text, or
    none of their top ``depth`` documents in the store) are the result's ``left_out``:
    :func:`evaluate` leaves them out of its means rather than scoring them 0, which would
    lower every measure for queries the model never ranked.

    ``use_tokens``: as the model was trained (``lading train cross-encoder --use-tokens`` or
    ``--no-use-tokens``; its ``lading.json`` says, where it was recorded): ``None`` reads the
    token ids of a store that has them, ``False`` tokenizes the documents' text with
    ``tokenizer`` (a store tokenized by another tokenizer), ``True`` requires the tokens.

    Raises:
        ValueError: ``max_length`` is longer than the positions ``model`` has; something of
            the run is missing (above); the store's tokens are another tokenizer's than
            ``tokenizer`` (without ``use_tokens=False``); the model scores a (query,
            document) NaN or infinite (a diverged run), naming them.
    """
    check_positions(model, max_length)
    left_out = _missing(store, queries, run, depth, on_missing)
    tokenizer = _tokenizer_of(store, tokenizer, use_tokens)
    collate = CrossEncoderCollator(
        store, tokenizer, max_length, max_query_length, use_tokens=use_tokens
    )
    model.eval().to(device)
    scores = Reranked()
    for qid, ranked in run.items():
        if qid not in queries:
            scores.left_out.append(qid)
            continue
        docs = [d for d in ranked[:depth] if d in store]
        if not docs and len(ranked[:depth]):  # (a run of no document: nothing to rerank,
            scores.left_out.append(qid)  # scored as the run found it, nothing; not left out)
        codes = store.rows(docs) if collate.use_tokens else None  # only tokens are read by row
        out: dict[str, float] = {}
        for lo in range(0, len(docs), batch_size):
            chunk = docs[lo : lo + batch_size]
            items = [
                {
                    "query": queries[qid],
                    "doc_ids": [d],
                    "doc_codes": codes[lo + i : lo + i + 1] if codes is not None else [0],
                }
                for i, d in enumerate(chunk)
            ]
            batch = collate(items)
            logits = model(
                batch["input_ids"].to(device),
                batch["attention_mask"].to(device),
                batch["token_type_ids"].to(device),
            )
            scored = logits.float().cpu()
            if not bool(torch.isfinite(scored).all()):
                _not_finite(qid, chunk, scored)
            out.update(zip(chunk, scored.tolist()))
        scores[qid] = out
    if left_out:
        warnings.warn(f"rerank left out {left_out}", SkippedRecordsWarning, stacklevel=2)
    return scores


def _tokenizer_of(store: DocStore, tokenizer: Any, use_tokens: bool | None) -> Any:
    """``tokenizer`` loaded (None stays None: a tokenized store's own is used), checked
    against the store's tokens where they would be read. The collator checks so too, but its
    refusal names ``lading train cross-encoder``'s flag; this one names ``use_tokens=False``
    and the flag beside it, which ``lading rerank`` prints as its own ``--no-use-tokens``
    (:func:`lading.cli.cli_spelling`)."""
    if tokenizer is None:
        return None
    tok = load_tokenizer(tokenizer)
    if use_tokens is False or not store.has_tokens:
        return tok
    if describe_tokenizer(tok)["sha256"] != (store.token_info or {}).get("sha256"):
        raise ValueError(
            f"{store!r} was tokenized with another tokenizer than the model's; pass "
            "use_tokens=False (--no-use-tokens) to tokenize its text with the model's "
            "tokenizer (how a model trained on this store with --no-use-tokens read it), or "
            "rerank on a store built with the model's tokenizer"
        )
    return tok


def _not_finite(qid: str, docs: Sequence[str], scores: torch.Tensor) -> None:
    """Refuse the first NaN or infinite score of ``scores`` (those of ``docs`` for query
    ``qid``), naming them and the likely cause: written to the run, they ranked nothing
    (NaN sorts nowhere) and made a file that read_run refuses."""
    bad = int((~torch.isfinite(scores)).nonzero()[0, 0])
    raise ValueError(
        f"the model scores query {qid!r} and document {docs[bad]!r} {float(scores[bad])} "
        "(not a finite number): its weights have likely diverged (an fp16 or bf16 run whose "
        "loss went to NaN); rerank with a model trained in fp32 (--precision fp32), or with an "
        "earlier checkpoint whose loss was finite"
    )


def with_tail(scores: Reranked, run: Mapping[str, Sequence[str]], depth: int) -> Reranked:
    """``scores`` of :func:`rerank` with each query's run below ``depth`` appended, in the
    run's order and scored below the reranked head: the usual convention (a reranker of the
    top N reorders those N; what the run found below them stays, where it was), so measures
    past N (R@100 after ``depth=20``) are the input run's, not those of a run cut to N.
    Documents of the top ``depth`` that :func:`rerank` could not score (not in the store,
    under ``on_missing="skip"``) stay too, in the run's order, right below the scored ones
    and above the tail; ``left_out`` is kept."""
    out = Reranked()
    out.left_out = list(scores.left_out)
    for qid, head in scores.items():
        merged = dict(head)
        floor = min(head.values(), default=0.0)
        for d in run.get(qid, ()):  # (the head's unscored ones come first: run order)
            if d not in merged:  # (a document the run ranks twice: its first place)
                merged[d] = floor - (len(merged) - len(head) + 1)
        out[qid] = merged
    return out


def _missing(
    store: DocStore,
    queries: Mapping[str, str],
    run: Mapping[str, Sequence[str]],
    depth: int,
    on_missing: str,
) -> str:
    """What of ``run`` cannot be reranked (queries without text, top documents not in the
    store), in words ("" for nothing); an error naming it unless ``on_missing="skip"``."""
    if on_missing not in ("raise", "skip"):
        raise ValueError(f"on_missing={on_missing!r}: pass 'raise' or 'skip'")
    no_text = [q for q in run if q not in queries]
    absent = [(q, d) for q, ranked in run.items() if q in queries for d in ranked[:depth]]
    absent = [(q, d) for q, d in absent if d not in store]
    said = []
    # a run read from a file names its lines, looked up only for an error (a read of the file)
    where = getattr(run, "where", None) if on_missing == "raise" else None
    if no_text:
        at = where(no_text[0]) if callable(where) else ""
        said.append(
            f"{len(no_text):,} run queries with no text in the queries (first: {no_text[0]!r}{at})"
        )
    if absent:
        at = where(*absent[0]) if callable(where) else ""
        said.append(
            f"{len(absent):,} documents of the runs' top {depth} not in the store (first: "
            f"{absent[0][1]!r} of query {absent[0][0]!r}{at})"
        )
    if said and on_missing == "raise":
        raise ValueError(
            f"cannot rerank {' and '.join(said)}; pass the queries and store the run was made "
            "with, or on_missing='skip' to rerank what is there"
        )
    if said and not any(
        q in queries and any(d in store for d in ranked[:depth]) for q, ranked in run.items()
    ):  # skip, and nothing is there: a run whose every query scores nothing, exit 0
        raise ValueError(
            f"nothing of the run can be reranked ({' and '.join(said)}): no query has its "
            f"text and one of its top {depth} documents in the store; pass the queries and "
            "store the run was made with"
        )
    return "; ".join(said)


def write_trec_run(
    scores: Mapping[str, Mapping[str, float]], path: str | os.PathLike[str], tag: str = "lading"
) -> None:
    """Write ``{qid: {docid: score}}`` as a TREC run, each query's documents by score.

    Scores are written as Python writes a float, digits enough to read back the same value:
    trec_eval and ir-measures rank by the score in the file (trec_eval ties by docno,
    reversed), so a rounded score could tie two documents the model told apart and reorder
    them. The rank
    column follows trec_eval's order (:func:`trec_order`: tied scores by doc id descending),
    the order :func:`~lading.ir.read_run` reads the file back in. A NaN score is refused
    naming its query and document (nothing is written): it ranks nowhere, and read_run
    refuses a file holding one."""
    ranked_runs = {qid: trec_order(docs) for qid, docs in scores.items()}
    for qid, ranked in ranked_runs.items():
        for docid, score in ranked:
            if math.isnan(score):
                raise ValueError(
                    f"the score of query {qid!r} and document {docid!r} is NaN, which "
                    "ranks nowhere (and read_run refuses a run holding one): leave the "
                    "document out, or score it with a model whose scores are finite"
                )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for qid, ranked in ranked_runs.items():
            for rank, (docid, score) in enumerate(ranked, start=1):
                f.write(f"{qid} Q0 {docid} {rank} {score!r} {tag}\n")


def trec_order(docs: Mapping[str, float]) -> list[tuple[str, float]]:
    """``docs`` ({docid: score}) as trec_eval ranks them: score descending, tied scores by
    doc id descending (trec_eval, pytrec_eval and :func:`~lading.ir.read_run` order so; a
    file's rank column is not read)."""
    ranked = sorted(((str(d), float(s)) for d, s in docs.items()), reverse=True)  # ties: id desc
    ranked.sort(key=lambda entry: -entry[1])  # (stable: tied scores keep the ids reversed)
    return ranked


def evaluate(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]] | Mapping[str, Sequence[str]],
    measures: Sequence[str] = DEFAULT_MEASURES,
    min_relevance: int = 1,
    leave_out: Collection[str] | None = None,
) -> dict[str, float]:
    """Mean of each measure over the judged queries, computed by ir-measures.

    A run given as ranked lists is scored by rank; one given as scores is ranked as trec_eval
    ranks it (:func:`trec_order`: tied scores by doc id descending) and scored by that rank,
    for every measure: ir-measures hands tied scores to providers that break ties apart
    (RR@10 by doc id ascending, RR, P and nDCG descending: RR@10 1.0 and RR 0.5 of one run).
    ``min_relevance`` sets the binary threshold of the measures that take one (RR, R, P, AP:
    ``rel=``); nDCG, ERR and the others use the graded judgements.

    A judged query the run does not rank scores 0 (ir-measures' rule: a system that returned
    nothing found nothing), except the queries of ``leave_out`` (default: the run's
    ``left_out``, the queries :func:`rerank` did not rerank under ``on_missing="skip"``):
    those are left out of the means, with a :class:`~lading.errors.SkippedRecordsWarning`
    saying how many judged queries were left out and over how many the means are. Pass
    ``leave_out=reranked.left_out`` to score the input run over the same queries.
    """
    import ir_measures

    parsed = parse_measures(measures, min_relevance)
    if leave_out is None:
        leave_out = getattr(run, "left_out", ())
    left = [q for q in dict.fromkeys(leave_out) if q in qrels]
    scored: dict[str, dict[str, float]] = {}
    for qid, docs in run.items():
        ranked = [d for d, _ in trec_order(docs)] if isinstance(docs, Mapping) else docs
        scored[qid] = {str(d): float(len(ranked) - i) for i, d in enumerate(ranked)}
    skip = set(left)
    judged = {q: dict(d) for q, d in qrels.items() if q not in skip}
    _check_ranked(judged, scored)
    if left:
        warnings.warn(
            f"evaluate left out {_queries(len(left), 'judged')} that rerank left out (first: "
            f"{left[0]!r}); the means are over {_queries(len(judged), 'judged')}",
            SkippedRecordsWarning,
            stacklevel=2,
        )
    result = ir_measures.calc_aggregate(parsed, judged, scored)
    return {name: float(result[m]) for name, m in zip(measures, parsed)}


def _check_ranked(judged: Mapping[str, Any], scored: Mapping[str, Any]) -> None:
    """Refuse judgements of none of the run's queries (another collection's or year's: every
    measure would be 0); warn of judged queries the run does not rank (each scores 0)."""
    unranked = [q for q in judged if q not in scored]
    if judged and scored and len(unranked) == len(judged):
        raise ValueError(
            f"the qrels judge none of the run's {len(scored):,} "
            f"{'query' if len(scored) == 1 else 'queries'} "
            f"(first {next(iter(scored))!r}); their {_queries(len(judged), 'judged')} are "
            f"others (first {unranked[0]!r}): pass the judgements of the run's queries"
        )
    if unranked:
        warnings.warn(
            UnrankedQueriesWarning(
                f"{len(unranked):,} of the {_queries(len(judged), 'judged')} have no ranking in "
                f"the run (first {unranked[0]!r}): each scores 0 in every measure "
                "(ir-measures' rule); pass the qrels of the run's queries alone to leave them out"
            ),
            stacklevel=3,
        )


def _queries(n: int, kind: str) -> str:
    """``"1 judged query"``, ``"2 judged queries"``."""
    return f"{n:,} {kind} {'query' if n == 1 else 'queries'}"


def parse_measures(measures: Sequence[str], min_relevance: int = 1) -> list[Any]:
    """The ir-measures measures named by ``measures`` (call it before work to check them).

    Raises:
        ImportError: ir-measures is not installed (saying how to install it).
        ValueError: naming the first measure ir-measures does not know.
    """
    try:
        import ir_measures
    except ImportError:
        raise missing_package("evaluation (lading rerank --qrels)", "ir-measures", "ir") from None
    parsed = []
    for name in measures:
        try:
            measure = ir_measures.parse_measure(name)
        except (NameError, ValueError) as e:
            raise ValueError(
                f"unknown measure {name!r} ({e}); name ir-measures measures such as "
                f"{', '.join(DEFAULT_MEASURES)}, P@10 or AP"
            ) from None
        if min_relevance != 1 and "rel" in getattr(measure, "SUPPORTED_PARAMS", {}):
            measure = measure(rel=min_relevance)  # (nDCG, ERR... take the graded judgements)
        parsed.append(measure)
    return parsed
