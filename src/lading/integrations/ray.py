"""A Ray Data pipeline writes a lading store: every write task one shard, the driver one commit.

```python
import ray
from lading.integrations.ray import LadingDatasink

ray.data.DataContext.get_current().execution_options.preserve_order = True  # ids() order
sink = LadingDatasink("msmarco.store", id_column="docid", text_column="body")
ray.data.read_json("corpus/*.jsonl").write_datasink(sink)
store = lading.open_store("msmarco.store")     # or sink.snapshot: the snapshot committed
```

Ray's two-phase write is the shape of a sharded build: ``write`` runs in each task and writes
that task's rows as one shard of ``DEST/build-<id>/`` (renamed into place once whole, as a
``lading build --shard`` worker does); ``on_write_complete`` runs once on the driver with every
task's return and commits them, in task order, as one snapshot (the id index over all shards,
duplicates across tasks refused naming both:
:func:`lading.stores.building.parallel.commit_shards`). A
failed or killed job commits nothing. ``dest`` must be on a filesystem every Ray node sees.
Rows are stored in the order of the write tasks, which is the dataset's order when
``preserve_order`` is set (as above).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

try:
    from ray.data import Datasink
except ImportError:  # pragma: no cover - depends on the environment
    raise ImportError(
        "lading.integrations.ray needs Ray Data. To install:\n  pip install 'lading[ray]'"
    ) from None

from lading.disk import BuildContext, is_ours_to_replace, write_file
from lading.sources import ParseOptions, RecordStream
from lading.stores.building.build import build_options
from lading.stores.building.merge import read_shard
from lading.stores.building.parallel import BUILD_FILE, commit_shards
from lading.stores.building.writer import Duplicates, write_shard
from lading.stores.layout import FORMAT_NAME
from lading.stores.tokens import load_tokenizer


class LadingDatasink(Datasink):
    """A Ray Data ``Datasink`` that writes a :class:`~lading.stores.PackedStore` at ``dest``.

    Args:
        dest: the store directory (on a filesystem every Ray node sees).
        id_column, text_column: where each row's id and text are.
        fields: further string columns kept as store fields where present.
        tokenizer: pre-tokenize with this (as :func:`lading.build_store`'s ``tokenizer``).
        max_length: keep at most this many tokens per document.
        duplicates: an id repeated within a task: ``"error"``, or keep ``"first"``/``"last"``;
            an id in two tasks is always an error.
        on_error: a null id or a non-text text stops the write (``"raise"``) or is skipped
            and counted (``"skip"``).

    Attributes:
        snapshot: the snapshot committed, once the write is complete.
    """

    def __init__(
        self,
        dest: str | os.PathLike[str],
        *,
        id_column: str = "id",
        text_column: str = "text",
        fields: Sequence[str] = ("title",),
        tokenizer: Any = None,
        max_length: int | None = None,
        duplicates: Duplicates = "error",
        on_error: Any = "raise",
    ) -> None:
        self.dest = Path(dest).resolve()
        self.columns = (id_column, text_column, tuple(fields))
        tok = load_tokenizer(tokenizer) if tokenizer is not None else None
        self.tokenizer_json = tok.to_str() if tok is not None else None  # ships to the tasks
        self.max_length, self.duplicates, self.on_error = max_length, duplicates, on_error
        parse = ParseOptions(id_field=id_column, text_field=text_column, keep_fields=tuple(fields))
        self.options = build_options("ray", on_error, duplicates, parse, tok, max_length)
        self.build_id = f"build-{secrets.token_hex(8)}"  # this write job's, fixed on the driver
        self.snapshot: str | None = None

    def on_write_start(self, schema: Any = None) -> None:
        """On the driver: refuse a foreign ``dest``, record the build the tasks write into."""
        if not is_ours_to_replace(self.dest):
            raise FileExistsError(
                f"{self.dest} exists and is not a lading store; refusing to write into it"
            )
        where = self.dest / self.build_id
        where.mkdir(parents=True, exist_ok=True)
        recipe = {"build_id": self.build_id, "options": self.options, "inputs": []}
        write_file(where / BUILD_FILE, json.dumps(recipe, indent=2, sort_keys=True).encode())

    def write(self, blocks: Iterable[Any], ctx: Any) -> dict[str, Any]:
        """In a task: this task's rows as one shard; returns where it is."""
        task = int(ctx.task_idx)
        rel = f"{self.build_id}/task-{task:05d}"
        stream = RecordStream(
            lambda: self._records(blocks), f"ray write task {task}", {"task": task}, self.on_error
        )
        tok = None
        if self.tokenizer_json is not None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_str(self.tokenizer_json)
        with BuildContext(self.dest / rel, None, "shard") as build, build.scratch() as tmp:
            written = write_shard(
                stream, tmp, tokenizer=tok, max_length=self.max_length,
                duplicates=self.duplicates, keep_tokenizer=task == 0, allow_empty=True,
                about={"options": self.options, "source": [{"ray_task": task}]},
            )  # fmt: skip
            build.publish_new(tmp)
        return {"task": task, "dir": rel, "rows": written.record["rows"]}

    def _records(self, blocks: Iterable[Any]) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
        id_column, text_column, fields = self.columns
        for block in blocks:
            table = block if hasattr(block, "column_names") else _arrow(block)
            names = set(table.column_names)
            kept = [f for f in fields if f in names]
            ids = table.column(id_column).to_pylist()
            texts = table.column(text_column).to_pylist()
            extra = {f: table.column(f).to_pylist() for f in kept}
            for i in range(len(ids)):
                yield ids[i], texts[i], {f: extra[f][i] for f in kept}

    def on_write_complete(self, write_result: Any) -> None:
        """On the driver: every task's shard, in task order, committed as one snapshot."""
        returns = sorted(write_result.write_returns, key=lambda r: r["task"])
        with BuildContext(self.dest, FORMAT_NAME) as build:
            shards = [read_shard(self.dest, r["dir"]) for r in returns]
            recipe = {"options": self.options, "inputs": [f"ray dataset -> {self.dest}"]}
            self.snapshot = commit_shards(build, self.build_id, shards, recipe)


def _arrow(block: Any) -> Any:
    """A pandas block as an Arrow table (Ray hands either)."""
    import pyarrow as pa

    return pa.Table.from_pandas(block, preserve_index=False)


__all__ = ["LadingDatasink"]
