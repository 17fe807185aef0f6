"""``lading`` store commands: build, merge, inspect, get, verify, stage."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lading.cli.inputs import add_choice, add_raise_or_skip, positive_int, tokenizer
from lading.disk.atomic import STAGE_MARK
from lading.errors import (
    AbandonedBuildWarning,
    EmptyTextWarning,
    IncompleteBuildWarning,
    LongIdWarning,
    OtherFormatError,
    SkippedRecordsWarning,
    StaleStoreWarning,
)

# lading.sources.FORMATS, spelled out so that building the parser imports nothing heavy (a test
# keeps the two equal)
STORE_HELP = (
    "a store: its directory, or the URL it was built to (s3://bucket/prefix/name; the "
    "endpoint and credentials come from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...)"
)
SOURCE_FORMATS = ("arrow", "beir", "irds", "jsonl", "parquet", "trec", "tsv")
# lading.sources.parsers.JSON_ID_FIELDS and JSON_TEXT_FIELDS, the keys a JSON record's id and
# text are looked for under, spelled out for the same reason (a test keeps them equal)
JSON_IDS = "id, doc_id, docid, _id, pid"
JSON_TEXTS = "text, contents, body"


_SAID = (EmptyTextWarning, AbandonedBuildWarning, LongIdWarning)  # one line each on stderr


def _cmd_build(args: argparse.Namespace) -> int:
    from lading.sources import ParseOptions
    from lading.stores import build_shard, build_store
    from lading.stores.building.build import refuse_shard_args

    started = time.perf_counter()
    parse = ParseOptions(
        id_field=args.id_field,
        text_field=args.text_field,
        columns=args.columns.split(",") if args.columns else ("id", "text"),
        prefix_fields=args.prefix_fields.split(",") if args.prefix_fields else (),
    )
    options: dict[str, Any] = {  # what a shard's build and a whole build share
        "format": args.format,
        "tokenizer": args.tokenizer,
        "max_length": args.max_length,
        "on_error": args.on_error,
        "duplicates": args.duplicates,
        "parse": parse,
        "progress": not args.quiet,
    }
    refuse_build_id_alone(args)
    refuse_other_formats_fields(args)
    if args.shard is not None:
        refuse_shard_args(args.source, args.overwrite)  # (--overwrite was taken and ignored)
        with (
            said_on_stderr("lading build", _SAID),
            warnings.catch_warnings(),
        ):
            # the skip count is in the shard's report (printed)
            warnings.simplefilter("ignore", SkippedRecordsWarning)
            report = build_shard(
                args.source, args.dest, args.shard, **options, build_id=args.build_id
            )
        print(report)
        return 0
    before, snapshot = _committed(args.dest), snapshot_at(args.dest)
    try:
        with (
            said_on_stderr("lading build", _SAID),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore", SkippedRecordsWarning)  # the count: printed below
            store = build_store(args.source, args.dest, **options, overwrite=args.overwrite)
    except KeyboardInterrupt:  # Ctrl-C: the scratch folder is gone, the manifest untouched
        said = (
            f"nothing was written ({args.dest} is as it was)"
            if _committed(args.dest) == before
            else f"{args.dest} was committed just before, in full"
        )
        end_bar = "" if args.quiet else "\n"  # off the progress bar's line
        print(f"{end_bar}lading build: interrupted; {said}", file=sys.stderr)
        return 130  # 128 + SIGINT, as a shell reports a command Ctrl-C stopped
    seconds = time.perf_counter() - started
    build = store.meta["build"]
    if snapshot is not None and store.snapshot == snapshot:
        print(f"{args.dest}: reused, {counted(len(store), 'document')} {REUSED}")
    else:
        print(f"{args.dest}: {counted(len(store), 'document')} in {seconds:.1f}s")
    print_skipped(build)
    print_dropped(build)
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    from lading.remote.objects import is_remote
    from lading.stores import merge_store

    started = time.perf_counter()
    with said_on_stderr(
        "lading merge",
        (IncompleteBuildWarning, StaleStoreWarning, AbandonedBuildWarning, LongIdWarning),
    ):
        store = merge_store(args.dest, build_id=args.build_id)
    shards = len(store.meta["shards"])
    where = args.dest if is_remote(args.dest) else store.path  # (a URL's: its node cache)
    print(
        f"{where}: {len(store):,} documents from {shards} shard(s), snapshot "
        f"{store.snapshot} ({time.perf_counter() - started:.1f}s)"
    )
    print_skipped(store.meta["build"])  # the shards' skips, summed
    print_dropped(store.meta["build"])  # theirs and the merge's own, across shards
    return 0


def print_dropped(record: dict[str, Any]) -> None:
    """The line of a build that dropped duplicate ids (``record``: its manifest's
    ``duplicates_dropped`` and ``duplicates``, the one kept); none when it dropped none."""
    if record.get("duplicates_dropped"):
        print(
            f"dropped {record['duplicates_dropped']:,} duplicate id(s), "
            f"kept the {record['duplicates']}"
        )


def shard_arg(value: str) -> tuple[int, int]:
    """``--shard i/N``: shard ``i`` of ``N`` (0-based)."""
    i, sep, n = value.partition("/")
    if not sep or not i.strip().isdigit() or not n.strip().isdigit():
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected I/N, e.g. 0/4 (shards 0 to 3 of 4; in a Slurm array: "
            "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)"
        )
    if not 0 <= int(i) < int(n):
        raise argparse.ArgumentTypeError(f"{value!r}: I must be in [0, N) (shards count from 0)")
    return int(i), int(n)


def refuse_build_id_alone(args: argparse.Namespace) -> None:
    """Refuse ``--build-id`` without ``--shard``: it names the shards' build directory, and a
    one-process build has none (it was taken and ignored)."""
    if args.build_id is not None and args.shard is None:
        raise ValueError(
            "--build-id names the build directory of the shards of `--shard I/N`; a build "
            "without --shard has none: add --shard, or leave --build-id out"
        )


KEYED_FORMATS = ("arrow", "beir", "jsonl", "parquet")  # what --id-field / --text-field apply to
# where the id and text of a source of each other format come from, for the refusals below
_OWN_ID_AND_TEXT = {
    "tsv": "has columns, not keys: name them with --columns (e.g. --columns "
    "id,url,title,text; default id,text)",
    "trec": "is TREC: its documents name their own id and text (<DOCNO>, <TEXT>)",
    "irds": "is an ir_datasets dataset: it gives its own ids and texts",
}


def refuse_other_formats_fields(args: argparse.Namespace) -> None:
    """Refuse ``--id-field`` / ``--text-field`` for a source without keys (TSV, TREC,
    ir_datasets) and ``--columns`` for one that is not TSV: each was taken and ignored. The
    format is ``--format``, else the source's (its first file's, for several); a source whose
    format cannot be told here is left to the build, which names what is wrong with it."""
    fields = [f for f, v in (("--id-field", args.id_field), ("--text-field", args.text_field)) if v]
    if not fields and not args.columns:
        return
    fmt = args.format or _source_format(args.source)
    if fields and fmt in _OWN_ID_AND_TEXT:
        named = " and ".join(fields)
        verb = "name" if len(fields) > 1 else "names"
        raise ValueError(
            f"{named} {verb} a JSON key or a table column (jsonl, parquet, arrow, beir); "
            f"{args.source} {_OWN_ID_AND_TEXT[fmt]}; leave {named} out"
        )
    if args.columns and fmt is not None and fmt != "tsv":
        how = _OWN_ID_AND_TEXT.get(
            fmt, "has keys: name its id and text with --id-field/--text-field"
        )
        raise ValueError(
            f"--columns names the columns of a TSV; {args.source} {how}; leave --columns out"
        )


def _source_format(source: str) -> str | None:
    """The format a build would read ``source`` as (its first file's, for several files); None
    where it cannot be told (no such file, a name without a known suffix)."""
    from lading.sources import detect_format
    from lading.stores.building.inputs import input_files

    try:
        files = input_files(source)
        return detect_format(files[0] if files else source)
    except (OSError, ValueError):
        return None


def add_shard_options(p: argparse.ArgumentParser, *, shard_help: str, build_id_help: str) -> None:
    """The options of a build that can be split among workers (``lading build``, ``lading lm
    build``): ``--overwrite``, ``--quiet``, ``--shard I/N`` and ``--build-id``."""
    p.add_argument("--overwrite", action="store_true", help="rebuild even if up to date")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--shard", type=shard_arg, metavar="I/N", help=shard_help)
    p.add_argument("--build-id", help=build_id_help)


@contextlib.contextmanager
def said_on_stderr(
    command: str, category: type[Warning] | tuple[type[Warning], ...]
) -> Iterator[None]:
    """Print each ``category`` warning of the body (one class or a tuple) on stderr as one
    line, ``COMMAND: warning: ...`` (not Python's ``file:line: Category: ...`` and source
    line): what a merge that kept the current snapshot over a build with shards missing says,
    for a job's log to show."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            for each in category if isinstance(category, tuple) else (category,):
                warnings.simplefilter("always", each)
            yield
    finally:  # shown once recording ended: inside it, a shown warning is recorded again
        for said in caught:  # (and this walk never ended: 24 GB, then the OOM killer)
            if issubclass(said.category, category):
                print(f"{command}: warning: {said.message}", file=sys.stderr, flush=True)
            else:  # others as they would have been shown
                warnings.showwarning(
                    said.message, said.category, said.filename, said.lineno, said.file,
                    said.line,
                )  # fmt: skip


def print_skipped(record: dict[str, Any]) -> None:
    """The line of a build that skipped malformed records (``record``: its manifest's
    ``skipped`` and ``skip_examples``): ``skipped N malformed record(s); first: ...``; none
    when it skipped nothing."""
    from lading.stores.building.shard_work import skipped_line

    if record.get("skipped"):
        print(skipped_line(record["skipped"], record.get("skip_examples") or []))


def counted(n: int, noun: str) -> str:
    """``1 document``, ``2 documents``, ``1,000 documents``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _committed(dest: str) -> int | None:
    """When ``dest``'s manifest was last replaced (None: no store there): a build commits by
    replacing it last, so an unchanged value means nothing was published."""
    try:
        return (Path(dest) / "meta.json").stat().st_mtime_ns
    except OSError:
        return None


REUSED = "(already built from the same input and options; --overwrite to rebuild)"


def snapshot_at(dest: str) -> str | None:
    """The snapshot a local ``dest``'s ``meta.json`` names (None: no store there, a URL, a
    version 1 store): a build that returns this snapshot committed nothing, it reused it."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        found = json.loads((Path(dest) / "meta.json").read_bytes()).get("snapshot")
        return found if isinstance(found, str) else None
    return None


