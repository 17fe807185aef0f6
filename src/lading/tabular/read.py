"""Reading planned rows out of parquet files and turning them into tensors.

File handles are per process (reopened after a fork, never shared), and only the
:data:`OPEN_FILES` read last are kept open (a folder may hold more files than the process may
open); the two row groups read last are kept: consecutive chunks of a reader often share the
row group between them.

The rows were planned from the footers read when the loader opened, and a file is opened again
later, in each process that reads it: each row group read is checked against its plan (the
footer's row count, then the rows decoded), and a local file against its size, inode and
modification time when the loader planned it. A file rewritten since is refused by name
(:func:`changed`) instead of giving short or empty batches, or reading the new bytes through the
old footer's offsets.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from lading.errors import ParquetError
from lading.sources.tables import does_not_decode, pyarrow_words
from lading.tabular.pad import PADS, pad_lists
from lading.tabular.plan import Piece, Share

FILL_HOW = (
    "pyarrow.compute.fill_null(column, 0); for a list column's items, "
    "pa.ListArray.from_arrays(column.offsets, pyarrow.compute.fill_null(column.flatten(), 0))"
)

OPEN_FILES = 8  # files a reader keeps open (the ones read last); reopening costs one footer read


def changed(path: str, what: str) -> ParquetError:
    """The error for ``path``, rewritten since the loader planned its rows from its footer:
    ``what`` differs, and the fix."""
    return ParquetError(
        f"{path} changed since the loader opened it ({what}): its batches were planned from "
        "the footer read then, so reading on would leave rows out or read others. Leave the "
        "files as they are while a loader reads them, and open PartitionedParquet again once "
        "they are final to read the new version"
    )


Stamp = tuple[int, int, int]  # a local file's (inode, size, mtime in ns)


def stamp_of(path: str) -> Stamp | None:
    """``path``'s inode, size and modification time (ns), or None when it is gone."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns


def undecodable(path: str, group: int, error: BaseException, what: str) -> ParquetError:
    """The error for row group ``group`` of ``path`` (a ``what``: file, object) whose bytes
    pyarrow could not decode: naming both, the first line of pyarrow's words, and the fix."""
    first = pyarrow_words(error)
    return ParquetError(
        f"{path}, row group {group}: its bytes do not decode ({first}); the {what} is "
        "damaged: write it again"
    )


