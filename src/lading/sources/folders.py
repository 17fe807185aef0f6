"""The files of a folder given as a source: its data, not what tools keep beside it.

A folder source is read at any depth. A file or folder whose name starts with one of the
``hidden`` prefixes is left out with everything below it, and such a folder is never walked:
``.git`` (a cloned dataset repository's hooks and objects were read as documents, 125 of 130
in a review's build), ``.cache``, ``.ipynb_checkpoints`` (a notebook's copy of a data file, read
twice); the stores also leave out ``_`` names (Spark's ``_SUCCESS``, ``_temporary``). A name
checked a file at a time let every file inside a hidden folder through. Links to folders are
not followed, as ``Path.rglob`` did not.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def data_files(folder: Path, hidden: tuple[str, ...]) -> Iterator[Path]:
    """The files under ``folder`` (unsorted, as the walk finds them) outside every file or
    folder whose name starts with one of ``hidden``."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(hidden)]  # (pruned: never walked)
        for name in files:
            path = Path(root) / name
            if not name.startswith(hidden) and path.is_file():
                yield path
