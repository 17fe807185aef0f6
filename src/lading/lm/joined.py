"""The token files of a corpus built in shards mapped into one range of addresses: one array.

A merged corpus reads each shard's ``tokens.bin`` in place (:mod:`lading.lm.parts`). Mapped
one by one, a read of a document's piece must first find its file: a Python step a piece that
a one-file corpus, one map sliced by numpy, does not take (~1.5 % of a ``Windows(512)`` epoch,
once each run's part is kept beside it). :func:`join_files` maps every file read-only into one
reserved range instead, file ``k`` from ``starts[k]`` (in tokens) at a 2 MiB boundary, so the
LM modes slice one array at a document's place in it, as they slice a one-file corpus's map.
The tokens between one file's end and the next file's start are padding no document spans:
the reservation is readable (``PROT_READ``, no memory behind it until read, and then the
kernel's one zero page), so a read that strays there (a damaged ``tokens.off``) gets zeros,
as a slice past a one-by-one map's end gets nothing, never a crash (``PROT_NONE`` there made
it SIGSEGV). At 2 MiB boundaries the kernel may map a file's cached huge
folios as huge pages, as it does a file mapped alone.

POSIX only (``mmap`` of each file with ``MAP_FIXED`` over a read-only reservation, called
through ctypes): where the C library or a call is missing or fails, None, and the reads find
each piece's file (:class:`~lading.lm.parts.PartTokens`). The range is unmapped when the last
array over it is collected.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.disk.maps import MAP_FAILED, c_library, owned_view

ALIGN = 2 << 20  # where each file starts in the range: a huge page's size, any page's multiple
MAP_FIXED = 0x10  # Linux, macOS and the BSDs alike; Python's mmap module does not export it


def join_files(
    paths: list[Path], dtype: np.dtype[Any]
) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], list[int]] | None:
    """(one read-only array over every file of ``paths``, where each file's first token is in
    it, the tokens of each), or None where this platform cannot map them so (then map them
    one by one)."""
    libc = c_library()
    if libc is None or ALIGN % mmap.PAGESIZE or ALIGN % dtype.itemsize:
        return None
    sizes = [os.path.getsize(p) for p in paths]
    if any(size % dtype.itemsize for size in sizes):
        return None  # (the corpus's checks name such a file)
    offsets, at = [], 0
    for size in sizes:
        offsets.append(at)
        at += -(-size // ALIGN) * ALIGN
    length = at + ALIGN  # room to start the range at a 2 MiB boundary
    anonymous = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
    reserved = libc.mmap(None, length, mmap.PROT_READ, anonymous, -1, 0)
    if reserved is None or reserved == MAP_FAILED:
        return None
    base = -(-reserved // ALIGN) * ALIGN
    try:
        for path, size, offset in zip(paths, sizes, offsets):
            if size and not _map(libc, path, base + offset, size):
                libc.munmap(reserved, length)
                return None
    except BaseException:
        libc.munmap(reserved, length)
        raise
    # read-only all the way down, unmapped when no array uses it and not at the interpreter's
    # exit: the process's maps go with it, and unmapped there the range was pulled from under
    # a daemon thread still reading it (SIGSEGV at exit)
    view = owned_view(base, max(at, dtype.itemsize), (reserved, length))
    array = np.frombuffer(view, dtype=dtype)
    counts = [size // dtype.itemsize for size in sizes]
    return array, np.array(offsets, dtype=np.int64) // dtype.itemsize, counts


def _map(libc: Any, path: Path, address: int, size: int) -> bool:
    """Map ``path`` (``size`` bytes) read-only at ``address``, over the reservation."""
    fd = os.open(path, os.O_RDONLY)
    try:
        got = libc.mmap(address, size, mmap.PROT_READ, mmap.MAP_SHARED | MAP_FIXED, fd, 0)
    finally:
        os.close(fd)
    return bool(got == address)
