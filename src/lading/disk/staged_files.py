"""A staged copy of plain files (a parquet dataset, a folder of text), read back by its mark.

:func:`lading.disk.stage.stage` copies any folder or prefix; where the source is no lading
format, the copy's only record is its staging mark (``_lading_stage.json``): each file's size
and CRC32, the source and when it was copied. ``lading inspect`` and ``lading verify`` read a
store's ``meta.json``; for such a copy they read the mark instead (:func:`plain_mark`,
:func:`check_plain`). Reads files only; writes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lading.disk import STAGE_MARK
from lading.disk.meta import LISTED_FORMATS
from lading.disk.names import inside
from lading.disk.snapshot import file_crc32
from lading.errors import StoreFormatError


def plain_mark(dest: Path) -> dict[str, Any] | None:
    """``dest``'s staging mark where ``dest`` is a staged copy of plain files (its source
    declared no lading format; a ``meta.json`` among them, even one naming a format, is
    another tool's file), else None (a store, a token corpus, a copy of one, no copy)."""
    try:
        mark = json.loads((dest / STAGE_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(mark, dict) or mark.get("format") in LISTED_FORMATS:
        return None
    files = mark.get("files")
    return mark if isinstance(files, dict) else None


def _entry(dest: Path, rel: str, info: Any) -> tuple[int, int] | None:
    """A file's ``(size, crc32)`` as the mark records it; None where the entry is damaged:
    not two integers, or a name that does not stay inside the copy (absolute, ``..``, a
    symlink leading out: the stores' own rule, :func:`lading.disk.names.inside`): the mark
    is read as input, and a check never reads outside the copy."""
    try:
        inside(dest, rel, "files", dest / STAGE_MARK)
    except StoreFormatError:
        return None
    if not isinstance(info, dict):
        return None
    size, crc = info.get("size"), info.get("crc32")
    if isinstance(size, bool) or isinstance(crc, bool):
        return None
    if not isinstance(size, int) or not isinstance(crc, int):
        return None
    return size, crc


def describe_plain(dest: Path, mark: dict[str, Any]) -> dict[str, Any]:
    """What ``lading inspect`` reports of the copy (``mark``: :func:`plain_mark`'s)."""
    files = mark["files"]
    entries = [_entry(dest, rel, info) for rel, info in files.items()]
    when = mark.get("staged_at")
    return {
        "path": str(dest.resolve()),
        "kind": "staged files",
        "source": mark.get("source"),
        "files": len(files),
        "bytes": sum(e[0] for e in entries if e is not None),
        "parquet": sum(1 for rel in files if rel.endswith(".parquet")),
        "staged_at": when if isinstance(when, (int, float)) else None,
    }


def check_plain(dest: Path, mark: dict[str, Any]) -> list[str]:
    """One line a file of the copy that is missing, of another size, or whose bytes do not
    match the CRC32 taken as it was copied, or whose entry in the mark is damaged; each
    names the file and the fix."""
    again = f"stage it again: lading stage {mark.get('source')} {dest}"
    problems = []
    for rel, info in sorted(mark["files"].items()):
        path, entry = dest / rel, _entry(dest, rel, info)
        if entry is None:
            problems.append(
                f"{dest / STAGE_MARK}: its entry for {rel!r} is damaged (not a size and CRC32 "
                f"of a file inside the copy); {again}"
            )
        elif not path.is_file():
            problems.append(f"{path}: missing from the staged copy; {again}")
        elif path.stat().st_size != entry[0]:
            problems.append(
                f"{path}: {path.stat().st_size:,} bytes where {entry[0]:,} were staged; {again}"
            )
        elif file_crc32(path) != entry[1]:
            problems.append(
                f"{path}: its bytes do not match the CRC32 taken as it was staged (damaged "
                f"since); {again}"
            )
    return problems
