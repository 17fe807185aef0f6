"""``lading train`` (sessions, lm, cross-encoder) and ``lading rerank``: commands and parsers."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from lading.cli.bench import int_list
from lading.cli.inputs import (
    add_choice,
    add_precision,
    add_query_columns,
    add_raise_or_skip,
    clip_norm,
    existing,
    local_model,
    model_or_tiny,
    nonnegative_int,
    positive_int,
    store_location,
    tokenizer,
)

T = TypeVar("T")


PARALLEL_HELP = {  # what --parallel's choices mean (a command offers those it supports)
    "ddp": "ddp (under torchrun)",
    "dp": "dp (one process, nn.DataParallel)",
    "none": "none",
}


def _config(config: type[T], args: argparse.Namespace, paths: tuple[str, ...]) -> T:
    """The command's run config: every parsed option the dataclass ``config`` has a field for,
    the options named in ``paths`` as Paths (where given); ``--lr`` not given is the kind's
    default, and a resume keeps the checkpoint's (``keep_on_resume``)."""
    names = {f.name for f in dataclasses.fields(config)}  # type: ignore[arg-type]
    fields = {k: v for k, v in vars(args).items() if k in names}
    if "lr" in fields and fields["lr"] is None:  # not given: the kind's, or the checkpoint's
        fields["lr"], fields["keep_on_resume"] = args.kind_lr, ("lr",)
    for key in paths:
        if fields.get(key) is not None and "://" not in str(fields[key]):  # URLs stay URLs
            fields[key] = Path(fields[key])
    return config(**fields)


def _rank0() -> bool:
    """Whether this process prints the summary: rank 0 under torchrun, or the only process."""
    return int(os.environ.get("RANK", "0")) == 0


def _train(
    train: Callable[[T], dict[str, Any]], config: T, say: Callable[[dict[str, Any]], str]
) -> int:
    """Run a ``lading train`` command: ``train(config)``, then ``say(summary)`` printed by the
    process that prints (:func:`_rank0`); the other ranks print nothing."""
    summary = train(config)
    if _rank0():
        print(say(summary))
    return 0


def column_names(value: str) -> tuple[str, ...]:
    """``--columns id,url,title,text`` as the names ParseOptions takes, checked while the
    command line is read (before a tokenizer is trained or a store built)."""
    from lading.sources import ParseOptions

    names = tuple(value.split(","))
    try:
        ParseOptions(columns=names)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{value}: {e}; e.g. id,url,title,text") from None
    return names


def _cmd_train_cross_encoder(args: argparse.Namespace) -> int:
    from lading.ir.train import TrainConfig, train

    def say(summary: dict[str, Any]) -> str:
        loss = summary["last_loss"]
        known = isinstance(loss, float) and math.isfinite(loss)
        return (
            f"{args.out}: {summary['steps']} steps, the last step's loss "
            + (
                f"{loss:.4f} (that step's alone: a progress line's is the mean over its steps); "
                if known
                else "not known (its checkpoint predates the loss being saved in one); "
            )
            + f"model in {Path(args.out) / 'model'}"
        )

    paths = ("out", "queries", "qrels", "store", "corpus", "negatives")
    with _groups_said("lading train cross-encoder"):
        return _train(train, _config(TrainConfig, args, paths), say)


@contextlib.contextmanager
def _groups_said(command: str) -> Iterator[None]:
    """What the training groups left out or drew at random, one line on stderr (``COMMAND:
    warning: ...``, not Python's ``file:line: UserWarning`` and source line), by the process
    that prints (:func:`_rank0`: every rank builds the same groups)."""
    from lading.cli.stores import said_on_stderr
    from lading.errors import EmptyTextWarning
    from lading.ir.groups import GroupsWarning

    if _rank0():  # (and what a build of --corpus stored empty: the fix is a flag of its own)
        with said_on_stderr(command, (GroupsWarning, EmptyTextWarning)):
            yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GroupsWarning)
        warnings.simplefilter("ignore", EmptyTextWarning)
        yield


