"""The node cache folder's own entries: checked to be what lading makes before a process uses it.

A folder shared by a group (``chmod 2775``, as docs/remote-stores.md says) is writable by each
of its users, so any of them can put something under a name lading uses there, and a symbolic
link followed there makes lading write or delete what it points to: one planted as ``owners``
had every file of the folder it pointed at removed, each taken for a dead process's token.

So there is one rule, checked in one place: every entry lading owns in the folder (the names
it makes at the top, :data:`FILES` and :data:`FOLDERS`, and the entries of the folders it
walks) is absent or what lading makes there -- a regular file, a real folder -- never a link.
:func:`check` runs when a process opens the folder (:func:`lading.remote.cache.node.node_of`,
:meth:`lading.remote.settings.RemoteSettings.fetcher`, the first call of every remote open)
and refuses it with one error naming the entry and the fix. Where lading creates or deletes
in the folder it never follows a link even so (:func:`open_new`, :func:`real_entries`): a
link planted after the check is refused or passed over, not followed. The cache folder itself
may be a link: the user chose it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from lading.errors import LadingError

LEDGER_FILE = "ledger.sqlite"  # the rows of what is where (:mod:`.ledger`)
DATA_FILE = "blocks.data"  # the payload, exactly the cap (:mod:`.regions`)
OWNERS = "owners"  # a token file a live process (:mod:`.owners`)
INFLIGHT = "inflight"  # the node's slots for GETs in flight (:mod:`lading.remote.slots`)
STORES = "stores"  # staged indexes, <URL's hash>/<snapshot> (:mod:`lading.remote.stage`)
PARQUET = "parquet"  # staged parquet footers (:mod:`lading.tabular.remote_files`)
# made by lading at the folder's top (SQLite opens the ledger and its WAL files through a
# link: it has no O_NOFOLLOW a caller can ask for, so this check is the ledger's only guard)
FILES = (LEDGER_FILE, f"{LEDGER_FILE}-wal", f"{LEDGER_FILE}-shm", DATA_FILE)
# made by lading at the top, and how deep each is walked (no entry down to there is a link;
# below a snapshot's folder nothing is walked: the sweep removes it whole, never following)
FOLDERS = {OWNERS: 1, INFLIGHT: 1, STORES: 2, PARQUET: 1}


class CacheFolderError(LadingError, PermissionError):
    """A cache folder this process may not use: another user's, or one holding an entry that
    is not what lading makes there (a symbolic link)."""


def check(directory: Path) -> None:
    """Raise :class:`CacheFolderError` where cache folder ``directory`` is another user's
    that this one may not write (naming the owner and the fix), or an entry lading owns in
    it is not what lading makes there (module doc); a folder not made yet holds none. A few
    ``lstat`` calls and a listing of each walked folder (no ``stat`` an entry: a listing
    tells a link). The first thing every remote open does, before anything is staged."""
    refuse_read_only(directory)
    if directory.exists() and not os.access(directory, os.W_OK | os.X_OK):
        raise not_writable(directory)
    for name in FILES:
        _entry(directory / name, stat.S_ISREG, "file")
    for name, depth in FOLDERS.items():
        if _entry(directory / name, stat.S_ISDIR, "folder"):
            _walk(directory / name, depth)


def refuse_read_only(directory: Path) -> None:
    """Raise :class:`CacheFolderError` where cache folder ``directory`` (or, not made yet, the
    folder it would be made in) is on a filesystem mounted read-only: no mode bit helps."""
    place = next(p for p in (directory, *directory.parents) if p.exists())
    if _read_only(place):
        raise CacheFolderError(
            f"{directory}: this node cache folder is on a read-only filesystem ({place}), "
            "and lading writes its cache there (its ledger, the blocks, staged indexes); "
            "give a folder on a writable disk of this node (cache=, or $LADING_CACHE)"
        )


def _read_only(path: Path) -> bool:
    """Whether ``path`` lies on a filesystem mounted read-only (where no mode bit helps)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # (no statvfs: Windows)
        return False


