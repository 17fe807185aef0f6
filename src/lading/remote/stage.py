"""Stage a remote snapshot's index to the node, once per node and snapshot: checked, atomic.

The files its reader names (a store's manifest, id index, offsets, ids, tokenizer: 26-94 B a
document, by the ids' kind; a token corpus's offsets and tokenizer) are copied to
``<cache>/stores/<hash of the URL>/<snapshot>/`` by the first process of the node that opens
the store, under the build lock (:mod:`lading.disk.atomic`); the node's other processes wait
for the lock and find the copy. Each file is read by concurrent ranged GETs of 8 MiB, checked
against the size and CRC32 its manifest gives, written to a temporary directory and published
by a rename, so a crash never leaves a copy that looks complete. A later open of the same
snapshot reuses the copy; another snapshot gets a directory of its own (a reader keeps its
snapshot while a newer one is staged beside it).

The folder's second budget, ``index_bytes`` (:func:`index_budget`): everything in the cache
folder but the payload file (:mod:`lading.remote.cache.regions`, the cap's) -- staged copies,
parquet footers, the ledger's rows and WAL. After each staging, the copies opened longest ago
(an open touches its mark) go until the folder is within it (:func:`keep_within`); a process
still reading one keeps its open files (a copy that process pickles stages it again).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import time
import zlib
from pathlib import Path
from typing import Any

from lading.disk import STAGE_MARK, build_lock, publish, remove_dead_temps, scratch
from lading.disk.bookkeeping import verify_bookkeeping
from lading.disk.meta import META_FILE
from lading.disk.names import check_name
from lading.disk.snapshot import MANIFEST, SNAP_PREFIX, file_crc32, spot_crc32
from lading.errors import RemoteChangedError, StoreFormatError
from lading.remote.cache.folder import (
    PARQUET,
    STORES,
    make_folders,
    real_entries,
    share_tree,
    shared,
)
from lading.remote.cache.ledger import WAL_PAGES
from lading.remote.cache.regions import folder_bytes
from lading.remote.fetch import Fetcher
from lading.remote.objects import ObjectClient, ObjectInfo, describe

CHUNK = 8 << 20  # one GET of a staged file: 8 MiB at ~100 MB/s is ~80 ms, as long as its wait
SPOT = 4096  # bytes at each end of a file whose CRC32 meta.json keeps (lading.disk.meta)
# the ledger's WAL and the files beside it (its rows are counted apart, from the cap): the
# WAL is trimmed from 2 MiB on, but only once no reader holds it, and six processes reading
# took it to 2.4 MB (threads under load, to 3.9 MB): three times the trim size
LEDGER_ROOM = 6 * WAL_PAGES * 4096
INDEX_FLOOR = 16 << 20  # the default budget for staged copies at least (a few snapshots)


def index_budget(given: int | None, cap: int, staged: int) -> int:
    """The folder's bytes besides the payload: ``given``, else the ledger's room (its rows:
    ~50 bytes a cached block, a quarter of the cap for blocks of ~200 bytes) and two copies of
    a snapshot staging ``staged`` bytes (this one and the last), at least 16 MiB.

    Raises:
        ValueError: ``given`` cannot hold the ledger and one copy, naming the least it can be.
    """
    least = LEDGER_ROOM + cap // 4 + staged
    if given is not None and given < least:
        raise ValueError(
            f"index_bytes={given:,} cannot hold the node cache's ledger ({LEDGER_ROOM + cap // 4:,}"
            f" bytes at cache_bytes={cap:,}) and this snapshot's staged index ({staged:,}); give "
            f"at least {least:,} (twice the index keeps the last snapshot's too)"
        )
    if given is not None:
        return given
    return LEDGER_ROOM + cap // 4 + max(INDEX_FLOOR, 2 * staged)


def keep_within(cache: Path, budget: int, keep: Path | None) -> None:
    """Remove staged copies (snapshot folders, parquet footers) but ``keep``, opened longest
    ago first, until the folder's bytes besides the payload are within ``budget`` (footers
    read less than a second ago stay: the dataset opening now reads them). The ledger's
    write-ahead log counts at its room (:data:`LEDGER_ROOM`) however small it is now, so
    that the copies kept leave it the room it takes when several processes write."""
    _, used = folder_bytes(cache)
    log = 0
    for name in ("ledger.sqlite-wal", "ledger.sqlite-shm"):
        with contextlib.suppress(OSError):
            info = (cache / name).lstat()
            log += min(info.st_size, info.st_blocks * 512)  # as folder_bytes counts it
    used += max(0, LEDGER_ROOM - log)
    if used <= budget:
        return
    for _, path in sorted(_copies(cache, keep), key=lambda f: f[0]):
        if used <= budget:
            return
        if path.suffix == ".footer":
            with contextlib.suppress(OSError):
                used -= min(path.lstat().st_size, path.lstat().st_blocks * 512)
                path.unlink()
        else:  # (rmtree removes a link in it, never what it points to)
            used -= sum(folder_bytes(path))
            # (its URL's folder stays, empty or not: a process that just made it to stage
            # into, 2775 in a group's cache, would make it again with its umask's mode)
            shutil.rmtree(path, ignore_errors=True)


def _copies(cache: Path, keep: Path | None) -> list[tuple[float, Path]]:
    """The staged copies :func:`keep_within` may remove, each with the time it was last
    opened: snapshot folders but ``keep`` (holding a mark), footers not read within the last
    second. Listed without following a link (:mod:`lading.remote.cache.folder`): one planted
    as ``stores`` had the sweep remove folders outside the cache that held a file of the
    mark's name."""
    found = []
    stores = cache / STORES
    for url, url_is_dir in real_entries(stores):
        for snapshot, is_dir in real_entries(stores / url) if url_is_dir else []:
            path = stores / url / snapshot
            if is_dir and path != keep and _is_file(path / STAGE_MARK):
                with contextlib.suppress(OSError):
                    found.append((path.lstat().st_mtime, path))
    fresh = time.time() - 1.0
    for name, is_dir in real_entries(cache / PARQUET):
        path = cache / PARQUET / name
        if not is_dir and name.endswith(".footer"):
            with contextlib.suppress(OSError):
                if (at := path.lstat().st_mtime) < fresh:
                    found.append((at, path))
    return found


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a regular file (a link is not)."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


