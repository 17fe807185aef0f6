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
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lading.disk import (
    DATASET_MARK,
    build_lock,
    current_version,
    publish,
    remove_dead_temps,
    staging,
)
from lading.tabular.plan import parquet_files, pieces_of

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


def plan_groups(rows: int, current: int, multiple: int, row_group_size: int | None) -> int:
    """How many row groups to write: a multiple of ``multiple``, at most one per row."""
    wanted = -(-rows // row_group_size) if row_group_size is not None else max(current, 1)
    groups = -(-wanted // multiple) * multiple
    if groups > rows:
        raise ValueError(
            f"{rows} rows cannot fill {groups} row groups (a multiple of "
            f"{multiple} = world_size x workers); use fewer processes or workers"
        )
    return groups


def repartition(
    src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    dst: str | os.PathLike[str],
    world_size: int = 1,
    workers: int = 1,
    row_group_size: int | None = None,
) -> RepartitionReport:
    """Rewrite the parquet under ``src`` into ``dst/part-0.parquet`` (see the module docstring).

    Args:
        src: parquet files or folders, all with the same schema.
        dst: the folder to create (replaced if it holds an earlier repartition).
        world_size, workers: the row-group count becomes a multiple of their product.
        row_group_size: rows per group wanted (default: keep the current number of groups,
            rounded up to the multiple).
    """
    import pyarrow.parquet as pq

    files = parquet_files(src)
    schema = pq.read_schema(files[0])
    for file in files[1:]:
        other = pq.read_schema(file)
        if not other.remove_metadata().equals(schema.remove_metadata()):
            raise ValueError(f"{file} has another schema than {files[0]}:\n{other}\nvs\n{schema}")
    pieces = pieces_of(files)
    rows = sum(p.rows for p in pieces)
    multiple = max(1, world_size) * max(1, workers)
    sizes = group_sizes(rows, plan_groups(rows, len(pieces), multiple, row_group_size))
    target = Path(dst)
    with build_lock(target):
        remove_dead_temps(target)
        with staging(target) as tmp:
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
            publish(tmp, target)
    return report


def _batches(files: list[Path]) -> Iterator[Any]:
    import pyarrow.parquet as pq

    for file in files:
        yield from pq.ParquetFile(file).iter_batches(batch_size=READ_BATCH)


def _write(files: list[Path], schema: Any, sizes: list[int], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pending: list[Any] = []
    held = 0
    groups = iter(sizes)
    want = next(groups)
    with pq.ParquetWriter(path, schema) as writer:
        for batch in _batches(files):
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
