"""The node cache's payload: one file of exactly the block budget, cut into regions.

As CacheLib's Navy and Apache Traffic Server do, the bytes of cached blocks live in a file made
once at the cap's size (sparse: disk is taken as regions fill) and cut into ``regions`` equal
regions. A block is appended to the open region (its place reserved in the ledger's
transaction, its bytes written by ``pwrite`` once fetched: every payload byte is written once);
a region is freed whole, its generation raised, when eviction takes it. The file never grows,
so the cap holds by construction, and no payload byte passes through SQLite (1 KiB pages, a
WAL that writes each byte twice and must itself be bounded: ~300 lines that measured it went).

Readers map the file once a process and copy a block's bytes out; the region's generation,
checked after the copy, tells a copy that raced a region's reuse (it is read again).

Sizes: 16 regions from 64 KiB to 256 MiB caps (a region is the largest block and the unit of
eviction: a sixteenth of the cache at a time), 16 MiB regions above (512 of them at 8 GiB),
and below 64 KiB regions of at least 4 KiB while there are two (a 3,000-byte cap: two regions
of 1,500). A block larger than a region is read around the cache.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import stat
import warnings
from pathlib import Path
from typing import NamedTuple

from lading.errors import LadingError
from lading.remote.cache.folder import DATA_FILE, open_new

REGIONS = 16  # regions of a small cache: eviction frees a sixteenth of it at a time
MAX_REGION = 16 << 20  # a region's bytes at most (the largest block, the unit of eviction)
MIN_REGION = 4 << 10  # ... at least, while there are two regions


class Layout(NamedTuple):
    """How a cap is cut: ``regions`` regions of ``region_bytes`` (their product <= cap)."""

    regions: int
    region_bytes: int

    @classmethod
    def of(cls, cap: int, region_bytes: int | None = None) -> Layout:
        """The layout of a cache of ``cap`` bytes (``region_bytes``: a size of one's own)."""
        if region_bytes is None:
            count = max(2, min(REGIONS, cap // MIN_REGION))
            region_bytes = min(MAX_REGION, max(1, cap // count))
        return cls(cap // region_bytes, region_bytes)

    @property
    def size(self) -> int:
        return self.regions * self.region_bytes


def _warn_if_no_room(fd: int, path: Path, size: int) -> None:
    """Say when the disk under a payload file just made has less room than its cap: the file
    is sparse, so the cap is taken as blocks come, and a disk that fills first (a cap set too
    high, another job's files) keeps no more of them (reads then go around the cache)."""
    with contextlib.suppress(OSError):
        st = os.fstatvfs(fd)
        free = st.f_bavail * st.f_frsize
        if free < size:
            warnings.warn(
                f"{path.parent}: this node cache's cap ({size / 2**20:,.0f} MiB of payload) is "
                f"more than its disk has free ({free / 2**20:,.0f} MiB): once the disk is full "
                "it keeps nothing more and reads fetch around it. Lower cache_bytes (or "
                "$LADING_REMOTE_CACHE_BYTES), or point cache= at a disk with room",
                RuntimeWarning,
                stacklevel=4,
            )


class PayloadCutError(LadingError, OSError):
    """The payload file is shorter than its layout: cut under the cache (mapping it failed)."""


class DataFile:
    """The payload file at ``path`` of ``layout`` (made sparse if absent or not of the layout's
    size, :attr:`made` then true; ``mode``: its bits)."""

    def __init__(self, path: Path, layout: Layout, mode: int = 0o666) -> None:
        self.path, self.layout = path, layout
        fd = open_new(path, os.O_RDWR | os.O_CREAT, mode)  # never through a link (.folder)
        try:
            if os.fstat(fd).st_mode & 0o777 != mode and os.fstat(fd).st_size == 0:
                os.fchmod(fd, mode)  # made now: the folder's mode, whatever the umask
            self.made = os.fstat(fd).st_size != layout.size  # new, gone or cut: none of
            if self.made:  # the blocks a ledger lists is here
                os.ftruncate(fd, layout.size)  # made (again): sparse
                _warn_if_no_room(fd, path, layout.size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.inode = os.fstat(fd).st_ino  # (a payload file removed under it is another)
        self._map: mmap.mmap | None = None

    def write(self, region: int, at: int, data: bytes | memoryview) -> None:
        """Write a block's bytes at ``at`` in ``region`` (its place reserved by a claim), all
        of them: ``pwrite`` may write fewer (a nearly full disk), and a block marked whole
        with a hole in it was copied out by this process, which trusts its own fills (SIGBUS
        on tmpfs). A write that makes no progress raises ENOSPC: the fill's failed write."""
        rest, offset = memoryview(data).cast("B"), region * self.layout.region_bytes + at
        while len(rest):
            written = os.pwrite(self._fd, rest, offset)
            if written <= 0:
                raise OSError(errno.ENOSPC, "no byte of a cached block written", str(self.path))
            rest, offset = rest[written:], offset + written

    def cut(self) -> int | None:
        """The file's size where it is shorter than its layout, else None: cut under the
        cache (a user's cleanup, a truncate), its mapped pages past the end would kill the
        process with SIGBUS at the next copy out of them. One ``fstat`` (~1 us), asked once
        a read round (:meth:`.Node.check_payload`), not once a block."""
        if self._fd < 0:
            return None
        size = os.fstat(self._fd).st_size
        return size if size < self.layout.size else None

    def restore(self) -> None:
        """Make the file its layout's size again (sparse: the cut bytes read as zeros)."""
        os.ftruncate(self._fd, self.layout.size)

    def view(self, region: int, at: int, size: int) -> memoryview:
        """The mapped bytes of ``[at, at + size)`` in ``region`` (copy them before the
        region's generation is checked: the view shows whatever is there now).

        Raises:
            PayloadCutError: the file was too short to map (cut since it was checked).
        """
        if self._map is None:
            if self._fd < 0:  # mmap(-1) would map anonymous zeros, read as the block's bytes
                raise ValueError("the node cache's payload file was closed")
            try:
                self._map = mmap.mmap(self._fd, self.layout.size or 1, access=mmap.ACCESS_READ)
            except ValueError as e:  # "mmap length is greater than file size", naming none
                raise PayloadCutError(
                    f"{self.path}: the node cache's payload file is shorter than its "
                    f"{self.layout.size:,} bytes ({e}): it was cut under the cache"
                ) from None
        start = region * self.layout.region_bytes + at
        return memoryview(self._map)[start : start + size]

    def move(self, source: tuple[int, int], dest: tuple[int, int], size: int) -> None:
        """Copy ``size`` bytes from ``(region, at)`` to another (a block carried forward)."""
        self.write(*dest, bytes(self.view(*source, size)))

    def close(self) -> None:
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a view still held: the GC unmaps it
                self._map.close()
            self._map = None
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = -1


def folder_bytes(cache: Path) -> tuple[int, int]:
    """``(payload, the rest)``: the bytes the cache folder holds on disk (a file's blocks, the
    payload's sparse ones left out, at most its size). A link is no bytes of the folder's:
    neither followed nor counted (the index budget's sweep would remove copies for a big
    file a link in the folder points to)."""
    payload = rest = 0
    for root, _, files in os.walk(cache):  # (a link to a folder is never walked into)
        for name in files:
            try:
                info = os.lstat(Path(root) / name)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            size = min(info.st_size, info.st_blocks * 512)  # disk taken (sparse), not rounded
            if root == str(cache) and name == DATA_FILE:
                payload += size
            else:
                rest += size
    return payload, rest