# (url, snapshot) -> the node copies this process opened: what verify_staged reads (a store's
# verify() passes no path; one URL opened over two cache folders has two)
_OPENED: dict[tuple[str, str], set[Path]] = {}


def stage_dir(cache: Path, url: str, snapshot: str) -> Path:
    """Where a snapshot of the store at ``url`` is staged in cache directory ``cache``."""
    return cache / STORES / hashlib.sha256(url.encode()).hexdigest()[:16] / snapshot


def stage_index(
    fetcher: Fetcher,
    url: str,
    raw_meta: bytes,
    meta: dict[str, Any],
    cache: Path,
    names: list[str],
    pinned: list[str],
    budget: int | None = None,
) -> Path:
    """The node's copy of the files ``names`` of ``meta``'s snapshot (made if absent); its
    path. ``pinned``: the files read by ranged GETs instead, each pinned to its ETag (kept
    in the copy's mark) after a check of its first and last bytes. ``budget``: the folder's
    bytes besides the payload (older copies go to keep within it).

    Raises:
        StoreFormatError: a file's bytes do not match the manifest's size or CRC32.
        RemoteReadError: a GET failed for good.
    """
    dest = stage_dir(cache, url, meta["snapshot"])
    _OPENED.setdefault((url, meta["snapshot"]), set()).add(dest)
    if _is_staged(dest, url, meta):
        with contextlib.suppress(PermissionError):  # (another user's copy: order only)
            os.utime(dest)  # opened now: the last to go (the folder's time; its files untouched)
        return dest
    group = shared(cache)  # a group's cache folder: the copy is the group's too
    make_folders(dest.parent, group)
    if budget is not None:  # room for the copy first: the folder is within it all along
        # (``dest`` kept: another process may have published it since the look above, and a
        # process of the node that staged it reads its mark next)
        keep_within(cache, budget - sum(int(meta["files"][n]["size"]) for n in names), dest)
    with build_lock(dest):
        if _is_staged(dest, url, meta):  # another process of the node staged it meanwhile
            return dest
        remove_dead_temps(dest)
        listing = _listing(fetcher, url, meta)  # sizes checked before a byte is written
        with scratch(dest) as tmp:
            for name in names:
                _copy(fetcher, url, name, meta["files"][name], tmp / name)
            (tmp / META_FILE).write_bytes(raw_meta)
            etags = _pin_payload(fetcher, url, meta, listing, pinned)
            mark = {"source": url, "snapshot": meta["snapshot"], "files": names, "etags": etags}
            (tmp / STAGE_MARK).write_text(json.dumps(mark, indent=2, sort_keys=True))
            share_tree(tmp, group)
            publish(tmp, dest)
    if budget is not None:
        keep_within(cache, budget, dest)
    return dest


def staged_etags(staged: Path) -> dict[str, str | None]:
    """The payload files' ETags recorded when ``staged`` was made (GETs are pinned to them)."""
    mark = json.loads((staged / STAGE_MARK).read_text(encoding="utf-8"))
    return dict(mark.get("etags", {}))