def _check_evaluation(args: argparse.Namespace) -> None:
    """With ``--qrels``, refuse now what would fail only after the reranking (minutes to
    hours): ir-measures missing, or a measure it does not know."""
    from lading.ir.rerank import parse_measures

    if not args.qrels:
        return
    try:
        parse_measures(args.measures, args.min_relevance)
    except ImportError:
        raise ImportError(
            "--qrels evaluates both runs with ir-measures, which is not installed: pip install "
            "ir-measures (or 'lading[ir]'), or leave --qrels out to rerank only"
        ) from None
    except ValueError as e:
        bad = str(e).split("'")[1]
        raise ValueError(f"--measures {bad}: {e}") from None


def _cmd_rerank(args: argparse.Namespace) -> int:
    _check_evaluation(args)
    import torch

    from lading.errors import SkippedRecordsWarning, UnrankedQueriesWarning
    from lading.ir.inputs import QUERY_COLUMNS, read_qrels, read_queries, read_run
    from lading.ir.model import CrossEncoder, check_positions, trained_inputs
    from lading.ir.rerank import evaluate, rerank, with_tail, write_trec_run
    from lading.stores import open_store

    model = CrossEncoder.from_pretrained(args.model)
    trained = {"max_length": 512, "max_query_length": 64, **trained_inputs(args.model)}
    max_length = int(args.max_length or trained["max_length"])
    use_tokens = args.use_tokens  # not given: a model trained on text reranks from text
    if use_tokens is None and trained.get("use_tokens") is False:  # (tokens and text give
        use_tokens = False  # the same rows: one trained on tokens reads them where they are)
    check_positions(model, max_length, args.model)  # before the store, queries and run
    tokenizer = Path(args.model) / "tokenizer.json"
    store = open_store(args.store)
    run = read_run(args.run)
    qrels = read_qrels(args.qrels) if args.qrels else None  # before hours of reranking
    unranked = _unranked(qrels, run, args) if qrels is not None else []
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", SkippedRecordsWarning)
        scores = rerank(
            model,
            store,
            read_queries(args.queries, columns=args.query_columns or QUERY_COLUMNS),
            run,
            tokenizer,
            depth=args.depth,
            batch_size=args.batch_size,
            max_length=max_length,
            max_query_length=int(args.max_query_length or trained["max_query_length"]),
            device=device,
            on_missing=args.on_missing,
            use_tokens=use_tokens,
        )
    reranked = with_tail(scores, run, args.depth)  # the input's order below the reranked top
    write_trec_run(reranked, args.out)
    done = sum(1 for out in scores.values() if out)  # (a query left out scored nothing)
    print(
        f"{args.out}: reranked the top {args.depth} of {done:,} queries (of the run's "
        f"{len(run):,}); below rank {args.depth} each keeps the input run's documents in "
        "their order"
    )
    for warning in said:
        print(str(warning.message))
    if qrels is not None:  # both runs on the same documents (the input run as given: the
        ranked = {q: [d for d in run[q] if d in reranked[q]] for q in reranked}  # written
        with warnings.catch_warnings(record=True) as noted:  # one keeps them all), over the
            warnings.simplefilter("always", SkippedRecordsWarning)  # same queries
            warnings.simplefilter("ignore", UnrankedQueriesWarning)  # (said below, once)
            before = evaluate(qrels, ranked, args.measures, args.min_relevance, scores.left_out)
            after = evaluate(qrels, reranked, args.measures, args.min_relevance)
        for message in dict.fromkeys(str(w.message) for w in noted):  # (both say the same)
            print(message)
        if unranked:
            print(
                f"{len(unranked):,} of the {len(qrels):,} judged queries of {args.qrels} have "
                f"no ranking in {args.run} (first {unranked[0]!r}): they score 0 in both columns"
            )
        print(f"{'measure':10s} {'input run':>10s} {'reranked':>10s}")
        for name in args.measures:
            print(f"{name:10s} {before[name]:10.4f} {after[name]:10.4f}")
    return 0


