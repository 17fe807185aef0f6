"""The ``lading`` command: argparse subcommands that call the library and print its answers."""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lading import __version__


def _cmd_build(args: argparse.Namespace) -> int:
    from lading.stores import build_store

    started = time.perf_counter()
    columns = tuple(args.columns.split(",")) if args.columns else ("id", "text")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the skip count is printed below instead
        store = build_store(
            args.source,
            args.dest,
            format=args.format,
            tokenizer=args.tokenizer,
            max_length=args.max_length,
            on_error=args.on_error,
            duplicates=args.duplicates,
            id_field=args.id_field,
            text_field=args.text_field,
            columns=columns,
            overwrite=args.overwrite,
            progress=not args.quiet,
        )
    seconds = time.perf_counter() - started
    build = store.meta["build"]
    print(f"{store.path}: {len(store):,} documents in {seconds:.1f}s")
    if build["skipped"]:
        print(
            f"skipped {build['skipped']:,} malformed record(s); first: {build['skip_examples'][0]}"
        )
    if build["duplicates_dropped"]:
        print(
            f"dropped {build['duplicates_dropped']:,} duplicate id(s), kept the {args.duplicates}"
        )
    return 0


def _sizes(path: Path, files: dict[str, Any]) -> str:
    total = sum(int(info["size"]) for info in files.values())
    return f"{total / 2**20:,.1f} MiB in {len(files)} files"


def describe(path: str | Path) -> dict[str, Any]:
    """What ``lading inspect`` reports of a store, as a dict."""
    from lading.stores import open_store

    store = open_store(path, on_stale="ignore")
    meta = store.meta
    return {
        "path": str(store.path),
        "format": f"{meta['format']} v{meta['version']}",
        "documents": meta["count"],
        "size": _sizes(store.path, meta["files"]),
        "text_bytes": meta["files"]["text.bin"]["size"],
        "index": meta["index"]["kind"],
        "fields": meta["fields"],
        "tokens": meta["tokens"],
        "source": meta["source"],
        "stale": store.stale,
        "build": {
            k: meta["build"][k]
            for k in ("on_error", "skipped", "duplicates", "duplicates_dropped", "seconds")
        },
    }


def _cmd_inspect(args: argparse.Namespace) -> int:
    info = describe(args.store)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    tokens = info["tokens"]
    source = info["source"]
    lines = [
        f"store      {info['path']} ({info['format']})",
        f"documents  {info['documents']:,}",
        f"size       {info['size']} (text {info['text_bytes'] / 2**20:,.1f} MiB)",
        f"index      {info['index']}",
        f"fields     {', '.join(info['fields']) or '-'}",
        "tokens     "
        + (
            f"{tokens['dtype']} (vocab {tokens['vocab_size']:,}, max_length {tokens['max_length']})"
            if tokens
            else "-"
        ),
        f"source     {source.get('path') or source.get('irds')} ({source.get('format')})",
        "stale      " + (f"YES: {info['stale']}" if info["stale"] else "no"),
        f"build      {info['build']['seconds']}s, skipped {info['build']['skipped']}, "
        f"duplicates {info['build']['duplicates']} (dropped {info['build']['duplicates_dropped']})",
    ]
    print("\n".join(lines))
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    from lading.stores import open_store

    store = open_store(args.store)
    missing = [i for i in args.ids if i not in store]
    for doc_id in args.ids:
        if doc_id in store:
            print(json.dumps(store.record(doc_id)._asdict(), ensure_ascii=False))
    for doc_id in missing:
        print(f"lading get: id {doc_id!r} is not in {store.path}", file=sys.stderr)
    return 1 if missing else 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from lading.disk import verify_checksums

    problems = verify_checksums(args.store)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"{args.store}: every file matches its checksum")
    return 1 if problems else 0