def not_writable(directory: Path) -> CacheFolderError:
    """The error of a cache folder this user may not write: its owner, and the fix (this
    user's own folder with its write bit off: its mode and ``chmod u+rwx``)."""
    found = directory.stat()
    uid = found.st_uid
    if uid == os.geteuid():
        return CacheFolderError(
            f"{directory}: this node cache folder is yours, but its mode "
            f"({oct(stat.S_IMODE(found.st_mode))}) does not let you write in it; make it "
            f"writable (chmod u+rwx {directory}) or give another folder (cache=, or "
            "$LADING_CACHE)"
        )
    try:
        import pwd

        owner = pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        owner = f"uid {uid}"
    return CacheFolderError(
        f"{directory}: this node cache folder belongs to {owner} and this user "
        f"(uid {os.geteuid()}) may not write it; give each user a cache folder of their "
        "own (cache=, or $LADING_CACHE), or share it within a group: chmod 2775 the "
        "folder, owned by that group"
    )


def shared(directory: Path) -> bool:
    """Whether cache folder ``directory`` is a group's (group-writable, ``chmod 2775``):
    then every folder and file lading makes in it is group-writable too, so that the
    group's other users can add to it, lock in it and evict from it."""
    try:
        return bool(os.stat(directory).st_mode & stat.S_IWGRP)
    except OSError:
        return False


def make_folders(path: Path, group: bool) -> None:
    """``path`` and its missing parents made; with ``group``, those made here set ``2775``
    whatever the umask (one another user made keeps the mode its maker gave it)."""
    missing, at = [], path
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    path.mkdir(parents=True, exist_ok=True)
    for made in missing if group else ():
        with contextlib.suppress(OSError):  # (made by another process meanwhile)
            made.chmod(0o2775)


def share_tree(path: Path, group: bool) -> None:
    """With ``group``: every folder under ``path`` (itself too) ``2775`` and every file
    ``664``, whatever the umask they were written with (a staged copy, before it is
    published: all its entries are this process's own)."""
    if not group:
        return
    for entry in [path, *path.rglob("*")]:
        if entry.is_symlink():
            continue
        with contextlib.suppress(OSError):
            entry.chmod(0o2775 if entry.is_dir() else 0o664)


def real_entries(folder: Path, refuse: bool = False) -> list[tuple[str, bool]]:
    """The entries of ``folder`` that are no links, ``(name, is a folder)``; none where
    ``folder`` is missing or is itself a link (it is opened with ``O_NOFOLLOW``: one swapped
    in after :func:`check` lists nothing). ``refuse``: a link in it raises
    :class:`CacheFolderError` instead of being passed over."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if refuse and e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(folder):
            raise linked(folder) from None
        return []
    found = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_symlink():
                    if refuse:
                        raise linked(folder / entry.name)
                    continue
                found.append((entry.name, entry.is_dir(follow_symlinks=False)))
    finally:
        os.close(fd)
    return found


def open_new(path: Path, flags: int, mode: int) -> int:
    """``os.open`` of an entry lading makes in the folder, never through a link at ``path``
    (``O_NOFOLLOW``: a link planted there is refused, naming it and the fix)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise linked(path) from None
        raise


def linked(path: Path) -> CacheFolderError:
    """The error of a link at ``path`` where lading makes an entry of its own."""
    target = "?"
    with contextlib.suppress(OSError):
        target = os.readlink(path)
    return CacheFolderError(
        f"{path} is a symbolic link (to {target}) where lading makes an entry of its own in "
        "its node cache folder; lading never writes or deletes through a link there, so the "
        f"folder is not used. Remove the link (rm {path}); a shared cache folder's entries "
        "are lading's own, never links"
    )


def _walk(folder: Path, depth: int) -> None:
    """Refuse a link among the entries of ``folder`` and of its folders ``depth`` deep."""
    for name, is_dir in real_entries(folder, refuse=True):
        if is_dir and depth > 1:
            _walk(folder / name, depth - 1)


def _entry(path: Path, kind: Callable[[int], bool], what: str) -> bool:
    """Whether ``path`` is there as lading makes it (``kind``: the ``stat.S_IS*`` of a
    ``what``); raise where it is a link or another kind of entry."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(info.st_mode):
        raise linked(path)
    if not kind(info.st_mode):
        found = "a folder" if stat.S_ISDIR(info.st_mode) else "a file that is no regular file"
        if stat.S_ISREG(info.st_mode):
            found = "a file"
        raise CacheFolderError(
            f"{path} is {found} where lading makes a {what} of its own in its node cache "
            f"folder; remove it (a shared cache folder's entries are lading's own)"
        )
    return True
