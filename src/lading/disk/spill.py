"""An append-only int64 array kept on disk while it grows, so a build's memory stays flat.

A build collects one integer per row (its source line, its integer id) that it only needs once
the pass is over. Held in RAM that is 8 bytes per row per array (140 MB for MS MARCO passages'
8.8M rows); here values are buffered 4 MiB at a time into a scratch file and read back as a
memory map at the end, paged in only where they are used.
"""

from __future__ import annotations

from array import array
from pathlib import Path

import numpy as np
import numpy.typing as npt

_BATCH = 1 << 19  # values buffered before a write: 4 MiB


class SpillArray:
    """int64 values appended in order to the scratch file ``path``; read back with :meth:`view`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "wb")  # noqa: SIM115 - closed in view()/discard()
        self._pending = array("q")
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, value: int) -> None:
        """Add one value."""
        self._pending.append(value)
        self._count += 1
        if len(self._pending) >= _BATCH:
            self._flush()

    def extend(self, values: npt.NDArray[np.int64]) -> None:
        """Add values in order."""
        self._pending.frombytes(np.asarray(values, dtype=np.int64).tobytes())
        self._count += len(values)
        if len(self._pending) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        self._file.write(np.frombuffer(self._pending, np.int64).astype("<i8").tobytes())
        self._pending = array("q")

    def view(self) -> npt.NDArray[np.int64]:
        """Every value, as a read-only memory map of the scratch file (closed for writing)."""
        if not self._file.closed:
            self._flush()
            self._file.close()
        if self._count == 0:
            return np.empty(0, dtype=np.int64)
        return np.memmap(self.path, dtype="<i8", mode="r", shape=(self._count,))

    def discard(self) -> None:
        """Close and delete the scratch file (views already taken keep their pages)."""
        if not self._file.closed:
            self._file.close()
        self.path.unlink(missing_ok=True)
