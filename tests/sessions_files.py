"""Parquet session files for tests of every folder (tabular, train): made here, at the tests
root, so that a test file imports it whatever else pytest collected first."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_sessions(path: Path, rows: int, row_groups: int, seed: int = 0) -> Path:
    """Sessions with ids 0..rows-1 and ragged item lists item = id * 100 + position."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 12, rows)
    table = pa.table(
        {
            "session_id": pa.array(np.arange(rows), pa.int64()),
            "score": pa.array(rng.random(rows).astype(np.float32)),
            "items": pa.array(
                [[i * 100 + k for k in range(n)] for i, n in enumerate(lengths)],
                pa.list_(pa.int64()),
            ),
        }
    ).replace_schema_metadata({"origin": "test"})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=-(-rows // row_groups))
    assert pq.ParquetFile(path).metadata.num_row_groups == row_groups
    return path