def _unranked(
    qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Sequence[str]], args: Any
) -> list[str]:
    """The judged queries ``run`` does not rank (they score 0 in both columns); none of the
    run's queries judged is refused: its measures would be 0 without a word."""
    if not any(q in qrels for q in run):
        first_run = next(iter(run), None)
        first_judged = next(iter(qrels), None)
        raise ValueError(
            f"--qrels {args.qrels} judges none of the {len(run):,} queries of --run {args.run} "
            f"(first {first_run!r}); its {len(qrels):,} judged queries are others (first "
            f"{first_judged!r}): pass the judgements of the run's queries, or leave --qrels "
            "out to rerank only"
        )
    return [q for q in qrels if q not in run]


def _cmd_train_lm(args: argparse.Namespace) -> int:
    from lading.lm.train import ArchOptionError, LMConfig, train_lm

    def say(summary: dict[str, Any]) -> str:
        steps, ppl = summary["steps"], summary["valid_ppl"]
        hint = " (the mean loss passed what exp holds: lower --lr)" if ppl == math.inf else ""
        if args.valid_fraction == 0:  # (NaN there read as a diverged run)
            return f"{args.out}: {steps} steps, no validation split (--valid-fraction 0)"
        return f"{args.out}: {steps} steps, validation perplexity {ppl:.2f}{hint}"

    try:
        config = _config(LMConfig, args, ("corpus", "out"))
    except ArchOptionError as e:  # the message with the flags typed, not the config's fields
        raise ValueError(e.line(_flag_spelling(args), lambda arch: f"--arch {arch}")) from None
    return _train(train_lm, config, say)


def _flag_spelling(args: argparse.Namespace) -> Callable[[str, Any], str]:
    """How a config field and its value were typed: a switch (``--packed``,
    ``--no-document-mask``) bare, any other flag with its value (``--heads 3``)."""
    flags: dict[str, str] = getattr(args, "_flags", {})

    def spell(field: str, value: Any) -> str:
        if isinstance(value, bool):  # the switch that sets it so (``--no-document-mask``)
            return flags.get(f"{field}={value}", flags.get(field, "--" + field.replace("_", "-")))
        return f"{flags.get(field, '--' + field.replace('_', '-'))} {value}"

    return spell


def _cmd_train_sessions(args: argparse.Namespace) -> int:
    from lading.tabular.train import SessionsConfig, train_sessions

    def say(summary: dict[str, Any]) -> str:  # (rank 0 evaluates: its summary has "model")
        model, popular = summary["model"], summary["most_popular"]
        lines = [
            f"{args.out}: {summary['steps']} steps on {summary['world_size']} process(es); "
            f"day {args.eval_day}, {model['sessions']:,} sessions",
            f"{'':14s} {'Recall@20':>10s} {'NDCG@20':>10s}",
        ]
        for name, m in (("model", model), ("most popular", popular)):
            lines.append(f"{name:14s} {m['recall@20']:10.4f} {m['ndcg@20']:10.4f}")
        return "\n".join(lines)

    args.train_days = int_list(args.train_days)  # (checked as parsed: day_numbers)
    return _train(train_sessions, _config(SessionsConfig, args, ("data", "out")), say)


