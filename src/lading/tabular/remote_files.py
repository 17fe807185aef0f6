"""Which parquet objects a URL names, their footers (staged once per node per version), and a
file object over the ranges of one read (what pyarrow decodes a row group from).

``PartitionedParquet(["s3://b/p/part-0.parquet", ...])`` or ``PartitionedParquet("s3://b/p/")``:
a URL ending in ``.parquet`` is one object (or, where no object has that key, the folder of
that name: Spark's ``out/sessions.parquet/part-*``), any other a prefix whose ``*.parquet``
objects are read recursively, by the rule of a local folder
(:func:`lading.tabular.files.select_listed`): sorted by path parts as the folder's files are
(``178/`` before ``178-late/``, where a plain key sort puts ``178-late/`` first: the bucket
copy of a folder gives its batches and takes its states), build debris left out, a nested
``lading repartition`` output refused; an object reached twice is refused. One LIST per
folder named gives every object's size and
ETag (a list of 1,000 objects in one folder is one request, not 1,000 HEADs); an object named
alone is found by a HEAD of its key (a LIST of its folder is recursive: for an object at a
bucket's top it would walk the whole bucket).

Each object's footer (the parquet metadata: schema, row groups, column chunk offsets; a few KB)
is staged to ``<cache>/parquet/<digest of URL, ETag, size>.footer`` by the first process of the
node that opens the dataset: one GET of the object's last 64 KiB (a second one for a larger
footer), written under a temporary name and renamed. Every later open on the node (other
ranks, a resumed run) reads the staged copy. The name holds the ETag, so an object rewritten
since is staged afresh and never read with another version's offsets; every row group GET is
pinned to the ETag listed (:mod:`lading.tabular.remote`).
"""

from __future__ import annotations

import bisect
import hashlib
import io
import os
import struct
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lading.disk import build_lock
from lading.disk.remote import first_line
from lading.errors import ParquetError, RemoteNotFoundError
from lading.remote.cache.folder import make_folders, shared
from lading.remote.clients import check_reachable
from lading.remote.fetch import Fetcher
from lading.remote.objects import RemoteNotSupportedError, describe, split_url
from lading.tabular.files import (
    MAGIC,
    looks_like_parquet,
    passed_over,
    refuse_twice,
    select_listed,
    warn_unread,
)

TAIL = 64 << 10  # bytes of an object's end fetched first: most footers fit (~1-20 KB)

Parts = list[tuple[int, bytes]]  # (start, bytes) of the ranges read of one row group


@dataclass(frozen=True)
class RemoteFile:
    """One parquet object: ``root`` (``s3://bucket``: one client and node cache a bucket),
    its ``key`` below it, and the size and ETag the listing gave (every GET is pinned to it);
    where the store gives no ETag, the modification time it gave (``modified``: part of the
    object's identity, in its staged footer's name and its blocks' names, never a pin)."""

    root: str
    key: str
    size: int
    etag: str | None
    modified: str | None = None

    @property
    def url(self) -> str:
        return f"{self.root}/{self.key}"

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]