class RowReader:
    """Rows of fragments as one Arrow table; tables as dicts of tensors (lists padded)."""

    def __init__(
        self,
        columns: Sequence[str],
        list_columns: Mapping[str, int],
        pad: str,
        pad_value: int | float,
        planned: Mapping[str, Stamp | None] | None = None,
        *,
        padded_with: int | float | None = None,
    ) -> None:
        """``planned``: each local file's stamp (:func:`stamp_of`) as the loader planned its
        rows, what every process's first open compares with (None: its first open's).
        ``padded_with``: the value the files' lists already end with as padding (dropped)."""
        self.columns, self.list_columns = list(columns), check_list_options(list_columns, pad)
        self.pad, self.pad_value, self.padded_with = pad, pad_value, padded_with
        self._planned = dict(planned or {})
        self._files: OrderedDict[str, Any] = OrderedDict()  # the OPEN_FILES read last
        self._recent: list[tuple[tuple[str, int], Any]] = []
        self._stamps: dict[str, Stamp | None] = {}  # each file as this process first opened it
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_files"], state["_recent"], state["_pid"] = OrderedDict(), [], -1  # stay behind
        state["_stamps"] = {}
        return state

    def _file(self, path: str) -> Any:
        """``path`` opened in this process: kept among the :data:`OPEN_FILES` read last, the
        least recently read one closed to make room (never one handle a file of the folder)."""
        import pyarrow.parquet as pq

        if self._pid != os.getpid():  # file handles are per process, never shared over fork
            self._files, self._recent, self._pid = OrderedDict(), [], os.getpid()
            self._stamps = {}
        found = self._files.get(path)
        if found is not None:
            self._files.move_to_end(path)
            return found
        while len(self._files) >= OPEN_FILES:
            self._files.popitem(last=False)[1].close()
        stamp = stamp_of(path)  # before its footer is read: a rewrite after shows at a read
        # (a file missing or unreadable raises as it is); pages written with a CRC are checked
        found = pq.ParquetFile(path, page_checksum_verification=True)
        seen = self._stamps.setdefault(path, self._planned.get(path, stamp))
        if seen != stamp:  # rewritten since the plan, or since this process first opened it
            found.close()
            raise changed(path, "its size, inode or modification time differ from then")
        self._files[path] = found
        return found

    def _check_unchanged(self, path: str) -> None:
        """Raise unless the local file ``path`` is as this process first opened it: an open
        handle keeps the old footer, whose offsets would read a rewritten file's new bytes."""
        now = stamp_of(path)
        if now != self._stamps.get(path, now):
            what = "it is gone" if now is None else "its size, inode or modification time"
            raise changed(path, f"{what} since this process opened it")

    def _check_planned(self, piece: Piece) -> None:
        """Raise unless the file's footer (as opened now) holds ``piece``'s row group with the
        rows planned: a file rewritten since the plan has other row groups."""
        metadata = self._metadata(piece.path)
        groups = metadata.num_row_groups
        if piece.row_group >= groups:
            raise changed(
                piece.path,
                f"row group {piece.row_group} of {piece.rows} rows was planned; the file "
                f"holds {groups} row groups now",
            )
        rows = metadata.row_group(piece.row_group).num_rows
        if rows != piece.rows:
            raise changed(
                piece.path,
                f"row group {piece.row_group} holds {rows} rows now, {piece.rows} were planned",
            )

    def close(self) -> None:
        """Close the files this process holds open (a later read opens them again)."""
        if self._pid == os.getpid():  # (a forked copy's handles are its parent's)
            while self._files:
                self._files.popitem(last=False)[1].close()
        self._files = OrderedDict()

    def _row_group(self, piece: Piece) -> Any:
        """``piece``'s row group (the columns read), decoded once for the two read last;
        checked against its plan when decoded (never per batch).

        Raises:
            ValueError: the file changed since the rows were planned (:func:`changed`).
        """
        key = (piece.path, piece.row_group)
        for cached_key, table in self._recent:
            if cached_key == key:
                return table
        self._check_planned(piece)
        table = self._decode(piece.path, piece.row_group)
        if table.num_rows != piece.rows:  # the last guard: the rows decoded are those planned
            raise changed(
                piece.path,
                f"row group {piece.row_group} decoded to {table.num_rows} rows, "
                f"{piece.rows} were planned",
            )
        self._recent = [*self._recent[-1:], (key, table)]
        return table

    def _decode(self, path: str, index: int) -> Any:
        """Row group ``index`` of ``path`` (the columns read) as an Arrow table.

        Raises:
            ValueError: its bytes do not decode (a damaged data page), naming file and group;
                the file changed since this process opened it (:func:`changed`).
        """
        file = self._file(path)  # (a file missing or unreadable raises as it is)
        try:
            table = file.read_row_group(index, columns=self.columns)
        except Exception as e:
            self._check_unchanged(path)  # rewritten under the open handle: not damaged
            if not does_not_decode(e):
                raise
            raise undecodable(path, index, e, "file") from None
        self._check_unchanged(path)  # one stat a row group: what was read is what was opened
        return table

    def _metadata(self, path: str) -> Any:
        """The parquet metadata of ``path``."""
        return self._file(path).metadata

    def read(self, share: Share, step: int | None = None) -> Any:
        """Every row of ``share`` as one Arrow table, in the share's order; ``step``: the
        batch (:func:`lading.step.step_of`) it is read for (remote files plan
        their reads by it; local files need not)."""
        import pyarrow as pa

        tables = []
        for fragment in share.fragments:
            table = self._row_group(fragment.piece)
            table = table.slice(fragment.start, fragment.stop - fragment.start)
            for name in self.columns:
                found = first_null(table.column(name))
                if found is not None:
                    piece = fragment.piece
                    metadata = self._metadata(piece.path)
                    row = found[0] + fragment.start  # of the row group
                    raise null_error(piece.path, metadata, piece.row_group, row, name, found[1])
            tables.append(table)
        # files may differ in nullability only (check_schemas): "default" unifies it
        return pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]

    def tensors(self, table: Any) -> dict[str, torch.Tensor]:
        """Columns as tensors; list columns padded to their ``max_len`` plus ``<name>_lengths``."""
        out: dict[str, torch.Tensor] = {}
        for name in self.columns:
            column = table.column(name).combine_chunks()
            if name in self.list_columns:
                offsets = np.asarray(column.offsets, dtype=np.int64)
                values = column.flatten().to_numpy(zero_copy_only=False)
                padded, lengths = pad_lists(
                    values,
                    offsets - offsets[0],
                    self.list_columns[name],
                    self.pad,
                    self.pad_value,
                    self.padded_with,
                )
                out[name] = torch.from_numpy(padded)
                out[f"{name}_lengths"] = torch.from_numpy(lengths)
            else:
                out[name] = torch.from_numpy(column.to_numpy(zero_copy_only=False).copy())
        return out


