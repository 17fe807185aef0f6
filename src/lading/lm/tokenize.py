"""Token ids of a stream of texts written as a ragged column: ``tokens.bin`` (the ids back to
back in the smallest dtype the vocabulary allows), ``tokens.off`` (``n + 1`` uint64 offsets)
and ``tokenizer.json``. One writer for a one-process build (:mod:`lading.lm.corpus`) and for
each shard of a parallel one (:mod:`lading.lm.shards`), so both write the same ids.

Texts are tokenized ``BATCH_DOCS`` at a time with ``encode_batch_fast`` where the tokenizer
has it (``tokenizers`` >= 0.20: no offsets computed; the ids are the same), else
``encode_batch``, in the library's own threads.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lading._version import __version__
from lading.disk import RaggedWriter, current_version, write_file
from lading.errors import EmptyTextWarning
from lading.lm.corpus_format import FORMAT_NAME, TOKENIZER
from lading.stores.tokens import flat_ids, token_dtype

BATCH_DOCS = 1000  # documents per encode_batch call
EOS_CANDIDATES: tuple[str, ...] = ("<|endoftext|>", "</s>", "<eos>", "[SEP]", "<|end|>")


def find_eos(tokenizer: Any, eos_token: str | None = None) -> int:
    """Id of the end-of-text token (``eos_token``, or the first of the usual names present)."""
    names = (eos_token,) if eos_token else EOS_CANDIDATES
    for name in names:
        token_id = tokenizer.token_to_id(name)
        if token_id is not None:
            return int(token_id)
    raise ValueError(
        f"the tokenizer has none of {list(names)}; pass eos_token=, or "
        "append_eos=False to keep documents unseparated"
    )


def encoder(tok: Any) -> Any:
    """The tokenizer's batch encoder: ``encode_batch_fast`` where it has one."""
    return getattr(tok, "encode_batch_fast", None) or tok.encode_batch


def write_tokens(
    directory: Path,
    texts: Iterable[str],
    tok: Any,
    info: dict[str, Any],
    eos: int | None,
    bar: Any,
) -> dict[str, Any]:
    """Tokenize ``texts`` into ``directory``; the manifest fields of what was written
    (``documents``, ``tokens``, ``dtype``, ``vocab_size``, ``eos_id``, ``seconds``, ``files``).
    A text that is empty or white space only is left out, counted in an
    :class:`~lading.errors.EmptyTextWarning`. ``bar``: a progress bar (``update(documents)``)."""
    started = time.perf_counter()
    dtype = token_dtype(info["vocab_size"])
    column = RaggedWriter(directory, "tokens", dtype.itemsize)
    encode = encoder(tok)
    pending: list[str] = []

    def flush() -> None:
        encodings = encode(pending, add_special_tokens=False)
        data, lengths = flat_ids([e.ids for e in encodings], dtype, eos)
        column.append_many(data, lengths * dtype.itemsize)
        bar.update(len(pending))
        pending.clear()

    empty = 0
    try:
        for text in texts:
            if not text or text.isspace():  # (a JSONL record's "": a document of EOS alone)
                empty += 1
                continue
            pending.append(text)
            if len(pending) >= BATCH_DOCS:
                flush()
        if pending:
            flush()
    except BaseException:  # a bad line: the files closed as the error is raised
        column.abort()
        raise
    if empty:
        warnings.warn(
            EmptyTextWarning(
                f"left out {empty:,} document(s) of empty or white-space-only text (a JSONL "
                "record's empty text was a document of the end-of-text token alone)"
            ),
            stacklevel=2,
        )
    files = column.finish()
    files[TOKENIZER] = write_file(directory / TOKENIZER, tok.to_str().encode())
    return {
        "format": FORMAT_NAME,
        "version": current_version(FORMAT_NAME),
        "lading_version": __version__,
        "documents": len(column),
        "tokens": int(files["tokens.bin"]["size"] // dtype.itemsize),
        "dtype": dtype.str,
        "vocab_size": info["vocab_size"],
        "eos_id": eos,
        "seconds": round(time.perf_counter() - started, 3),
        "files": files,
    }


def progress_bar(name: str, progress: bool | None) -> Any:
    """A documents bar for tokenizing ``name`` (shown on a terminal by default)."""
    from tqdm.auto import tqdm

    return tqdm(
        unit=" docs", desc=f"tokenizing {name}", disable=None if progress is None else not progress
    )