def _stage_mark(dest: str) -> dict[str, Any] | None:
    """``dest``'s staging mark (None: none there, or unreadable): who copied it (``pid``)
    and when (``staged_at``) tell a stage that copied from one that reused the copy (there
    before, or copied by another process while this one waited for the lock)."""
    from lading.disk import STAGE_MARK

    with contextlib.suppress(OSError, ValueError):
        mark = json.loads((Path(dest) / STAGE_MARK).read_bytes())
        return mark if isinstance(mark, dict) else None
    return None


def _sizes(files: dict[str, Any]) -> dict[str, Any]:
    """The manifest's ``files``' sizes: ``bytes`` and ``files`` as numbers (for a script
    reading ``--json``), ``size`` in words (the text view's line)."""
    total = sum(int(info["size"]) for info in files.values())
    return {
        "size": f"{total / 2**20:,.1f} MiB in {len(files)} files",
        "bytes": total,
        "files": len(files),
    }


def _format_of(path: str | Path) -> str | None:
    """The lading format a local folder's manifest declares; None for a URL (read when it is
    opened: a wrong guess is an :class:`OtherFormatError` naming the one found)."""
    from lading.disk.meta import declared_format
    from lading.remote.objects import is_remote

    return None if is_remote(path) else declared_format(path)