def _listing(fetcher: Fetcher, url: str, meta: dict[str, Any]) -> dict[str, ObjectInfo]:
    """The store's objects, after checking that every file its manifest lists is there with
    the size it says (a manifest's sizes are never trusted to size a copy or a read)."""
    listing = fetcher.list()
    for name, info in meta["files"].items():
        found, size = listing.get(name), int(info["size"])
        if name != META_FILE and (found is None or found.size != size):
            seen = "is missing" if found is None else f"is {found.size} bytes"
            raise StoreFormatError(
                f"{describe(url, name)} {seen}, its meta.json says {size}: the store is "
                "damaged, or was rebuilt meanwhile; open it again, or rebuild it"
            )
    return listing


def _pin_payload(
    fetcher: Fetcher,
    url: str,
    meta: dict[str, Any],
    listing: dict[str, ObjectInfo],
    pinned: list[str],
) -> dict[str, str | None]:
    """Each payload file's ETag, after checking the CRC32 of its first and last 4 KiB against
    the manifest (its size was checked by :func:`_listing`): a file replaced in place (a
    version 1 store rebuilt under the same names) is refused here, and any later GET of
    another version fails."""
    etags: dict[str, str | None] = {}
    for name in pinned:
        info, found = meta["files"][name], listing[name]
        size = int(info["size"])
        etags[name] = found.etag
        if "spot_crc32" in info and size:
            head = fetcher.submit(name, 0, min(SPOT, size), found.etag)
            tail = fetcher.submit(name, max(0, size - SPOT), size, found.etag)
            if zlib.crc32(head.result() + tail.result()) != int(info["spot_crc32"]):
                raise StoreFormatError(
                    f"{describe(url, name)}: its first and last {SPOT} bytes do not match "
                    "their checksum in meta.json: the object was replaced or damaged after "
                    "the build; rebuild the store"
                )
    return etags