def check_list_options(list_columns: Mapping[str, int], pad: str) -> dict[str, int]:
    """``list_columns`` as a dict when every length is an int >= 1 and ``pad`` names a side;
    else a ValueError naming the argument and the fix (before, only the first batch said so)."""
    if pad not in PADS:
        raise ValueError(f"pad={pad!r}: list columns are padded on the 'left' or 'right'")
    for name, length in list_columns.items():
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(
                f"list_columns={dict(list_columns)!r}: a list column's length must be an int "
                f">= 1 (the items kept of each list), got {length!r} for {name!r}"
            )
    return dict(list_columns)


def null_error(
    path: str | os.PathLike[str], metadata: Any, row_group: int, row: int, name: str, what: str
) -> ValueError:
    """The error for a null at ``row`` of a row group: a tensor has no null, and the only way
    to hold one would be a float NaN, silently changing an int column's dtype."""
    before = sum(metadata.row_group(i).num_rows for i in range(row_group))
    return ParquetError(
        f"{path}, row group {row_group}, row {row} of it (row {before + row} of the "
        f"file): column {name!r} {what}; a tensor cannot hold a null (it would turn "
        f"into NaN and the column into float64). Fill the nulls when writing the file "
        f"({FILL_HOW}) or leave the column out of columns="
    )


def leaf_fields(schema: Any) -> list[str]:
    """The top-level field each leaf column (parquet's column chunk ``j``) of ``schema`` (a
    ``pyarrow.parquet.ParquetSchema``) belongs to.

    A leaf's dotted path cannot say it: list column ``item.seq``'s leaf is
    ``item.seq.list.element``, which dot-splits to ``item``. Leaves come depth first in field
    order, so each field owns as many as its Arrow type holds.
    """
    arrow = schema.to_arrow_schema()
    found = [name for name, kind in zip(arrow.names, arrow.types) for _ in range(_leaves_of(kind))]
    paths = [schema.column(j).path for j in range(len(schema))]
    if len(found) == len(paths) and all(
        path == name or path.startswith(f"{name}.") for name, path in zip(found, paths)
    ):
        return found
    # a type counted otherwise than its parquet leaves: the longest field its path starts with
    names = sorted(arrow.names, key=len, reverse=True)
    return [
        next((n for n in names if path == n or path.startswith(f"{n}.")), path) for path in paths
    ]


