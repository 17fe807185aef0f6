"""``lading lm`` (tokenizer, build): language-model corpus commands and their parser."""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Iterator
from typing import Any

from lading.cli.inputs import add_choice, add_raise_or_skip, positive_int, tokenizer
from lading.cli.stores import (
    REUSED,
    add_shard_options,
    counted,
    print_skipped,
    refuse_build_id_alone,
    said_on_stderr,
    snapshot_at,
)
from lading.errors import (
    AbandonedBuildWarning,
    EmptyTextWarning,
    IncompleteBuildWarning,
    SkippedRecordsWarning,
    StaleStoreWarning,
)

SOURCE_HELP = (
    "a text, JSONL or WikiExtractor file, a folder, a glob in quotes ('wiki/*.jsonl.gz': the "
    "files it matches, sorted by path) or a lading store"
)
ON_ERROR_HELP = (
    "a malformed JSONL record, or a text document with invalid UTF-8, stops the {what} "
    "(naming file and line) or is counted and skipped"
)


def _split(args: argparse.Namespace) -> str:
    """``--split`` as given (refused where no file of the source is plain text), or blank."""
    from lading.lm.texts import refuse_unused_split

    if args.split is None:
        return "blank"
    refuse_unused_split(args.split, args.source, "--split")
    return str(args.split)


def _cmd_lm_tokenizer(args: argparse.Namespace) -> int:
    import itertools
    from pathlib import Path

    from lading.lm.texts import Skips, iter_texts
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    skipped = Skips()
    texts = iter_texts(
        args.source,
        _split(args),
        on_error=args.on_error,
        skipped=skipped,
        text_field=args.text_field,
    )
    path = Path(args.out)
    if path.is_dir() or path.suffix != ".json":
        path = path / "tokenizer.json"
    documents = 0

    def counted_texts() -> Iterator[str]:
        nonlocal documents
        for text in itertools.islice(texts, args.limit):
            documents += 1
            yield text

    tok = train_tokenizer(counted_texts(), args.kind, args.vocab_size)
    if documents == 0:  # as lading lm build: a tokenizer of nothing is not one of the source
        raise ValueError(
            f"{args.source} holds no documents"
            + (f" (every record skipped: {skipped.said(args.source)})" if skipped.count else "")
            + "; nothing to train a tokenizer on, so nothing was written"
        )
    save_tokenizer(tok, path)
    entries = tok.get_vocab_size()
    asked = f" (--vocab-size {args.vocab_size:,}: " if entries != args.vocab_size else ""
    if entries < args.vocab_size:
        asked += "the source has no more)"
    elif entries > args.vocab_size:
        asked += "its alphabet and special tokens alone are more)"
    print(f"{path}: {args.kind} tokenizer, {entries:,} entries{asked}")
    if skipped.count:
        print(skipped.said(args.source))
    return 0


def _cmd_lm_build(args: argparse.Namespace) -> int:
    from lading.lm.corpus import TokenCorpus
    from lading.stores.building.build import refuse_shard_args

    # what a whole build and a shard of one are both told
    documents: dict[str, Any] = {
        "append_eos": not args.no_eos,
        "eos_token": args.eos_token,
        "split": _split(args),
        "text_field": args.text_field,
        "progress": not args.quiet,
    }
    refuse_build_id_alone(args)
    if not args.no_eos:
        check_eos(args.tokenizer, args.eos_token)
    if args.shard is not None:
        refuse_shard_args(args.source, args.overwrite)  # (--overwrite was taken and ignored)
        with said_on_stderr("lading lm build", EmptyTextWarning), warnings.catch_warnings():
            warnings.simplefilter("ignore", SkippedRecordsWarning)  # in the report (printed)
            report = TokenCorpus.build_shard(
                args.source,
                args.dest,
                args.shard,
                args.tokenizer,
                on_error=args.on_error,
                build_id=args.build_id,
                **documents,
            )
        print(report)
        return 0
    snapshot = snapshot_at(args.dest)
    said = (AbandonedBuildWarning, EmptyTextWarning)
    with said_on_stderr("lading lm build", said), warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRecordsWarning)  # the count is printed below
        corpus = TokenCorpus.build(
            args.source,
            args.dest,
            args.tokenizer,
            overwrite=args.overwrite,
            on_error=args.on_error,
            **documents,
        )
    reused = snapshot is not None and corpus.snapshot == snapshot
    print(
        f"{getattr(corpus, 'url', None) or corpus.path}: {'reused, ' if reused else ''}"
        f"{counted(len(corpus), 'document')}, {counted(corpus.n_tokens, 'token')} as "
        f"{corpus.dtype} ({corpus.n_tokens * corpus.dtype.itemsize / 2**20:,.1f} MiB)"
        + (f" {REUSED}" if reused else "")
    )
    print_skipped(corpus.meta)
    return 0


