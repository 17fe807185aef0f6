"""What a token corpus holds, as one id whatever its files: built in one process or in any
number of shards, the same tokens in the same documents get the same id.

A snapshot's file-level id (:func:`lading.disk.snapshot.content_id`: each file's role, size
and CRC32) differs between a one-process build and a merge of shards of the same inputs (one
``tokens.bin`` against one a shard), so a loader state saved on one was refused by the other
as "rebuilt from other text". :func:`tokens_content_id` digests the corpus as a reader sees
it instead: the CRC32 of every token back to back (the parts' CRC32s from the manifest,
combined: no token is read), the CRC32 of the documents' lengths (from the offsets, a pass
over 8 bytes a document), and the tokenizer file's CRC32.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable
from typing import Any

import numpy as np

from lading.lm.corpus_format import tokenizer_file

_POLY = 0xEDB88320  # CRC-32 (zlib's), reflected
_CHUNK = 1 << 20  # documents a step of the lengths' pass


def _times(matrix: list[int], vector: int) -> int:
    """``matrix`` (32 columns over GF(2)) times ``vector``."""
    out, i = 0, 0
    while vector:
        if vector & 1:
            out ^= matrix[i]
        vector >>= 1
        i += 1
    return out


def _square(matrix: list[int]) -> list[int]:
    return [_times(matrix, column) for column in matrix]


def crc32_combine(crc_a: int, crc_b: int, length_b: int) -> int:
    """The CRC32 of ``A + B`` from ``crc32(A)``, ``crc32(B)`` and ``len(B)`` (zlib's
    ``crc32_combine``, which Python's zlib does not expose): ``A`` is moved on by ``len(B)``
    zero bytes, an operator applied by squaring, O(log len(B))."""
    if length_b <= 0:
        return crc_a
    odd = [_POLY] + [1 << n for n in range(31)]  # one zero bit
    even = _square(odd)  # two
    odd = _square(even)  # four
    crc, n = crc_a, length_b
    while True:
        even = _square(odd)  # a byte, then 4, 16 ... as n's bits are read
        if n & 1:
            crc = _times(even, crc)
        n >>= 1
        if not n:
            break
        odd = _square(even)
        if n & 1:
            crc = _times(odd, crc)
        n >>= 1
        if not n:
            break
    return crc ^ crc_b


def tokens_content_id(
    meta: dict[str, Any], offsets_parts: Iterable[Any], tokens_file: str = "tokens.bin"
) -> str | None:
    """The id of a corpus's tokens, documents and tokenizer (see the module doc), from its
    manifest ``meta`` and ``offsets_parts`` (each part's ``n + 1`` offsets, in order; one
    array for a one-process build); None where the manifest records no CRC32 of a part's
    tokens (an older corpus: its file-level id stands)."""
    files = meta.get("files", {})
    parts = meta.get("parts")
    dirs = [p["dir"] for p in parts] if parts else [meta.get("dir", "")]  # "": version 1
    tokens_crc, size = 0, 0
    for folder in dirs:
        info = files.get(f"{folder}/{tokens_file}" if folder else tokens_file, {})
        if not isinstance(info.get("crc32"), int) or not isinstance(info.get("size"), int):
            return None
        tokens_crc = crc32_combine(tokens_crc, info["crc32"], info["size"])
        size += info["size"]
    lengths_crc, documents = 0, 0
    for offsets in offsets_parts:
        for start in range(0, max(len(offsets) - 1, 0), _CHUNK):
            chunk = np.asarray(offsets[start : start + _CHUNK + 1], dtype=np.uint64)
            lengths = np.diff(chunk).astype("<u8")
            lengths_crc = zlib.crc32(lengths.tobytes(), lengths_crc)
            documents += len(lengths)
    tokenizer = files.get(tokenizer_file(meta), {}).get("crc32")
    about = ["lading.tokens", str(meta.get("dtype")), tokens_crc, size, lengths_crc, documents]
    digest = hashlib.sha256(json.dumps([*about, tokenizer]).encode("utf-8"))
    return digest.hexdigest()[:32]