def describe(path: str | Path) -> dict[str, Any]:
    """What ``lading inspect`` reports of a store (or of a token corpus: :func:`describe_corpus`),
    as a dict."""
    from lading.stores import open_store

    if _format_of(path) == "lading.tokens":
        return describe_corpus(path)
    from lading.stores.layout import column_bytes, shards

    try:
        store = open_store(path, on_stale="ignore")
    except OtherFormatError as e:  # a URL's format is known once its manifest is read
        if e.found != "lading.tokens":
            raise
        return describe_corpus(path)
    meta = store.meta
    return {
        **_where(path, store.path),
        "format": f"{meta['format']} v{meta['version']}",
        "snapshot": store.snapshot,
        "shards": len(shards(meta)),
        "documents": meta["count"],
        **_sizes(meta["files"]),
        "text_bytes": column_bytes(meta, "text"),
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


def _where(given: str | Path, opened: Path) -> dict[str, str]:
    """``path``: the store as the user named it, a URL too; ``staged``: where a URL's
    snapshot is read from on this node (its staged copy in the node cache)."""
    from lading.remote.objects import is_remote

    if is_remote(given):
        return {"path": str(given), "staged": str(opened)}
    return {"path": str(opened)}


def describe_corpus(path: str | Path) -> dict[str, Any]:
    """What ``lading inspect`` reports of a token corpus (``lading lm build``), as a dict:
    ``kind`` is ``"token corpus"``, ``tokens`` a count (a store's: its tokenizer's settings)."""
    import numpy as np

    from lading.lm import TokenCorpus

    corpus = TokenCorpus.open(path, on_stale="ignore")
    try:
        meta = corpus.meta
        return {
            **_where(path, corpus.path),
            "kind": "token corpus",
            "format": f"{meta['format']} v{meta['version']}",
            "snapshot": corpus.snapshot,
            "documents": len(corpus),
            "tokens": corpus.n_tokens,
            "dtype": np.dtype(corpus.dtype).name,
            "vocab_size": corpus.vocab_size,
            "eos_id": corpus.eos_id,
            **_sizes(meta["files"]),
            "source": (meta.get("recipe") or {}).get("source"),
            "stale": corpus.stale,
            "build": {"seconds": meta.get("seconds"), "skipped": meta.get("skipped", 0)},
        }
    finally:
        corpus.close()


def _staged_line(info: dict[str, Any]) -> list[str]:
    """The line naming a URL's staged copy on this node; none for a local store."""
    return [f"staged     {info['staged']}"] if "staged" in info else []


def _corpus_lines(info: dict[str, Any]) -> list[str]:
    eos = "none" if info["eos_id"] is None else info["eos_id"]
    return [
        f"corpus     {info['path']} ({info['format']}, a token corpus)",
        *_staged_line(info),
        f"snapshot   {info['snapshot']}",
        f"documents  {info['documents']:,}",
        f"tokens     {info['tokens']:,} as {info['dtype']} (vocab {info['vocab_size']:,}, "
        f"end-of-text id {eos})",
        f"size       {info['size']}",
        f"source     {info['source'] or '-'}",
        "stale      " + (f"YES: {info['stale']}" if info["stale"] else "no"),
        f"build      {_seconds(info['build']['seconds'])}, skipped {info['build']['skipped']}",
    ]


def _seconds(seconds: float | None) -> str:
    """A build's time as ``inspect`` prints it; ``-`` where the manifest has none (a corpus
    merged in a bucket before the merge recorded it)."""
    return "-" if seconds is None else f"{seconds}s"


def _cmd_inspect(args: argparse.Namespace) -> int:
    plain = _plain_copy(args.store)
    if plain is not None:
        return _inspect_plain(*plain, args.json)
    info = describe(args.store)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    if info.get("kind") == "token corpus":
        print("\n".join(_corpus_lines(info)))
        return 0
    tokens = info["tokens"]
    source = info["source"]
    lines = [
        f"store      {info['path']} ({info['format']})",
        *_staged_line(info),
        f"snapshot   {info['snapshot']} ({info['shards']} shard(s))",
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
        f"build      {_seconds(info['build']['seconds'])}, skipped {info['build']['skipped']}, "
        f"duplicates {info['build']['duplicates']} (dropped {info['build']['duplicates_dropped']})",
    ]
    print("\n".join(lines))
    return 0


def _plain_copy(store: str) -> tuple[Path, dict[str, Any]] | None:
    """``store`` and its staging mark where it is a staged copy of plain files (a parquet
    folder: :mod:`lading.disk.staged_files`), else None."""
    from lading.disk.staged_files import plain_mark
    from lading.remote.objects import is_remote

    if is_remote(store):
        return None
    mark = plain_mark(Path(store))
    return None if mark is None else (Path(store), mark)


def _inspect_plain(dest: Path, mark: dict[str, Any], as_json: bool) -> int:
    from lading.disk.staged_files import describe_plain

    info = describe_plain(dest, mark)
    if as_json:
        print(json.dumps(info, indent=2))
        return 0
    when = info["staged_at"]
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when)) if when else "-"
    parquet = info["parquet"]
    read = (
        f"its files ({parquet:,} parquet: lading.tabular.PartitionedParquet({str(dest)!r}))"
        if parquet
        else "its files"
    )
    lines = [
        f"copy       {dest} (a staged copy of plain files, from {info['source']})",
        f"files      {info['files']:,}",
        f"size       {info['bytes'] / 2**20:,.1f} MiB",
        f"copied at  {at}",
        f"read as    {read}",
    ]
    print("\n".join(lines))
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    from lading.stores import open_store

    with said_on_stderr("lading get", StaleStoreWarning):  # one line, not Python's two
        store = open_store(args.store)
    missing = [i for i in args.ids if i not in store]
    for doc_id in args.ids:
        if doc_id in store:
            print(json.dumps(store.record(doc_id)._asdict(), ensure_ascii=False))
    for doc_id in missing:
        print(f"lading get: id {doc_id!r} is not in {args.store}", file=sys.stderr)
    return 1 if missing else 0