def add_run_args(
    p: argparse.ArgumentParser,
    *,
    batch_size: int,
    lr: float,
    epochs: int = 1,
    log_every: int = 50,
    parallel: tuple[str, ...] = ("ddp", "dp", "none"),
    clip: float | None = None,
    rows: str = "rows",
) -> None:
    """The options every ``lading train`` command takes (lading.train.config.RunConfig);
    ``rows``: what one unit of ``--batch-size`` is for this kind."""
    p.add_argument("--out", required=True, help="folder for model, checkpoints and logs")
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=batch_size,
        help=f"{rows} per step per rank (%(default)s)",
    )
    p.add_argument("--steps", type=positive_int, help="optimizer steps (default: --epochs epochs)")
    p.add_argument(
        "--epochs",
        type=positive_int,
        default=epochs,
        help="epochs when --steps is not given (%(default)s)",
    )
    p.add_argument(
        "--lr",
        type=float,
        help=f"peak learning rate ({lr}; at a --resume, the checkpoint's unless given)",
    )
    p.set_defaults(kind_lr=lr)
    p.add_argument(
        "--clip",
        type=clip_norm,
        default=clip,
        help=f"clip the gradients' norm to this before each update ({clip or 0}; 0: none)",
    )
    p.add_argument("--seed", type=int, default=0, help="fixes every order, draw and initial weight")
    said = ", ".join(PARALLEL_HELP[name] for name in parallel)
    add_choice(p, "--parallel", parallel, said, default="ddp")
    p.add_argument(
        "--num-workers",
        type=nonnegative_int,
        default=0,
        help="DataLoader workers per rank; for data in object storage keep 0: batches are then "
        "built on a thread beside the step (the cross-encoder on an H200: 0.99-1.00x a local "
        "store's samples/s at 0, 0.70-0.73x at 4)",
    )
    p.add_argument(
        "--log-every",
        type=nonnegative_int,
        default=log_every,
        help="steps between OUT/log.jsonl records and progress lines (%(default)s; 0: none)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=nonnegative_int,
        default=0,
        help="steps between checkpoints in OUT/checkpoint, and one at the end (%(default)s: "
        "none at all, so a killed run cannot be resumed)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from OUT/checkpoint when there is one; else start at step 0 (with "
        "--checkpoint-every, or it is refused: nothing would ever be saved to resume)",
    )
    p.add_argument(
        "--no-prefetch",
        dest="prefetch",
        action="store_false",
        help="on CUDA, copy each batch in the step instead of ahead on a side stream (to compare)",
    )


def _kind_parser(kinds: Any, name: str, text: str, launch: str, **run: Any) -> Any:
    """The parser of ``lading train NAME`` with the options of :func:`add_run_args` (``run``:
    this kind's defaults); ``launch`` says how to start it under DDP."""
    p = kinds.add_parser(name, help=text, description=launch)
    add_run_args(p, **run)
    return p


def add_train(sub: Any) -> None:
    train = sub.add_parser("train", help="train a model with DDP, DP or one process")
    kinds = train.add_subparsers(dest="kind", required=True)
    _add_train_sessions(kinds)
    _add_train_lm(kinds)
    _add_train_cross_encoder(kinds)


def day_numbers(text: str) -> str:
    """``--train-days 178,179``, checked while the command line is read: comma-separated day
    numbers (folders of ``--data``; the command reads them with :func:`int_list`), else one
    line naming the flag and the form, not Python's "invalid literal for int()" later."""
    try:
        days = int_list(text)
    except ValueError:
        days = []
    if not days or min(days) < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected comma-separated day numbers (folders of --data), e.g. "
            "--train-days 178,179,180,181"
        )
    return text


def _add_train_sessions(kinds: Any) -> None:
    p = _kind_parser(
        kinds,
        "sessions",
        "a next-item transformer on parquet sessions (YOOCHOOSE protocol)",
        "torchrun --nproc_per_node N -m lading train sessions ... for DDP; --parallel dp for "
        "nn.DataParallel (batch size = total).",
        batch_size=256,
        rows="sessions",
        lr=1e-3,
        epochs=3,
    )
    p.add_argument(
        "--data",
        required=True,
        help="folder or s3:// prefix holding DAY/train.parquet (valid, test) per day (node "
        "cache in $LADING_CACHE/remote, cap $LADING_REMOTE_CACHE_BYTES)",
    )
    p.add_argument(
        "--train-days",
        type=day_numbers,
        default="178,179,180,181",
        help="day folders to train on, comma-separated (%(default)s)",
    )
    p.add_argument("--eval-day", type=int, default=182, help="day folder to evaluate on")
    p.add_argument("--column", default="item_id-list_seq", help="the sessions' item list column")
    p.add_argument(
        "--max-len", type=positive_int, default=20, help="most recent items kept a session"
    )
    p.add_argument("--dim", type=positive_int, default=64, help="model width")
    p.add_argument("--layers", type=positive_int, default=2, help="transformer layers")
    p.add_argument("--heads", type=positive_int, default=2, help="attention heads")
    p.add_argument(
        "--positions",
        type=nonnegative_int,
        default=4,
        help="random positions per session in the loss (0: all; CPU-friendly)",
    )
    p.set_defaults(func=_cmd_train_sessions)


