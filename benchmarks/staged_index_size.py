"""Bytes a document of what a remote store stages to each node (its "index"), file by file.

    python benchmarks/staged_index_size.py [--n 1000000] [--write]

A remote store stages every file its manifest lists except the payload's data (texts, tokens,
fields: read by ranged GETs): ``lading.stores.remote.manifest.staged_files``. This builds
``n`` documents of two words each (the staged files do not depend on the texts) under three
spellings of ids, plain, with token ids and, for integer ids, in 2 shards + merge, and divides
each staged file's size (from the manifest) by ``n``; the tokenizer's own file (a constant, not
per document) is left out. Sizes, not times: no load to record.
"""

from __future__ import annotations

import argparse
import shutil
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lading
from common import HERE, add_write_flag, write_section
from lading.stores.remote.manifest import staged_files

SHAPES: dict[str, Callable[[int], str]] = {
    "0..n-1": str,
    "1,000,003i+7": lambda i: str(1_000_003 * i + 7),  # integers too sparse for a table
    "D<i>": lambda i: f"D{i}",
    "msmarco_passage_<i>": lambda i: f"msmarco_passage_{i}",
}


def tokenizer(path: Path) -> Path:
    """A word-level tokenizer of the two words the documents hold."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path


def staged_row(label: str, store: lading.PackedStore, n: int) -> str:
    """A table row: the index kind, bytes a document in all, and file by file."""
    meta = store.meta
    sizes: dict[str, int] = defaultdict(int)
    for name in staged_files(meta):
        base = name.rsplit("/", 1)[-1]
        if base != "tokenizer.json":
            sizes[base] += int(meta["files"][name]["size"])
    parts = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(sizes.items()))
    return f"| {label} | {meta['index']['kind']} | **{sum(sizes.values()) / n:.1f}** | {parts} |"


def build(src: Path, dest: Path, shards: int, extra: dict[str, Any]) -> lading.PackedStore:
    shutil.rmtree(dest, ignore_errors=True)
    if shards == 1:
        return lading.build_store(src, dest, progress=False, **extra)
    for i in range(shards):
        lading.build_shard(src, dest, progress=False, shard=(i, shards), **extra)
    return lading.merge_store(dest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--out", default="bench-out/staged-index")
    add_write_flag(parser)
    args = parser.parse_args()
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    tok = tokenizer(work / "tok.json")
    lines = [
        f"{args.n:,} documents; bytes a document of each staged file (the manifest's sizes / "
        "n; the tokenizer's file, a constant, left out).",
        "",
        "| ids, store | index | staged B/doc | by file |",
        "|---|---|---:|---|",
    ]
    for shape, spell in SHAPES.items():
        src = work / "src.tsv"
        with open(src, "w", encoding="utf-8") as f:
            f.writelines(f"{spell(i)}\ta b\n" for i in range(args.n))
        kinds: list[tuple[str, int, dict[str, Any]]] = [("plain", 1, {})]
        if shape == "0..n-1":
            tokens = {"tokenizer": tok}
            kinds += [("tokens", 1, tokens), ("tokens, 2 shards", 2, tokens)]
        for label, shards, extra in kinds:
            store = build(src, work / "store", shards, extra)
            lines.append(staged_row(f"{shape}, {label}", store, args.n))
            print(lines[-1], flush=True)
    body = "\n".join(lines)
    print(body)
    command = f"python benchmarks/staged_index_size.py --n {args.n}"
    title = "Remote: the staged index, bytes a document"
    write_section(HERE / "RESULTS.md", title, body, command, write=args.write)


if __name__ == "__main__":
    main()
