"""Names a manifest gives (files, folders, snapshot ids), checked before anything is opened.

A manifest is input other people may have written (a bucket other jobs can write, a folder
copied from a colleague). Python's ``tarfile`` data filter is the rule followed: refuse an
absolute name, a ``..`` component, a NUL, before a byte is written; then join only checked
names to the root. A name is checked as text, so it holds for a key in a bucket (never
resolved on disk) and for a path below a staged copy alike.
"""

from __future__ import annotations

import re

from lading.errors import StoreFormatError

MAX_NAME = 1024  # bytes of a whole relative name: S3's own key limit, and far below PATH_MAX
MAX_PART = 255  # bytes of one component: NAME_MAX of ext4, xfs, btrfs
_SNAPSHOT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def safe_member_name(name: object, where: str, field: str) -> str:
    """``name`` if it is a relative POSIX name that stays below its root; else one error.

    Refused: not a string, empty, absolute (``/x``, ``C:/x``), a ``\\``, a NUL or control
    character, an empty, ``.`` or ``..`` component, a component over 255 bytes, a name over
    1024 bytes.

    Args:
        name: the name as the manifest gives it.
        where: the manifest (a path or URL) for the message.
        field: the field that held the name (``files``, ``shards[0].columns.text.data``).

    Raises:
        StoreFormatError: naming ``where``, ``field``, the name and why.
    """
    why = _why_unsafe(name)
    if why is not None:
        long = isinstance(name, str) and len(name) > 80
        shown = repr(name[:80]) + "…" if long else repr(name)  # type: ignore[index]
        raise StoreFormatError(
            f"{where}: {field} names {shown}, which {why}; a store names only relative files "
            "inside it: the manifest is damaged or hostile, rebuild the store"
        )
    assert isinstance(name, str)
    return name


def _why_unsafe(name: object) -> str | None:
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a file name"
    if not name:
        return "is empty"
    encoded = name.encode("utf-8", "surrogatepass")
    if len(encoded) > MAX_NAME:
        return f"is {len(encoded)} bytes long (at most {MAX_NAME})"
    if any(ord(c) < 32 or c == "\x7f" for c in name):
        return "holds a NUL or control character"
    if "\\" in name:
        return "holds a backslash"
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "is absolute"
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, '.' or '..' component"
    if any(len(p.encode("utf-8", "surrogatepass")) > MAX_PART for p in parts):
        return f"has a component over {MAX_PART} bytes"
    return None


def safe_snapshot_id(snapshot: object, where: str) -> str:
    """A snapshot id fit to be one folder name (``snap-20261126T061759Z-f2041710``, ``v1-…``).

    Raises:
        StoreFormatError: anything else, naming ``where`` and the field.
    """
    if not isinstance(snapshot, str) or not _SNAPSHOT.match(snapshot):
        shown = repr(snapshot)[:80]
        raise StoreFormatError(
            f"{where}: snapshot is {shown}, expected letters, digits, '.', '_' or '-' "
            "(at most 128, e.g. snap-20261126T061759Z-f2041710); rebuild the store"
        )
    return snapshot