VERIFY_EXIT_CODES = (
    "exit 0: intact; 1: damage found (each problem one line on stderr, naming the file and the "
    "fix); 2: nothing to check there (a file, no such folder, no meta.json, a bucket or endpoint "
    "not reached, access denied), as for inspect and get"
)


def _cmd_verify(args: argparse.Namespace) -> int:
    """Exit as :data:`VERIFY_EXIT_CODES` says (what ``lading verify --help`` prints)."""
    from lading.disk.snapshot import check_directory
    from lading.lm.corpus import verify_corpus
    from lading.remote.objects import is_remote
    from lading.stores import verify_store

    plain = _plain_copy(args.store)
    if plain is not None:  # a staged copy of plain files: checked against its mark
        from lading.disk.staged_files import check_plain

        problems = check_plain(*plain)
        for problem in problems:
            print(problem, file=sys.stderr)
        if not problems:
            print(f"{args.store}: every file matches its checksum (a staged copy)")
        return 1 if problems else 0
    if not is_remote(args.store):  # a file, or nothing there: exit 2, not a problem found
        check_directory(Path(args.store), "lading.packed")

    if _format_of(args.store) == "lading.tokens":
        problems = verify_corpus(args.store)
    else:
        try:
            problems = verify_store(args.store)
        except OtherFormatError as e:  # a URL's format is known once its manifest is read
            if e.found != "lading.tokens":
                raise
            problems = verify_corpus(args.store)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        local = not is_remote(args.store) and not (Path(args.store) / STAGE_MARK).is_file()
        kept = ", and the build's records agree with meta.json" if local else ""  # (a copy: none)
        print(f"{args.store}: opens, every file matches its checksum{kept}")
    return 1 if problems else 0


