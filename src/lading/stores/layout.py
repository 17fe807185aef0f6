"""The packed store's files on disk (the shared machinery is in :mod:`lading.disk`).

A store is a directory:

- ``meta.json``: format name and version, row count, index kind, columns, token dtype, the
  source's fingerprint, and for every other file its exact size and CRC32 (see
  :mod:`lading.disk.meta`).
- ``<column>.bin`` + ``<column>.off``: a ragged column (see :mod:`lading.disk.ragged`).
  Columns: ``text`` and ``ids`` (UTF-8), ``field.<name>`` (UTF-8), ``tokens`` (token ids, uint16
  or uint32, offsets counted in tokens).
- the id index (see :mod:`lading.stores.index`).

Nothing is pickled. ``meta.json`` is the last file written, so a directory without it, or with
files whose sizes differ from it, is refused on open.
"""

from __future__ import annotations

import re

FORMAT_NAME = "lading.packed"
_FIELD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def field_column(name: str) -> str:
    """Column name of an extra field, checked to be a safe file name."""
    if not _FIELD_NAME.match(name):
        raise ValueError(
            f"field name {name!r} cannot name a file; use letters, digits, '_', '-' or '.'"
        )
    return f"field.{name}"