def check_eos(tokenizer: str, eos_token: str | None) -> None:
    """Refuse, naming the tokenizer file and the flags that fix it, a tokenizer without the
    end-of-text token the build would append (``--eos-token``'s, else one of the usual names);
    the library's own refusal names neither the file nor the command's flags."""
    from lading.lm.tokenize import EOS_CANDIDATES
    from lading.stores.tokens import load_tokenizer

    tok = load_tokenizer(tokenizer)
    if eos_token is None:
        if any(tok.token_to_id(name) is not None for name in EOS_CANDIDATES):
            return
        wanted = (
            f"{tokenizer} has none of the usual end-of-text tokens "
            f"({', '.join(EOS_CANDIDATES)}) to end every document with"
        )
    elif tok.token_to_id(eos_token) is None:
        wanted = f"--eos-token {eos_token!r}: {tokenizer} has no such token"
    else:
        return
    specials = sorted(str(t.content) for t in tok.get_added_tokens_decoder().values())
    held = f" (its special tokens: {', '.join(specials)})" if specials else ""
    raise ValueError(
        f"{wanted}{held}; name the tokenizer's end-of-text token with --eos-token, or give "
        "--no-eos to keep documents unseparated"
    )


def _cmd_lm_merge(args: argparse.Namespace) -> int:
    from lading.lm.corpus import TokenCorpus

    with said_on_stderr(
        "lading lm merge", (IncompleteBuildWarning, StaleStoreWarning, AbandonedBuildWarning)
    ):
        corpus = TokenCorpus.merge(args.dest, build_id=args.build_id)
    parts = len(corpus.meta.get("parts") or [None])
    print(
        f"{getattr(corpus, 'url', None) or corpus.path}: {counted(len(corpus), 'document')}, "
        f"{counted(corpus.n_tokens, 'token')} from {parts} shard(s), snapshot {corpus.snapshot}"
    )
    print_skipped(corpus.meta)  # the shards' skips, summed
    return 0


def _add_split(p: argparse.ArgumentParser) -> None:
    """``--split``: how plain text divides into documents, and ``--text-field``: which JSON
    key holds a record's text (the tokenizer's and the build's)."""
    add_choice(
        p,
        "--split",
        ("blank", "line", "file"),
        "how plain text divides into documents (default: blank; refused where no file is "
        "plain text)",
        default=None,
    )
    p.add_argument(
        "--text-field",
        metavar="KEY",
        help="JSON key of a JSONL record's text, e.g. content (default: the first of text, "
        "contents, body the record has)",
    )


def add_lm(sub: Any) -> None:
    lm = sub.add_parser("lm", help="language-model corpora: train a tokenizer, build a corpus")
    kinds = lm.add_subparsers(dest="lm_command", required=True)
    p = kinds.add_parser("tokenizer", help="train a tokenizer locally (byte-level BPE default)")
    p.add_argument("source", help=SOURCE_HELP)
    p.add_argument("out", help="tokenizer.json to write (or a folder)")
    p.add_argument("--vocab-size", type=positive_int, default=8000, help="entries (default 8000)")
    what = "byte-level BPE (GPT-style) or WordPiece (BERT-style)"
    add_choice(p, "--kind", ("bpe", "wordpiece"), what)
    _add_split(p)
    p.add_argument("--limit", type=positive_int, help="train on at most this many documents")
    add_raise_or_skip(p, "--on-error", ON_ERROR_HELP.format(what="training"))
    p.set_defaults(func=_cmd_lm_tokenizer)
    p = kinds.add_parser("build", help="tokenize a corpus into a memory-mapped TokenCorpus")
    p.add_argument("source", help=SOURCE_HELP)
    p.add_argument(
        "dest", help="TokenCorpus directory to create, or an s3://... URL (built, then uploaded)"
    )
    p.add_argument("--tokenizer", required=True, type=tokenizer, help="tokenizer.json or folder")
    _add_split(p)
    eos = p.add_mutually_exclusive_group()  # (an end-of-text token named, or none at all)
    eos.add_argument("--no-eos", action="store_true", help="do not end documents with EOS")
    eos.add_argument(
        "--eos-token",
        help="name of the end-of-text token (default: the first usual name the tokenizer "
        "has, e.g. <|endoftext|> or </s>)",
    )
    add_shard_options(
        p,
        shard_help="tokenize shard I of N only (any worker, any order); then "
        "`lading lm merge DEST`",
        build_id_help="with --shard: the build directory the shards share, build-<letters, "
        "digits> (e.g. build-$SLURM_ARRAY_JOB_ID)",
    )
    add_raise_or_skip(p, "--on-error", ON_ERROR_HELP.format(what="build"))
    p.set_defaults(func=_cmd_lm_build)
    p = kinds.add_parser(
        "merge", help="commit the shards of `lading lm build --shard I/N` as one token corpus"
    )
    p.add_argument("dest", help="the corpus directory (or s3://... URL) the shards were written to")
    p.add_argument("--build-id", help="which build, when several are complete")
    p.set_defaults(func=_cmd_lm_merge)
