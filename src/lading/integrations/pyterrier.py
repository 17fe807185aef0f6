"""Document text from a lading store in a PyTerrier pipeline (no Java, no Terrier index needed).

``pipeline >> store_text_loader(store)`` adds a ``text`` column (and any stored field, e.g.
``title``) to a result frame by its ``docno`` column, as PyTerrier's own text loaders do for a
Terrier index or an ir_datasets docstore. :class:`PyTerrierStore` gives a store PyTerrier's
``HasTextLoader`` protocol, so ``pt.text.get_text(PyTerrierStore(store), "text")`` works too.
Texts are read by row from the memory map in one ``get_many``-style call per frame; the
input's row order and duplicates are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lading.errors import missing_package

try:
    import pyterrier as pt
except ImportError:  # pragma: no cover - depends on the environment
    raise missing_package("lading.integrations.pyterrier", "PyTerrier", "pyterrier") from None

from lading.stores.base import DocStore

TEXT = "text"


def _available(store: DocStore) -> list[str]:
    return [TEXT, *getattr(store, "fields", ())]


def _fields(store: DocStore, fields: str | Sequence[str]) -> list[str]:
    available = _available(store)
    if fields == "*":
        return available
    wanted = [fields] if isinstance(fields, str) else list(fields)
    missing = [f for f in wanted if f not in available]
    if missing:
        raise ValueError(f"{store!r} has no field {missing}; its fields are {available}")
    return wanted


class StoreTextLoader(pt.Transformer):
    """A transformer adding the store's text (and fields) to each row, found by ``docno``.

    Args:
        store: any lading store.
        fields: ``"text"``, a stored field name, a list of them, or ``"*"`` (all).
        on_missing: a docno absent from the store is an error (``"raise"``) or gets an empty
            text (``"empty"``).
    """

    schematic = {"label": "TextLoader"}  # noqa: RUF012 - PyTerrier reads it as a class attribute

    def __init__(
        self, store: DocStore, fields: str | Sequence[str] = TEXT, *, on_missing: str = "raise"
    ) -> None:
        if on_missing not in ("raise", "empty"):
            raise ValueError(f"unknown on_missing {on_missing!r}; choose from ['empty', 'raise']")
        self.store, self.fields, self.on_missing = store, _fields(store, fields), on_missing

    def transform(self, inp: Any) -> Any:
        """``inp`` with the text columns appended (replacing columns of the same names)."""
        import pandas as pd

        if "docno" not in inp.columns:
            raise ValueError(f"input has no 'docno' column; its columns are {list(inp.columns)}")
        docnos = [str(d) for d in inp["docno"].tolist()]
        rows = self.store.find_rows(docnos)
        absent = np.flatnonzero(rows < 0)
        if len(absent) and self.on_missing == "raise":
            raise KeyError(
                f"docno {docnos[absent[0]]!r} is not in {self.store!r} ({len(absent)} such); "
                "pass on_missing='empty' to give them empty text"
            )
        found = rows >= 0
        columns: dict[str, list[str]] = {}
        for name in self.fields:
            values = [""] * len(docnos)
            if name == TEXT:
                texts = self.store.texts_at(rows[found])
            else:
                texts = [self.store.field(d, name) for d in np.asarray(docnos)[found]]  # type: ignore[attr-defined]
            for i, text in zip(np.flatnonzero(found).tolist(), texts):
                values[i] = text
            columns[name] = values
        out = inp.drop(columns=self.fields, errors="ignore").reset_index(drop=True)
        return pd.concat([out, pd.DataFrame(columns)], axis="columns")

    def fuse_rank_cutoff(self, k: int) -> Any:
        """Cut the ranking before loading text (PyTerrier's pipeline optimisation)."""
        return pt.RankCutoff(k) >> self


class PyTerrierStore:
    """A store seen as PyTerrier's ``HasTextLoader`` (for ``pt.text.get_text``)."""

    def __init__(self, store: DocStore) -> None:
        self.store = store

    def text_loader(
        self, fields: str | Sequence[str] = "*", *, verbose: bool = False
    ) -> StoreTextLoader:
        """A transformer loading ``fields`` (all by default) by docno."""
        return StoreTextLoader(self.store, fields)


def store_text_loader(
    store: DocStore, fields: str | Sequence[str] = TEXT, *, on_missing: str = "raise"
) -> StoreTextLoader:
    """``pipeline >> store_text_loader(store)``: add the documents' text to the results."""
    return StoreTextLoader(store, fields, on_missing=on_missing)


__all__ = ["PyTerrierStore", "StoreTextLoader", "store_text_loader"]
