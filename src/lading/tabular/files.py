"""Which parquet files a tabular dataset reads, and whether they agree, checked on open.

Every footer is read once (no data): its row groups become :class:`~lading.tabular.plan.Piece`
s and its schema is compared with the first file's, so a file that lacks a column or holds it
in another type is named when the dataset opens, not by a ``KeyError`` mid-epoch.

A folder (or an object-store prefix: :mod:`lading.tabular.remote_files` applies the same rule,
:func:`select_listed`) is read recursively, its files sorted by path parts (``178/`` before
``178-late/``; the order decides the batches and a state's digest), except for what lading
itself leaves in it: the temporary and old directories of an atomic build
(``DEST.tmp-<pid>-<hex>``, ``DEST.old-<pid>-<hex>``, see :func:`lading.disk.new_temp_dir`) are
skipped, and a nested ``lading repartition`` output (a folder holding ``_lading.json``) is
refused: it copies rows the folder most likely holds already, so reading both would read them
twice. For the same reason a file reached twice (a folder and a file in it, one folder given
twice or through a link) is refused, naming the file and both inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from lading.disk import DATASET_MARK
from lading.errors import NoRowsError, ParquetError, SkippedFilesWarning
from lading.remote.objects import is_remote, refuse_remote
from lading.tabular.plan import Piece

# the names lading.disk gives a build's scratch and replaced directories
_BUILD_DEBRIS = re.compile(r"\.(tmp|old)-\d+-[0-9a-f]+$")

# one path, or any iterable of them: a list, or a generator such as ``Path.glob``'s
PathsArg = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]


def path_list(paths: PathsArg) -> list[str | os.PathLike[str]]:
    """``paths`` as a list, read once: a str or path is one path; any other iterable (a
    generator such as ``Path.glob``'s, which a second pass would find empty) is listed.

    Whatever reads ``paths`` more than once lists it first (PartitionedParquet and
    repartition check the paths before they list the files).
    """
    return [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)


def parquet_files(paths: PathsArg, exclude: Iterable[Path] = ()) -> list[Path]:
    """Every ``*.parquet`` file under ``paths`` (files or folders), sorted per folder.

    Args:
        paths: parquet files and/or folders.
        exclude: folders left out of the walk (with their build debris), e.g. the output of
            the command that is listing them.

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: a folder holds no parquet file, or holds a nested repartition output.
    """
    items = path_list(paths)
    skip = {Path(p).resolve() for p in exclude}
    files: list[Path] = []
    reached: dict[Path, tuple[str, str]] = {}  # resolved path: (the file, the input reaching it)
    for item in items:
        refuse_remote(
            item,
            "lading repartition",
            "it rewrites parquet files on this node; copy the objects here first "
            "(PartitionedParquet reads URLs itself)",
        )
        path = Path(item)
        if path.is_dir():
            found = _walk(path, skip)
            if not found:
                raise ValueError(
                    f"no *.parquet files in {path} (nor in its subfolders); point at the "
                    "folder that holds the parquet files, or at the files themselves"
                )
        elif path.is_file():
            found = [path]
        else:
            raise FileNotFoundError(f"no parquet file or folder at {path}")
        for file in found:  # (one file by a symlink or a hard link: one device and inode)
            stat = file.stat()
            refuse_twice(reached, (stat.st_dev, stat.st_ino), str(file), os.fspath(item))
        files += found
    if not files:
        raise ValueError("no parquet files given: paths is empty")
    return files


def remote_urls(paths: PathsArg) -> list[str]:
    """The URLs of ``paths`` when they are object-store URLs (objects or prefixes); empty when
    they are local paths.

    Raises:
        ValueError: local paths and URLs mixed (one line naming the fix).
    """
    items = path_list(paths)
    urls = [os.fspath(p) for p in items if is_remote(p)]
    if urls and len(urls) != len(items):
        local = next(os.fspath(p) for p in items if not is_remote(p))
        raise ValueError(
            f"PartitionedParquet: paths mix URLs ({urls[0]}) and local paths ({local}); "
            "read one kind: upload the local files beside the others, or copy the objects "
            "to this node"
        )
    return urls


def refuse_twice(reached: dict[Any, tuple[str, str]], key: Any, file: str, item: str) -> None:
    """Record that input ``item`` reaches ``file`` (``key``: a local file's device and inode,
    an object's URL); raise when an earlier input, or this one by another path, reached it
    already: its rows would be read twice every epoch."""
    if key in reached:
        seen, first = reached[key]
        if first == item and seen != file:  # one input reaches one file by two paths
            raise ValueError(
                f"{seen} and {file}, both under {item!r}, are one file (a link to it, or a "
                "hard link): its rows would be read twice every epoch. Remove the link, or "
                "give the files to read as a list"
            )
        how = f"{item!r} is given twice" if first == item else f"by {first!r} and by {item!r}"
        also = "" if seen == file else f" (as {seen} before)"
        raise ValueError(
            f"{file}{also} is reached twice ({how}): its rows would be read twice every "
            "epoch. Give each folder or file once, and no file inside a folder also given"
        )
    reached[key] = (file, item)


def select_listed(top: str, names: Iterable[str]) -> list[str]:
    """The parquet files to read of a folder or prefix ``top`` holding the files ``names``
    (paths relative to ``top``, ``/``-separated), sorted by path parts: the one rule of
    local folders and object-store prefixes.

    Files inside build debris (a folder ``*.tmp-<pid>-<hex>`` or ``*.old-<pid>-<hex>``) are
    left out, and so is every file or folder whose name starts with ``_`` or ``.``, as
    pyarrow, Spark and dask leave them out (Spark's ``_temporary/`` attempts and
    ``.spark-staging-*`` copies beside its output: their rows were read again).

    Raises:
        ValueError: a folder below ``top`` holds a ``lading repartition`` output (its
            ``_lading.json``), naming it.
    """
    kept = []
    for name in names:
        parts = name.split("/")
        if any(_BUILD_DEBRIS.search(folder) for folder in parts[:-1]):
            continue
        if parts[-1] == DATASET_MARK and len(parts) > 1:
            here = f"{top.rstrip('/')}/{'/'.join(parts[:-1])}"
            raise ValueError(
                f"{here} holds the output of `lading repartition` ({DATASET_MARK}) inside "
                f"{top}: reading {top} would read its rows twice, once from the sources and "
                f"once from the copy. Read {here} alone, move it out of {top}, or pass the "
                "folders or files to read as a list"
            )
        if parts[-1].endswith(".parquet") and _data_name(parts):
            kept.append(parts)
    return ["/".join(parts) for parts in sorted(kept)]


_HIDDEN = ("_", ".")  # the names a dataset reader passes over (pyarrow's default)
MAGIC = b"PAR1"  # a parquet file's first and last 4 bytes
_PARQUET_LOOKING = (".parq", ".pq")  # other names parquet writers give (Hive's and Impala's
# files have no suffix at all: ``000000_0``, ``part-00001``)


def passed_over(names: Iterable[str]) -> list[str]:
    """The names among ``names`` (as :func:`select_listed` takes them) that it passes over
    though nothing marks them as not data: not ``*.parquet``, not hidden, not build debris."""
    return [n for n in names if not n.endswith(".parquet") and _data_name(n.split("/"))]


def _data_name(parts: list[str]) -> bool:
    """Whether a file at path ``parts`` may be data by :func:`select_listed`'s rules: no part
    hidden (``_``, ``.``), no folder build debris."""
    hidden = any(p.startswith(_HIDDEN) for p in parts)
    return not hidden and not any(_BUILD_DEBRIS.search(folder) for folder in parts[:-1])


def looks_like_parquet(name: str) -> bool:
    """Whether an object's name is one parquet writers give besides ``*.parquet``: no suffix
    (Hive, Impala) or ``.parq``/``.pq`` (what a listing tells without reading the object);
    not a README, LICENSE, NOTICE or Makefile, nor s3n's ``$folder$`` marker."""
    last = name.rsplit("/", 1)[-1]
    if "$folder$" in last or last.split(".", 1)[0].upper() in _NOT_DATA:
        return False
    return "." not in last or last.endswith(_PARQUET_LOOKING)


_NOT_DATA = ("README", "LICENSE", "NOTICE", "MAKEFILE", "CHANGES", "AUTHORS")


def warn_unread(top: str, unread: Sequence[str], what: str = "file") -> None:
    """Say which parquet ``what``s below ``top`` are not read (their names do not end in
    ``.parquet``): a folder read without them lost their rows without a word (76 % of a
    Hive table's, and `lading repartition` wrote the copy without them)."""
    if not unread:
        return
    held = "hold parquet" if what == "file" else "look like parquet files"  # (sniffed or named)
    shown = ", ".join(unread[:3]) + (f", ... ({len(unread)} in all)" if len(unread) > 3 else "")
    warnings.warn(
        SkippedFilesWarning(
            f"{top}: {len(unread)} {what}(s) {held} but are not named *.parquet, so they "
            f"are not read: {shown}; rename them *.parquet, or pass them as a list of {what}s"
        ),
        stacklevel=4,
    )


def _walk(top: Path, skip: set[Path]) -> list[Path]:
    """The parquet files below ``top`` (:func:`select_listed`), leaving out the folders in
    ``skip`` (resolved) whole. A linked folder is read as the folder it leads to (a day kept
    on another disk: its rows were left out without a word), but not one the walk reaches
    anyway by its real name (that name is kept), nor one holding ``top`` (a link back up
    the tree would read what lies beside it), and each such target once."""
    top_real = top.resolve()
    names: list[str] = []
    links: list[tuple[str, Path]] = []  # (name under top, the folder it leads to)
    covered: set[Path] = set()
    _walk_real(top, "", skip, names, links, covered)
    while links:
        rel, real = links.pop(0)
        if real in covered or real in skip or real == top_real or real in top_real.parents:
            continue
        _walk_real(real, rel, skip, names, links, covered)
    others = passed_over(names)[:_SNIFFED]
    warn_unread(str(top), [n for n in others if _parquet_magic(top / n)])
    return [top / name for name in select_listed(str(top), names)]


_SNIFFED = 1000  # files not named *.parquet read for parquet's magic, at most, a folder


def _parquet_magic(path: Path) -> bool:
    """Whether ``path`` starts with parquet's magic bytes (``PAR1``)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def _walk_real(
    root: Path,
    prefix: str,
    skip: set[Path],
    names: list[str],
    links: list[tuple[str, Path]],
    covered: set[Path],
) -> None:
    """The files below ``root`` without following links, named ``prefix/...``; the linked
    folders met go to ``links`` (followed after every real folder is known: ``covered``)."""
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        covered.add(here.resolve())
        rel = here.relative_to(root).as_posix()
        under = "/".join(p for p in (prefix, "" if rel == "." else rel) if p)
        keep = []
        for d in sorted(dirs):
            path = here / d
            if _is_debris(path) or path.resolve() in skip:
                continue
            if d.startswith(_HIDDEN):
                continue  # (not walked: a Spark _temporary/ may hold many attempts)
            if path.is_symlink():
                links.append((f"{under}/{d}" if under else d, path.resolve()))
            else:
                keep.append(d)
        dirs[:] = keep
        names += [
            f"{under}/{n}" if under else n
            for n in files
            if (n == DATASET_MARK or not n.startswith(_HIDDEN)) and (here / n).is_file()
        ]


def _is_debris(folder: Path) -> bool:
    """A build's scratch or replaced directory: never data to read (half-written or stale)."""
    return bool(_BUILD_DEBRIS.search(folder.name))


def scan(files: Sequence[Path]) -> tuple[list[Piece], list[Any], list[Any]]:
    """The non-empty row groups of ``files``, each file's Arrow schema and parquet metadata,
    from the footers.

    Raises:
        ValueError: a file is not parquet (e.g. empty or truncated), naming it.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schemas, footers = [], []
    for file in files:
        try:
            footer = pq.ParquetFile(file)
        except (pa.ArrowInvalid, OSError) as e:
            raise ParquetError(
                f"{file} is not a parquet file ({e}); remove it or write it again"
            ) from e
        schemas.append(footer.schema_arrow)
        footers.append(footer.metadata)
    return pieces_of([str(f) for f in files], footers), schemas, footers


def pieces_of(files: Sequence[str], footers: Sequence[Any]) -> list[Piece]:
    """The non-empty row groups of ``files`` (paths or URLs), from their parquet metadata.

    Raises:
        ValueError: no file has a row.
    """
    pieces = []
    for file, metadata in zip(files, footers):
        for i in range(metadata.num_row_groups):
            rows = metadata.row_group(i).num_rows
            if rows:
                pieces.append(Piece(file, i, rows))
    if not pieces:
        shown = ", ".join(str(f) for f in files[:3]) + (", ..." if len(files) > 3 else "")
        raise NoRowsError(f"no rows in {len(files)} parquet file(s): {shown}")
    return pieces


def check_schemas(
    files: Sequence[str | Path],
    schemas: Sequence[Any],
    columns: Sequence[str],
    rows: Sequence[int] | None = None,
    choose: bool = True,
) -> None:
    """Raise unless every file holds ``columns`` with the first file's types; where the
    files' ``rows`` are given, a file of none is left out (pandas types the list column of
    an empty split ``null``: nothing of it is ever read).

    Only the columns read need to agree: the others are never read. Nullability (``not
    null`` on a column or a list's items) and a list's item name are not compared: a file
    rewritten through pandas drops them, its values the same; the reader refuses an actual
    null itself (:func:`lading.tabular.read.first_null`). ``choose``: the caller reads the
    columns its user names (a loader's ``columns=``), so the error offers that way out.
    """
    if rows is not None:  # what has no rows is read for none: an empty split pandas typed
        kept = [(f, s) for f, s, n in zip(files, schemas, rows) if n]  # null, say
        files, schemas = [f for f, _ in kept], [s for _, s in kept]
    if not schemas:
        return
    first = schemas[0]
    for file, schema in zip(files[1:], schemas[1:]):
        differ = []
        for name in columns:
            if name not in first.names:
                if name in schema.names:
                    differ.append(f"{name!r} is {_describe(schema.field(name))}, missing first")
                continue  # in no file so far: check_columns names the first file
            want = first.field(name)
            if name not in schema.names:
                differ.append(f"{name!r} is missing (want {want.type})")
            elif _bare(schema.field(name).type) != _bare(want.type):
                differ.append(f"{name!r} is {schema.field(name).type}, not {want.type}")
        if differ:
            raise ParquetError(
                f"{file} does not match {files[0]}: {'; '.join(differ)}. Every file must hold "
                "the columns read with one type: rewrite the file, cast the column (e.g. "
                "table.cast)"
                + (", or read only the columns they share (columns=[...])" if choose else "")
            )


def _describe(field: Any) -> str:
    return f"{field.type}{'' if field.nullable else ' not null'}"


def _bare(kind: Any) -> Any:
    """Arrow type ``kind`` with every nested field nullable and a list's item named ``item``:
    what the reader's tensors depend on (the values' types), not how a writer flagged them."""
    import pyarrow as pa

    if pa.types.is_list(kind):
        return pa.list_(_bare(kind.value_type))
    if pa.types.is_large_list(kind):
        return pa.large_list(_bare(kind.value_type))
    if pa.types.is_fixed_size_list(kind):
        return pa.list_(_bare(kind.value_type), kind.list_size)
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, _bare(f.type)) for f in kind])
    return kind


def footer_digest(
    files: Sequence[str | Path], footers: Sequence[Any], sizes: Sequence[int] | None = None
) -> str:
    """A digest of what the files hold, from their footers (read once already): each file's
    name and size (``sizes``, else the local file's), and its parquet metadata (schema, every
    row group's column chunks with their sizes, offsets and statistics). Another dataset with
    the same row and row-group counts differs here; a copy of the same files (another folder,
    a new mtime, the bucket they were uploaded to) does not."""
    digest = hashlib.sha256()
    for i, (path, footer) in enumerate(zip(files, footers)):
        meta = footer.to_dict()
        meta.pop("created_by", None)
        size = sizes[i] if sizes is not None else Path(path).stat().st_size
        digest.update(PurePosixPath(os.fspath(path)).name.encode())
        digest.update(str(size).encode())
        digest.update(json.dumps(meta, sort_keys=True, default=str).encode())
    return digest.hexdigest()
