"""A Ray Data pipeline writes a token corpus: each write task tokenizes its rows, the driver
commits every task's shard with one merge.

```python
import ray
from lading.integrations.ray_tokens import LadingTokenDatasink

ray.data.DataContext.get_current().execution_options.preserve_order = True  # document order
sink = LadingTokenDatasink("s3://bucket/corpora/wiki", "tokenizer.json", text_column="text")
ray.data.read_parquet("wiki/").write_datasink(sink)
corpus = lading.lm.TokenCorpus.open("s3://bucket/corpora/wiki")   # sink.snapshot's
```

Each write task tokenizes its rows inside the task with the user's tokenizer (shipped to the
tasks as its JSON; ``encode_batch_fast`` where the ``tokenizers`` version has it, a thousand
documents a call: :func:`lading.lm.tokenize.write_tokens`) and writes one shard in the format a
``lading lm build --shard`` worker writes; ``on_write_complete`` commits the shards the tasks
returned, in task order, with the merge of :mod:`lading.lm.merge` (the manifest only: no token
is copied). The corpus reads the same tokens, in the same document order, as
:meth:`TokenCorpus.build <lading.lm.TokenCorpus.build>` over the same texts in the dataset's
order. Exactly once under failures and retries, local folder or ``s3://`` URL:
:mod:`lading.integrations.ray_shards`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from lading.disk import BuildContext
from lading.errors import SourceError
from lading.integrations.ray_shards import ShardSink, arrow
from lading.lm.corpus_format import FORMAT_NAME
from lading.lm.merge import commit_corpus
from lading.lm.remote_shards import commit_in_bucket
from lading.lm.shards import finish_shard, read_corpus_shard
from lading.lm.texts import Skips
from lading.lm.tokenize import find_eos, progress_bar, write_tokens
from lading.remote.settings import RemoteSettings
from lading.stores.building.pending import BuildToCommit
from lading.stores.tokens import describe_tokenizer, load_tokenizer


class LadingTokenDatasink(ShardSink):
    """A Ray Data ``Datasink`` that writes a :class:`~lading.lm.TokenCorpus` at ``dest``.

    Args:
        dest: the corpus directory (on a filesystem every Ray node sees), or an ``s3://`` URL.
        tokenizer: a ``tokenizers.Tokenizer``, HF fast tokenizer or ``tokenizer.json`` path.
        text_column: where each row's text is.
        append_eos, eos_token: as :meth:`TokenCorpus.build <lading.lm.TokenCorpus.build>`'s.
        on_error: a null or non-string text stops the write, naming the task and row
            (``"raise"``), or is skipped and counted (``"skip"``: the manifest's ``skipped``).
        cache, storage_options: a URL ``dest``'s node cache (each task's scratch folder) and
            client options, as :meth:`TokenCorpus.open <lading.lm.TokenCorpus.open>`'s.

    Attributes:
        snapshot: the snapshot committed, once the write is complete.
    """

    fmt, what = FORMAT_NAME, "token corpus"

    def __init__(
        self,
        dest: str | os.PathLike[str],
        tokenizer: Any,
        *,
        text_column: str = "text",
        append_eos: bool = True,
        eos_token: str | None = None,
        on_error: Literal["raise", "skip"] = "raise",
        cache: str | os.PathLike[str] | None = None,
        storage_options: Any = None,
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error={on_error!r}: choose 'raise' or 'skip'")
        tok = load_tokenizer(tokenizer)
        self.tokenizer_json = tok.to_str()  # ships to the tasks
        self.info = describe_tokenizer(tok)
        self.eos = find_eos(tok, eos_token) if append_eos else None  # on the driver: early
        self.text_column, self.on_error = text_column, on_error
        options = {
            "kind": "tokens",
            "append_eos": append_eos,
            "eos_token": eos_token,
            "split": None,
            "on_error": on_error,
            "format": "ray",
        }
        super().__init__(dest, options, cache, storage_options)

    def write_shard(self, blocks: Iterable[Any], tmp: Path, task: int) -> dict[str, Any]:
        """In a task: this task's texts tokenized into one corpus shard in ``tmp``."""
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(self.tokenizer_json)
        skipped = Skips()
        texts = self.texts(blocks, task, skipped)
        with progress_bar(f"ray write task {task}", False) as bar:
            meta = write_tokens(tmp, texts, tok, self.info, self.eos, bar)
        about: dict[str, Any] = {
            "source": [{"ray_task": task}],
            "source_path": None,
            "source_identity": {},
        }
        skips = {"skipped": skipped.count, "skip_examples": skipped.examples}
        finish_shard(tmp, meta, self.info["sha256"], self.options, {**about, **skips})
        return {"documents": meta["documents"], "skipped": skipped.count}

    def texts(self, blocks: Iterable[Any], task: int, skipped: Skips) -> Iterator[str]:
        """The texts of ``blocks`` in order; a null or non-string one raises naming the task
        and row (numbered from 1 within the task, as the store sink and the file sources
        number theirs), or is counted into ``skipped`` (the first few named, as a file
        build names its lines: the manifest's ``skip_examples``)."""
        number = 0
        for block in blocks:
            table = arrow(block)
            if table.num_rows == 0:
                continue  # Ray hands a task of more blocks than rows an empty one, no columns
            if self.text_column not in table.column_names:
                raise SourceError(
                    f"ray write task {task}",
                    None,
                    f"no column {self.text_column!r} (columns: {table.column_names}); pass "
                    "LadingTokenDatasink(text_column=...)",
                )
            for text in table.column(self.text_column).to_pylist():
                number += 1
                if isinstance(text, str):
                    yield text
                    continue
                where = f"ray write task {task}, row {number}"
                why = f"{self.text_column!r} is {type(text).__name__} {text!r:.40}, not a string"
                if self.on_error == "skip":
                    skipped.add(1, [f"{where}: {why}"])
                else:
                    raise SourceError(
                        where,
                        None,
                        f"{why}; fix the dataset, or pass on_error='skip' to count and skip it",
                    )

    def read(self, root: Path, rel: str) -> Any:
        return read_corpus_shard(root, rel)

    def commit_local(self, build: BuildContext, shards: list[Any]) -> str:
        merge = BuildToCommit(self.build_id, shards, {"options": self.options}, [])
        return commit_corpus(build, merge)

    def commit_remote(
        self, settings: RemoteSettings, root: Path, previous: Any, shards: list[Any]
    ) -> str:
        assert self.url is not None
        merge = BuildToCommit(self.build_id, shards, {"options": self.options}, [])
        return commit_in_bucket(self.url, settings, root, previous, merge)


__all__ = ["LadingTokenDatasink"]
