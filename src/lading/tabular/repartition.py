"""Rewrite parquet into row groups whose count is a multiple of world_size x workers.

:class:`~lading.tabular.PartitionedParquet` already splits row groups by row range, so this is
not needed for correctness; it makes every reader's share whole row groups (no row group read
by two readers) and sizes them evenly. The rewrite streams record batches (never the whole
table in memory), keeps the schema and its metadata (e.g. pandas'), writes exactly the planned
group sizes, and publishes the folder atomically with a ``_lading.json`` describing what it did
(pyarrow skips names starting with ``_`` when it reads the folder as a dataset).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lading.disk import DATASET_MARK, BuildContext, current_version, is_ours_to_replace
from lading.sources.tables import import_pyarrow
from lading.tabular.files import PathsArg, check_schemas, parquet_files, path_list, scan
from lading.tabular.plan import Piece

FORMAT_NAME = "lading.repartition"  # of the _lading.json written beside the parquet
READ_BATCH = 65_536  # rows per record batch read from the source


@dataclass(frozen=True)
class RepartitionReport:
    """What a repartition did."""

    source_files: int
    rows: int
    row_groups_before: int
    row_groups_after: int
    row_group_sizes: tuple[int, int]  # smallest, largest
    multiple_of: int
    output: str

    def __str__(self) -> str:
        lo, hi = self.row_group_sizes
        size = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
        return (
            f"{self.output}: {self.rows:,} rows from {self.source_files} file(s), "
            f"{self.row_groups_before} -> {self.row_groups_after} row groups of {size} rows "
            f"(a multiple of {self.multiple_of} = world_size x workers)"
        )


def group_sizes(rows: int, groups: int) -> list[int]:
    """``groups`` sizes adding up to ``rows``, differing by at most one."""
    base, extra = divmod(rows, groups)
    return [base + 1] * extra + [base] * (groups - extra)


def plan_groups(
    rows: int,
    current: int,
    multiple: int,
    row_group_size: int | None,
    settings: str = "",
) -> int:
    """How many row groups to write: a multiple of ``multiple``, at most one per row.

    The groups wanted (``rows / row_group_size``, or the ``current`` count) are rounded up to
    the multiple, or down where that would make more groups than rows (5 rows for 2 readers
    in groups of 1: 4 groups of 1-2 rows, not 6).

    Raises:
        ValueError: fewer rows than ``multiple`` (every reader needs a row of its own),
            naming the numbers and ``settings`` (how ``multiple`` was set).
    """
    wanted = -(-rows // row_group_size) if row_group_size is not None else max(current, 1)
    groups = -(-wanted // multiple) * multiple
    if groups > rows:
        groups = rows // multiple * multiple
    if groups < 1:
        how = f" ({settings})" if settings else ""
        raise ValueError(
            f"{rows} rows cannot fill {multiple} row groups, one for each of the {multiple} "
            f"readers{how}: the group count must be a multiple of the readers; use at most "
            f"{rows} readers (fewer processes or workers)"
        )
    return groups


def repartition(
    src: PathsArg,
    dst: str | os.PathLike[str],
    world_size: int = 1,
    workers: int = 1,
    row_group_size: int | None = None,
) -> RepartitionReport:
    """Rewrite the parquet under ``src`` into ``dst/part-0.parquet`` (see the module docstring).

    Args:
        src: parquet files or folders, all with the same schema: one, or any iterable of
            them (a generator such as ``Path.glob``'s is listed once). ``dst`` may lie inside a
            folder of ``src``: it is left out of the listing (with the scratch folders of
            killed runs), so a second run reads the same rows as the first.
        dst: the folder to create, replaced atomically (never mixed with old files) if it
            holds an earlier repartition; any other non-empty folder is refused.
        world_size, workers: the row-group count becomes a multiple of their product;
            ``world_size`` at least 1, ``workers`` at least 0 (0: the DataLoader reads in
            the main process, one reader a rank, as 1 worker).
        row_group_size: rows per group wanted, at least 1 (default: keep the current number
            of groups); the group count is rounded up to the multiple, or down where
            rounding up would make more groups than rows.

    Raises:
        FileExistsError: ``dst`` holds files lading did not write.
        ValueError: an input lies inside ``dst``, files differ in schema, a folder has no
            parquet, or holds another repartition output (see
            :func:`lading.tabular.files.parquet_files`); fewer rows than
            ``world_size x workers`` readers.
    """
    _check_count("world_size", world_size, 1)
    _check_count("workers", workers, 0)
    if row_group_size is not None:
        _check_count("row_group_size", row_group_size, 1)
    import_pyarrow()  # one line naming the extra, not a bare import error later
    target = Path(dst)
    files, pieces, schema = _inputs(path_list(src), target)  # a generator (glob) read once
    rows = sum(p.rows for p in pieces)
    multiple = world_size * max(1, workers)  # 0 workers: the main process, one reader
    settings = f"world_size={world_size} x workers={workers}"
    settings += ", 0 workers reading as 1" if workers == 0 else ""
    groups = plan_groups(rows, len(pieces), multiple, row_group_size, settings)
    sizes = group_sizes(rows, groups)
    # a parquet dataset other tools read whole: written beside it, swapped in by one rename
    with BuildContext(target, None, "directory") as build, build.scratch() as tmp:
        out = tmp / "part-0.parquet"
        try:
            _write(files, schema, sizes, out)
        except OSError as e:  # Arrow's I/O errors carry the errno but not the file
            if e.filename is None and e.errno is not None:
                raise OSError(e.errno, os.strerror(e.errno), str(out)) from e
            raise
        report = RepartitionReport(
            len(files),
            rows,
            len(pieces),
            len(sizes),
            (min(sizes), max(sizes)),
            multiple,
            str(target),
        )
        meta = {
            "format": FORMAT_NAME,
            "version": current_version(FORMAT_NAME),
            "report": asdict(report),
            "source": [str(f) for f in files],
        }
        (tmp / DATASET_MARK).write_text(json.dumps(meta, indent=2))
        build.publish(tmp)
    return report


def _check_count(name: str, value: int, least: int) -> None:
    """Refuse ``value`` unless it is an int of at least ``least`` (a row-group size of 0
    divided by zero; a world size of 0 or less was taken as 1 without a word)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(
            f"repartition {name}={value!r}: must be an int of at least {least}; pass "
            f"{name}={max(least, 1)} or more"
        )


def _inputs(src: list[str | os.PathLike[str]], target: Path) -> tuple[list[Path], list[Piece], Any]:
    """The files, row groups and schema to rewrite into ``target``, checked before any write.

    ``target`` (an earlier output of this command) and its build debris are left out of the
    listing, so ``repartition day day/rep`` run twice reads ``day``'s files only.
    """
    if not is_ours_to_replace(target):
        raise FileExistsError(
            f"{target} exists and is not a lading directory; refusing to replace it. "
            "Choose another destination or remove it yourself."
        )
    resolved = target.resolve()
    for item in src:
        path = Path(item).resolve()
        if path == resolved or resolved in path.parents:
            raise ValueError(
                f"input {item} is inside the output {target}, which the repartition replaces "
                "whole (deleting the input); write the output to another folder"
            )
    files = parquet_files(src, exclude=[target])
    pieces, schemas, footers = scan(files)
    if any(f.num_rows for f in footers):  # a file of no rows adds none, nor its types (pandas
        kept = [i for i, f in enumerate(footers) if f.num_rows]  # types an empty list null)
        files, schemas = [files[i] for i in kept], [schemas[i] for i in kept]
    names = list(schemas[0].names)
    check_schemas(files, schemas, names, choose=False)  # the rewrite keeps every column
    for file, schema in zip(files[1:], schemas[1:]):
        extra = [n for n in schema.names if n not in names]
        if extra:
            raise ValueError(
                f"{file} has column(s) {extra} that {files[0]} lacks; every file must have "
                "the same columns: rewrite the file, or repartition the files apart"
            )
    return files, pieces, _nullable_where_any_is(schemas)


def _nullable_where_any_is(schemas: list[Any]) -> Any:
    """The first file's schema, its fields nullable where any file's field of that name is,
    at any depth (a later file's nulls, or null list items, would not cast to the first's
    ``not null``: pandas writes list items ``not null``)."""
    first = schemas[0]
    for i, field in enumerate(first):
        first = first.set(i, _widened(field, [s.field(field.name) for s in schemas[1:]]))
    return first


def _widened(field: Any, others: list[Any]) -> Any:
    """``field`` nullable where one of ``others`` (the same column in other files) is, and
    so its list items and struct fields, recursively."""
    import pyarrow as pa

    kind = field.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        items = [o.type.value_field for o in others if hasattr(o.type, "value_field")]
        item = _widened(kind.value_field, items)
        kind = pa.list_(item) if pa.types.is_list(kind) else pa.large_list(item)
    elif pa.types.is_struct(kind):
        children = []
        for child in kind:
            same = [
                o.type.field(child.name)
                for o in others
                if pa.types.is_struct(o.type) and o.type.get_field_index(child.name) >= 0
            ]
            children.append(_widened(child, same))
        kind = pa.struct(children)
    nullable = field.nullable or any(o.nullable for o in others)
    return field.with_type(kind).with_nullable(nullable)


def _batches(files: list[Path], schema: Any) -> Iterator[Any]:
    """Every file's batches in ``schema`` (the first file's): files that differ only in
    column order or ``not null`` flags, which the schema check and the loader accept, are
    reordered and cast (the writer takes one schema exactly)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for file in files:
        for batch in pq.ParquetFile(file, page_checksum_verification=True).iter_batches(
            batch_size=READ_BATCH
        ):
            if batch.schema.equals(schema):
                yield batch
            else:
                table = pa.Table.from_batches([batch]).select(schema.names).cast(schema)
                yield from table.to_batches()


def _write(files: list[Path], schema: Any, sizes: list[int], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pending: list[Any] = []
    held = 0
    groups = iter(sizes)
    want = next(groups)
    # a CRC a page: every read of the output checks it (a bit lost is refused, not decoded)
    with pq.ParquetWriter(path, schema, write_page_checksum=True) as writer:
        for batch in _batches(files, schema):
            pending.append(batch)
            held += batch.num_rows
            while held >= want > 0:
                table = pa.Table.from_batches(pending, schema=schema)
                writer.write_table(table.slice(0, want), row_group_size=want)
                rest = table.slice(want)
                pending, held = rest.to_batches(), rest.num_rows
                want = next(groups, 0)
        if held:
            raise AssertionError(f"{held} rows left over after the planned groups")