def _cmd_stage(args: argparse.Namespace) -> int:
    from lading.staging import stage

    options: dict[str, Any] = {}
    for item in args.storage_option:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--storage-option {item!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(value)  # numbers, booleans, objects
        except json.JSONDecodeError:
            options[key] = value
    started = time.perf_counter()
    dest = stage(
        args.src, args.dest, storage_options=options, verify=args.verify, progress=not args.quiet
    )
    print(f"{dest}: staged from {args.src} ({time.perf_counter() - started:.1f}s)")
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from lading.synth import synth

    files = synth(
        args.kind,
        args.n,
        args.out,
        queries=args.queries,
        seed=args.seed,
        corpus_format=args.corpus_format,
    )
    for name, path in files.__dict__.items():
        print(f"{name:8s} {path}")
    return 0


def _cmd_train_cross_encoder(args: argparse.Namespace) -> int:
    from lading.ir.train import TrainConfig, train

    fields = {k: v for k, v in vars(args).items() if k in TrainConfig.__dataclass_fields__}
    for key in ("out", "queries", "qrels", "store", "corpus", "negatives"):
        if fields.get(key) is not None:
            fields[key] = Path(fields[key])
    summary = train(TrainConfig(**fields))
    if int(__import__("os").environ.get("RANK", "0")) == 0:
        print(
            f"{args.out}: {summary['steps']} steps, last loss {summary['last_loss']:.4f}; "
            f"model in {Path(args.out) / 'model'}"
        )
    return 0


def _cmd_rerank(args: argparse.Namespace) -> int:
    import torch

    from lading.ir.inputs import read_qrels, read_queries, read_run
    from lading.ir.model import CrossEncoder
    from lading.ir.rerank import evaluate, rerank, write_trec_run
    from lading.stores import open_store

    model = CrossEncoder.from_pretrained(args.model)
    tokenizer = Path(args.model) / "tokenizer.json"
    store = open_store(args.store)
    run = read_run(args.run)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    scores = rerank(
        model,
        store,
        read_queries(args.queries),
        run,
        tokenizer,
        depth=args.depth,
        batch_size=args.batch_size,
        max_length=args.max_length,
        device=device,
    )
    write_trec_run(scores, args.out)
    print(f"{args.out}: reranked the top {args.depth} of {len(scores)} queries")
    if args.qrels:
        qrels = read_qrels(args.qrels)
        before = evaluate(
            qrels, {q: run[q][: args.depth] for q in scores}, args.measures, args.min_relevance
        )
        after = evaluate(qrels, scores, args.measures, args.min_relevance)
        print(f"{'measure':10s} {'input run':>10s} {'reranked':>10s}")
        for name in args.measures:
            print(f"{name:10s} {before[name]:10.4f} {after[name]:10.4f}")
    return 0


def _cmd_lm_tokenizer(args: argparse.Namespace) -> int:
    from lading.lm.tokenizer import train_tokenizer

    path = train_tokenizer(
        args.source,
        args.out,
        vocab_size=args.vocab_size,
        kind=args.kind,
        split=args.split,
        limit=args.limit,
    )
    print(f"{path}: {args.kind} tokenizer, {args.vocab_size:,} entries")
    return 0


def _cmd_lm_build(args: argparse.Namespace) -> int:
    from lading.lm.corpus import TokenCorpus

    corpus = TokenCorpus.build(
        args.source,
        args.dest,
        args.tokenizer,
        append_eos=not args.no_eos,
        eos_token=args.eos_token,
        split=args.split,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    print(
        f"{corpus.path}: {len(corpus):,} documents, {corpus.n_tokens:,} tokens as "
        f"{corpus.dtype} ({corpus.n_tokens * corpus.dtype.itemsize / 2**20:,.1f} MiB)"
    )
    return 0


def _cmd_train_lm(args: argparse.Namespace) -> int:
    from lading.lm.train import LMConfig, train_lm

    fields = {k: v for k, v in vars(args).items() if k in LMConfig.__dataclass_fields__}
    fields["corpus"], fields["out"] = Path(args.corpus), Path(args.out)
    summary = train_lm(LMConfig(**fields))
    if int(__import__("os").environ.get("RANK", "0")) == 0:
        print(
            f"{args.out}: {summary['steps']} steps, validation perplexity "
            f"{summary['valid_ppl']:.2f}"
        )
    return 0


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def bench_plan(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """(GridOptions, Settings, passages) of ``lading bench``: options given, else the preset.

    The preset is :data:`lading.bench.QUICK`, or :data:`lading.bench.FULL` with ``--full``.
    """
    from lading.bench import FULL, QUICK, GridOptions, Settings, parse_bytes

    preset = FULL if args.full else QUICK
    if args.world_sizes:
        world_sizes = _int_list(args.world_sizes)
    elif preset.world_sizes is not None:
        world_sizes = list(preset.world_sizes)
    else:
        world_sizes = _default_world_sizes()
    options = GridOptions(
        strategies=args.strategies.split(",") if args.strategies else list(preset.strategies),
        world_sizes=world_sizes,
        modes=args.modes.split(",") if args.modes else list(preset.modes),
        workers=_int_list(args.workers),
        pin_memory=args.pin_memory,
        ramdisk=args.ramdisk,
        parallel=args.parallel,
        memory_budget=parse_bytes(args.memory_budget) if args.memory_budget else None,
    )
    options.strategies = [s for s in options.strategies if s]
    options.modes = [m for m in options.modes if m]
    settings = Settings(
        steps=args.steps if args.steps is not None else preset.steps,
        warmup=args.warmup if args.warmup is not None else preset.warmup,
        batch_size=args.batch_size,
        group_size=args.group_size,
        max_length=args.max_length,
        model=args.model,
    )
    return options, settings, args.passages if args.passages is not None else preset.passages


def _cmd_bench(args: argparse.Namespace) -> int:
    from lading.bench import render, run_bench

    if args.target == "report":
        if not args.dir:
            raise ValueError("lading bench report DIR: say which folder holds results.json")
        print(render(args.dir))
        return 0
    options, settings, passages = bench_plan(args)
    paths = {
        k: Path(getattr(args, k)) if getattr(args, k) else None
        for k in ("corpus", "queries", "qrels", "negatives")
    }
    run_bench(
        options, settings, Path(args.out), passages=passages, tokenizer=args.tokenizer, **paths
    )
    print(f"results in {args.out} (results.json, report.md, *.png)")
    return 0


def _default_world_sizes() -> list[int]:
    import torch

    gpus = torch.cuda.device_count()
    return [w for w in (1, 2, 4, 8) if w <= gpus] if gpus else [1, 2, 4]


def _add_bench(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="the study: document strategies x world sizes, samples/s and memory",
        description="lading bench [ir] [options] runs a quick grid (loader mode, 20,000 "
        "passages, 1 and 2 processes; minutes); --full runs the study's grid (100,000 passages, "
        "every strategy, loader and train, 1/2/4 processes or up to 8 GPUs). Options given "
        "override the grid's. lading bench report DIR re-renders report.md and the plots from "
        "DIR/results.json.",
    )
    p.add_argument("target", nargs="?", choices=["ir", "report"], default="ir")
    p.add_argument("dir", nargs="?", help="with report: the results folder")
    p.add_argument(
        "--full", action="store_true", help="the study's full grid (11-16 min on 2 CPUs)"
    )
    p.add_argument("--corpus", help="a corpus file (default: a synthetic one, cached)")
    p.add_argument("--queries")
    p.add_argument("--qrels")
    p.add_argument("--negatives", help="a run for --sampling run (default sampling: random)")
    p.add_argument("--passages", type=int, help="size of the default corpus (20000; --full 100000)")
    p.add_argument(
        "--strategies",
        help="memory,offsets,packed,packed-text (--full adds irds); packed reads stored token "
        "ids, the others tokenize text in the collator",
    )
    p.add_argument("--world-sizes", help="default 1,2; --full: 1,2,4 on CPU, up to 8 GPUs")
    p.add_argument("--modes", help="loader, train or both (default loader; --full both)")
    p.add_argument("--workers", default="0", help="DataLoader workers, e.g. 0,2,4")
    p.add_argument("--pin-memory", action="store_true", help="also run with pinned memory")
    p.add_argument("--ramdisk", action="store_true", help="also run from a copy in /dev/shm")
    p.add_argument("--parallel", choices=["ddp", "dp"], default="ddp")
    p.add_argument("--steps", type=int, help="timed steps per cell (20; --full 30)")
    p.add_argument("--warmup", type=int, help="untimed steps first (3; --full 5)")
    p.add_argument("--batch-size", type=int, default=8, help="groups per rank per step")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--model", default="tiny", help="'tiny' on CPU; a HF model path on GPU")
    p.add_argument("--tokenizer", help="the model's tokenizer (default: trained on the corpus)")
    p.add_argument("--memory-budget", help="e.g. 8G (default: the machine's available RAM)")
    p.add_argument("--out", default="bench-out", help="folder for results")
    p.set_defaults(func=_cmd_bench)


def _cmd_train_sessions(args: argparse.Namespace) -> int:
    from lading.tabular.train import SessionsConfig, train_sessions

    fields = {k: v for k, v in vars(args).items() if k in SessionsConfig.__dataclass_fields__}
    fields.update(data=Path(args.data), out=Path(args.out), train_days=_int_list(args.train_days))
    summary = train_sessions(SessionsConfig(**fields))
    if "model" in summary:
        model, popular = summary["model"], summary["most_popular"]
        print(
            f"{args.out}: {summary['steps']} steps on {summary['world_size']} process(es); "
            f"day {args.eval_day}, {model['sessions']:,} sessions"
        )
        print(f"{'':14s} {'Recall@20':>10s} {'NDCG@20':>10s}")
        for name, m in (("model", model), ("most popular", popular)):
            print(f"{name:14s} {m['recall@20']:10.4f} {m['ndcg@20']:10.4f}")
    return 0


def _cmd_repartition(args: argparse.Namespace) -> int:
    from lading.tabular.repartition import repartition

    print(
        repartition(
            args.src,
            args.dst,
            world_size=args.world_size,
            workers=args.workers,
            row_group_size=args.row_group_size,
        )
    )
    return 0


def _add_lm(sub: Any) -> None:
    lm = sub.add_parser("lm", help="language-model corpora: train a tokenizer, build a corpus")
    kinds = lm.add_subparsers(dest="lm_command", required=True)
    p = kinds.add_parser("tokenizer", help="train a tokenizer locally (byte-level BPE default)")
    p.add_argument("source", help="text file(s), JSONL, WikiExtractor output, folder or store")
    p.add_argument("out", help="tokenizer.json to write (or a folder)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--kind", choices=["bpe", "wordpiece"], default="bpe")
    p.add_argument("--split", choices=["blank", "line", "file"], default="blank")
    p.add_argument("--limit", type=int, help="train on at most this many documents")
    p.set_defaults(func=_cmd_lm_tokenizer)
    p = kinds.add_parser("build", help="tokenize a corpus into a memory-mapped TokenCorpus")
    p.add_argument("source")
    p.add_argument("dest")
    p.add_argument("--tokenizer", required=True)
    p.add_argument(
        "--split",
        choices=["blank", "line", "file"],
        default="blank",
        help="how plain text divides into documents",
    )
    p.add_argument("--no-eos", action="store_true", help="do not end documents with EOS")
    p.add_argument("--eos-token", help="name of the end-of-text token")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_cmd_lm_build)


def _add_run_args(
    p: argparse.ArgumentParser,
    *,
    batch_size: int,
    lr: float,
    epochs: int = 1,
    log_every: int = 50,
    parallel: tuple[str, ...] = ("ddp", "dp", "none"),
) -> None:
    """The options every ``lading train`` command takes (lading.train.config.RunConfig)."""
    p.add_argument("--out", required=True, help="folder for model, checkpoints and logs")
    p.add_argument("--batch-size", type=int, default=batch_size, help="rows per step per rank")
    p.add_argument("--steps", type=int, help="optimizer steps (default: --epochs epochs)")
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parallel", choices=list(parallel), default="ddp")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader workers per rank")
    p.add_argument("--log-every", type=int, default=log_every)
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    p.add_argument(
        "--no-prefetch",
        dest="prefetch",
        action="store_false",
        help="on CUDA, copy each batch in the step instead of ahead on a side stream (to compare)",
    )


def _add_train(sub: Any) -> None:
    train = sub.add_parser("train", help="train a model with DDP, DP or one process")
    kinds = train.add_subparsers(dest="kind", required=True)
    p = kinds.add_parser(
        "sessions",
        help="a next-item transformer on parquet sessions (YOOCHOOSE protocol)",
        description="torchrun --nproc_per_node N -m lading train sessions ... for DDP; "
        "--parallel dp for nn.DataParallel (batch size = total).",
    )
    _add_run_args(p, batch_size=256, lr=1e-3, epochs=3)
    p.add_argument("--data", required=True, help="folder with one sub-folder per day")
    p.add_argument("--train-days", default="178,179,180,181")
    p.add_argument("--eval-day", type=int, default=182)
    p.add_argument("--column", default="item_id-list_seq")
    p.add_argument("--max-len", type=int, default=20)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument(
        "--positions",
        type=int,
        default=4,
        help="random positions per session in the loss (0: all; CPU-friendly)",
    )
    p.set_defaults(func=_cmd_train_sessions)
    p = kinds.add_parser(
        "lm",
        help="a language model on a TokenCorpus: LSTM (BPTT continuity) or a tiny GPT",
        description="torchrun --nproc_per_node N -m lading train lm ... for DDP.",
    )
    _add_run_args(p, batch_size=32, lr=3e-3, parallel=("ddp", "none"))
    p.add_argument("--corpus", required=True, help="a TokenCorpus (lading lm build)")
    p.add_argument("--arch", choices=["lstm", "gpt"], default="lstm")
    p.add_argument("--heads", type=int, default=4, help="gpt: attention heads")
    p.add_argument("--packed", action="store_true", help="gpt: pack whole documents")
    p.add_argument(
        "--no-document-mask",
        dest="document_mask",
        action="store_false",
        help="gpt ablation: attend and count positions across document boundaries",
    )
    p.add_argument("--valid-fraction", type=float, default=0.02, help="documents held out")
    p.add_argument("--bptt", type=int, default=70)
    p.add_argument("--emb", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument(
        "--break-continuity",
        action="store_true",
        help="ablation: shuffle the rows of every batch (the state no longer fits)",
    )
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-batches", type=int, help="validation batches per evaluation")
    p.set_defaults(func=_cmd_train_lm)
    p = kinds.add_parser(
        "cross-encoder",
        help="a cross-encoder reranker on (query, relevant, negatives) groups",
        description="Launch with torchrun --nproc_per_node N -m lading train cross-encoder ... "
        "for DDP (NCCL on GPU, gloo on CPU).",
    )
    _add_run_args(p, batch_size=8, lr=2e-5, log_every=10)
    p.add_argument("--store", help="a lading store (built with the model's tokenizer: fastest)")
    p.add_argument(
        "--corpus", help="a corpus file: built into OUT/store with the model's tokenizer"
    )
    p.add_argument("--queries", required=True)
    p.add_argument("--qrels", required=True)
    p.add_argument("--negatives", help="TREC run, hard-negative JSONL or MS MARCO id triples")
    p.add_argument(
        "--model",
        default="tiny",
        help="'tiny' (a 2-layer BERT, tokenizer trained locally) or a HF model path",
    )
    p.add_argument("--tokenizer", help="tokenizer.json or folder (default: the model's)")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--warmup", type=float, default=0.1, help="share of steps warming up")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--loss", choices=["bce", "listwise"], default="bce")
    p.add_argument("--sampling", choices=["run", "random", "run+random"], default="run")
    p.add_argument("--depth", type=int, default=100)
    p.add_argument("--min-relevance", type=int, default=1)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--max-query-length", type=int, default=64)
    p.add_argument("--trace", action="store_true", help="per-step JSON lines per rank")
    p.add_argument(
        "--narrow",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send ids in the store's dtype + lengths, widened on the device (default: on CUDA)",
    )
    p.set_defaults(func=_cmd_train_cross_encoder)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``lading`` command."""
    parser = argparse.ArgumentParser(
        prog="lading",
        description="Move training data from disk to RAM to GPU without a copy per process.",
    )
    parser.add_argument("--version", action="version", version=f"lading {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build", help="build a memory-mapped store from a corpus file")
    p.add_argument("source", help="TSV/JSONL/TREC file (.gz/.bz2/.zst ok), BEIR folder, irds:<id>")
    p.add_argument("dest", help="store directory to create")
    p.add_argument("--format", choices=["beir", "irds", "jsonl", "trec", "tsv"])
    p.add_argument("--tokenizer", help="tokenizer.json or a local HF model folder: pre-tokenize")
    p.add_argument("--max-length", type=int, help="keep at most this many tokens per document")
    p.add_argument("--on-error", choices=["raise", "skip"], default="raise")
    p.add_argument("--duplicates", choices=["error", "first", "last"], default="error")
    p.add_argument("--id-field", help="JSON key of the id")
    p.add_argument("--text-field", help="JSON key of the text")
    p.add_argument("--columns", help="TSV column names, comma-separated (default: id,text)")
    p.add_argument("--overwrite", action="store_true", help="rebuild even if up to date")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_build)

    p = sub.add_parser("inspect", help="counts, sizes, dtypes, fields, source and staleness")
    p.add_argument("store")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("get", help="print documents by id (JSON lines)")
    p.add_argument("store")
    p.add_argument("ids", nargs="+")
    p.set_defaults(func=_cmd_get)

    p = sub.add_parser("verify", help="read every file of a store and check its checksum")
    p.add_argument("store")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("stage", help="copy a store/corpus/parquet folder to node-local disk")
    p.add_argument("src", help="a built directory, or an fsspec URL (s3://bucket/prefix, gs://...)")
    p.add_argument("dest", help="node-local directory to create (reused when still current)")
    p.add_argument(
        "--storage-option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec option for a URL source, e.g. endpoint_url=http://host:9000 (repeatable)",
    )
    p.add_argument("--verify", action="store_true", help="re-read a reused copy in full")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_stage)

    _add_train(sub)
    _add_lm(sub)
    _add_bench(sub)

    p = sub.add_parser("repartition", help="rewrite parquet into row groups for N readers")
    p.add_argument("src", nargs="+", help="parquet files or folders")
    p.add_argument("dst", help="folder to write")
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--workers", type=int, default=1, help="DataLoader workers per rank")
    p.add_argument("--row-group-size", type=int, help="rows per group wanted")
    p.set_defaults(func=_cmd_repartition)

    p = sub.add_parser("rerank", help="rerank a run with a trained cross-encoder; evaluate it")
    p.add_argument("--model", required=True, help="OUT/model of lading train cross-encoder")
    p.add_argument("--store", required=True)
    p.add_argument("--queries", required=True)
    p.add_argument("--run", required=True, help="the run to rerank (TREC format)")
    p.add_argument("--out", required=True, help="where to write the reranked run")
    p.add_argument("--qrels", help="judgements: print measures of both runs (ir-measures)")
    p.add_argument("--measures", nargs="+", default=["nDCG@10", "RR@10", "R@100"])
    p.add_argument("--min-relevance", type=int, default=1)
    p.add_argument("--depth", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=512)
    p.set_defaults(func=_cmd_rerank)

    p = sub.add_parser("synth", help="write a deterministic MS MARCO-shaped collection")
    p.add_argument("kind", choices=["passages", "documents"])
    p.add_argument("n", type=int, help="number of documents")
    p.add_argument("out", help="folder to write")
    p.add_argument("--queries", type=int, help="number of queries (default n/100, 10..5000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--format",
        dest="corpus_format",
        choices=["jsonl", "tsv"],
        help="documents: docs.jsonl (default) or docs.tsv (docid, url, title, body)",
    )
    p.set_defaults(func=_cmd_synth)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``lading`` command; errors lading raises on purpose print as one line."""
    from lading.errors import LadingError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (LadingError, FileNotFoundError, FileExistsError, ImportError, ValueError) as e:
        print(f"lading {args.command}: {e}", file=sys.stderr)
        return 2
