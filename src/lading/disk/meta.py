"""``meta.json``: the commit point of every lading directory, and the checks made on open.

Each format (a packed store, an offsets index, a token corpus) writes its ``meta.json`` last,
naming its format and version and, for every other file, its exact size, its CRC32 and the CRC32
of its first and last 4 KiB. A directory without ``meta.json``, with files whose sizes differ
from it, or whose spot checksums fail, is refused on open; ``lading verify`` reads every byte.
Versions are checked per format (see :mod:`lading.disk.formats`).
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from pathlib import Path
from typing import Any

from lading.disk.files import fsync_dir, write_file
from lading.disk.formats import DiskFormat, check_version, disk_format
from lading.errors import StoreFormatError

META_FILE = "meta.json"
LISTED_FORMATS = ("lading.packed", "lading.tokens", "lading.offsets")  # meta.json lists files
SPOT_BYTES = 4096


def _spots(path: Path) -> bytes:
    """A file's first and last 4 KiB (they overlap in a file under 8 KiB)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(SPOT_BYTES)
        f.seek(max(0, size - SPOT_BYTES))
        return head + f.read(SPOT_BYTES)


def spot_crc32(path: Path) -> int:
    """CRC32 of a file's first and last 4 KiB: read on every open, it catches a file that was
    zero-filled (what some filesystems leave after a crash) or overwritten, for 8 KiB of I/O."""
    return zlib.crc32(_spots(path))


def write_meta(directory: Path, meta: dict[str, Any]) -> None:
    """Write ``meta.json`` (the commit point of a build) and fsync the directory.

    Each listed file gets its spot checksum (:func:`spot_crc32`), checked on open.
    """
    for name, info in meta.get("files", {}).items():
        info["spot_crc32"] = spot_crc32(directory / name)
    text = json.dumps(meta, indent=2, sort_keys=True)
    write_file(directory / META_FILE, text.encode("utf-8"))
    fsync_dir(directory)


def read_meta(
    directory: str | os.PathLike[str], expected_format: str, spots: bool = True
) -> dict[str, Any]:
    """Load and check ``meta.json``: format, version (against that format's own versions, see
    :mod:`lading.disk.formats`), every listed file's size and (unless ``spots`` is False) the
    checksum of its first and last 4 KiB.

    Raises:
        StoreFormatError: naming the directory or file, what was expected and how to fix it
            (an :class:`~lading.disk.formats.UnsupportedVersionError` for a version it cannot read).
    """
    fmt = disk_format(expected_format)
    root = Path(directory)
    if root.is_file():
        raise StoreFormatError(
            f"{root} is a file, not a lading {fmt.what} (a directory holding {META_FILE}); "
            f"pass the directory a build wrote (e.g. `lading build {root} DEST`, then DEST)"
        )
    if not root.is_dir():
        raise StoreFormatError(f"{root} is not a lading {fmt.what}: no such directory")
    meta_path = root / META_FILE
    if not meta_path.is_file():
        raise StoreFormatError(
            f"{root} is not a lading {fmt.what}: {META_FILE} is missing (an interrupted build "
            f"leaves no meta.json); {fmt.rebuild}"
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreFormatError(f"{meta_path} is not valid JSON ({e}); {fmt.rebuild}") from None
    if not isinstance(meta, dict) or meta.get("format") != expected_format:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise StoreFormatError(f"{meta_path}: format is {found!r}, expected {expected_format!r}")
    check_version(expected_format, meta.get("version"), meta_path)
    files = meta.get("files")
    if not isinstance(files, dict):
        raise StoreFormatError(f"{meta_path}: no file list; {fmt.rebuild}")
    for name, info in files.items():
        _check_listed_file(root, name, info, spots, fmt)
    return meta


def _check_listed_file(root: Path, name: str, info: Any, spots: bool, fmt: DiskFormat) -> None:
    if not isinstance(name, str) or "/" in name or "\\" in name or name in ("", ".", ".."):
        raise StoreFormatError(
            f"{root / META_FILE}: file name {name!r} points outside the {fmt.what}"
        )
    path = root / name
    if not path.is_file():
        raise StoreFormatError(f"{path} is missing; the {fmt.what} is incomplete, {fmt.rebuild}")
    expected = info.get("size") if isinstance(info, dict) else None
    actual = path.stat().st_size
    if actual != expected:
        raise StoreFormatError(
            f"{path} is {actual} bytes, expected {expected} (truncated or replaced?); {fmt.rebuild}"
        )
    spot = info.get("spot_crc32")
    if spots and spot is not None and zlib.crc32(seen := _spots(path)) != spot:
        zeros = not seen.strip(b"\0")
        raise StoreFormatError(
            f"{path}: its first and last {SPOT_BYTES} bytes do not match their checksum"
            + (" (they are all zero bytes, as a crash can leave a file)" if zeros else "")
            + f"; the file was damaged or replaced after the build. {fmt.rebuild[:1].upper()}"
            + f"{fmt.rebuild[1:]} (`lading verify` checks every byte)."
        )


def verify_checksums(
    directory: str | os.PathLike[str], expected_format: str | None = None
) -> list[str]:
    """Read every file of a lading directory in full, compare CRC32s; return the problems found.

    ``expected_format`` defaults to whichever lading format with a file list (a packed store, a
    token corpus, an offsets index) ``meta.json`` declares, else the packed store.
    """
    root = Path(directory)
    if expected_format is None:
        expected_format = "lading.packed"
        with contextlib.suppress(OSError, ValueError, AttributeError):
            declared = json.loads((root / META_FILE).read_text(encoding="utf-8")).get("format")
            if isinstance(declared, str) and declared in LISTED_FORMATS:
                expected_format = declared
    meta = read_meta(root, expected_format, spots=False)  # every byte is checked below
    problems = []
    for name, info in sorted(meta["files"].items()):
        crc = 0
        with open(root / name, "rb") as f:
            while block := f.read(1 << 24):
                crc = zlib.crc32(block, crc)
        if crc != info.get("crc32"):
            problems.append(f"{root / name}: CRC32 {crc:#010x}, expected {info.get('crc32'):#010x}")
    return problems
