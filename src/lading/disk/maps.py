"""Read-only maps of whole files that keep no file descriptor, through the C library's calls.

CPython's ``mmap`` (3.11; ``trackfd=False`` came in 3.13) keeps a duplicate of the file's
descriptor for as long as the map lives. A store or corpus built in shards maps about two
files a column a shard, so a store merged from a few hundred shards held more descriptors
than the 1,024 many systems allow a process, and its open failed with ``EMFILE``; every
DataLoader worker held as many again. :func:`map_file` maps a file itself (``mmap`` with
``PROT_READ`` and ``MAP_SHARED``, called through ctypes), closes the descriptor at once (a
map does not need it) and hands back a read-only ``memoryview`` over the pages: the same
page-cache pages Python's map reads, the same faults, the same ``SIGBUS`` should the file be
cut short under it. The pages are unmapped when the last view or array over them is
collected, not at the interpreter's exit (a daemon thread may still read them then; the
process's maps go with it). :func:`advise` passes ``madvise`` hints for a range of it.

POSIX, 64-bit only: elsewhere (Windows, a 32-bit process, no C library found)
:func:`c_library` is None and callers map with Python's ``mmap`` as before.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np

MAP_FAILED = ctypes.c_void_p(-1).value


@functools.cache
def c_library() -> Any:
    """The C library with ``mmap``, ``munmap`` and ``madvise`` declared (ctypes), or None
    (Windows, a 32-bit process, whose ``off_t`` may not be the 64 bits declared here, or not
    found). Looked up once a process (20-55 us an open otherwise; the handle stays valid in
    a forked child)."""
    if sys.platform == "win32" or not hasattr(mmap, "MAP_ANONYMOUS"):
        return None
    if ctypes.sizeof(ctypes.c_void_p) < 8:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mapper, unmapper, adviser = libc.mmap, libc.munmap, libc.madvise
    except (OSError, AttributeError):
        return None
    mapper.restype = ctypes.c_void_p
    mapper.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int64,  # off_t: 64 bits on every 64-bit POSIX platform
    ]
    unmapper.restype = ctypes.c_int
    unmapper.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    adviser.restype = ctypes.c_int
    adviser.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def map_file(path: Path) -> tuple[memoryview, int] | None:
    """(a read-only view of the whole of ``path``, mapped; the address of its first byte),
    with no descriptor kept; None where this platform cannot (see the module doc) or the file
    is empty (a map of 0 bytes does not exist). The size is the open file's own (``fstat``),
    so a file replaced between a ``stat`` and the map is still mapped whole.

    Raises:
        OSError: the file cannot be opened (``EMFILE`` too: it is open for the call), or the
            map fails (``ENOMEM``: out of address space or of the map count).
    """
    libc = c_library()
    if libc is None:
        return None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return None
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address is None or address == MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"{path}: mmap of {size:,} bytes failed: {os.strerror(err)}")
    finally:
        os.close(fd)
    return owned_view(address, size, (address, size)), address


_PyBUF_READ = 0x100
_memory_view = ctypes.pythonapi.PyMemoryView_FromMemory
_memory_view.restype = ctypes.py_object
_memory_view.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]


def owned_view(address: int, size: int, mapped: tuple[int, int]) -> memoryview:
    """A read-only view of ``size`` bytes from ``address``, whose owner unmaps ``mapped``
    (its address and length) when the last view or array over it is collected, never at the
    interpreter's exit (see the module doc).

    Read-only all the way down: the view is made by ``PyMemoryView_FromMemory`` with
    ``PyBUF_READ`` and owned by a read-only numpy array (which, unlike a memoryview, takes a
    finalizer). A ctypes array over the pages exported a writable buffer: a write through a
    view's ``.base.obj`` killed the process (SIGSEGV) where a Python map's raises, and each
    size was a new ctypes type of ~2.8 KB a map."""
    libc = c_library()
    owner = np.frombuffer(_memory_view(address, size, _PyBUF_READ), dtype=np.uint8)
    weakref.finalize(owner, libc.munmap, *mapped).atexit = False
    return memoryview(owner)  # type: ignore[arg-type]  # (numpy's stubs: no Buffer)


def advise(address: int, length: int, advice: int) -> None:
    """``madvise(advice)`` over ``length`` bytes from ``address`` (page-aligned by the
    caller), as ``mmap.madvise`` does for a Python map; a hint: its failure is ignored."""
    libc = c_library()
    if libc is not None and length > 0:
        libc.madvise(address, length, advice)