def _is_staged(dest: Path, url: str, meta: dict[str, Any]) -> bool:
    """Whether ``dest`` holds a whole copy of ``meta``'s staged files: each of its size and
    with the CRC32 of its first and last 4 KiB the manifest gives (8 KiB read a file, as a
    local store's open checks its files). Not every byte: that would read the whole index
    (26-94 B a document, ~90 MB at 1M) at every open of every process of the node; a
    change in a file's middle is :func:`verify_staged`'s to find (``verify()``)."""
    try:
        mark = json.loads((dest / STAGE_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if mark.get("source") != url or mark.get("snapshot") != meta["snapshot"]:
        return False
    for name in mark.get("files", []):
        path, info = dest / name, meta["files"].get(name)
        try:
            if info is None or not _is_file(path) or path.stat().st_size != int(info["size"]):
                return False
            if "spot_crc32" in info and spot_crc32(path) != int(info["spot_crc32"]):
                return False  # changed in place (same size): staged again
        except OSError:
            return False
    return True


def verify_staged(url: str, meta: dict[str, Any]) -> list[str]:
    """Read every staged file of ``meta``'s snapshot in the node copies this process opened
    (:func:`stage_index`) and compare its CRC32 with the manifest's; the problems found
    (empty: intact). A copy removed since (the index budget's) is not read: a later open
    stages and checks it anew."""
    problems = []
    for dest in sorted(_OPENED.get((url, meta["snapshot"]), ())):
        try:
            mark = json.loads((dest / STAGE_MARK).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # removed (or being replaced): nothing of it is read any more
        for name in sorted(set(mark.get("files", [])) & set(meta["files"])):
            expected = meta["files"][name].get("crc32")
            try:
                crc = file_crc32(dest / name, CHUNK)
            except OSError as e:
                problems.append(
                    f"{dest / name}: cannot be read ({e.strerror}): the node's staged copy of "
                    f"{describe(url, name)} is damaged; remove {dest} (the next open stages it "
                    "again)"
                )
                continue
            if expected is not None and crc != int(expected):
                problems.append(
                    f"{dest / name}: CRC32 {crc:#010x} read, {int(expected):#010x} in its "
                    f"meta.json: the node's staged copy of {describe(url, name)} was changed "
                    f"or damaged on this node's disk; remove {dest} (the next open stages it "
                    "again)"
                )
    return problems


def verify_remote(
    fetcher: Fetcher, url: str, meta: dict[str, Any], etags: dict[str, str | None]
) -> list[str]:
    """Read every file of ``meta`` from the bucket (ranged GETs of 8 MiB; the payload pinned
    to ``etags``) and every staged file of the node's copy (:func:`verify_staged`: an open
    checks their sizes and ends only), and compare each CRC32 with the manifest's, after the
    build's records in the bucket (:func:`lading.disk.verify_bookkeeping`, as in a folder);
    the problems found (empty: intact). The index objects are read from the bucket too: a copy
    staged before one was damaged there is intact here, where a node staging afresh refuses
    the store.

    Raises:
        RemoteChangedError: the snapshot ``meta`` describes was replaced and removed since
            (past its grace): there is nothing of it left to check, which is no damage.
    """
    _refuse_if_removed(fetcher, url, meta)
    problems = verify_staged(url, meta)
    problems += verify_bookkeeping(BucketRecords(fetcher.client, url), meta, meta["format"])
    for name in sorted(meta["files"]):
        info = meta["files"][name]
        try:
            crc = _crc(fetcher, name, int(info["size"]), None, etags.get(name))
        except RemoteChangedError:  # as a local file gone: the store is damaged
            problems.append(
                f"{describe(url, name)} is missing or was replaced since its meta.json was "
                "written: the store is damaged; rebuild it"
            )
            continue
        if "crc32" in info and crc != int(info["crc32"]):
            problems.append(
                f"{describe(url, name)}: CRC32 {crc:#010x} read, {int(info['crc32']):#010x} "
                "in its meta.json: the object is damaged or was replaced; rebuild the store"
            )
    return problems


def _refuse_if_removed(fetcher: Fetcher, url: str, meta: dict[str, Any]) -> None:
    """Raise where snapshot ``meta`` is neither the current one nor kept in the bucket (its
    ``snap-<id>/manifest.json`` gone: replaced and removed past its grace)."""
    snap = str(meta.get("snapshot", ""))
    if not snap.startswith(SNAP_PREFIX) or fetcher.client.head(f"{snap}/{MANIFEST}") is not None:
        return
    with contextlib.suppress(Exception):  # (an unreadable current manifest: checked below)
        if json.loads(fetcher.get_object(META_FILE)).get("snapshot") == snap:
            return
    raise RemoteChangedError(
        f"{url}: snapshot {snap}, the one this store read, was replaced and removed since "
        "(past its grace): nothing of it is left to verify; open the store again to verify "
        "its current snapshot"
    )


class BucketRecords:
    """A build's records (:mod:`lading.disk.bookkeeping`) as objects below ``url``: a build in
    shards straight into a bucket keeps there what a local one keeps in its folder."""

    def __init__(self, client: ObjectClient, url: str) -> None:
        self.client, self.url = client, url

    def at(self, name: str) -> str:
        return describe(self.url, name)

    def read(self, name: str) -> bytes:
        return self.client.get(name)  # none: RemoteNotFoundError, a FileNotFoundError

    def size(self, folder: str, name: str, where: str) -> int:
        checked = check_name(name, "a name in files", where)
        info = self.client.head(f"{folder}/{checked}" if folder else checked)
        if info is None:
            raise FileNotFoundError(self.at(f"{folder}/{checked}"))
        return info.size

    def staged(self) -> bool:
        return False  # (a bucket is written by builds, never by `lading stage`)

    def copy_command(self, source: str, dest: str) -> str:
        tools = {"s3": "aws s3 cp", "gs": "gcloud storage cp"}
        tool = tools.get(self.url.split("://", 1)[0])
        if tool is None:
            return f"your object store's copy of {self.at(source)} to {self.at(dest)}"
        return f"`{tool} {self.at(source)} {self.at(dest)}`"


def _crc(fetcher: Fetcher, name: str, size: int, out: Any, etag: str | None = None) -> int:
    """CRC32 of object ``name`` read by 8 MiB GETs (at most 16 in flight), each block
    written to ``out`` if given."""
    crc = 0
    for at in range(0, size, 16 * CHUNK):
        starts = range(at, min(size, at + 16 * CHUNK), CHUNK)
        for future in [fetcher.submit(name, a, min(a + CHUNK, size), etag) for a in starts]:
            block = future.result()
            crc = zlib.crc32(block, crc)
            if out is not None:
                out.write(block)
    return crc


def _copy(fetcher: Fetcher, url: str, name: str, info: dict[str, Any], out: Path) -> None:
    size = int(info["size"])  # checked against the listing (_listing)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        crc = _crc(fetcher, name, size, f)
    expected = info.get("crc32")
    if expected is not None and crc != int(expected):
        raise StoreFormatError(
            f"{describe(url, name)}: CRC32 {crc:#010x} read, {int(expected):#010x} in its "
            "meta.json: the object is damaged or was replaced without a new manifest; "
            "nothing was staged"
        )
