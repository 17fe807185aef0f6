"""Every on-disk format lading writes, each with its own version.

A format's ``version`` is what this lading writes; ``readable`` is every version it still reads.
Raising one format's version (a new packed store layout, say) therefore leaves every other
format readable: a token corpus is checked against the token corpus's versions only. Writers
look their version up when they write (:func:`current_version`), readers check what they find
with :func:`check_version`, so the table below is the one place a version changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from lading.errors import StoreFormatError


class UnsupportedVersionError(StoreFormatError, ValueError):
    """A file declares a version of its format that this lading cannot read (too new, or gone).

    Also a ``ValueError``, as the checkpoint loader raised before formats had versions of their own.
    """


@dataclass(frozen=True)
class DiskFormat:
    """One on-disk format: its name in ``meta.json``, the version written and those still read.

    Attributes:
        name: the ``"format"`` value written into the format's metadata file.
        version: the version this lading writes.
        readable: every version this lading reads (``version`` among them).
        what: what the user calls it, for messages ("store", "token corpus").
        rebuild: how to make a current one, for messages.
        made_by: the command that makes one from a source file (``{source}`` in it), for the
            message of a file given where one is read; empty where none does.
    """

    name: str
    version: int
    readable: frozenset[int]
    what: str
    rebuild: str
    made_by: str = ""

    def __post_init__(self) -> None:
        if self.version not in self.readable:
            raise ValueError(f"{self.name}: version {self.version} must be among the readable ones")


def _format(
    name: str, version: int, what: str, rebuild: str, *older: int, made_by: str = ""
) -> DiskFormat:
    return DiskFormat(name, version, frozenset({version, *older}), what, rebuild, made_by)


FORMATS: dict[str, DiskFormat] = {
    f.name: f
    for f in (
        # version 2: immutable files under snap-<id>/ and build-<id>/, a manifest committed
        # last (lading.disk.snapshot); version 1 (a flat folder) is read as one snapshot
        # version 3 of both: an id index of a kind version 2 did not have (``hash-ids``, read
        # against the ids column, written by merges of string ids; ``runs``, integer ids in
        # runs of consecutive values: lading.stores.index.VERSION_3_KINDS)
        _format(
            "lading.packed",
            2,
            "store",
            "rebuild the store with `lading build --overwrite`",
            1,
            3,
            made_by="lading build {source} DEST",
        ),
        _format("lading.offsets", 2, "offsets index", "rebuild it with OffsetStore.build", 1, 3),
        # lading.tokens version 3: a corpus built in shards, its parts read in place (written
        # by `lading lm merge` only; a one-process build keeps writing version 2)
        _format(
            "lading.tokens",
            2,
            "token corpus",
            "rebuild it with `lading lm build --overwrite`",
            1,
            3,
            made_by="lading lm build {source} DEST --tokenizer TOKENIZER",
        ),
        _format("lading.train.checkpoint", 1, "checkpoint", "train again from the start"),
        _format(
            "lading.repartition",
            1,
            "repartition",
            "run `lading repartition` again",
            made_by="lading repartition {source} DEST",
        ),
    )
}


def disk_format(name: str) -> DiskFormat:
    """The registered format called ``name``.

    Raises:
        KeyError: naming the formats that exist.
    """
    try:
        return FORMATS[name]
    except KeyError:
        raise KeyError(f"no on-disk format {name!r}; lading has {sorted(FORMATS)}") from None


def current_version(name: str) -> int:
    """The version of format ``name`` that this lading writes."""
    return disk_format(name).version


def check_version(name: str, found: object, path: str | os.PathLike[str]) -> int:
    """Return ``found`` if this lading reads that version of format ``name``.

    Raises:
        UnsupportedVersionError: naming ``path``, the version found and those expected.
    """
    fmt = disk_format(name)
    if isinstance(found, int) and not isinstance(found, bool) and found in fmt.readable:
        return found
    readable = ", ".join(str(v) for v in sorted(fmt.readable))
    newer = isinstance(found, int) and found > fmt.version
    raise UnsupportedVersionError(
        f"{os.fspath(path)}: Unsupported {fmt.what} version: {found!r}. Expected {fmt.version} "
        f"(this lading reads {fmt.name} version {readable}). "
        + (
            f"It was written by a newer lading: upgrade lading, or {fmt.rebuild}."
            if newer
            else f"{fmt.rebuild[:1].upper()}{fmt.rebuild[1:]}, or install the lading that wrote it."
        )
    )
