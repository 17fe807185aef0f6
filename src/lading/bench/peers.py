"""Peer data layers as bench strategies: documents read through another tool's route.

``hf``: the collection as a Hugging Face ``datasets.Dataset`` saved to disk and opened with
``load_from_disk`` (Arrow, memory-mapped). A Dataset has no lookup by id, so each rank builds the
route a user would: a dict from every id to its row, which the bench counts as that rank's
memory. Other peers (Mosaic streaming, litdata) are measured by ``benchmarks/bench_peers.py``.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lading.stores.base import DocStore, IdLike

PEER_STRATEGIES: tuple[str, ...] = ("hf",)


def unavailable(strategy: str) -> str | None:
    """Why peer ``strategy`` cannot run here (its package is missing), or None."""
    if strategy == "hf":
        try:
            import datasets  # noqa: F401
        except ImportError as e:
            return f"HF datasets is not installed ({e}); pip install 'lading[peers]'"
    return None


def build_hf(corpus: Path, dest: Path) -> Path:
    """``corpus`` (``id<TAB>text``) as a saved Dataset at ``dest`` (kept when already there)."""
    if (dest / "dataset_info.json").is_file():
        return dest
    import datasets

    cache = dest.with_name(dest.name + ".cache")
    text = datasets.Value("string")
    table = datasets.Dataset.from_csv(
        str(corpus),
        sep="\t",
        column_names=["id", "text"],
        quoting=3,  # csv.QUOTE_NONE: a passage's quotes are text
        keep_default_na=False,
        features=datasets.Features({"id": text, "text": text}),
        cache_dir=str(cache),
    )
    table.save_to_disk(str(dest))
    shutil.rmtree(cache, ignore_errors=True)
    return dest


class HFDatasetStore(DocStore):
    """A saved Dataset read as a document store: rows found through a per-process id map."""

    def __init__(self, path: Path) -> None:
        import datasets

        self.path = Path(path)
        self._table: Any = datasets.load_from_disk(str(self.path))
        self._rows = {doc_id: row for row, doc_id in enumerate(self._table["id"])}

    def get_many(self, ids: Sequence[IdLike]) -> list[str]:
        try:
            rows = [self._rows[str(doc_id)] for doc_id in ids]
        except KeyError as e:
            raise self.missing(e.args[0]) from None
        texts: list[str] = self._table[rows]["text"]
        return texts

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, doc_id: object) -> bool:
        return str(doc_id) in self._rows

    def ids(self) -> list[str]:
        return list(self._rows)

    def scan(self) -> int:
        """Texts read in one sequential pass, a batch of 1,024 rows at a time (the route
        ``Dataset.iter`` gives a user)."""
        return sum(len(batch["text"]) for batch in self._table.iter(batch_size=1024))

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]
