"""InMemoryStore: the study's baseline 1, every document in a dict in every process.

Kept as the reference point of the benchmarks: the fastest possible lookup, and a full copy of
the corpus in each DDP rank (and, once reference counts touch the pages after a fork, in each
DataLoader worker). On MS MARCO passages that is ~500 MiB of anonymous memory per process per
million passages; with documents (~22 GB) the study ran out of memory at 4 GPUs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from lading.errors import SourceError
from lading.sources import OnError, ParseOptions, read_records
from lading.stores.base import DocStore, IdLike, id_list, id_text, is_id
from lading.stores.building.writer import DUPLICATE_MODES, Duplicates


class InMemoryStore(DocStore):
    """A dict from id to text, loaded from a source.

    Pickles as its recipe (source and options), so a ``spawn`` DataLoader worker reloads the
    source, exactly as each process of the study's training script did.
    """

    def __init__(self, docs: dict[str, str], recipe: dict[str, Any] | None = None) -> None:
        self._docs = docs
        self._recipe = recipe

    @classmethod
    def from_source(
        cls,
        source: str | os.PathLike[str],
        format: str | None = None,
        on_error: OnError = "raise",
        *,
        duplicates: Duplicates = "error",
        parse: ParseOptions | None = None,
    ) -> InMemoryStore:
        """Read every record of ``source`` into a dict (arguments as :func:`lading.build_store`'s;
        only the text of each record is kept, so ``parse.keep_fields`` changes nothing)."""
        if duplicates not in DUPLICATE_MODES:
            raise ValueError(
                f"unknown duplicates {duplicates!r}; choose from {sorted(DUPLICATE_MODES)}"
            )
        reader = read_records(source, format, on_error, parse=parse)
        docs: dict[str, str] = {}
        for record, line, _ in reader.iter_numbered():
            if record.id in docs:
                if duplicates == "error":
                    raise SourceError(
                        reader.path or os.fspath(source),
                        line,
                        f"duplicate id {record.id!r}; pass duplicates='first' or 'last'",
                    )
                if duplicates == "first":
                    continue
                # "last": the id's row is where its last occurrence is, as in the packed and
                # offset stores (a dict re-assigned in place keeps the first one's place)
                del docs[record.id]
            docs[record.id] = record.text
        if not docs:
            from lading.stores.building.writer import empty_source_reason

            raise SourceError(reader.source, None, empty_source_reason(reader))
        recipe = {
            "source": os.fspath(source),
            "format": reader.format,
            "on_error": on_error,
            "duplicates": duplicates,
            "parse": reader.options,  # frozen, so the recipe pickles it as a value
        }
        store = cls(docs, recipe)
        store.skipped = reader.skipped
        return store

    skipped: int = 0

    def __repr__(self) -> str:
        origin = self._recipe["source"] if self._recipe else "dict"
        return f"InMemoryStore({origin!r}, {len(self._docs)} docs)"

    def __getstate__(self) -> dict[str, Any]:
        if self._recipe is None:
            return {"docs": self._docs, "recipe": None}
        return {"recipe": self._recipe}

    def __setstate__(self, state: dict[str, Any]) -> None:
        recipe = state["recipe"]
        if recipe is None:
            self._docs, self._recipe = state["docs"], None
            return
        args = dict(recipe)
        fresh = InMemoryStore.from_source(args.pop("source"), **args)
        self._docs, self._recipe, self.skipped = fresh._docs, recipe, fresh.skipped

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, doc_id: object) -> bool:
        return str(doc_id) in self._docs if is_id(doc_id) else False

    def ids(self) -> list[str]:
        return list(self._docs)

    def __getitem__(self, doc_id: IdLike) -> str:
        key = doc_id if type(doc_id) is str else id_text(doc_id)  # None: no id, no key either
        try:
            return self._docs[key]  # type: ignore[index]
        except KeyError:
            raise self.missing(doc_id) from None

    def get_many(self, ids: Sequence[IdLike]) -> list[str]:
        id_list(ids)
        docs = self._docs
        try:
            return [docs[i] for i in ids]  # type: ignore[index]
        except KeyError:
            return [self[i] for i in ids]  # int ids, or name the missing one
