"""The token corpus format's name and the files a corpus snapshot holds: what the local reader
(:mod:`lading.lm.corpus`) and the object-storage reader (:mod:`lading.lm.remote`) both check."""

from __future__ import annotations

from typing import Any

import numpy as np

from lading.disk.ragged import first_descent
from lading.errors import StoreFormatError

FORMAT_NAME = "lading.tokens"
TOKENS = "tokens.bin"  # every document's token ids back to back
OFFSETS = "tokens.off"  # n + 1 uint64 offsets into TOKENS
TOKENIZER = "tokenizer.json"  # the tokenizer the ids came from
MERGED_VERSION = 3  # a corpus built in shards: ``parts`` read in place (lading.lm.parts)
TOKEN_DTYPES = ("<u2", "<u4", "<i4", "|u1")  # what token_dtype writes (uint16: 65,536 ids)


def tokenizer_file(meta: dict[str, Any]) -> str:
    """Where the corpus's tokenizer is, relative to its folder: a merged corpus's manifest
    names it (``tokenizer_file``, its first shard's); a one-process build's is in its ``dir``."""
    name = meta.get("tokenizer_file") or f"{meta.get('dir', '')}/{TOKENIZER}"
    return str(name).lstrip("/")


def check_dtype(meta: dict[str, Any], where: str) -> np.dtype[Any]:
    """The manifest's ``dtype`` if it is one a build writes (a byte-swapped ``>u2`` read the
    ids of every document wrong, without a word).

    Raises:
        StoreFormatError: naming the manifest's field and the fix.
    """
    value = meta.get("dtype")
    if value not in TOKEN_DTYPES:
        raise StoreFormatError(
            f"{where}: meta.json's dtype is {repr(value)[:40]}, not one of {TOKEN_DTYPES}; the "
            "manifest is damaged, rebuild the corpus with `lading lm build`"
        )
    return np.dtype(value)


def check_offsets(
    offsets: Any, tokens: int, meta: dict[str, Any], where: str, in_order: bool = False
) -> None:
    """Refuse ``tokens.off`` unless it is ``documents + 1`` offsets from 0 to ``tokens``, never
    going down (``offsets``: an array, or a merged corpus's
    :class:`~lading.lm.parts.PartOffsets`, sliced as one). The open's checksums read a file's
    first and last 4 KiB only: offsets out of order in between opened, and a read of those
    documents failed in numpy. One pass over the file, a chunk at a time
    (:func:`lading.disk.ragged.first_descent`; 8 B a document; 10M documents, in the page
    cache: 20-50 ms).

    ``in_order``: the order was checked already (a merged corpus's, a part at a time, as its
    parts were mapped: :func:`lading.lm.parts.part_offsets`).

    Raises:
        StoreFormatError: naming the corpus, the first document out of order and the fix.
    """
    n = len(offsets)
    if n != meta["documents"] + 1 or int(offsets[-1]) != tokens or int(offsets[0]) != 0:
        raise StoreFormatError(
            f"{where}: {OFFSETS} ({n} offsets) does not describe {TOKENS} ({tokens} tokens of "
            f"meta.json's dtype {meta.get('dtype')!r}) and the manifest's documents = "
            f"{meta['documents']!r}; rebuild it with `lading lm build`"
        )
    i = -1 if in_order else first_descent(offsets)  # the stores' check too (lading.disk.ragged)
    if i >= 0:
        raise StoreFormatError(
            f"{where}: {OFFSETS} is not in order: document {i} ends at {int(offsets[i + 1])}, "
            f"before it starts at {int(offsets[i])}; the file is damaged, rebuild the corpus "
            "with `lading lm build`"
        )