def split_root(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("s3://bucket", "a/b")`` (the key may be empty: the bucket).

    Raises:
        RemoteNotSupportedError: no ``scheme://bucket``, or a scheme lading cannot reach.
    """
    try:
        scheme, rest = split_url(url)
    except ValueError as e:
        raise RemoteNotSupportedError(f"PartitionedParquet: {e}") from None
    check_reachable(url, "PartitionedParquet")
    bucket, _, key = rest.partition("/")
    return f"{scheme}://{bucket}", key


def list_files(urls: Sequence[str], fetchers: dict[str, Fetcher]) -> list[RemoteFile]:
    """The parquet objects ``urls`` name, in the order given (a prefix's as a local folder's:
    :func:`lading.tabular.files.select_listed`).

    Args:
        urls: object URLs (ending in ``.parquet``; a folder of that name where no object has
            the key) and prefixes.
        fetchers: a fetcher for each root (``s3://bucket``), made by the caller.

    Raises:
        FileNotFoundError: an object named is not there.
        ValueError: a prefix holds no ``*.parquet`` object (one line naming it and the fix),
            or a nested ``lading repartition`` output; an object is reached twice.
        RemoteReadError: a LIST failed for good (naming the endpoint and the setting).
    """
    listings: dict[tuple[str, str], dict[str, tuple[int, str | None, str | None]]] = {}

    def listing(root: str, folder: str) -> dict[str, tuple[int, str | None, str | None]]:
        if (root, folder) not in listings:
            found = fetchers[root].list(folder)
            markers = folder_markers({k: v.size for k, v in found.items()})
            listings[root, folder] = {
                k: (v.size, v.etag, v.modified) for k, v in found.items() if k not in markers
            }
        return listings[root, folder]

    def head(root: str, key: str) -> tuple[int, str | None, str | None] | None:
        client = fetchers[root].client
        info = fetchers[root].run(f"HEAD {root}/{key}", lambda: client.head_async(key))
        return None if info is None else (info.size, info.etag, info.modified)

    objects = [split_root(u) for u in urls if u.endswith(".parquet")]
    named_in = Counter((root, _above(key)) for root, key in objects)
    files: list[RemoteFile] = []
    reached: dict[str, tuple[str, str]] = {}
    for url in urls:
        root, key = split_root(url)
        if key.endswith(".parquet") and not url.endswith("/"):
            # one object: a HEAD of it; several of a folder: one LIST of the folder (a LIST of
            # what is above one object would walk the whole bucket for an object at its top)
            above = _above(key)
            found = listing(root, above).get(key) if named_in[root, above] > 1 else head(root, key)
            if found is not None:
                refuse_twice(reached, url, url, url)
                files.append(RemoteFile(root, key, *found))
                continue
            if not listing(root, key):
                raise RemoteNotFoundError(
                    f"no parquet object at {url} (endpoint "
                    f"{fetchers[root].client.endpoint or 'the default'}); check the URL, or "
                    "name the prefix that holds the files"
                )
            # no object of that key, but a folder of that name (Spark writes x.parquet/part-*)
        folder = key.rstrip("/")
        listed = listing(root, key)
        start = len(folder) + 1 if folder else 0
        below = {k[start:]: k for k in listed if not folder or k.startswith(folder + "/")}
        top = f"{root}/{folder}" if folder else root
        chosen = select_listed(top, below)
        unread = [n for n in passed_over(below) if listed[below[n]][0] >= _SMALLEST]
        warn_unread(top, [n for n in unread if looks_like_parquet(n)], "object")
        if not chosen and folder and head(root, folder) is not None:
            raise ValueError(
                f"{root}/{folder} is an object, not parquet files (its name does not end in "
                ".parquet); name the parquet objects, or the prefix that holds them"
            )
        if not chosen:
            raise ValueError(
                f"no *.parquet objects below {root}/{key}/ (endpoint "
                f"{fetchers[root].client.endpoint or 'the default'}); point at the prefix "
                "that holds the parquet files, or list the files' URLs"
            )
        for name in chosen:
            file = RemoteFile(root, below[name], *listed[below[name]])
            refuse_twice(reached, file.url, file.url, url)
            files.append(file)
    return files


def folder_markers(sizes: dict[str, int]) -> set[str]:
    """The keys of ``sizes`` (key -> bytes) that mark a folder: 0 bytes, with keys below them.
    The S3 console and Hadoop's S3A keep a ``name/`` key for a folder, which obstore lists as
    ``name``: a Spark output's ``out/a.parquet/`` read as an empty parquet object."""
    empty = [key for key, size in sizes.items() if size == 0]
    if not empty:  # (the usual listing: nothing to sort)
        return set()
    keys = sorted(sizes)
    found = set()
    for key in empty:
        at = bisect.bisect_left(keys, key + "/")
        if at < len(keys) and keys[at].startswith(key + "/"):
            found.add(key)
    return found


def _above(key: str) -> str:
    """The folder holding ``key`` ("" at the bucket's top)."""
    return key.rsplit("/", 1)[0] if "/" in key else ""


def footer_path(cache: Path, file: RemoteFile) -> Path:
    """Where ``file``'s footer is staged: a name of its URL, ETag and size (a rewritten object
    gets a new one), and its modification time where it has no ETag."""
    ident = f"{file.url}\0{file.etag}\0{file.size}".encode()
    if file.etag is None and file.modified is not None:
        ident += f"\0{file.modified}".encode()
    return cache / "parquet" / f"{hashlib.sha256(ident).hexdigest()[:24]}.footer"


def stage_footers(
    files: Sequence[RemoteFile], fetchers: dict[str, Fetcher], cache: Path
) -> list[bytes]:
    """Each file's footer with its 8-byte trailer (what :func:`pyarrow.parquet.read_metadata`
    reads from a buffer): the node's staged copy, else fetched (all at once) and staged.

    Raises:
        ValueError: an object is not parquet (too short, or no ``PAR1`` at its end).
        RemoteReadError: a GET failed for good (a rewritten object: its ETag changed).
    """
    out: list[bytes | None] = [None] * len(files)
    todo = _read_staged(files, cache, out, range(len(files)))
    if not todo:
        return [d for d in out if d is not None]
    # one process of the node fetches what is missing; the node's others (ranks opening
    # together) wait on the lock and find the footers staged
    ident = hashlib.sha256(repr([footer_path(cache, files[i]).name for i in todo]).encode())
    lock = cache / "parquet" / f"staging-{ident.hexdigest()[:16]}"
    make_folders(lock.parent, shared(cache))  # a group's cache folder: its users' too
    with build_lock(lock):
        todo = _read_staged(files, cache, out, todo)
        _fetch_footers(files, fetchers, cache, out, todo)
    return [d for d in out if d is not None]


def _read_staged(
    files: Sequence[RemoteFile], cache: Path, out: list[bytes | None], which: Iterable[int]
) -> list[int]:
    """Fill ``out[i]`` from the node's staged footers; the indices still missing."""
    todo = []
    for i in which:
        try:
            data = footer_path(cache, files[i]).read_bytes()
        except OSError:
            todo.append(i)
            continue
        out[i] = data if _complete(data) else None
        if out[i] is None:
            todo.append(i)  # damaged: fetched and staged again
    return todo


def _fetch_footers(
    files: Sequence[RemoteFile],
    fetchers: dict[str, Fetcher],
    cache: Path,
    out: list[bytes | None],
    todo: list[int],
) -> None:
    """Fetch the footers of ``files[i]`` for ``i`` in ``todo`` (every tail GET at once), stage
    them and fill ``out``."""
    for i in todo:
        if files[i].size < 12:  # (an empty range is a GET S3 refuses, and would be retried)
            raise _not_parquet(files[i])
    tails = {
        i: fetchers[files[i].root].submit(
            files[i].key, max(0, files[i].size - TAIL), files[i].size, files[i].etag
        )
        for i in todo
    }
    for i, future in tails.items():
        file = files[i]
        data = _footer(file, future.result(), fetchers[file.root])
        _stage(footer_path(cache, file), data)
        out[i] = data


_SMALLEST = 12  # bytes of the least parquet file (magic, footer length, magic): a smaller
# object (a folder marker, an empty file) is no unread data


def _not_parquet(file: RemoteFile) -> ParquetError:
    return ParquetError(
        f"{describe(file.root, file.key)} is not a parquet file ({file.size} bytes, no "
        f"{MAGIC.decode()} at its end); remove it or write it again"
    )


def _footer(file: RemoteFile, tail: bytes, fetcher: Fetcher) -> bytes:
    """The footer and trailer of ``file`` from its last bytes ``tail`` (more fetched if the
    footer is longer)."""
    if file.size < 12 or tail[-4:] != MAGIC:
        raise _not_parquet(file)
    length = struct.unpack("<I", tail[-8:-4])[0]
    if length + 8 > file.size - 4:
        raise ParquetError(
            f"{describe(file.root, file.key)} is not a parquet file (its footer length "
            f"{length} does not fit its {file.size} bytes); remove it or write it again"
        )
    if length + 8 > len(tail):
        start = file.size - length - 8
        more = fetcher.submit(file.key, start, file.size - len(tail), file.etag).result()
        tail = more + tail
    footer = tail[-(length + 8) :]
    decode_footer(footer, describe(file.root, file.key))  # never staged unless it decodes
    return footer


def decode_footer(footer: bytes, where: str) -> Any:
    """The parquet metadata in ``footer`` (its thrift and trailer), or a ParquetError naming
    ``where`` (an object whose footer was damaged or cut: pyarrow's own error names none)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(pa.BufferReader(footer))
    except (pa.ArrowException, OSError) as e:
        raise ParquetError(
            f"{where} is not a parquet file (its footer does not decode: {first_line(e)}); "
            "remove it or write it again"
        ) from None


def _complete(data: bytes) -> bool:
    return (
        len(data) >= 8
        and data[-4:] == MAGIC
        and struct.unpack("<I", data[-8:-4])[0] + 8 == len(data)
    )


def _stage(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a crash leaves no half-written footer)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    part.write_bytes(data)
    if shared(path.parent):  # a group's cache folder: another user may replace it
        part.chmod(0o664)
    os.replace(part, path)


class FetchedRanges(io.RawIOBase):
    """A read-only file of ``size`` bytes whose only readable bytes are ``parts``: what
    pyarrow reads a row group from, given its footer (anything else is a bug, named)."""

    def __init__(self, file: RemoteFile, parts: Parts) -> None:
        super().__init__()
        self.file, self.parts, self.pos = file, sorted(parts, key=lambda p: p[0]), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.file.size}[whence]
        self.pos = base + offset
        return self.pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self.file.size - self.pos)
        for start, data in self.parts:
            if start <= self.pos and self.pos + n <= start + len(data):
                view[:n] = data[self.pos - start : self.pos - start + n]
                self.pos += n
                return n
        raise OSError(
            f"{self.file.url}: bytes {self.pos}-{self.pos + n - 1} were not fetched (the "
            "footer's column chunk ranges do not cover this read); please report it"
        )
