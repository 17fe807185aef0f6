"""A Ray Data pipeline writes a lading store: every write task one shard, the driver one commit.

```python
import ray
from lading.integrations.ray import LadingDatasink

ray.data.DataContext.get_current().execution_options.preserve_order = True  # ids() order
sink = LadingDatasink("msmarco.store", id_column="docid", text_column="body")
ray.data.read_json("corpus/*.jsonl").write_datasink(sink)
store = lading.open_store("msmarco.store")     # or sink.snapshot: the snapshot committed
```

Each write task writes its rows as one shard; ``on_write_complete`` commits the shards the
tasks returned, in task order, as one snapshot (the id index over all shards, duplicates across
tasks refused naming both, or one kept as ``duplicates=`` says:
:func:`lading.stores.building.parallel.commit_shards`); a failed or
killed job commits nothing, a task retried by Ray is taken once
(:mod:`lading.integrations.ray_shards`). ``dest`` is a folder every Ray node sees or an
``s3://`` URL (each task uploads its shard, the driver commits in the bucket). Rows are stored
in the order of the write tasks, which is the dataset's order when ``preserve_order`` is set
(as above). Token corpora: :class:`lading.integrations.ray_tokens.LadingTokenDatasink`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from lading.disk import BuildContext
from lading.errors import SourceError
from lading.integrations.ray_shards import ShardSink, arrow
from lading.remote.settings import RemoteSettings
from lading.sources import ON_ERROR_MODES, ParseOptions, RecordStream
from lading.stores.building.build import build_options, check_max_length
from lading.stores.building.merge import read_shard
from lading.stores.building.parallel import commit_shards
from lading.stores.building.pending import BuildToCommit
from lading.stores.building.remote_shards import commit_store_in_bucket, store_needs
from lading.stores.building.writer import DUPLICATE_MODES, Duplicates, write_shard
from lading.stores.layout import FORMAT_NAME
from lading.stores.tokens import load_tokenizer


class LadingDatasink(ShardSink):
    """A Ray Data ``Datasink`` that writes a :class:`~lading.stores.PackedStore` at ``dest``.

    Args:
        dest: the store directory (on a filesystem every Ray node sees), or an ``s3://`` URL.
        id_column, text_column: where each row's id and text are.
        fields: further string columns kept as store fields where present.
        tokenizer: pre-tokenize with this (as :func:`lading.build_store`'s ``tokenizer``).
        max_length: keep at most this many tokens per document.
        duplicates: an id repeated, within a task or in two: ``"error"`` (naming both
            rows and tasks), or keep its ``"first"``/``"last"`` row in the dataset's order
            (a folder ``dest`` only).
        on_error: a null id or a non-text text stops the write (``"raise"``) or is skipped
            and counted (``"skip"``).
        cache, storage_options: a URL ``dest``'s node cache (each task's scratch folder) and
            client options, as :func:`lading.open_store`'s.

    Attributes:
        snapshot: the snapshot committed, once the write is complete.
    """

    fmt, what, need = FORMAT_NAME, "store", staticmethod(store_needs)

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
        cache: str | os.PathLike[str] | None = None,
        storage_options: Any = None,
    ) -> None:
        # on the driver, before any task reads a row: each task would otherwise fail on it
        for name, value, modes in (
            ("on_error", on_error, ON_ERROR_MODES),
            ("duplicates", duplicates, DUPLICATE_MODES),
        ):
            if value not in modes:
                raise ValueError(f"LadingDatasink({name}={value!r}): choose from {sorted(modes)}")
        self.columns = (id_column, text_column, tuple(fields))
        check_max_length(tokenizer, max_length)
        tok = load_tokenizer(tokenizer) if tokenizer is not None else None
        self.tokenizer_json = tok.to_str() if tok is not None else None  # ships to the tasks
        self.max_length, self.duplicates, self.on_error = max_length, duplicates, on_error
        parse = ParseOptions(id_field=id_column, text_field=text_column, keep_fields=tuple(fields))
        options = build_options("ray", on_error, duplicates, parse, tok, max_length)
        super().__init__(dest, options, cache, storage_options)
        if self.url is not None and duplicates != "error":
            raise ValueError(
                f"LadingDatasink({self.url!r}, duplicates={duplicates!r}): a store written to "
                "a bucket keeps every row (duplicates='error'); write to a folder, or drop the "
                "duplicates in the dataset first"
            )

    def write_shard(self, blocks: Iterable[Any], tmp: Path, task: int) -> dict[str, Any]:
        """In a task: this task's rows as one store shard in ``tmp``."""
        stream = RecordStream(
            lambda: self._records(blocks), f"ray write task {task}", {"task": task}, self.on_error
        )
        tok = None
        if self.tokenizer_json is not None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_str(self.tokenizer_json)
        written = write_shard(
            stream,
            tmp,
            tokenizer=tok,
            max_length=self.max_length,
            duplicates=self.duplicates,
            keep_tokenizer=task == 0,
            allow_empty=True,
            id_keys=True,
            about={"options": self.options, "source": [{"ray_task": task}]},
        )
        return {"rows": written.record["rows"]}

    def _records(self, blocks: Iterable[Any]) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
        id_column, text_column, fields = self.columns
        for block in blocks:
            table = arrow(block)
            if table.num_rows == 0:
                continue  # Ray hands a task of more blocks than rows an empty one, no columns
            names = set(table.column_names)
            missing = [c for c in (id_column, text_column) if c not in names]
            if missing:
                raise SourceError(
                    "ray dataset",
                    None,
                    f"no column {missing[0]!r} (columns: {table.column_names}); pass "
                    "LadingDatasink(id_column=..., text_column=...)",
                )
            kept = [f for f in fields if f in names]
            ids = table.column(id_column).to_pylist()
            texts = table.column(text_column).to_pylist()
            extra = {f: table.column(f).to_pylist() for f in kept}
            for i in range(len(ids)):
                yield ids[i], texts[i], {f: extra[f][i] for f in kept}

    def read(self, root: Path, rel: str) -> Any:
        return read_shard(root, rel)

    def _recipe(self) -> dict[str, Any]:
        where = self.url or str(self.dest)
        return {"options": self.options, "inputs": [f"ray dataset -> {where}"]}

    def commit_local(self, build: BuildContext, shards: list[Any]) -> str:
        return commit_shards(build, BuildToCommit(self.build_id, shards, self._recipe(), []))

    def commit_remote(
        self, settings: RemoteSettings, root: Path, previous: Any, shards: list[Any]
    ) -> str:
        assert self.url is not None
        merge = BuildToCommit(self.build_id, shards, self._recipe(), [])
        return commit_store_in_bucket(self.url, settings, root, previous, merge)


__all__ = ["LadingDatasink"]
