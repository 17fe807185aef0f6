"""``lading bench``: the study's grid from options or a preset (bench_plan), command, parser."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from lading.cli.inputs import (
    add_choice,
    add_precision,
    add_query_columns,
    existing,
    nonnegative_int,
    positive_int,
)

# lading.bench.cell.MODES, spelled here so that a bad --modes is refused when the command line
# is parsed, not after importing torch (tests/bench/test_bench_flags.py checks they agree)
BENCH_MODES: tuple[str, ...] = ("loader", "train")
DEFAULT_OUT = "bench-out"  # where lading bench ir writes without DIR or --out


def mode_list(text: str) -> list[str]:
    """``--modes``: comma-separated names of :data:`BENCH_MODES`, or an argparse error naming
    them (a typo or ``both`` once ran loader cells labelled with it)."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    wrong = [m for m in modes if m not in BENCH_MODES]
    if not modes or wrong:
        raise argparse.ArgumentTypeError(
            f"{', '.join(map(repr, wrong)) or repr(text)} "
            f"{'are not modes' if len(wrong) > 1 else 'is not a mode'}; give one or both of "
            f"{', '.join(BENCH_MODES)} separated by a comma, e.g. --modes {','.join(BENCH_MODES)}"
        )
    return list(dict.fromkeys(modes))


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def flag_ints(flag: str, text: str, minimum: int, meaning: str, example: str) -> list[int]:
    """``text`` as comma-separated integers ``>= minimum``, or a ValueError naming ``flag``,
    what it counts and an example (not Python's "invalid literal for int()")."""
    try:
        values = int_list(text)
    except ValueError:
        values = []
    if not values or min(values) < minimum:
        raise ValueError(
            f"{flag} {text!r}: expected {meaning}, integers >= {minimum} separated by "
            f"commas, e.g. {flag} {example}"
        )
    return values


def strategy_list(text: str) -> list[str]:
    """``--strategies``: the names of a comma-separated list, blanks dropped, or a ValueError
    naming the flag and the choices where none is left (``--strategies ,`` measured nothing
    and exited 0). An unknown name is refused when the grid starts, with the same choices."""
    from lading.bench import STRATEGIES

    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError(
            f"--strategies {text!r} names no strategy; give one or more of "
            f"{', '.join(STRATEGIES)} separated by commas, e.g. --strategies packed,offsets "
            "(or leave the flag out for the preset's)"
        )
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:  # (the report ranked packed against packed)
        raise ValueError(f"--strategies {text!r} names {', '.join(twice)} twice: name each once")
    return names