def _add_train_lm(kinds: Any) -> None:
    p = _kind_parser(
        kinds,
        "lm",
        "a language model on a TokenCorpus: LSTM (BPTT continuity) or a tiny GPT",
        "torchrun --nproc_per_node N -m lading train lm ... for DDP.",
        batch_size=32,
        rows="windows (rows of --bptt tokens)",
        lr=3e-3,
        parallel=("ddp", "none"),
        clip=0.25,
    )
    p.add_argument(
        "--corpus",
        required=True,
        type=store_location,
        help="a TokenCorpus (lading lm build): a folder or an s3:// URL (node cache in "
        "$LADING_CACHE/remote, cap $LADING_REMOTE_CACHE_BYTES)",
    )
    add_choice(
        p,
        "--arch",
        ("lstm", "gpt"),
        "an LSTM or a tiny GPT; the flags marked lstm: or gpt: are refused with the other",
    )
    p.add_argument("--heads", type=positive_int, default=4, help="gpt: attention heads")
    p.add_argument("--packed", action="store_true", help="gpt: pack whole documents")
    p.add_argument(
        "--no-document-mask",
        dest="document_mask",
        action="store_false",
        help="gpt ablation: attend and count positions across document boundaries",
    )
    p.add_argument("--valid-fraction", type=float, default=0.02, help="documents held out")
    p.add_argument("--bptt", type=positive_int, default=70, help="tokens a row of a batch (window)")
    p.add_argument("--emb", type=positive_int, default=256, help="embedding width")
    p.add_argument("--hidden", type=positive_int, default=256, help="lstm: hidden width")
    p.add_argument("--layers", type=positive_int, default=2, help="LSTM or transformer layers")
    p.add_argument("--dropout", type=float, default=0.2, help="dropout probability")
    p.add_argument(
        "--break-continuity",
        action="store_true",
        help="lstm ablation: shuffle the rows of every batch (the state no longer fits)",
    )
    p.add_argument(
        "--eval-every",
        type=nonnegative_int,
        default=0,
        help="steps between validations (0: at the end)",
    )
    p.add_argument("--eval-batches", type=positive_int, help="validation batches per evaluation")
    p.set_defaults(func=_cmd_train_lm)


def _add_train_cross_encoder(kinds: Any) -> None:
    p = _kind_parser(
        kinds,
        "cross-encoder",
        "a cross-encoder reranker on (query, relevant, negatives) groups",
        "Launch with torchrun --nproc_per_node N -m lading train cross-encoder ... for DDP "
        "(NCCL on GPU, gloo on CPU).",
        batch_size=8,
        rows="groups (a query and its --group-size documents: group-size rows each)",
        lr=2e-5,
        log_every=10,
    )
    p.add_argument(
        "--store",
        type=store_location,
        help="a lading store (built with the model's tokenizer: fastest), a folder or an "
        "s3:// URL (node cache in $LADING_CACHE/remote, cap $LADING_REMOTE_CACHE_BYTES)",
    )
    p.add_argument(
        "--corpus",
        type=existing,
        help="a corpus file: built into OUT/store with the model's tokenizer",
    )
    p.add_argument(
        "--columns",
        type=column_names,
        help="with a TSV --corpus: its column names, comma-separated, one per column (default: "
        "id,text); a wider TSV names every column, e.g. id,url,title,text for msmarco-docs.tsv",
    )
    p.add_argument(
        "--prefix-fields",
        type=lambda value: tuple(value.split(",")),
        default=(),
        help="with --corpus: fields put before each document's text, comma-separated, e.g. "
        "title (CACM keeps half its documents' words in titles)",
    )
    p.add_argument("--queries", required=True, type=existing, help="queries (id<TAB>text)")
    add_query_columns(p)
    p.add_argument("--qrels", required=True, type=existing, help="judgements (TREC qrels)")
    p.add_argument(
        "--negatives",
        type=existing,
        help="TREC or MS MARCO run, hard-negative JSONL or MS MARCO id triples",
    )
    p.add_argument(
        "--model",
        default="tiny",
        type=model_or_tiny,
        help="'tiny' (a 2-layer BERT, tokenizer trained locally) or a HF model path",
    )
    p.add_argument(
        "--tokenizer", type=tokenizer, help="tokenizer.json or folder (default: the model's)"
    )
    p.add_argument(
        "--group-size",
        type=positive_int,
        default=8,
        help="documents a group: 1 relevant + negatives",
    )
    p.add_argument("--warmup", type=float, default=0.1, help="share of steps warming up")
    add_precision(
        p, "autocast precision of the step (bf16/fp16 on CUDA; fp16 is refused elsewhere)"
    )
    what = "pointwise binary cross-entropy, or cross-entropy over each group"
    add_choice(p, "--loss", ("bce", "listwise"), what)
    add_choice(
        p,
        "--sampling",
        ("run", "random", "run+random"),
        "negatives from the run's top --depth, uniform over the store, or half each",
    )
    p.add_argument(
        "--depth", type=positive_int, default=100, help="how far down the run negatives come"
    )
    p.add_argument(
        "--min-relevance", type=int, default=1, help="judgements at or above this are relevant"
    )
    p.add_argument(
        "--max-length", type=positive_int, default=512, help="tokens a (query, document) pair"
    )
    p.add_argument("--max-query-length", type=positive_int, default=64, help="tokens a query keeps")
    p.add_argument("--trace", action="store_true", help="per-step JSON lines per rank")
    p.add_argument(
        "--narrow",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send ids in the store's dtype + lengths, widened on the device (default: on CUDA)",
    )
    p.add_argument(
        "--use-tokens",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="read the token ids the store was built with (default: where it has them); "
        "--no-use-tokens tokenizes its text with the model's tokenizer (a store built with "
        "another one)",
    )
    p.set_defaults(func=_cmd_train_cross_encoder)


