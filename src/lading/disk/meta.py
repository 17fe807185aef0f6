"""``meta.json``: the commit point of every lading directory, and the checks made on open.

Each snapshot format (a packed store, an offsets index, a token corpus) commits a build by
replacing its ``meta.json`` (see :mod:`lading.disk.snapshot`): format, version, snapshot id and,
for every other file, its path relative to the directory, its exact size, its CRC32 and the
CRC32 of its first and last 4 KiB. A directory without ``meta.json``, with files whose sizes
differ from it, or whose spot checksums fail, is refused on open; ``lading verify`` reads every
byte. Versions are checked per format (see :mod:`lading.disk.formats`).
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from pathlib import Path
from typing import Any

from lading.disk.formats import FORMATS
from lading.disk.snapshot import (
    META_FILE,
    SPOT_BYTES,
    check_files,
    load_manifest,
    safe_relative,
    spot_crc32,
)

LISTED_FORMATS = ("lading.packed", "lading.tokens", "lading.offsets")  # meta.json lists files

__all__ = [
    "LISTED_FORMATS",
    "META_FILE",
    "SPOT_BYTES",
    "declared_format",
    "read_meta",
    "spot_crc32",
    "verify_checksums",
]


def read_meta(
    directory: str | os.PathLike[str], expected_format: str, spots: bool = True
) -> dict[str, Any]:
    """Load and check the current manifest: format, version (against that format's own
    versions, see :mod:`lading.disk.formats`), every listed file's size and (unless ``spots``
    is False) the checksum of its first and last 4 KiB.

    Raises:
        StoreFormatError: naming the directory or file, what was expected and how to fix it
            (an :class:`~lading.disk.formats.UnsupportedVersionError` for a version it cannot read).
    """
    root = Path(directory)
    meta = load_manifest(root, expected_format)
    check_files(root, meta, expected_format, spots)
    return meta


def declared_format(directory: str | os.PathLike[str]) -> str | None:
    """The lading format with a file list that ``directory/meta.json`` declares, if any."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        found = json.loads((Path(directory) / META_FILE).read_text(encoding="utf-8")).get("format")
        if isinstance(found, str) and found in LISTED_FORMATS:
            return found
    return None


def verify_checksums(
    directory: str | os.PathLike[str],
    expected_format: str | None = None,
    meta: dict[str, Any] | None = None,
) -> list[str]:
    """Read every file of a lading directory in full, compare CRC32s; return the problems found.

    ``expected_format`` defaults to whichever lading format with a file list (a packed store, a
    token corpus, an offsets index) ``meta.json`` declares, else the packed store. ``meta``: the
    manifest to check (default: the current one, checked for sizes first).
    """
    root = Path(directory)
    fmt = expected_format or declared_format(root) or "lading.packed"
    if meta is None:
        meta = read_meta(root, fmt, spots=False)  # every byte is checked below
    problems = []
    for name, info in sorted(meta["files"].items()):
        path = safe_relative(root, name, "directory")
        crc = 0
        with open(path, "rb") as f:
            while block := f.read(1 << 24):
                crc = zlib.crc32(block, crc)
        expected = info.get("crc32") if isinstance(info, dict) else None
        if crc != expected:
            shown = f"{expected:#010x}" if isinstance(expected, int) else repr(expected)
            problems.append(
                f"{path}: CRC32 {crc:#010x}, expected {shown}: the file changed since it was "
                f"written, or its disk damaged it; {FORMATS[fmt].rebuild}"
            )
    return problems
