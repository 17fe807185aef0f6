"""HF ``datasets`` in and out: a store from a dataset (or parquet/Arrow files), groups as a dataset.

In: :func:`build_store` takes a ``datasets.Dataset``, a ``DatasetDict`` and a split, or a parquet
or Arrow file, with the id and text columns named, and builds a lading store once (reused while
the dataset's fingerprint and the options stay the same). Out: :func:`groups_to_dataset` writes
the training groups of one epoch as a ``datasets.Dataset`` in a sentence-transformers format
(:mod:`lading.integrations.rows`), for those who want the static file, and
:func:`store_to_dataset` a store's documents (text, fields, token ids); training through
:mod:`lading.integrations.sentence_transformers` redraws the negatives every epoch instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from lading.integrations.rows import GroupRows, check_format
from lading.sources import OnError, ParseOptions, RecordStream
from lading.stores import PackedStore
from lading.stores import build_store as build_from_source

READ_ROWS = 1000  # rows per batch read from a dataset's Arrow table


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise ImportError(
            "this needs HF datasets. To install:\n  pip install 'lading[datasets]'"
        ) from None
    return datasets


def pick_split(data: Any, split: str | None) -> Any:
    """The ``datasets.Dataset`` of ``data``: itself, or its ``split`` when it is a DatasetDict."""
    datasets = _datasets()
    if isinstance(data, datasets.DatasetDict):
        if split is None:
            if len(data) != 1:
                raise ValueError(f"the DatasetDict has splits {sorted(data)}: pass split=")
            split = next(iter(data))
        if split not in data:
            raise KeyError(f"no split {split!r}; the DatasetDict has {sorted(data)}")
        return data[split]
    if isinstance(data, datasets.Dataset):
        return data
    raise TypeError(
        f"expected a datasets.Dataset or DatasetDict, got {type(data).__name__}; materialise an "
        "IterableDataset first (Dataset.from_generator) or pass a parquet/Arrow file"
    )


def build_store(
    data: Any,
    dest: str | os.PathLike[str],
    *,
    id_column: str = "id",
    text_column: str = "text",
    split: str | None = None,
    fields: Sequence[str] = ("title",),
    on_error: OnError = "raise",
    **options: Any,
) -> PackedStore:
    """Build (once) and open a store of the documents in ``data``.

    Args:
        data: a ``datasets.Dataset``, a ``DatasetDict`` (with ``split``), or the path of a
            parquet or Arrow file.
        dest: the store directory.
        id_column, text_column: where the document id and text are.
        split: the split of a DatasetDict (may be left out when it has one).
        fields: further string columns kept as store fields where present.
        on_error: a null id or non-string text stops the build (``"raise"``) or is skipped
            and counted (``"skip"``).
        **options: passed to :func:`lading.build_store` (``tokenizer``, ``max_length``,
            ``duplicates``, ``overwrite``, ``builder``…).
    """
    if isinstance(data, (str, os.PathLike)):
        parse = ParseOptions(id_field=id_column, text_field=text_column, keep_fields=fields)
        return build_from_source(data, dest, on_error=on_error, parse=parse, **options)
    dataset = pick_split(data, split)
    names = list(dataset.column_names)
    for column in (id_column, text_column):
        if column not in names:
            raise ValueError(
                f"the dataset has no column {column!r}; its columns are {names} "
                "(name them with id_column=/text_column=)"
            )
    kept = [f for f in fields if f in names and f not in (id_column, text_column)]
    table = dataset.select_columns([id_column, text_column, *kept])

    def records() -> Iterator[tuple[Any, Any, dict[str, Any]]]:
        for batch in table.iter(batch_size=READ_ROWS):
            ids, texts = batch[id_column], batch[text_column]
            for i in range(len(ids)):
                yield ids[i], texts[i], {f: batch[f][i] for f in kept}

    fingerprint = getattr(dataset, "_fingerprint", None)
    identity = {
        "hf_dataset": fingerprint,
        "rows": dataset.num_rows,
        "columns": [id_column, text_column, *kept],
    }
    stream = RecordStream(records, f"datasets.Dataset({fingerprint})", identity, on_error)
    return build_from_source(stream, dest, **options)


def _generate(groups: Any, epoch: int, fmt: str, data: str) -> Iterator[dict[str, Any]]:
    """The rows of ``groups``' epoch; ``data`` (their content digest) only keys the cache."""
    from lading.loading.hooks import EpochIndex

    rows = GroupRows(groups, fmt)
    for i in range(len(rows)):
        yield from rows[EpochIndex(epoch, i)]


