"""The merge of a token corpus built in shards: checks, and one commit of a manifest.

No byte of a shard is copied or rewritten: the merged snapshot's manifest lists the shards as
``parts`` (directory, documents, tokens, in document order) and the reader maps each part's
``tokens.bin`` and ``tokens.off`` in place, the offsets shifted by the tokens of the parts
before (:mod:`lading.lm.parts`), so a merged corpus reads exactly as a one-process build (the
same offsets, the same windows, packing and masks). The merge writes the manifest only: its
time and memory grow with the shards (their ``shard.json`` read and checked), not with the
documents.
The tokenizer stays in the first shard's folder (``tokenizer_file``), the only tokenizer the
manifest lists (the other shards' copies are never read). Shards must agree on the tokenizer
(its SHA-256), its dtype and the end-of-text id: a shard tokenized otherwise is refused naming
both shards. The tokenizer's SHA-256 is one of the build's options, so a shard of another
tokenizer is refused by the options check that every merge runs first (``check_same_options``
in :mod:`lading.stores.building.shardset`: it names that shard and one of the build's
tokenizer); :func:`check_same_tokens` checks what each ``shard.json`` records besides.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from lading._version import __version__
from lading.disk import BuildContext
from lading.errors import SourceError, StoreFormatError
from lading.lm.corpus_format import FORMAT_NAME, MERGED_VERSION, TOKENIZER, TOKENS
from lading.lm.shards import COMMAND, CorpusShard, read_corpus_shard
from lading.lm.texts import SKIP_EXAMPLES
from lading.stores.building.pending import BuildToCommit, builds_record, merge_in_folder

_CHUNK = 1 << 20  # offsets written per numpy pass
_SAME = ("tokenizer", "dtype", "eos_id", "vocab_size")  # what every shard must agree on


def merge_corpus(dest: Path, build_id: str | None = None) -> dict[str, Any] | str:
    """Commit the shards of build ``build_id`` of ``dest`` (by default the one a merge takes:
    :func:`~lading.stores.building.pending.merge_in_folder`) as its new snapshot: the manifest
    committed, or the current snapshot's id where that build is committed already.

    Raises:
        StoreFormatError: shards are missing (naming them and ``lading lm build``), read
            other inputs, or were tokenized otherwise (naming both shards).
    """

    kind = (FORMAT_NAME, "token corpus")
    return merge_in_folder(dest, kind, build_id, read_corpus_shard, COMMAND, commit_corpus)


def commit_corpus(build: BuildContext, merge: BuildToCommit[CorpusShard]) -> str:
    """Under ``build`` (the corpus's build context): ``merge``'s shards, in order, checked to
    be tokenized alike and committed as the new snapshot (its manifest only); its id."""
    check_same_tokens(build.dest, merge.shards)
    started = time.perf_counter()
    with build.scratch() as tmp:
        meta = manifest(merge.bid, merge.shards, merge.recipe["options"], build.snapshot)
        meta["builds"] = builds_record(build.dest, build.previous, merge.bid, merge.passed)
        meta["seconds"] = round(time.perf_counter() - started, 3)
        return build.commit(tmp, meta)


def check_same_tokens(dest: Path, shards: list[CorpusShard]) -> None:
    """Refuse shards tokenized otherwise than the first (tokenizer, dtype, end-of-text id),
    naming both shards and the two values."""
    first = shards[0]
    for shard in shards[1:]:
        for key in _SAME:
            if shard.record.get(key) != first.record.get(key):
                raise StoreFormatError(
                    f"{dest}: shards {dest / first.dir} and {dest / shard.dir} were tokenized "
                    f"differently ({key} {first.record.get(key)!r} vs {shard.record.get(key)!r}): "
                    "merged, their ids would mean different things. Build every shard with the "
                    f"same tokenizer (`{COMMAND} ... --tokenizer T --shard i/N`)"
                )
    if sum(s.record["documents"] for s in shards) == 0:
        where = shards[0].record.get("source_path") or dest
        raise SourceError(where, None, "no documents in any shard; a corpus of 0 is refused")


def manifest(
    bid: str,
    shards: list[CorpusShard],
    options: dict[str, Any],
    snapshot: str,
) -> dict[str, Any]:
    """The manifest committing ``shards``, every file of theirs read in place."""
    first = shards[0].record
    files: dict[str, Any] = {}
    parts = []
    for k, shard in enumerate(shards):
        for name, info in shard.record["files"].items():
            if k == 0 or name != TOKENIZER:  # the first shard's tokenizer is the corpus's; the
                files[f"{shard.dir}/{name}"] = info  # others' copies (the same, checked by
                # check_same_tokens) are never read: listed, each open spot-read all 8
        counts = {k: shard.record[k] for k in ("documents", "tokens")}
        parts.append({"dir": shard.dir, **counts})
    identity = first.get("source_identity") or {}
    return {
        "format": FORMAT_NAME,
        "version": MERGED_VERSION,
        "lading_version": __version__,
        "build_id": bid,
        "documents": sum(p["documents"] for p in parts),
        "tokens": sum(p["tokens"] for p in parts),
        "dtype": first["dtype"],
        "vocab_size": first["vocab_size"],
        "eos_id": first["eos_id"],
        "dir": snapshot,
        "parts": parts,
        "tokenizer_file": f"{shards[0].dir}/{TOKENIZER}",
        "recipe": {
            "source": first.get("source_path"),
            "source_identity": identity,
            "tokenizer": first["tokenizer"],
            "append_eos": options.get("append_eos"),
            "eos_id": first["eos_id"],
            "split": options.get("split"),
            "shards": len(shards),
            **({"text_field": options["text_field"]} if "text_field" in options else {}),
        },
        "skipped": sum(s.record["skipped"] for s in shards),
        "skip_examples": [e for s in shards for e in s.record["skip_examples"]][:SKIP_EXAMPLES],
        "files": files,
    }


__all__ = ["TOKENS", "commit_corpus", "merge_corpus"]
