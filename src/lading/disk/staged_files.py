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
from lading.disk.snapshot import file_crc32


def plain_mark(dest: Path) -> dict[str, Any] | None:
    """``dest``'s staging mark where ``dest`` is a staged copy of plain files (its source
    declared no lading format; a ``meta.json`` among them is another tool's file), else None
    (a store, a token corpus, a copy of one, or no copy at all)."""
    try:
        mark = json.loads((dest / STAGE_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(mark, dict) or mark.get("format") is not None:
        return None
    files = mark.get("files")
    return mark if isinstance(files, dict) else None


def describe_plain(dest: Path, mark: dict[str, Any]) -> dict[str, Any]:
    """What ``lading inspect`` reports of the copy (``mark``: :func:`plain_mark`'s)."""
    files = mark["files"]
    return {
        "path": str(dest),
        "kind": "staged files",
        "source": mark.get("source"),
        "files": len(files),
        "bytes": sum(int(info.get("size", 0)) for info in files.values()),
        "staged_at": mark.get("staged_at"),
    }


def check_plain(dest: Path, mark: dict[str, Any]) -> list[str]:
    """One line a file of the copy that is missing, of another size, or whose bytes do not
    match the CRC32 taken as it was copied; each names the file and the fix."""
    again = f"stage it again: lading stage {mark.get('source')} {dest}"
    problems = []
    for rel, info in sorted(mark["files"].items()):
        path = dest / rel
        if not path.is_file():
            problems.append(f"{path}: missing from the staged copy; {again}")
        elif path.stat().st_size != int(info["size"]):
            problems.append(
                f"{path}: {path.stat().st_size:,} bytes where {int(info['size']):,} were "
                f"staged; {again}"
            )
        elif file_crc32(path) != int(info["crc32"]):
            problems.append(
                f"{path}: its bytes do not match the CRC32 taken as it was staged (damaged "
                f"since); {again}"
            )
    return problems