def groups_to_dataset(
    groups: Any, fmt: str = "n-tuple", *, epoch: int = 0, cache_dir: str | None = None
) -> Any:
    """The groups of ``epoch`` as a ``datasets.Dataset`` in a sentence-transformers format.

    Args:
        groups: a :class:`~lading.ir.TrainingGroups`.
        fmt: ``"n-tuple"``, ``"triplet"``, ``"labeled-pair"`` or ``"labeled-list"``.
        epoch: whose negatives (the same draw :func:`lading.loader` makes in that epoch).
        cache_dir: where datasets writes the Arrow file (default: its cache).

    Rows follow the item order (not an epoch's shuffle); ``dataset.to_parquet(...)`` or
    ``save_to_disk(...)`` writes the static file.
    """
    _datasets()  # not installed: say so before anything else
    check_format(fmt)
    return _from_generator(
        _generate, groups.data_fingerprint(), cache_dir, groups=groups, epoch=epoch, fmt=fmt
    )


def _store_rows(
    store: Any, fields: tuple[str, ...], tokens: bool, data: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """The store's documents in row order, a block at a time; ``data`` only keys the cache."""
    import numpy as np

    for start in range(0, len(store), READ_ROWS):
        rows = np.arange(start, min(start + READ_ROWS, len(store)), dtype=np.int64)
        ids, texts = store.ids_at(rows), store.texts_at(rows)
        ids_of = store.tokens_at(rows) if tokens else [None] * len(rows)
        for doc_id, text, token_ids in zip(ids, texts, ids_of):
            row: dict[str, Any] = {"id": doc_id, "text": text}
            for name in fields:
                row[name] = store.field(doc_id, name)
            if tokens:
                row["input_ids"] = token_ids.tolist()
            yield row


def store_to_dataset(store: Any, *, tokens: bool = False, cache_dir: str | None = None) -> Any:
    """A store's documents as a ``datasets.Dataset``: ``id``, ``text``, each stored field
    (e.g. ``title``), and with ``tokens=True`` the stored token ids as ``input_ids``.

    Rows are in the store's row order (the source's order). The snapshot of the store object
    passed keys datasets' cache (the rows come from that object, whatever was rebuilt on disk
    since), so a rebuilt and reopened store is exported afresh, an unchanged one reused.

    Raises:
        ValueError: ``tokens=True`` on a store built without a tokenizer.
    """
    from lading.stores.base import store_identity

    _datasets()  # not installed: say so before anything else
    if tokens and not store.has_tokens:
        raise store.no_tokens()
    fields = tuple(getattr(store, "fields", ()))
    return _from_generator(
        _store_rows, store_identity(store), cache_dir, store=store, fields=fields, tokens=tokens
    )


def _from_generator(
    generate: Callable[..., Iterator[dict[str, Any]]], data: Any, cache_dir: str | None, **kw: Any
) -> Any:
    """``datasets.Dataset.from_generator(generate)`` with the generator's keywords ``kw``, and
    ``data``, the content digest of what the rows come from (with the store's snapshot), among
    them: datasets keys its cache on the keywords, so rows of a rebuilt store are not served
    from the old Arrow file."""
    return _datasets().Dataset.from_generator(
        generate, gen_kwargs={**kw, "data": data}, cache_dir=cache_dir
    )


__all__ = ["build_store", "groups_to_dataset", "pick_split", "store_to_dataset"]