def add_rerank(sub: Any) -> None:
    """The parser of ``rerank``."""
    p = sub.add_parser("rerank", help="rerank a run with a trained cross-encoder; evaluate it")
    p.add_argument(
        "--model", required=True, type=local_model, help="OUT/model of lading train cross-encoder"
    )
    p.add_argument(
        "--store",
        required=True,
        type=store_location,
        help="the documents (a lading store: a directory or an s3://... URL)",
    )
    p.add_argument("--queries", required=True, type=existing, help="queries (id<TAB>text)")
    add_query_columns(p)
    p.add_argument(
        "--run", required=True, type=existing, help="the run to rerank (TREC or MS MARCO format)"
    )
    p.add_argument("--out", required=True, help="where to write the reranked run")
    p.add_argument(
        "--qrels", type=existing, help="judgements: print measures of both runs (ir-measures)"
    )
    p.add_argument(
        "--measures",
        nargs="+",
        default=["nDCG@10", "RR@10", "R@100"],
        help="ir-measures names (default nDCG@10 RR@10 R@100)",
    )
    p.add_argument(
        "--min-relevance", type=int, default=1, help="judgements at or above this are relevant"
    )
    p.add_argument(
        "--depth",
        type=positive_int,
        default=100,
        help="documents reranked a query; the rest of its run follows them, in the run's order",
    )
    p.add_argument("--batch-size", type=positive_int, default=64, help="pairs scored at once")
    p.add_argument(
        "--max-length",
        type=positive_int,
        help="tokens a (query, document) pair (default: as the model was trained, else 512)",
    )
    p.add_argument(
        "--max-query-length",
        type=positive_int,
        help="tokens a query keeps (default: as the model was trained, else 64)",
    )
    add_raise_or_skip(
        p,
        "--on-missing",
        "a run query without text or a top document not in the store: stop (naming them), or "
        "rerank what is there and say what was left out (such a document stays in the "
        "written run, below the reranked ones, in the run's order)",
    )
    p.add_argument(
        "--use-tokens",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="read the token ids the store was built with (default: where it has them, unless "
        "the model's lading.json says it was trained on text); --no-use-tokens tokenizes its "
        "text with the model's tokenizer (a store built with another one, as lading train "
        "cross-encoder --no-use-tokens does)",
    )
    p.set_defaults(func=_cmd_rerank)
