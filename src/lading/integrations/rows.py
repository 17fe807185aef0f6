"""Training groups as rows in sentence-transformers' dataset formats, and a dataset of them.

A group is one query, its relevant document and ``k`` negatives (see
:class:`~lading.ir.TrainingGroups`). The formats are those ``sentence_transformers.util.
mine_hard_negatives`` writes, so a loss that trains on its output trains on these rows:

- ``"n-tuple"``: one row ``query, positive, negative_1 … negative_k`` (MultipleNegativesRankingLoss
  for bi-encoders and cross-encoders);
- ``"triplet"``: ``k`` rows ``anchor, positive, negative`` (TripletLoss, MNRL);
- ``"labeled-pair"``: ``k + 1`` rows ``query, passage, label`` with label 1.0 for the relevant
  document (the cross-encoder's BinaryCrossEntropyLoss);
- ``"labeled-list"``: one row ``query, docs, labels`` (the cross-encoder's listwise losses).

Column order matters to sentence-transformers' losses (the first column is the anchor); the
dicts keep it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lading.loading.hooks import EpochIndex

ROW_FORMATS: tuple[str, ...] = ("labeled-list", "labeled-pair", "n-tuple", "triplet")


def check_format(fmt: str) -> str:
    """``fmt`` if it is a known row format, else a ValueError listing them."""
    if fmt not in ROW_FORMATS:
        raise ValueError(f"unknown row format {fmt!r}; choose from {sorted(ROW_FORMATS)}")
    return fmt


def group_rows(query: str, texts: Sequence[str], fmt: str) -> list[dict[str, Any]]:
    """The rows of one group in ``fmt``; ``texts[0]`` is the relevant document."""
    positive, negatives = texts[0], list(texts[1:])
    if fmt == "n-tuple":
        row: dict[str, Any] = {"query": query, "positive": positive}
        row.update({f"negative_{i}": t for i, t in enumerate(negatives, start=1)})
        return [row]
    if fmt == "triplet":
        if not negatives:
            raise ValueError("the triplet format needs negatives: use group_size >= 2")
        return [{"anchor": query, "positive": positive, "negative": t} for t in negatives]
    if fmt == "labeled-pair":
        return [
            {"query": query, "passage": t, "label": 1.0 if i == 0 else 0.0}
            for i, t in enumerate(texts)
        ]
    if fmt == "labeled-list":
        return [{"query": query, "docs": list(texts), "labels": [1] + [0] * len(negatives)}]
    check_format(fmt)
    raise AssertionError("unreachable")


def rows_per_group(fmt: str, group_size: int) -> int:
    """How many rows one group becomes in ``fmt``."""
    return {"n-tuple": 1, "labeled-list": 1, "triplet": group_size - 1}.get(
        check_format(fmt), group_size
    )


class GroupRows:
    """A map-style dataset whose item ``i`` is the list of rows of training group ``i``.

    Texts come from the groups' store by row code (no id lookup). Epoch-aware like the groups:
    with :func:`lading.loader` each key carries its epoch, so negatives are redrawn from
    ``(seed, epoch, i)`` in every DataLoader worker, identically on every rank.

    Args:
        groups: a :class:`~lading.ir.TrainingGroups` (or any dataset of items with ``query``
            and ``doc_codes``, relevant document first).
        fmt: one of :data:`ROW_FORMATS`.
    """

    epoch_aware = True

    def __init__(self, groups: Any, fmt: str = "n-tuple") -> None:
        self.groups, self.fmt = groups, check_format(fmt)

    def __len__(self) -> int:
        return len(self.groups)

    def set_epoch(self, epoch: int) -> None:
        self.groups.set_epoch(epoch)

    def data_fingerprint(self) -> str | None:
        """The groups' content digest and the row format (what a loader state is keyed on),
        None where the groups have no digest."""
        method = getattr(self.groups, "data_fingerprint", None)
        return f"{method()}:{self.fmt}" if callable(method) else None

    def ranks_fingerprint(self) -> str | None:
        """The groups' (what every rank holds alike) and the row format, None where the
        groups have none (:mod:`lading.loading.agree` compares it across ranks)."""
        method = getattr(self.groups, "ranks_fingerprint", None)
        return f"{method()}:{self.fmt}" if callable(method) else None

    def duplicate_keys(self, items: Any, epoch: int) -> Any:
        """The groups' keys (for ``batching="no_duplicates"``): a group's rows are one unit."""
        return self.groups.duplicate_keys(items, epoch)

    def __getitem__(self, key: int | EpochIndex) -> list[dict[str, Any]]:
        item = self.groups[key]
        texts = self.groups.store.texts_at(item["doc_codes"])
        return group_rows(item["query"], texts, self.fmt)


class FlattenRows:
    """A collate function: the rows of every group in a batch, handed to ``collate`` as one list."""

    def __init__(self, collate: Callable[[list[dict[str, Any]]], Any]) -> None:
        self.collate = collate

    def __call__(self, items: Sequence[list[dict[str, Any]]]) -> Any:
        return self.collate([row for rows in items for row in rows])