def bench_plan(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """(GridOptions, Settings, passages) of ``lading bench``: options given, else the preset.

    The preset is :data:`lading.bench.QUICK`, or :data:`lading.bench.FULL` with ``--full``.
    """
    from lading.bench import FULL, QUICK, GridOptions, Settings
    from lading.bench.launched import launched_world

    preset = FULL if args.full else QUICK
    launched = launched_world()
    if args.world_sizes:
        world_sizes = flag_ints("--world-sizes", args.world_sizes, 1, "processes per cell", "1,2,4")
    elif launched is not None:  # torchrun/srun: every cell runs on all the launched processes
        world_sizes = [launched.world_size]
    elif preset.world_sizes is not None:
        world_sizes = list(preset.world_sizes)
    else:
        world_sizes = default_world_sizes()
    options = GridOptions(
        strategies=strategy_list(args.strategies)
        if args.strategies is not None
        else list(preset.strategies),
        world_sizes=world_sizes,
        modes=args.modes if args.modes else list(preset.modes),
        workers=flag_ints("--workers", args.workers, 0, "DataLoader workers", "0,2"),
        pin_memory=args.pin_memory,
        ramdisk=args.ramdisk,
        parallel=args.parallel,
        memory_budget=memory_budget(args.memory_budget),
    )
    if args.remote:  # the packed store, uploaded there and read through the node cache
        options.remote = args.remote
        options.strategies += [] if "remote" in options.strategies else ["remote"]
    check_flags(args)
    settings = Settings(
        seconds=args.seconds if args.seconds is not None else preset.seconds,
        repeats=args.repeats if args.repeats is not None else preset.repeats,
        steps=args.steps if args.steps is not None else preset.steps,
        warmup=args.warmup if args.warmup is not None else preset.warmup,
        batch_size=args.batch_size,
        group_size=args.group_size,
        max_length=args.max_length,
        model=args.model,
        precision=args.precision,
        sampling="run" if args.negatives else "random",
        query_columns=args.query_columns,
    )
    return options, settings, args.passages if args.passages is not None else preset.passages


def check_flags(args: argparse.Namespace) -> None:
    """Refuse, in one line naming the flag and the fix, the flags this machine cannot honour
    and the flags that would be ignored."""
    if args.pin_memory:
        import torch

        if not torch.cuda.is_available():
            raise ValueError(
                "--pin-memory pins host memory for copies to a CUDA device, and this machine "
                "has none (torch.cuda.is_available() is False): nothing would be pinned. "
                "Leave --pin-memory out on CPU"
            )
    if getattr(args, "parallel", None) == "dp":
        import torch

        if not torch.cuda.is_available():  # (DDP ran, and results.json said dp)
            raise ValueError(
                "--parallel dp runs one process driving every GPU (nn.DataParallel), and this "
                "machine has no CUDA device: the cells would run DDP and be labelled dp. "
                "Leave --parallel out on CPU"
            )
    if args.model != "tiny" and model_folder(args.model) is None:
        raise ValueError(
            f"--model {args.model}: no model folder with config.json there (nor a model of "
            "that id in the local Hugging Face cache; the bench never downloads); give a local "
            "model folder with config.json, or 'tiny'"
        )
    if args.corpus:
        check_corpus_columns(Path(args.corpus))
    if not args.corpus:
        # the synthetic collection brings its own queries, judgements and run: these would be
        # silently replaced by them
        for flag in ("queries", "qrels", "negatives", "query_columns"):
            if getattr(args, flag):
                shown = getattr(args, flag)
                shown = ",".join(shown) if isinstance(shown, tuple) else shown
                flag = flag.replace("_", "-")
                raise ValueError(
                    f"--{flag} {shown} given without --corpus: the default "
                    "synthetic collection has its own queries, qrels and run (its negatives "
                    f"come from that run); give --corpus (with --queries and --qrels) to use "
                    f"yours, or leave --{flag} out"
                )
    elif not (args.queries and args.qrels):
        raise ValueError(
            f"--corpus {args.corpus} needs --queries and --qrels too (the training groups "
            "pair judged queries with documents); --negatives is optional"
        )
    elif args.passages is not None:
        # the size of the synthetic collection: the bench runs on every document of --corpus
        raise ValueError(
            f"--passages {args.passages} given with --corpus {args.corpus}: --passages sizes "
            "the default synthetic collection, and the bench reads every document of "
            "--corpus; leave --passages out (or --corpus, to bench a synthetic collection of "
            f"{args.passages} passages)"
        )
    if args.seconds is not None and not 0 <= args.seconds < math.inf:  # (nan ran for ever)
        raise ValueError(
            f"--seconds {args.seconds}: expected a window of 0 seconds or more, finite"
        )
    tokenizer = bench_tokenizer(args)  # a model without one is refused now, not after stores
    if tokenizer is not None and args.model != "tiny":
        check_vocabulary(tokenizer, args.model)


def check_corpus_columns(corpus: Path) -> None:
    """Refuse a TSV ``--corpus`` whose first line has more than two columns, naming a fix the
    bench has: every strategy reads the file as ``id<TAB>text`` (the packed and offsets stores,
    ir_datasets' docstore, the peers' formats), so it takes no ``--columns``; the reader's own
    refusal would advise that flag, after planning and from inside the preparation."""
    from lading.sources import detect_format, open_binary

    try:
        if corpus.is_dir() or detect_format(corpus) != "tsv":
            return
    except ValueError:  # a name of no known format: the reader says so, naming it
        return
    with open_binary(corpus) as f:
        first = next((line for line in f if line.strip()), b"")
    parts = first.rstrip(b"\r\n").split(b"\t")
    if len(parts) <= 2:
        return
    shown = " | ".join(repr(p[:24].decode("utf-8", "replace")) for p in parts[:6])
    keep = "cut -f1,4" if len(parts) == 4 else f"cut -f1,{len(parts)}"
    raise ValueError(
        f"--corpus {corpus}: line 1 has {len(parts)} columns ({shown}); the bench reads "
        "id<TAB>text in every strategy, so give it a two-column file, e.g. "
        f"{keep} {corpus.name} > {corpus.stem}.id-text.tsv (for id,url,title,text: the id and "
        "the body)"
    )


def check_vocabulary(tokenizer: str, model: str) -> None:
    """Refuse a tokenizer whose ids pass the model's embedding (every train cell would fail
    with an IndexError inside the model)."""
    import json

    from lading.stores.tokens import load_tokenizer

    folder = model_folder(model)
    assert folder is not None  # checked by check_flags
    rows = json.loads((folder / "config.json").read_text()).get("vocab_size")
    if not isinstance(rows, int):  # a config without one: nothing to compare with
        return
    entries = load_tokenizer(tokenizer).get_vocab_size()
    if entries > rows:
        raise ValueError(
            f"--tokenizer {tokenizer} has {entries:,} entries and --model {model} embeds "
            f"{rows:,} (config.json vocab_size): ids past it would fail every train cell; "
            "give the model's own tokenizer (leave --tokenizer out to use its tokenizer.json)"
        )


def model_folder(model: str) -> Path | None:
    """The folder of ``model``: a local folder with ``config.json``, or the copy of a model
    id already in the Hugging Face cache (looked up locally only: the bench is offline)."""
    path = Path(model)
    if path.exists():
        return path if (path / "config.json").is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache

        config = try_to_load_from_cache(model, "config.json")
    except Exception:  # not installed, or not a valid repo id: not there
        return None
    return Path(config).parent if isinstance(config, str) else None


def bench_tokenizer(args: argparse.Namespace) -> str | None:
    """The tokenizer the stores are built with: ``--tokenizer``, else ``--model``'s own
    ``tokenizer.json`` (token ids the model's embedding knows), else None (one is trained on
    the corpus, for ``--model tiny``)."""
    if args.tokenizer:
        return str(args.tokenizer)
    if args.model == "tiny":
        return None
    folder = model_folder(args.model)
    if folder is None or not (folder / "tokenizer.json").is_file():
        raise ValueError(
            f"--model {args.model} has no tokenizer.json beside its config.json: the stores "
            "must hold the model's token ids; give its tokenizer with --tokenizer PATH "
            "(a tokenizer.json, e.g. saved with AutoTokenizer(...).backend_tokenizer.save)"
        )
    return str(folder / "tokenizer.json")


def _cmd_bench(args: argparse.Namespace) -> int:
    from lading.bench import render, run_bench
    from lading.bench.grid import GridInterrupted

    if args.target == "report":
        if not args.dir:
            raise ValueError("lading bench report DIR: say which folder holds results.json")
        print(render(args.dir))
        return 0
    out = bench_out(args)  # refused before torch is imported
    print("lading bench: importing torch and planning the grid", file=sys.stderr, flush=True)
    options, settings, passages = bench_plan(args)
    paths = {
        k: Path(getattr(args, k)) if getattr(args, k) else None
        for k in ("corpus", "queries", "qrels", "negatives")
    }
    try:
        results = run_bench(
            options,
            settings,
            out,
            passages=passages,
            tokenizer=bench_tokenizer(args),
            **paths,
        )
    except GridInterrupted as cut:
        kept = (
            f"what was measured is in {out} (report.md, marked interrupted; results.json)"
            if cut.runs
            else "nothing was measured"
        )
        from lading.bench.words import counted

        print(
            f"lading bench: interrupted after {cut.runs} of {counted(cut.of, 'run')}; {kept}",
            file=sys.stderr,
        )
        return 130
    print(f"results in {out} (results.json, report.md, *.png)")
    return _failed_cells(results["cells"])


def _failed_cells(cells: list[dict[str, Any]]) -> int:
    """1 (each failed cell a line on stderr) when a cell ended in an error, else 0: a run
    whose cells failed is no measurement. A cell out of memory is a result, not a failure."""
    from lading.bench.words import counted

    failed = [c for c in cells if c["status"] == "error"]
    if not failed:
        return 0
    print(f"lading bench: {len(failed)} of {counted(len(cells), 'cell')} failed:", file=sys.stderr)
    for cell in failed:
        reason = str(cell.get("reason", "")).strip().splitlines()
        print(
            f"  {cell['strategy']} x{cell['world_size']} {cell['mode']}, "
            f"{counted(cell['workers'], 'worker')}: "
            f"{reason[-1] if reason else 'no reason recorded'}",
            file=sys.stderr,
        )
    return 1


def memory_budget(text: str | None) -> int | None:
    """``--memory-budget`` in bytes (None: the RAM available), refused under 1 MiB: every cell
    would be recorded as out of memory."""
    from lading.bench import parse_bytes

    if not text:
        return None
    budget = parse_bytes(text, "--memory-budget")
    if budget < 2**20:
        raise ValueError(
            f"--memory-budget {text}: {budget:,} bytes; a budget is at least 1 MiB (the "
            "memory every cell's processes may hold together), e.g. 8G"
        )
    return budget


def bench_out(args: argparse.Namespace) -> Path:
    """Where ``lading bench ir`` writes: ``DIR`` (``lading bench ir DIR``, as ``report DIR``
    reads it), else ``--out``, else ``bench-out``; DIR and a different ``--out`` are refused
    (one of them would be ignored)."""
    if args.dir and args.out and Path(args.dir) != Path(args.out):
        raise ValueError(
            f"ir {args.dir} and --out {args.out} name two output folders (DIR is the output "
            f"folder, as --out is); give one: ir {args.dir}, or --out {args.out}"
        )
    return Path(args.dir or args.out or DEFAULT_OUT)


def default_world_sizes() -> list[int]:
    import torch

    gpus = torch.cuda.device_count()
    return [w for w in (1, 2, 4, 8) if w <= gpus] if gpus else [1, 2, 4]


def add_bench(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="the study: document strategies x world sizes, samples/s and memory",
        description="lading bench [ir] [options] runs a quick grid (loader mode, 20,000 "
        "passages, 1 and 2 processes, 3 repeats of a 0.5 s window per cell; 1.5-3 minutes "
        "measured on 2 shared CPU cores); --full runs the study's grid (100,000 passages, "
        "every strategy, loader and train, 1/2/4 processes or up to 8 GPUs). Options given "
        "override the grid's. lading bench report DIR re-renders report.md and the plots from "
        "DIR/results.json; lading bench ir DIR writes to DIR (as --out DIR).",
    )
    p.add_argument(
        "target",
        nargs="?",
        choices=["ir", "report"],
        default="ir",
        help="ir: run the grid (default); report: re-render DIR's report and plots",
    )
    p.add_argument(
        "dir",
        nargs="?",
        help="with ir: the output folder (as --out; default bench-out); with report: the "
        "results folder to re-render",
    )
    p.add_argument(
        "--full", action="store_true", help="the study's full grid (30 cells x 3 repeats)"
    )
    p.add_argument(
        "--corpus", type=existing, help="a corpus file (default: a synthetic one, cached)"
    )
    p.add_argument("--queries", type=existing, help="with --corpus: queries (TSV)")
    add_query_columns(p)
    p.add_argument("--qrels", type=existing, help="with --corpus: judgements (TREC qrels)")
    p.add_argument(
        "--negatives",
        type=existing,
        help="with --corpus: a run (TREC) whose top documents are the negatives: sampling "
        "'run' (without it, negatives of --corpus are drawn at random)",
    )
    p.add_argument(
        "--passages", type=positive_int, help="size of the default corpus (20000; --full 100000)"
    )
    p.add_argument(
        "--strategies",
        help="memory,offsets,packed,packed-text (--full adds irds and the peers hf,mds,litdata "
        "where installed); packed reads stored token ids, the others tokenize text in the "
        "collator",
    )
    p.add_argument("--world-sizes", help="default 1,2; --full: 1,2,4 on CPU, up to 8 GPUs")
    p.add_argument(
        "--modes",
        type=mode_list,
        metavar="MODES",
        help="loader, train or loader,train: a comma list (default loader; --full loader,train)",
    )
    p.add_argument("--workers", default="0", help="DataLoader workers, e.g. 0,2,4")
    p.add_argument(
        "--pin-memory", action="store_true", help="also run with pinned memory (CUDA only)"
    )
    p.add_argument("--ramdisk", action="store_true", help="also run from a copy in /dev/shm")
    p.add_argument(
        "--remote",
        metavar="URL",
        help="also run strategy 'remote': the packed store uploaded to URL (s3://bucket/prefix) "
        "and read by ranged GETs through the node cache ($LADING_REMOTE_CACHE_BYTES)",
    )
    add_choice(
        p,
        "--parallel",
        ("ddp", "dp"),
        "train cells: DistributedDataParallel processes (ddp) or one DataParallel (dp)",
    )
    p.add_argument(
        "--seconds", type=float, help="each repeat's timed window, after warm-up (0.5; --full 2)"
    )
    p.add_argument(
        "--repeats", type=positive_int, help="runs of every cell, interleaved over the grid (3)"
    )
    p.add_argument(
        "--steps", type=positive_int, help="at least this many timed steps per window (5)"
    )
    p.add_argument("--warmup", type=nonnegative_int, help="untimed steps first (3; --full 5)")
    _add_cell_arguments(p)
    p.set_defaults(func=_cmd_bench)


def _add_cell_arguments(p: Any) -> None:
    """What one cell's step is (batch, group, length, precision, model), its memory budget and
    where results go; the grid and the window are :func:`add_bench`'s."""
    p.add_argument("--batch-size", type=positive_int, default=8, help="groups per rank per step")
    p.add_argument(
        "--group-size",
        type=positive_int,
        default=4,
        help="documents per group: 1 relevant + negatives",
    )
    p.add_argument(
        "--max-length", type=positive_int, default=128, help="tokens per (query, document) pair"
    )
    add_precision(
        p, "train cells: autocast precision of the step (bf16/fp16 on CUDA; fp32 default)"
    )
    p.add_argument(
        "--model",
        default="tiny",
        help="'tiny', or a local HF model folder (or a model id in the local Hugging Face "
        "cache) with its tokenizer.json; trained in train mode",
    )
    p.add_argument(
        "--tokenizer",
        type=existing,
        help="a tokenizer.json (default: --model's own; with 'tiny', trained on the corpus)",
    )
    p.add_argument("--memory-budget", help="e.g. 8G (default: the machine's available RAM)")
    p.add_argument(
        "--out",
        help=f"folder for results (default {DEFAULT_OUT}; lading bench ir DIR says the same)",
    )
