"""The id indexes on their own: every present id found at its row, no absent id ever found."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import distinct_ids
from lading.stores.hashindex import HashIndex, query_words, write_hash_index
from lading.stores.index import canonical_int

ids_strategy = distinct_ids(longest=30, most=300)


@settings(max_examples=60, deadline=None)
@given(ids=ids_strategy, absent=st.lists(st.text(max_size=40), max_size=20))
def test_hash_index_finds_exactly_the_present_ids(tmp_path_factory, ids, absent) -> None:  # type: ignore[no-untyped-def]
    directory: Path = tmp_path_factory.mktemp("idx")
    width = max(8, -(-max(len(i.encode()) for i in ids) // 8) * 8)
    words, fits = query_words(ids, width)
    assert fits.all()
    meta, _ = write_hash_index(directory, np.ascontiguousarray(words), np.dtype("<i4"))
    index = HashIndex(directory, meta)
    assert index.rows(ids).tolist() == list(range(len(ids)))
    missing = [a for a in absent if a not in set(ids)]
    assert (index.rows(missing) == -1).all()


def test_canonical_ints() -> None:
    assert [canonical_int(s) for s in ["0", "7", "8841822", "10" * 9]] == [
        0,
        7,
        8841822,
        int("10" * 9),
    ]
    assert [canonical_int(s) for s in ["07", "+7", " 7", "7 ", "", "٧", "1" * 19, "1e3"]] == [
        None
    ] * 8
