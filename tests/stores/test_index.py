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


def test_one_long_id_that_widens_every_key_is_warned_naming_it(tmp_path: Path) -> None:
    """Every id's key is as wide as the longest: one 4,000-byte id among 2,000 short ones made
    an 8 MB index of 14 KB of ids without a word (a review's: a 20,000-byte one, 96 MB from a
    108 KB file; at MS MARCO's 8.8M passages a stray 1 KB id is a 9 GB index, in memory at the
    build). The build warns naming the row and the size; the store still reads."""
    import warnings

    from lading.errors import LongIdWarning
    from lading.stores import build_store

    source = tmp_path / "docs.tsv"
    lines = [f"d{i}\ttext {i}" for i in range(2000)] + ["y" * 4000 + "\tthe long one"]
    source.write_text("\n".join(lines) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = build_store(source, tmp_path / "store")
    said = [str(w.message) for w in caught if issubclass(w.category, LongIdWarning)]
    assert len(said) == 1, [str(w.message) for w in caught]
    assert "row 2000" in said[0] and "4,000 bytes" in said[0] and "yyyy" in said[0], said[0]
    assert store["y" * 4000] == "the long one" and store["d7"] == "text 7"
    with warnings.catch_warnings(record=True) as quiet:  # ids of one length: nothing to say
        warnings.simplefilter("always")
        source.write_text("".join(f"d{i:04d}\ttext\n" for i in range(2000)))
        build_store(source, tmp_path / "even")
    assert not [w for w in quiet if issubclass(w.category, LongIdWarning)]


def test_a_merge_warns_of_a_long_id_once_naming_its_shard_and_row(tmp_path: Path) -> None:
    """A 10-shard build of the same file said nothing, though the merge widens every shard's
    keys to the longest id's (each shard alone was under the 4 MiB floor); and a shard that
    did warn named a row of its own as if of the store (a diff review's finds). The merge
    warns once, naming the shard and the row within it."""
    import warnings

    from lading.errors import LongIdWarning
    from lading.stores import build_shard, merge_store

    source = tmp_path / "docs.tsv"
    lines = [f"d{i}\ttext {i}" for i in range(4000)]
    lines[3000] = "y" * 4000 + "\tthe long one"
    source.write_text("\n".join(lines) + "\n")
    for i in range(10):
        build_shard(source, tmp_path / "s", (i, 10), progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = merge_store(tmp_path / "s")
    said = [str(w.message) for w in caught if issubclass(w.category, LongIdWarning)]
    assert len(said) == 1, said
    assert "4,000 bytes" in said[0] and "/shard-00006-of-00010" in said[0], said[0]
    assert store["y" * 4000] == "the long one"
