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
"""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path
from typing import Any

from lading.disk import STAGE_MARK, build_lock, publish, remove_dead_temps, scratch
from lading.disk.meta import META_FILE
from lading.errors import StoreFormatError
from lading.remote.fetch import Fetcher
from lading.remote.objects import ObjectInfo, describe

CHUNK = 8 << 20  # one GET of a staged file: 8 MiB at ~100 MB/s is ~80 ms, as long as its wait
SPOT = 4096  # bytes at each end of a file whose CRC32 meta.json keeps (lading.disk.meta)


def stage_dir(cache: Path, url: str, snapshot: str) -> Path:
    """Where a snapshot of the store at ``url`` is staged in cache directory ``cache``."""
    return cache / "stores" / hashlib.sha256(url.encode()).hexdigest()[:16] / snapshot


def stage_index(
    fetcher: Fetcher,
    url: str,
    raw_meta: bytes,
    meta: dict[str, Any],
    cache: Path,
    names: list[str],
    pinned: list[str],
) -> Path:
    """The node's copy of the files ``names`` of ``meta``'s snapshot (made if absent); its
    path. ``pinned``: the files read by ranged GETs instead, each pinned to its ETag (kept
    in the copy's mark) after a check of its first and last bytes.

    Raises:
        StoreFormatError: a file's bytes do not match the manifest's size or CRC32.
        RemoteReadError: a GET failed for good.
    """
    dest = stage_dir(cache, url, meta["snapshot"])
    if _is_staged(dest, url, meta):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
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
            publish(tmp, dest)
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
                "incomplete or was rebuilt meanwhile; open it again"
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
    try:
        mark = json.loads((dest / STAGE_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if mark.get("source") != url or mark.get("snapshot") != meta["snapshot"]:
        return False
    for name in mark.get("files", []):
        path = dest / name
        if not path.is_file() or path.stat().st_size != int(meta["files"][name]["size"]):
            return False
    return True


def verify_remote(
    fetcher: Fetcher, url: str, meta: dict[str, Any], etags: dict[str, str | None]
) -> list[str]:
    """Read every payload file of ``meta`` (ranged GETs of 8 MiB, pinned to ``etags``) and
    compare its CRC32 with the manifest's; the problems found (empty: intact). The staged
    files were checked when they were staged."""
    problems = []
    for name in sorted(etags):
        info = meta["files"][name]
        crc = _crc(fetcher, name, int(info["size"]), None, etags[name])
        if "crc32" in info and crc != int(info["crc32"]):
            problems.append(
                f"{describe(url, name)}: CRC32 {crc:#010x} read, {int(info['crc32']):#010x} "
                "in its meta.json: the object is damaged or was replaced; rebuild the store"
            )
    return problems


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
