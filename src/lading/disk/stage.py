"""Copy a built directory to node-local storage once per node, checked, atomic, reused next run.

A store on NFS or Lustre answers random reads slowly (HF datasets #2252: a cold load took 1,865 s
on Lustre and 42.8 s after preloading), and a bucket cannot be memory-mapped at all. ``stage``
copies a packed store, a token corpus or a parquet folder -- from a path or any fsspec URL
(``s3://``, ``gs://``, ...) -- to a local directory (NVMe, ``/dev/shm``):

- One local rank of each node copies, under the build lock of ``dest``: every rank takes it
  (a file lock: no process group needed, so it also works before ``init_process_group``), and
  the first copies while the others wait, then reuse its copy. A rank that finds the copy
  published takes no lock; one that finds the holder dead (SIGKILL, out of memory) takes the
  lock over and copies; one whose lock cannot be made (a read-only or full disk) fails as the
  first did; one that finds a failure another rank of this launch recorded raises it. (Before,
  ranks other than 0 polled for the copy only: they waited the whole timeout, an hour, for a
  rank 0 killed mid-copy, for one that could not write its failure beside ``dest``, and for a
  copy of a snapshot rank 0 had not read, a rebuild landing between their starts.)
- Every byte read is CRC32-checked against the source's ``meta.json`` (lading formats) and every
  written file is read back and compared, so neither a damaged source nor a bad local write
  goes unnoticed. The copy goes to a temporary directory, published by an atomic rename under
  the build lock (:mod:`lading.disk.atomic`).
- ``_lading_stage.json`` in the copy records the source and its fingerprint (the SHA-256 of its
  ``meta.json``, or of its file listing for a plain folder); a later run whose source has the
  same fingerprint reuses the copy after checking sizes and spot checksums.
- A restage keeps the snapshot it replaces readable for the grace
  (:func:`~lading.disk.snapshot.grace_seconds`), as a rebuild does on the store itself: a job
  still reading the copy hands its workers a store pinned to that snapshot. The new copy
  carries the old snapshot's files (hard links, else copies) and its ``snap-<id>/manifest.json``
  (what a pinned reader reopens), and its mark lists it under ``kept`` with the time it was
  replaced. The first stage of the copy after the grace removes it: a restage carries only
  the kept snapshots still within it, a reuse deletes the others in place (manifest first).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import time
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from stat import S_ISREG
from typing import Any, NamedTuple

from lading.disk import (
    STAGE_MARK,
    build_lock,
    byte_bar,
    fsync_dir,
    publish,
    read_meta,
    remove_dead_temps,
    scratch,
)
from lading.disk.atomic import refuse_to_replace
from lading.disk.commit import units
from lading.disk.files import write_file
from lading.disk.meta import LISTED_FORMATS, META_FILE
from lading.disk.names import check_layout, check_name, inside, safe_snapshot_id
from lading.disk.remote import RemoteDir, meant_url
from lading.disk.snapshot import (
    MANIFEST,
    SNAP_PREFIX,
    TMP_PREFIX,
    check_files,
    decode_manifest,
    file_crc32,
    grace_seconds,
)
from lading.errors import StoreFormatError
from lading.world import World, from_environment

CHUNK = 1 << 22  # 4 MiB per read: large enough for object stores, small for the progress bar
_ERROR_SUFFIX = ".stage-error"
_STARTED = time.time()  # (about) when this process started: lading was imported after it


class _Source:
    """A directory to copy from: a local path, or a prefix behind an fsspec URL (every call
    of which is under the remote deadline: :class:`~lading.disk.remote.RemoteDir`)."""

    def __init__(
        self,
        src: str | os.PathLike[str],
        storage_options: Mapping[str, Any],
        remote_timeout: float | None = None,
    ) -> None:
        self.url = os.fspath(src)
        self.remote = "://" in self.url and not self.url.startswith("file://")
        if self.remote:
            self.objects = RemoteDir(self.url, storage_options, remote_timeout)
        else:
            self.local = Path(self.url.removeprefix("file://"))
            if not self.local.is_dir():
                raise FileNotFoundError(
                    f"{self.local} is not a directory to stage{meant_url(self.url)}"
                )

    @property
    def name(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    def files(self) -> dict[str, dict[str, Any]]:
        """Every file under the source: relative path -> {size, version (mtime or ETag)}. A
        local folder is walked, and what vanishes while it is walked is left out (a builder
        renaming its temporary folder into place meanwhile is no error); in a lading folder
        (one with a ``meta.json``) so is what a writer there has not finished (``.tmp-*``
        entries, lock files: :func:`_unfinished`). A plain folder's files are every one of
        them: a user's ``poetry.lock`` or ``.tmp-notes`` is theirs to copy."""
        if self.remote:
            return self.objects.files()
        ours = (self.local / META_FILE).is_file()
        skip = _unfinished if ours else (lambda name: False)
        out: dict[str, dict[str, Any]] = {}
        for top, folders, names in os.walk(self.local):  # a folder gone meanwhile: skipped
            folders[:] = [name for name in folders if not skip(name)]
            for name in names:
                info = None if skip(name) else _file_info(Path(top, name))
                if info is not None:
                    out[Path(top, name).relative_to(self.local).as_posix()] = info
        return dict(sorted(out.items()))

    def named(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """The files of ``names`` (relative paths, checked to stay inside) that are there, as
        :meth:`files` gives them: a local source's each looked at, nothing else walked."""
        if self.remote:
            every = self.objects.files()
            return {name: every[name] for name in names if name in every}
        found = {name: _file_info(self.local / name) for name in names}
        return {name: info for name, info in found.items() if info is not None}

    def meta_bytes(self, listing: dict[str, dict[str, Any]] | None) -> bytes | None:
        """The source's ``meta.json`` as read now, None where it has none (a plain folder);
        ``listing``: a URL source's :meth:`files`, where the caller listed it already."""
        if self.remote:
            every = self.objects.files() if listing is None else listing
            return self.objects.read(META_FILE) if META_FILE in every else None
        try:
            return (self.local / META_FILE).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def check(self, meta: dict[str, Any]) -> None:
        """Refuse a manifest naming a file outside the source (``..``, absolute, a symlink out
        of a local source) or a layout name it does not list (:mod:`lading.disk.names`)."""
        where = f"{self.url}/{META_FILE}"
        root = None if self.remote else self.local
        for name in meta["files"]:
            if root is None:
                check_name(name, "a name in files", where)
            else:
                inside(root, name, "a name in files", where)
        check_layout(meta, meta["format"], where, root)

    def read_bytes(self, rel: str) -> bytes:
        if self.remote:
            return self.objects.read(rel)
        return (self.local / rel).read_bytes()

    def blocks(self, rel: str, size: int) -> Iterator[bytes]:
        """The bytes of file ``rel`` (``size`` of them by the listing), a block at a time."""
        if self.remote:
            yield from self.objects.blocks(rel, size)
            return
        with open(self.local / rel, "rb") as reader:
            while block := reader.read(CHUNK):
                yield block


def _unfinished(name: str) -> bool:
    """Whether a name in a source folder is a writer's, not yet (or no longer) part of it: a
    ``.tmp-*`` file or folder (a builder's scratch, renamed into place or removed once done)
    or a ``*.lock`` file (a build's or a shard's lock)."""
    return name.startswith(TMP_PREFIX) or name.endswith(".lock")


def _file_info(path: Path) -> dict[str, Any] | None:
    """A regular file's size and version (its mtime), or None where ``path`` is none (gone,
    never there, or not a regular file)."""
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return {"size": st.st_size, "version": st.st_mtime_ns} if S_ISREG(st.st_mode) else None


class Snapshot(NamedTuple):
    """What :func:`snapshot_of` found of the source: what to copy and how to check it."""

    fingerprint: str  # what the staged copy's mark records: a copy of another is replaced
    files: dict[str, dict[str, Any]]  # relative path -> {size, version}: what is copied
    crcs: dict[str, int]  # the CRC32 each file must have (a lading format's); else empty
    format: str | None  # the lading format its meta.json declares (None: a plain folder)
    raw: bytes | None = None  # a lading format's meta.json as read: the copy's, not read again


def snapshot_of(source: _Source) -> Snapshot:
    """What to copy of this version of the source (see :class:`Snapshot`).

    A lading snapshot format: its ``meta.json``, read once (a rebuild commits a new one, and
    the copy is of the snapshot read here: its files stay for the grace), and only the files
    it names (not older snapshots kept beside them, nor a rebuild's temporary folders: a
    local source is not walked, so a rebuild running meanwhile is no error), with their
    CRC32s. Else every file (:meth:`_Source.files`), fingerprinted by names, sizes and
    versions. A ``meta.json`` that is no JSON (nor JSON Lines), or names a lading format but
    is no JSON object, or declares a listed format without a well-formed file list, is
    refused: copied as a plain folder, nothing of it would be checked (another tool's, a
    JSON list or JSON Lines, is a plain file).
    """
    listing = source.files() if source.remote else None  # a bucket: one listing serves all
    raw = source.meta_bytes(listing)
    if raw is not None:
        print_ = "meta:" + hashlib.sha256(raw).hexdigest()
        meta = _meta_in(raw, source.url)
        fmt = _format_in(raw)
        if meta.get("format") in LISTED_FORMATS:
            listed = _listed_files(meta, source.url)
            source.check(meta)  # every name it uses stays inside: nothing else is copied
            names = [*listed, META_FILE]
            files = source.named(names) if listing is None else listing
            wanted = {name: files[name] for name in listed if name in files}
            missing = sorted(set(listed) - set(wanted))
            if missing:
                raise StoreFormatError(
                    f"{source.url}: {missing[0]} (named in its meta.json) is missing; "
                    "the source is incomplete, nothing was staged"
                )
            wanted[META_FILE] = {**files.get(META_FILE, {}), "size": len(raw)}
            crcs = dict(listed)
            crcs[META_FILE] = zlib.crc32(raw)
            return Snapshot(print_, wanted, crcs, fmt, raw)
        return Snapshot(print_, source.files() if listing is None else listing, {}, fmt)
    files = source.files() if listing is None else listing
    said = json.dumps(files, sort_keys=True).encode("utf-8")
    return Snapshot("listing:" + hashlib.sha256(said).hexdigest(), files, {}, None)


def _meta_in(raw: bytes, url: str) -> dict[str, Any]:
    """A source's ``meta.json`` as a JSON object; another tool's (a JSON list, JSON Lines:
    the folder is then plain files) as an empty one. Bytes that are no JSON at all are
    refused, naming the file: a lading manifest cut short (its format named past the cut)
    would be staged as plain files, nothing of it checked."""
    try:
        meta = json.loads(raw)
    except ValueError as e:
        if not _json_lines(raw):
            raise StoreFormatError(
                f"{url}/{META_FILE} is not valid JSON ({e}): a damaged store or token corpus "
                f"(`lading verify {url}` says more; rebuild it), or a file of another tool's "
                "(rename it to stage the folder as plain files); nothing was staged"
            ) from None
        return {}
    if not isinstance(meta, dict) and b'"lading.' in raw:
        raise StoreFormatError(
            f"{url}/{META_FILE} names a lading format but holds a JSON "
            f"{type(meta).__name__}, not an object: a damaged store or token corpus "
            f"(`lading verify {url}` says more; rebuild it); nothing was staged"
        )
    return meta if isinstance(meta, dict) else {}


def _json_lines(raw: bytes) -> bool:
    """Whether ``raw`` is JSON Lines: every non-empty line a JSON value (at least two)."""
    lines = [line for line in raw.splitlines() if line.strip()]
    try:
        return len(lines) > 1 and all(json.loads(line) is not None for line in lines)
    except ValueError:
        return False


def _listed_files(meta: dict[str, Any], url: str) -> dict[str, int]:
    """Name -> CRC32 of every file a listed format's manifest names, refused naming the
    manifest where its list is not well-formed."""
    listed = meta.get("files")
    with contextlib.suppress(AttributeError, KeyError, TypeError, ValueError):
        if isinstance(listed, dict):
            return {str(name): int(info["crc32"]) for name, info in listed.items()}
    raise StoreFormatError(
        f'{url}/{META_FILE} declares {meta.get("format")} but its "files" is not a list '
        "of files with their sizes and CRC32s: the manifest is damaged (`lading verify "
        f"{url}` says more; rebuild it); nothing was staged"
    )


def _format_in(raw: bytes) -> str | None:
    """The lading format a ``meta.json``'s bytes declare, read as :func:`publish` reads the
    copy's (:func:`~lading.disk.atomic.lading_format`); None where they declare none."""
    with contextlib.suppress(ValueError, AttributeError):
        found = json.loads(raw).get("format")
        return found if isinstance(found, str) and found.startswith("lading.") else None
    return None


def stage(
    src: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    world: World | None = None,
    storage_options: Mapping[str, Any] | None = None,
    verify: bool = False,
    progress: bool | None = None,
    timeout: float = 3600.0,
    remote_timeout: float | None = None,
) -> Path:
    """Copy directory ``src`` (a path or an fsspec URL) to ``dest`` once per node; return ``dest``.

    Args:
        src: a built store, token corpus or parquet folder; ``s3://bucket/prefix`` and other
            fsspec URLs read from object storage (``pip install 'lading[remote]'``).
        dest: the node-local directory to create (replaced when the source changed). What
            is there already is replaced only where it is a staged copy (it holds
            ``_lading_stage.json``) or an empty folder: a built store is never overwritten.
        world: who this process is (default: from the launcher's variables, see
            :mod:`lading.world`); a local rank other than 0 first looks for rank 0's copy.
        storage_options: passed to fsspec (e.g. ``{"endpoint_url": ...}`` for S3).
        verify: on reuse, re-read every staged byte against its checksum, not just sizes and
            the first and last 4 KiB of each file.
        progress: show a progress bar with MB/s (default: when stderr is a terminal).
        timeout: seconds a local rank other than 0 waits for the lock of the rank copying.
        remote_timeout: seconds each attempt of a call to a URL source may take (the
            listing, ``meta.json``, each 4 MiB range; 3 retries), default
            ``$LADING_REMOTE_TIMEOUT`` or 20, as for a remote store.

    Raises:
        StoreFormatError: a source file does not match its checksum, or the copy does not.
        RemoteReadError: a call to a URL source failed 4 times (one line: the object, the
            endpoint, the setting); nothing was staged.
        TimeoutError: another local rank held the lock, alive, for more than ``timeout``.
        RuntimeError: another local rank of this launch failed to stage it (its error).
        ValueError: ``dest`` is the source, inside it, or holds it (a local source).
        FileExistsError: ``dest`` holds something other than a staged copy (a built store,
            the user's files): it is left as it was.
    """
    source = _Source(src, storage_options or {}, remote_timeout)
    target = Path(dest)
    _refuse_overlap(source, target)
    snap = snapshot_of(source)
    world = world or from_environment(os.environ)  # no torch import just for the local rank
    if world.local_rank != 0 and staged_copy_is_valid(target, snap.fingerprint):
        return target  # rank 0's copy, published: no lock taken
    error_file = target.parent / f"{target.name}{_ERROR_SUFFIX}"
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(build_lock(target, timeout=timeout if world.local_rank else None))
        except TimeoutError:
            raise TimeoutError(
                f"waited {timeout:.0f}s for another local rank to stage {source.url} into "
                f"{target} (it holds {target.name}.lock and is alive: is it still copying? see "
                "its progress bar); pass a longer timeout, or stage before the launch"
            ) from None
        if world.local_world_size > 1:  # (a process alone has no rank to hear from)
            _raise_failure_of_this_launch(error_file, source.url, target)
        try:
            with contextlib.suppress(OSError):  # (one that cannot go is never read as ours)
                error_file.unlink(missing_ok=True)
            remove_dead_temps(target)
            # what the publish at the end of a copy would refuse, refused before the copy
            refuse_to_replace(target, snap.format)
            _refuse_unstaged(target, source.url)
            full = verify and world.local_rank == 0  # (one full re-read a node)
            if staged_copy_is_valid(target, snap.fingerprint, full=full):
                _collect_kept(target)
            else:
                _copy(source, snap, target, progress)
        except Exception as e:  # (an interrupt or exit is this process's, not the copy's)
            if world.local_world_size <= 1:  # no rank of this node waits to hear of it
                raise
            with contextlib.suppress(OSError):  # tell this node's ranks waiting on the lock
                failure = {
                    "time": time.time(),
                    "error": f"{type(e).__name__}: {e}",
                    "launch": _launch(),
                    "pid": os.getpid(),
                    "rank": world.local_rank,
                }
                error_file.write_text(json.dumps(failure))
            raise
    return target


def _raise_failure_of_this_launch(error_file: Path, url: str, dest: Path) -> None:
    """Raise the failure another local rank of this launch recorded while this one waited for
    the lock (each rank trying the same copy again would fail as it did, one after another).
    Never this process's own (a retry of it copies again), nor another launch's."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        failure = json.loads(error_file.read_text(encoding="utf-8"))
        if failure.get("pid") != os.getpid() and _of_this_launch(failure):
            raise RuntimeError(
                f"local rank {failure.get('rank', '?')} failed to stage {url} into {dest}: "
                f"{failure['error']}"
            )


def _refuse_overlap(source: _Source, target: Path) -> None:
    """Refuse a destination that is the local source itself, lies inside it or holds it: a
    copy published there would replace the source (or a folder holding it) with a copy of its
    current snapshot, deleting older snapshots that pinned readers still use."""
    if source.remote:
        return
    src, dest = source.local.resolve(), target.resolve()
    fix = (
        "Stage to a folder outside the source (open_store(stage_to=FOLDER) copies to "
        "FOLDER/<store name>); the source was left as it was"
    )
    if dest == src:
        problem = f"{target} is the source itself ({source.url}); refusing to stage it onto itself"
    elif src in dest.parents:
        problem = f"{target} is inside the source {source.url}; refusing to stage a copy into it"
    elif dest in src.parents:
        problem = (
            f"the source {source.url} is inside the destination {target}; refusing to replace "
            "a folder that holds the source"
        )
    else:
        return
    raise ValueError(f"{problem}. {fix}.")


def _refuse_unstaged(target: Path, url: str) -> None:
    """Refuse to replace a non-empty directory that is not a staged copy (no ``STAGE_MARK``):
    a store someone built there (``lading stage a.store b.store``, arguments swapped) is not
    ``stage``'s to overwrite."""
    if not target.is_dir() or (target / STAGE_MARK).is_file() or not any(target.iterdir()):
        return
    raise FileExistsError(
        f"{target} is not a staged copy (no {STAGE_MARK} in it) and is not empty; refusing "
        f"to replace it with a copy of {url}. Choose another destination, or remove {target} "
        "yourself if it is meant to go."
    )


def staged_copy_is_valid(dest: Path, print_: str, full: bool = False) -> bool:
    """Whether ``dest`` is a complete copy of the source with fingerprint ``print_``: the mark
    matches, every file has its size, lading formats pass their open checks, and with ``full``
    every byte matches its CRC32."""
    try:
        mark = json.loads((dest / STAGE_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(mark, dict) or mark.get("fingerprint") != print_:
        return False
    for rel, info in mark.get("files", {}).items():
        path = dest / rel
        if not path.is_file() or path.stat().st_size != info["size"]:
            return False
        if full and file_crc32(path) != info["crc32"]:
            return False
    declared = mark.get("format")
    if declared in LISTED_FORMATS:
        try:
            read_meta(dest, declared)  # sizes and the spot checksums of the first/last 4 KiB
        except StoreFormatError:
            return False
    return True


def _copy(source: _Source, snap: Snapshot, dest: Path, progress: bool | None) -> None:
    """Copy the files of ``snap`` to a scratch folder, each checked, and publish it at
    ``dest``. A lading format's ``meta.json`` is the bytes :func:`snapshot_of` read: a rebuild
    committing meanwhile keeps the files of the snapshot being copied for the grace."""
    files, expected = snap.files, snap.crcs
    total = sum(int(info["size"]) for info in files.values())
    crcs: dict[str, int] = {}
    order = sorted(files, key=lambda rel: rel == META_FILE)  # the manifest last, as in a build
    with scratch(dest) as tmp, byte_bar(f"staging {source.name}", total, progress) as bar:
        for rel in order:
            out = tmp / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            size = int(files[rel]["size"])
            blocks = [snap.raw] if rel == META_FILE and snap.raw is not None else None
            crc = read = 0
            with open(out, "wb") as writer:
                for block in blocks or source.blocks(rel, size):
                    crc = zlib.crc32(block, crc)
                    read += len(block)
                    writer.write(block)
                    bar.update(len(block))
                writer.flush()
                os.fsync(writer.fileno())
            if blocks is None:
                _unchanged(source, rel, files[rel], read)
            if rel in expected and crc != expected[rel]:
                raise StoreFormatError(
                    f"{source.url}/{rel}: CRC32 {crc:#010x} read, {expected[rel]:#010x} in its "
                    f"meta.json: the source is damaged (`lading verify` on it says more); "
                    "nothing was staged"
                )
            if file_crc32(out) != crc:
                raise StoreFormatError(
                    f"{out}: the written copy differs from what was read from {source.url}/{rel}"
                    f" (a failing disk or memory?); nothing was staged to {dest}"
                )
            crcs[rel] = crc
        if source.remote and not expected:  # a bucket's plain files: versions, one listing
            _unchanged_listing(source, files)
        fmt = _declared_format(tmp)
        kept = _carry_kept(dest, tmp, fmt)
        mark = {
            "kept": kept,
            "source": source.url,
            "fingerprint": snap.fingerprint,
            "format": fmt,
            "host": socket.gethostname(),
            "pid": os.getpid(),  # (with staged_at: whether a caller's call copied, or reused)
            "staged_at": time.time(),
            "files": {rel: {"size": files[rel]["size"], "crc32": crcs[rel]} for rel in files},
        }
        (tmp / STAGE_MARK).write_text(json.dumps(mark, indent=2, sort_keys=True))
        fsync_dir(tmp)
        if fmt in LISTED_FORMATS:
            read_meta(tmp, fmt)  # the copy opens as the format it claims
        publish(tmp, dest)


def _unchanged(source: _Source, rel: str, listed: dict[str, Any], read: int) -> None:
    """Refuse a file that changed while it was copied: another size read than listed, or
    (a local file) another size or modification time now (a plain folder has no checksums
    to catch it, and its copy's mark records what was listed)."""
    now = source.named([rel]).get(rel) if not source.remote else None
    if read == int(listed["size"]) and (source.remote or now == listed):
        return
    raise StoreFormatError(
        f"{source.url}/{rel} changed while it was staged ({listed['size']} bytes listed, "
        f"{read} read): something writes the source; nothing was staged. Stage it again once "
        "it is written (a store or corpus: stage what its build committed)"
    )


def _unchanged_listing(source: _Source, files: dict[str, dict[str, Any]]) -> None:
    """Refuse a URL source's plain files whose size or version (ETag) the listing gives
    otherwise after the copy than before it: its ranged reads stop at the listed size, so an
    object rewritten meanwhile was copied cut, or mixed."""
    now = source.files()
    for rel, listed in files.items():
        if now.get(rel) != listed:
            raise StoreFormatError(
                f"{source.url}/{rel} changed while it was staged (listed as {listed}, now "
                f"{now.get(rel, 'gone')}): something writes the source; nothing was staged. "
                "Stage it again once it is written"
            )


def _carry_kept(dest: Path, tmp: Path, fmt: str | None) -> list[dict[str, Any]]:
    """Carry into the new copy ``tmp`` the snapshots of the copy ``dest`` it replaces that a
    reader may still be opening: ``dest``'s current one, and those its mark keeps that were
    replaced less than the grace ago. Each one's files are hard-linked (copied where the
    filesystem has no links) and its manifest written as ``snap-<id>/manifest.json``.

    Returns:
        The mark's ``kept`` entries (snapshot id, when it was replaced) of what was carried.
        A snapshot that cannot be carried whole (damaged, not a snapshot lading names, a
        filesystem error) is left out: a reader pinned to it is told it is gone.
    """
    if fmt not in LISTED_FORMATS or not (dest / STAGE_MARK).is_file():
        return []
    new = _manifest(tmp / META_FILE, fmt)
    if new is None:
        return []
    mark = _read_mark(dest)
    grace, now = grace_seconds(), time.time()
    wanted: list[tuple[Path, float | None]] = [(dest / META_FILE, None)]  # None: replaced now
    for entry in _kept_entries(mark):
        if now - entry["replaced_at"] < grace:
            wanted.append((dest / entry["snapshot"] / MANIFEST, entry["replaced_at"]))
    carried: list[dict[str, Any]] = []
    done = {new["snapshot"]}
    for where, replaced_at in wanted:
        manifest = _manifest(where, fmt)
        if manifest is None or manifest["snapshot"] in done:
            continue
        if _carry(dest, tmp, manifest, where.read_bytes(), fmt):
            done.add(manifest["snapshot"])
            carried.append({"snapshot": manifest["snapshot"], "replaced_at": replaced_at})
    replaced = time.time()  # the publish follows at once: the old snapshot's grace starts
    return [
        {**entry, "replaced_at": replaced if entry["replaced_at"] is None else entry["replaced_at"]}
        for entry in carried
    ]


def _carry(dest: Path, tmp: Path, manifest: dict[str, Any], raw: bytes, fmt: str) -> bool:
    """Link (else copy) every file of snapshot ``manifest`` from ``dest`` into ``tmp`` where
    ``tmp`` has no such file yet, then write its ``snap-<id>/manifest.json`` (``raw``).
    Whether it was carried whole; if not, what was added for it is removed again."""
    snap = manifest["snapshot"]
    added: list[Path] = []
    try:
        check_files(dest, manifest, fmt)  # whole as it was committed: sizes, spot checksums
        for name in manifest["files"]:
            out = tmp / name
            if out.exists():
                continue  # the new snapshot (or one carried before) has it: the same file
            out.parent.mkdir(parents=True, exist_ok=True)
            source = inside(dest, name, "a name in the files", dest / snap / MANIFEST)
            try:
                os.link(source, out)
            except OSError:
                shutil.copy2(source, out)
            added.append(out)
        (tmp / snap).mkdir(exist_ok=True)
        write_file(tmp / snap / MANIFEST, raw)
        added.append(tmp / snap / MANIFEST)
        fsync_dir(tmp / snap)
    except (OSError, StoreFormatError):
        for path in added:
            path.unlink(missing_ok=True)
        return False
    return True


def _manifest(where: Path, fmt: str) -> dict[str, Any] | None:
    """The manifest of format ``fmt`` at ``where`` (a ``meta.json`` or a kept snapshot's
    ``manifest.json``) with a snapshot id lading names (``snap-…``); None where there is none
    or it is not that (a version 1 store's files lie at the top: they cannot be kept aside)."""
    try:
        manifest = decode_manifest(where.read_bytes(), where, fmt)
        snap = safe_snapshot_id(manifest.get("snapshot"), where)
    except (OSError, StoreFormatError):
        return None
    return manifest if snap.startswith(SNAP_PREFIX) else None


def _read_mark(dest: Path) -> dict[str, Any]:
    """The staged copy's mark, or an empty one where it is missing or damaged."""
    try:
        mark = json.loads((dest / STAGE_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return mark if isinstance(mark, dict) else {}


def _kept_entries(mark: dict[str, Any]) -> list[dict[str, Any]]:
    """The well-formed entries of a mark's ``kept`` (a snapshot id lading names, a time);
    anything else in it (the mark is input too) is ignored."""
    entries = mark.get("kept")
    out = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        snap, at = entry.get("snapshot"), entry.get("replaced_at")
        try:
            ok = safe_snapshot_id(snap, STAGE_MARK).startswith(SNAP_PREFIX)
        except StoreFormatError:
            ok = False
        if ok and isinstance(at, (int, float)) and not isinstance(at, bool):
            out.append({"snapshot": snap, "replaced_at": float(at)})
    return out


def _collect_kept(dest: Path) -> list[str]:
    """Remove from the staged copy ``dest`` (reused as it is, under the lock) the kept
    snapshots replaced more than the grace ago: each one's manifest first (a reader pinned to
    it is then told it is gone), then the top-level folders it uses that neither the current
    snapshot nor a kept one still within the grace uses. Returns the names removed."""
    mark = _read_mark(dest)
    fmt = mark.get("format")
    if not isinstance(fmt, str) or fmt not in LISTED_FORMATS:
        return []
    current = _manifest(dest / META_FILE, fmt)
    if current is None:
        return []
    grace, now = grace_seconds(), time.time()
    live = units(current)
    expired = []
    for entry in _kept_entries(mark):
        manifest = _manifest(dest / entry["snapshot"] / MANIFEST, fmt)
        if manifest is None or manifest["snapshot"] != entry["snapshot"]:
            continue
        if now - entry["replaced_at"] < grace:
            live |= units(manifest)
        else:
            expired.append(manifest)
    removed = []
    for manifest in expired:
        (dest / manifest["snapshot"] / MANIFEST).unlink(missing_ok=True)
        for unit in sorted(units(manifest) - live):
            path = dest / unit
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(unit)
    if removed:
        fsync_dir(dest)
    return removed


def _declared_format(directory: Path) -> str | None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        found = json.loads((directory / META_FILE).read_text(encoding="utf-8")).get("format")
        return str(found) if found is not None else None
    return None


def _launch() -> str:
    """What the local ranks of one launch share and another launch does not: the launcher
    process (torchrun's agent, mp.spawn's parent, srun's step daemon) and torchrun's restart
    count (a restart keeps the agent)."""
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "")
    return f"{socket.gethostname()}:{os.getppid()}:{restart}"


def _of_this_launch(failure: dict[str, Any]) -> bool:
    """Whether a recorded ``failure`` is this launch's: written by the same launch (the same
    launcher process, host and restart) after the minute before this process started. An
    earlier launch's, or another command's run from the same shell a while ago, is not: a
    waiting rank raised an old error while rank 0 staged (a relaunch after a timeout), and a
    stage run again after a failure raised that failure for good."""
    return failure.get("launch") == _launch() and float(failure["time"]) >= _STARTED - 60