def _cmd_stage(args: argparse.Namespace) -> int:
    from lading.disk.stage import stage

    options: dict[str, Any] = {}
    for item in args.storage_option:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--storage-option {item!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(value)  # numbers, booleans, objects
        except json.JSONDecodeError:
            options[key] = value
    started, wall = time.perf_counter(), time.time()
    dest = stage(
        args.src, args.dest, storage_options=options, verify=args.verify, progress=not args.quiet
    )
    mark = _stage_mark(args.dest) or {}
    copied = mark.get("pid") == os.getpid() and float(mark.get("staged_at") or 0) >= wall
    if not copied:  # (already there, or another process copied it while this one waited)
        checked = "every byte re-read" if args.verify else "sizes and spot checksums checked"
        print(
            f"{dest}: reused (already staged from the same {args.src}, {checked}; a changed "
            f"source is copied again{'' if args.verify else ', --verify re-reads every byte'})"
        )
    else:
        print(f"{dest}: staged from {args.src} ({time.perf_counter() - started:.1f}s)")
    return 0


def add_store_commands(sub: Any) -> None:
    """The parsers of ``build``, ``merge``, ``inspect``, ``get``, ``verify`` and ``stage``."""
    _add_build(sub)
    p = sub.add_parser(
        "merge", help="commit the shards of a parallel build (lading build --shard I/N) as a store"
    )
    p.add_argument("dest", help="the store directory the shards were written to")
    p.add_argument(
        "--build-id",
        help="which build, when several are complete (default: the one whose shards are all "
        "there that no merge took yet, else the current snapshot's: a rerun commits nothing new)",
    )
    p.set_defaults(func=_cmd_merge)

    p = sub.add_parser(
        "inspect",
        help="counts, sizes, dtypes, fields, source and staleness of a store (or token corpus)",
    )
    p.add_argument("store", help=STORE_HELP + "; or a token corpus's directory (lading lm build)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("get", help="print documents by id (JSON lines)")
    p.add_argument("store", help=STORE_HELP)
    p.add_argument("ids", nargs="+", help="document ids to print (exit 1 if one is absent)")
    p.set_defaults(func=_cmd_get)

    p = sub.add_parser(
        "verify",
        help="make every check an open makes, then read every file of a store (or token "
        "corpus, offsets index) and check its checksum",
        description="Make every check an open makes, read every file the manifest (meta.json) "
        "lists and check its CRC32, and (a local directory) check the records a build keeps "
        "beside them against meta.json: the snapshot's manifest.json, each shard's shard.json, "
        "each build's build.json.",
        epilog=VERIFY_EXIT_CODES,
    )
    p.add_argument("store", help=STORE_HELP + "; or a token corpus's directory")
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
    p.add_argument(
        "--verify",
        action="store_true",
        help="re-read a reused copy in full (default: sizes and the first and last 4 KiB of "
        "each file checked; a copy is always checked in full)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_stage)


def _add_build(sub: Any) -> None:
    """The parser of ``build``."""
    p = sub.add_parser("build", help="build a memory-mapped store from a corpus file")
    p.add_argument(
        "source",
        help="TSV/JSONL/TREC file (.gz/.bz2/.zst ok), BEIR folder, irds:<id>, or several files "
        "of one format: a folder of them or a quoted glob ('corpus/*.jsonl.gz')",
    )
    p.add_argument(
        "dest", help="store directory to create, or an object-store URL (s3://bucket/prefix/name)"
    )
    p.add_argument(
        "--format",
        choices=SOURCE_FORMATS,
        help="the source's format (default: from its name; parquet and arrow need pyarrow)",
    )
    p.add_argument(
        "--tokenizer",
        type=tokenizer,
        help="tokenizer.json or a local HF model folder: pre-tokenize (default: none, texts only)",
    )
    p.add_argument(
        "--max-length",
        type=positive_int,
        help="keep at most this many tokens per document (default: no limit)",
    )
    add_raise_or_skip(
        p,
        "--on-error",
        "a malformed record stops the build naming file and line (raise), or is skipped and "
        "counted (skip)",
    )
    add_choice(
        p,
        "--duplicates",
        ("error", "first", "last"),
        "an id twice in the source is an error, or its first or last record is kept",
    )
    p.add_argument(
        "--id-field",
        help=f"JSON key (parquet/Arrow column) of the id (default: the first of {JSON_IDS} "
        "there; _id in BEIR; a record where another of them holds a different id is refused: "
        "name one); a TSV takes --columns",
    )
    p.add_argument(
        "--text-field",
        help=f"JSON key (parquet/Arrow column) of the text (default: the first of {JSON_TEXTS} "
        "there); a TSV takes --columns",
    )
    p.add_argument(
        "--columns",
        help="TSV column names, comma-separated, one per column (default: id,text); a wider "
        "TSV names every column, e.g. id,url,title,text for msmarco-docs.tsv",
    )
    p.add_argument(
        "--prefix-fields",
        help="fields put before each document's text, comma-separated, e.g. title (a "
        "model then reads title and body, as BEIR's readers give them; CACM keeps half its "
        "documents' words in titles); a JSON key, table column, named TSV column or TREC title",
    )
    add_shard_options(
        p,
        shard_help="write shard I of N only (0-based; a Slurm array: "
        "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT), then `lading merge DEST --build-id ID` "
        "once all N are written (ID: the one each shard prints, or the one given them)",
        build_id_help="with --shard: the build directory the shards share, build-<letters, "
        "digits> (e.g. build-$SLURM_ARRAY_JOB_ID; default: derived from the inputs, options "
        "and N, the same in every worker)",
    )
    p.set_defaults(func=_cmd_build)
