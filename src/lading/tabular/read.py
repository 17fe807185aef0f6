"""Reading planned rows out of parquet files and turning them into tensors.

File handles are per process (reopened after a fork, never shared), and the two row groups
read last are kept: consecutive chunks of a reader often share the row group between them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from lading.tabular.pad import pad_lists
from lading.tabular.plan import Share


class RowReader:
    """Rows of fragments as one Arrow table; tables as dicts of tensors (lists padded)."""

    def __init__(
        self,
        columns: Sequence[str],
        list_columns: Mapping[str, int],
        pad: str,
        pad_value: int | float,
    ) -> None:
        self.columns, self.list_columns = list(columns), dict(list_columns)
        self.pad, self.pad_value = pad, pad_value
        self._files: dict[str, Any] = {}
        self._recent: list[tuple[tuple[str, int], Any]] = []
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_files"], state["_recent"], state["_pid"] = {}, [], -1  # handles stay behind
        return state

    def _file(self, path: str) -> Any:
        import pyarrow.parquet as pq

        if self._pid != os.getpid():  # file handles are per process, never shared over fork
            self._files, self._recent, self._pid = {}, [], os.getpid()
        if path not in self._files:
            self._files[path] = pq.ParquetFile(path)
        return self._files[path]

    def _row_group(self, path: str, index: int) -> Any:
        key = (path, index)
        for cached_key, table in self._recent:
            if cached_key == key:
                return table
        table = self._file(path).read_row_group(index, columns=self.columns)
        self._recent = [*self._recent[-1:], (key, table)]
        return table

    def read(self, share: Share) -> Any:
        """Every row of ``share`` as one Arrow table, in the share's order."""
        import pyarrow as pa

        tables = []
        for fragment in share.fragments:
            table = self._row_group(fragment.piece.path, fragment.piece.row_group)
            table = table.slice(fragment.start, fragment.stop - fragment.start)
            for name in self.columns:
                if table.column(name).null_count:
                    raise ValueError(
                        f"{fragment.piece.path}, row group {fragment.piece.row_group}: column "
                        f"{name!r} has nulls; fill them (pyarrow.compute.fill_null) or leave the "
                        "column out of columns="
                    )
            tables.append(table)
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def tensors(self, table: Any) -> dict[str, torch.Tensor]:
        """Columns as tensors; list columns padded to their ``max_len`` plus ``<name>_lengths``."""
        out: dict[str, torch.Tensor] = {}
        for name in self.columns:
            column = table.column(name).combine_chunks()
            if name in self.list_columns:
                offsets = np.asarray(column.offsets, dtype=np.int64)
                values = column.flatten().to_numpy(zero_copy_only=False)
                padded, lengths = pad_lists(
                    values, offsets - offsets[0], self.list_columns[name], self.pad, self.pad_value
                )
                out[name] = torch.from_numpy(padded)
                out[f"{name}_lengths"] = torch.from_numpy(lengths)
            else:
                out[name] = torch.from_numpy(column.to_numpy(zero_copy_only=False).copy())
        return out


def check_columns(
    schema: Any, columns: list[str], list_columns: Mapping[str, int], path: Any
) -> None:
    """Raise, naming the file and column, unless every column can become a tensor."""
    import pyarrow as pa

    for name in [*columns, *list_columns]:
        if name not in schema.names:
            raise ValueError(f"{path}: no column {name!r}; it has {schema.names}")
    for name in columns:
        kind = schema.field(name).type
        if name in list_columns:
            if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
                raise ValueError(
                    f"{path}: {name!r} is {kind}, not a list; drop it from list_columns"
                )
            kind = kind.value_type
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            raise ValueError(
                f"{path}: {name!r} is a list column ({kind}); give its max_len in "
                f"list_columns={{{name!r}: N}}"
            )
        if not (
            pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
        ):
            raise ValueError(
                f"{path}: {name!r} is {kind} and cannot become a tensor; leave it out of columns="
            )
    missing_lists = [n for n in list_columns if n not in columns]
    if missing_lists:
        raise ValueError(f"list_columns {missing_lists} are not among columns={columns}")