def _leaves_of(kind: Any) -> int:
    """How many parquet leaves (column chunks) a field of Arrow type ``kind`` is stored as."""
    import pyarrow as pa

    if isinstance(kind, pa.ExtensionType):
        return _leaves_of(kind.storage_type)
    if pa.types.is_struct(kind):
        return sum(_leaves_of(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _leaves_of(kind.key_type) + _leaves_of(kind.item_type)
    if isinstance(kind, (pa.ListType, pa.LargeListType, pa.FixedSizeListType)):
        return _leaves_of(kind.value_type)
    return 1


def check_counted_nulls(
    files: Sequence[Any],
    footers: Sequence[Any],
    flat: Sequence[str],
    read_group: Callable[[Any, int, list[str]], Any] | None = None,
) -> None:
    """Raise when the footers' statistics count a null in a column of ``flat`` (not lists).

    This finds a null when the dataset opens instead of when its batch comes, mid-epoch; only
    the flagged column chunk is read, to name the row (by ``read_group(file, group, columns)``,
    default a local file's). List columns are left to :meth:`RowReader.read`: their leaf
    statistics count an empty list as a null too.
    """
    import pyarrow.parquet as pq

    if read_group is None:

        def read_group(file: Any, group: int, columns: list[str]) -> Any:
            return pq.ParquetFile(file, page_checksum_verification=True).read_row_group(
                group, columns=columns
            )

    for file, metadata in zip(files, footers):
        leaves = {name: j for j, name in enumerate(leaf_fields(metadata.schema))}  # flat: one
        wanted = [(name, leaves[name]) for name in flat if name in leaves]
        for group in range(metadata.num_row_groups):
            chunks = metadata.row_group(group)
            for name, j in wanted:
                stats = chunks.column(j).statistics
                if stats is None or not stats.has_null_count or not stats.null_count:
                    continue
                column = read_group(file, group, [name]).column(name)
                found = first_null(column)
                if found is not None:
                    raise null_error(file, metadata, group, found[0], name, found[1])


def first_null(column: Any) -> tuple[int, str] | None:
    """``(row, what)`` of the first null of an Arrow column, or of an item of a list column.

    Arrow would hand a null to numpy as NaN, turning an int64 column (or a list column's
    items) into float64 without a word; the caller refuses instead.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    seen = 0  # rows of the earlier chunks
    for chunk in column.chunks:
        if chunk.null_count:
            return seen + pc.index(pc.is_null(chunk), True).as_py(), "is null"
        if pa.types.is_list(chunk.type) or pa.types.is_large_list(chunk.type):
            values = chunk.flatten()  # the items of this (possibly sliced) chunk's rows
            if values.null_count:
                at = pc.index(pc.is_null(values), True).as_py()
                offsets = np.asarray(chunk.offsets, dtype=np.int64)
                row = int(np.searchsorted(offsets - offsets[0], at, side="right")) - 1
                return (
                    seen + row,
                    f"has a null item in its list (item {at - offsets[row] + offsets[0]})",
                )
        seen += len(chunk)
    return None


def check_columns(
    schema: Any,
    columns: list[str],
    list_columns: Mapping[str, int],
    path: Any,
    pad_value: int | float = 0,
    padded_with: int | float | None = None,
) -> None:
    """Raise, naming the file and column, unless every column can become a tensor (and every
    list column's items can hold ``pad_value`` and ``padded_with``)."""
    import pyarrow as pa

    if not columns:
        raise ValueError(
            f"columns=[]: no column to read, every batch would be empty; name some of "
            f"{schema.names} ({path}), or leave columns= out to read them all"
        )
    for name in [*columns, *list_columns]:
        if name not in schema.names:
            raise ParquetError(f"{path}: no column {name!r}; it has {schema.names}")
    for name in columns:
        kind = schema.field(name).type
        is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
        items = kind.value_type if is_list else kind
        why = ""  # why no tensor holds it, where none does
        if pa.types.is_fixed_size_list(kind):
            why = "a fixed-size list, which lading does not pad (cast it to a list to read it)"
        elif not (
            pa.types.is_integer(items) or pa.types.is_floating(items) or pa.types.is_boolean(items)
        ):
            why = f"its items ({items}) are not numbers or bools" if is_list else "not a number"
        if why:
            raise ParquetError(
                f"{path}: {name!r} is {kind}: {why}, so it cannot become a tensor; leave it out "
                "of columns="
            )
        if name in list_columns and not is_list:
            raise ParquetError(f"{path}: {name!r} is {kind}, not a list; drop it from list_columns")
        if is_list and name not in list_columns:
            raise ParquetError(
                f"{path}: {name!r} is a list column ({kind}); give its max_len in "
                f"list_columns={{{name!r}: N}}"
            )
        if name in list_columns:
            check_pad_value(path, name, items, pad_value)
            if padded_with is not None:  # (a value the items cannot hold would strip nothing)
                check_pad_value(path, name, items, padded_with, "padded_with")
    missing_lists = [n for n in list_columns if n not in columns]
    if missing_lists:
        raise ValueError(f"list_columns {missing_lists} are not among columns={columns}")
    for name in list_columns:  # the batch's keys are one dict: a column must not replace them
        lengths = f"{name}_lengths"
        if lengths in columns:
            kept = [c for c in columns if c != lengths]
            raise ValueError(
                f"{path}: column {lengths!r} would clash with the lengths of list column "
                f"{name!r} (the batch's {lengths!r} tensor); leave it out (columns={kept!r}) "
                "or rename it in the files"
            )


def check_pad_value(
    path: Any, name: str, items: Any, pad_value: int | float, keyword: str = "pad_value"
) -> None:
    """Raise, naming the file, column, dtype and value, unless the items of list column
    ``name`` (Arrow type ``items``) hold ``pad_value`` (the value of ``keyword``) as it is:
    -1.5 would silently become -1 in an int list, -1 a bare OverflowError at the first batch
    of a uint8 one."""
    import pyarrow as pa

    dtype = np.dtype(items.to_pandas_dtype())
    value = float(pad_value)
    if pa.types.is_boolean(items):
        holds, which = pad_value in (0, 1), "0 or 1"
    elif isinstance(pad_value, bool):  # True pads an int list with 1, a float one with 1.0
        holds, which = False, "a number, not a bool"
    elif pa.types.is_integer(items):
        limits = np.iinfo(dtype)
        holds = value.is_integer() and limits.min <= pad_value <= limits.max
        which = f"a whole number from {limits.min} to {limits.max}"
    else:
        with np.errstate(over="ignore"):
            holds = not np.isfinite(value) or bool(np.isfinite(np.array(value, dtype=dtype)))
        which = f"a number within +-{np.finfo(dtype).max}"
    if not holds:
        raise ValueError(
            f"{path}: {keyword}={pad_value!r} does not fit list column {name!r}, whose items "
            f"are {items}{'' if str(items) == str(dtype) else f' ({dtype})'}; give a "
            f"{keyword} {dtype} holds ({which}), or cast the "
            "column when writing the files"
        )
