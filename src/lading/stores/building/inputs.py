"""What a build reads: one source or several files, and the part of them that shard ``i`` of ``n``
reads.

A source is a file, a BEIR folder, ``irds:<id>``, a reader made elsewhere, or several files: a list
of paths, a folder of them (not a BEIR folder), or a glob pattern (``corpus/*.jsonl.gz``; a name
that exists is that file or folder, ``[`` in it or not), read in the order given (a folder and a
glob: sorted by path). Shards split the files' bytes into ``n`` equal runs, in order: an
uncompressed TSV or JSONL file is cut inside at line boundaries (:mod:`lading.sources.span`), any
other file goes whole to the shard its first byte falls in. Shards in order therefore read the
records in the one-process order, so a store built in any number of shards has the same ``ids()``
order, texts, fields and tokens.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lading.sources import (
    ParseOptions,
    SourceReader,
    beir_corpus_file,
    detect_format,
    is_compressed,
)
from lading.sources.folders import data_files
from lading.sources.tsv_blocks import TsvBlock

SPLITTABLE = ("tsv", "jsonl")  # uncompressed, cut at line starts


def refuse_dest_in_source(source: Any, dest: Any, every_file: bool = False) -> None:
    """Refuse a local ``dest`` that is a folder ``source`` or lies below it where the source
    is read as a folder of files, recursively: the build would read its own output (its
    lock, its shards, a snapshot) as input on the next run, or on another worker's. A store
    build reads a BEIR folder's corpus file only (a store inside it is no input); a token
    corpus reads every file of a folder (``every_file``). A lading store as the source is
    read as a store, and URLs are no folders: neither is refused.

    Raises:
        ValueError: naming both folders and the fix.
    """
    from lading.disk.meta import META_FILE
    from lading.remote.objects import is_remote

    if not isinstance(source, (str, os.PathLike)) or is_remote(dest) or is_remote(source):
        return
    folder = Path(source)
    if not folder.is_dir() or (folder / META_FILE).is_file():
        return
    if not every_file and _kind(os.fspath(source)) != "folder":
        return  # (a BEIR folder: its corpus file is read, nothing below it)
    inside, within = Path(dest).resolve(), folder.resolve()
    if inside == within or inside.is_relative_to(within):
        raise ValueError(
            f"{os.fspath(dest)} is inside the source folder {os.fspath(source)}: a folder "
            "source is read with everything below it, so the build would read its own output "
            "as input; build into a folder outside it"
        )


def glob_matches(source: Any) -> list[Path] | None:
    """The files a glob pattern ``source`` (``"corpus/*.jsonl.gz"``) matches, sorted by path;
    None where ``source`` is no pattern (a file, folder or ``[v1]`` name that exists, a list,
    a reader).

    Raises:
        FileNotFoundError: a pattern that matches no file, naming it.
    """
    if not isinstance(source, (str, os.PathLike)) or _kind(os.fspath(source)) != "glob":
        return None
    files = spec_files({"glob": os.fspath(source)})  # the name as given: paths as written
    if not files:
        raise FileNotFoundError(f"no file matches {os.fspath(source)!r}")
    return files


def input_files(source: Any) -> list[Path] | None:
    """The files of a several-file source in reading order; None for a single source (a file,
    a BEIR folder, ``irds:``, a reader).

    Raises:
        FileNotFoundError: a glob that matches nothing, a listed file that is missing.
        ValueError: a folder without files, an empty list.
    """
    if isinstance(source, (list, tuple)):
        files = listed_files(source)
    elif isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        kind = _kind(name)
        if kind is None:
            return None
        files = glob_matches(name) or spec_files({kind: name})  # paths as the user wrote them
        if not files:
            raise ValueError(f"{name} holds no files to build from")
    else:
        return None
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"source {path} does not exist")
    return files


def input_spec(source: Any) -> dict[str, str] | None:
    """What a folder or glob ``source`` names, made absolute: ``{"folder": path}`` (not a
    BEIR folder) or ``{"glob": pattern}``; None for any other source (a file, a list of files,
    ``irds:``, a reader). A build records it in its manifest (``source.input``), so an open
    lists it again by :func:`spec_files` and sees a file added or removed as the next build
    would."""
    if not isinstance(source, (str, os.PathLike)):
        return None
    name = os.fspath(source)
    kind = _kind(name)
    if kind == "glob":
        return {"glob": os.path.abspath(name)}
    if kind == "folder":
        return {"folder": str(Path(name).resolve())}
    return None


def _kind(name: str) -> str | None:
    """``"glob"``, ``"folder"`` (not a BEIR folder) or None (a file, ``irds:``...)."""
    if name.startswith("irds:"):
        return None
    if any(ch in name for ch in "*?[") and not os.path.exists(name):  # a name that is
        # there is that file or folder (``data [v1].jsonl``), never a pattern of others
        return "glob"
    if os.path.isdir(name) and beir_corpus_file(name) is None:
        return "folder"
    return None


def spec_files(spec: dict[str, str]) -> list[Path]:
    """The files a folder or glob (an :func:`input_spec`) holds now, in reading order: a
    glob's matches that are files; a folder's files at any depth except hidden and ``_``
    ones and those in such folders (``.DS_Store``, ``_SUCCESS``, ``.git/``, ``_temporary/``:
    :func:`~lading.sources.folders.data_files`); both sorted by path. Empty where there are none."""
    return sorted(spec_paths(spec))


def spec_paths(spec: dict[str, str]) -> Iterator[Path]:
    """:func:`spec_files` one at a time, unsorted, as the listing finds them: a caller that
    stops at the first file it did not expect lists no further (an open's staleness check)."""
    if "glob" in spec:
        for found in glob.iglob(spec["glob"], recursive=True):
            if os.path.isfile(found):
                yield Path(found)
        return
    yield from data_files(Path(spec["folder"]), (".", "_"))


def listed_files(source: list[Any] | tuple[Any, ...], globs: bool = True) -> list[Path]:
    """The paths of a list (or tuple) of source files, as given.

    Raises:
        ValueError: an empty list: nothing to build from (a glob expanded by the caller,
            ``glob.glob(...)``, that matched nothing), where it was the first reader of none
            (a store) or a shard of no documents (a token corpus). ``globs``: the builder
            also takes a glob pattern as a string, and the message says so.
    """
    if not source:
        also = (
            ", or the glob pattern itself as a string ('corpus/*.jsonl.gz'), refused naming "
            "itself when it matches nothing"
            if globs
            else ""
        )
        raise ValueError(
            "an empty list of source files: nothing to build from (a pattern expanded before "
            f"the call that matched nothing?); pass at least one file{also}"
        )
    return [Path(p) for p in source]


@dataclass(frozen=True)
class Piece:
    """A whole file, or the lines starting in ``[start, end)`` of it."""

    path: Path
    start: int | None = None
    end: int | None = None

    @property
    def span(self) -> tuple[int, int] | None:
        """The byte range, or None for the whole file."""
        return None if self.start is None or self.end is None else (self.start, self.end)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": str(self.path.resolve())}
        if self.start is not None:
            out.update(start=self.start, end=self.end)
        return out


Cut = Callable[[Path], bool]  # whether a file may be cut at line starts (default: TSV, JSONL)


def _splittable(path: Path, size: int, format: str | None, cut: Cut | None = None) -> bool:
    if cut is not None:
        return size > 0 and not is_compressed(path) and cut(path)
    return (format or detect_format(path)) in SPLITTABLE and not is_compressed(path) and size > 0


def _shard_of(byte: int, total: int, n: int) -> int:
    """The shard whose run holds ``byte``: the largest ``k < n`` with ``total * k // n <= byte``
    (``total * k // n <= b`` holds exactly when ``k < (b + 1) * n / total``)."""
    return min(n - 1, -(-(byte + 1) * n // total) - 1) if total else 0


def check_shard_count(
    files: Sequence[Path],
    n: int,
    format: str | None,
    cut: Cut | None = None,
    cut_formats: str = "TSV/JSONL",
) -> None:
    """Refuse ``n`` shards where one would read nothing, in time linear in the files (not in
    ``n``: ``--shard 0/100000000000`` is answered at once, not after planning every shard).

    A shard's run of the input's bytes must hold a line start of a splittable file or the
    first byte of another file: at most one shard per byte of input, and each file that
    cannot be split (compressed, not of ``cut_formats``: what ``cut`` cuts) goes whole to one
    shard.

    Raises:
        ValueError: naming the first shard that would read nothing, the most shards below
            ``n`` the input allows (:func:`most_shards`: a count that is accepted), and the fix.
    """
    sizes = [p.stat().st_size for p in files]
    total = sum(sizes)
    if not total and n > 1:  # (no count of shards reads anything: not a count's advice)
        shown = ", ".join(str(p) for p in files[:3]) + (" ..." if len(files) > 3 else "")
        raise ValueError(
            f"{n:,} shards but the {len(files)} input file(s) hold no bytes ({shown}): there is "
            "nothing to build; check the input path"
        )
    splittable = [_splittable(p, size, format, cut) for p, size in zip(files, sizes)]
    if n > max(total, 1):
        raise ValueError(
            f"{n:,} shards but the {len(files)} input file(s) hold {total:,} bytes: each shard "
            f"needs at least one byte to read. {_advice(sizes, splittable, n)} (--shard I/N "
            "with a smaller N; under shard='auto', as many ranks at most), or give more input"
        )
    first_empty = _first_empty(sizes, splittable, n)
    if first_empty is None:
        return
    raise ValueError(
        f"{n} shards but {len(files)} input file(s) that cannot all be split at lines "
        f"(compressed, or not {cut_formats}): shard {first_empty} would read nothing. "
        f"{_advice(sizes, splittable, n)} (under shard='auto', as many ranks at most), or "
        "give more (or uncompressed) files"
    )


def _advice(sizes: Sequence[int], splittable: Sequence[bool], n: int) -> str:
    most, sure = most_shards(sizes, splittable, n)
    also = f" (any count up to {sure:,} works)" if sure < most else ""
    return f"Use at most {most:,} shards{also}"


_SEARCH_WORK = 100_000  # files looked at while searching for the most shards a refusal names


def most_shards(sizes: Sequence[int], splittable: Sequence[bool], n: int) -> tuple[int, int]:
    """(the most shards below ``n`` of which none would read nothing: a count
    :func:`check_shard_count` accepts; the count up to which every count is accepted), for
    files of ``sizes`` laid end to end, ``splittable`` those cut at lines.

    The counts accepted are not a run from 1 (each count moves the runs' bounds): with
    ``longest`` the bytes of the largest file that goes whole, after its first byte, every
    count up to ``total // (longest + 1)`` is accepted (each run is longer than that file),
    none above ``ceil(total / half) - 1`` (``half = (longest + 1) // 2``: a run of at most
    ``half`` bytes falls inside it); the counts between are tried from the top, then the
    first from the bottom. Where more than a bounded number of them would be tried (many
    files, a wide band), the counts are the surest ones: accepted, if not the most.
    """
    total = sum(sizes)
    top = min(n - 1, total)
    longest = max((size - 1 for size, split in zip(sizes, splittable) if not split), default=0)
    if top <= 1 or longest < 1:  # every byte is read: any count up to the bytes
        return max(top, 1), max(top, 1)
    sure = total // (longest + 1)
    top = min(top, -(-total // ((longest + 1) // 2)) - 1)
    tries = max(4, _SEARCH_WORK // len(sizes))
    most = min(top, sure)
    for m in range(top, max(sure, top - tries), -1):
        if _first_empty(sizes, splittable, m) is None:
            most = m
            break
    tries -= top - most
    while sure < most and tries > 0 and _first_empty(sizes, splittable, sure + 1) is None:
        sure, tries = sure + 1, tries - 1
    return most, min(most, sure)


def _first_empty(sizes: Sequence[int], splittable: Sequence[bool], n: int) -> int | None:
    """The first of ``n`` shards that would read nothing, or None: each file's bytes are a run
    of shards where it may be cut at lines, else its first byte's shard; an empty file is
    read by none (a last shard given only empty files reads nothing)."""
    total = sum(sizes)
    if total == 0:
        return None  # empty files only: one shard (n <= 1, checked before) reads them all
    upto, offset = -1, 0  # the last shard that reads something: files are in byte order
    for size, split in zip(sizes, splittable):
        if size == 0:
            continue
        a = _shard_of(offset, total, n)
        if a > upto + 1:
            return upto + 1
        upto = max(upto, _shard_of(offset + size - 1, total, n) if split else a)
        offset += size
    return upto + 1 if upto < n - 1 else None


def plan_shard(
    files: Sequence[Path], n: int, format: str | None, i: int, cut: Cut | None = None
) -> list[Piece]:
    """The pieces shard ``i`` of ``n`` reads, in order: the bytes ``[total * i // n,
    total * (i + 1) // n)`` of the files laid end to end, cut at line starts where the file
    allows, else whole files whose first byte falls there. Linear in the files, not in ``n``.
    ``cut``: which files may be cut (default: uncompressed TSV and JSONL)."""
    sizes = [p.stat().st_size for p in files]
    total = sum(sizes)
    lo_i, hi_i = total * i // n, total * (i + 1) // n
    pieces: list[Piece] = []
    offset = 0
    for path, size in zip(files, sizes):
        if _splittable(path, size, format, cut):
            lo, hi = max(lo_i, offset), min(hi_i, offset + size)
            if lo < hi:
                pieces.append(Piece(path, lo - offset, hi - offset))
        elif _shard_of(offset, total, n) == i:
            pieces.append(Piece(path))
        offset += size
    return pieces


def refuse_mixed_formats(formats: Iterable[tuple[Path, str]]) -> None:
    """Refuse input files ``(path, format)`` of more than one format, naming the first file
    of each (a build reads one format; a sharded one refuses in every shard, as this).

    Raises:
        ValueError: the files are of several formats.
    """
    first: dict[str, Path] = {}
    for path, fmt in formats:
        first.setdefault(fmt, path)
    if len(first) > 1:
        named = ", ".join(f"{path} is {fmt}" for fmt, path in first.items())
        raise ValueError(
            f"the input files have different formats ({named}); build from files of one "
            "format, or pass format="
        )


@dataclass
class PiecesReader:
    """The records of several pieces, in order, read the way one :class:`SourceReader` reads
    one file (the build sees one reader): blocks from every piece, skip counts added up."""

    pieces: list[Piece]
    format: str | None
    on_error: Any
    options: ParseOptions
    readers: list[SourceReader] = field(init=False)
    _rows: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.readers = [
            SourceReader(p.path, self.format, self.on_error, self.options, span=p.span)
            for p in self.pieces
        ]
        refuse_mixed_formats(
            (piece.path, str(reader.format)) for piece, reader in zip(self.pieces, self.readers)
        )
        self.format = self.readers[0].format

    @property
    def source(self) -> str:
        first = str(self.pieces[0].path)
        return first if len(self.pieces) == 1 else f"{first} (+{len(self.pieces) - 1} more)"

    @property
    def path(self) -> Path | None:
        return None

    @property
    def total_bytes(self) -> int:
        return sum(
            (p.end - p.start)
            if p.start is not None and p.end is not None
            else p.path.stat().st_size
            for p in self.pieces
        )

    @property
    def skipped(self) -> int:
        return sum(r.skipped for r in self.readers)

    @property
    def skip_reasons(self) -> list[str]:
        return [reason for r in self.readers for reason in r.skip_reasons][:10]

    def fingerprints(self) -> list[dict[str, Any]]:
        """Each file's identity, once per file (taken before reading)."""
        seen: dict[Path, dict[str, Any]] = {}
        for piece, reader in zip(self.pieces, self.readers):
            if piece.path not in seen:
                seen[piece.path] = reader.fingerprint()
        return list(seen.values())

    def iter_bulk(self) -> Iterator[TsvBlock]:
        """Every block of every piece; ``end`` counts bytes over the pieces."""
        base = 0
        for piece, reader in zip(self.pieces, self.readers):
            rows = 0
            last = 0
            for block in reader.iter_bulk():
                rows += len(block.lines)
                last = block.end
                yield block._replace(end=base + block.end)
            self._rows.append(rows)
            size = piece.path.stat().st_size if piece.start is None else 0
            base += max(last, size)

    def locate(self, row: int, line: int) -> tuple[str, int]:
        """(file, line) of the record read as ``row`` (counted over all pieces)."""
        for reader, rows in zip(self.readers, self._rows):
            if row < rows:
                return str(reader.path), reader.absolute_line(line)
            row -= rows
        return self.source, line
