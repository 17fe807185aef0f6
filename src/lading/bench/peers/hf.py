"""``hf``: the collection as a Hugging Face ``datasets.Dataset``, saved to disk and opened with
``load_from_disk`` (Arrow, memory-mapped: the text is shared through the page cache).

Built with ``Dataset.from_csv`` (the library's own fast path for a TSV: pyarrow's CSV reader,
no Python loop over rows) and ``save_to_disk``. The ids come out of the Arrow column at once
(``dataset["id"]``), so the id map each rank builds (:class:`~lading.bench.peers.base.IdMapStore`)
costs the id strings and the dict, no read of the texts.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from lading.bench.peers.base import IdMapStore, peer_module, publish

DONE = "dataset_info.json"  # save_to_disk writes it


def build_hf(corpus: Path, dest: Path) -> Path:
    """``corpus`` (``id<TAB>text``) as a saved Dataset at ``dest`` (kept when already there)."""

    def build(tmp: Path) -> None:
        datasets = peer_module("datasets")
        cache = tmp.with_name(tmp.name + ".cache")  # from_csv's Arrow cache, never ~/.cache
        text = datasets.Value("string")
        try:
            table = datasets.Dataset.from_csv(
                str(corpus),
                sep="\t",
                column_names=["id", "text"],
                quoting=3,  # csv.QUOTE_NONE: a passage's quotes are text
                keep_default_na=False,
                features=datasets.Features({"id": text, "text": text}),
                cache_dir=str(cache),
            )
            table.save_to_disk(str(tmp))
        finally:
            shutil.rmtree(cache, ignore_errors=True)

    return publish(dest, build, DONE)


class HFDatasetStore(IdMapStore):
    """A saved Dataset read as a document store: rows found through a per-process id map."""

    def _open(self) -> None:
        self.data = peer_module("datasets").load_from_disk(str(self.path))

    def _count(self) -> int:
        return len(self.data)

    def _read_ids(self, count: int) -> list[str]:
        ids: list[str] = self.data["id"]
        return list(ids)

    def _read_texts(self, rows: list[int]) -> list[str]:
        texts: list[str] = self.data[rows]["text"]
        return texts

    def scan(self) -> int:
        """Texts read in one sequential pass, a batch of 1,024 rows at a time (the route
        ``Dataset.iter`` gives a user)."""
        batches: Any = self.data.iter(batch_size=1024)
        return sum(len(batch["text"]) for batch in batches)
