"""The bulk TSV path gives exactly what the per-line path gives: records, lines, skips, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lading.tsv_blocks
from lading.errors import SourceError
from lading.sources import SourceReader
from lading.tsv_blocks import TsvBlock, int_values

PIECES = [
    b"1",
    b"42",
    b"007",
    b"abc",
    b"\t",
    b"\t",
    b"\r",
    b" ",
    b"\x00",
    b"\xff",
    b"\xc3\xa9",
    b"text",
    b"\xef\xbb\xbf",
    b"\x0b",
    b"x" * 40,
]
line_strategy = st.lists(st.sampled_from(PIECES), max_size=8).map(b"".join)
file_strategy = st.lists(line_strategy, max_size=40).map(lambda ls: b"\n".join(ls))


def flatten(reader: SourceReader, bulk: bool) -> list[tuple[str, str, int]]:
    out = []
    items = reader.iter_bulk() if bulk else reader.iter_numbered()
    for item in items:
        if isinstance(item, TsvBlock):
            ends = [0, *__import__("itertools").accumulate(item.text_lengths.tolist())]
            for i, doc_id in enumerate(item.ids):
                text = item.texts[ends[i] : ends[i + 1]].decode()
                out.append((doc_id.decode(), text, int(item.lines[i])))
        else:
            record, line, _ = item
            out.append((record.id, record.text, line))
    return out


def outcome(path: Path, on_error: str, bulk: bool) -> tuple[object, ...]:
    reader = SourceReader(path, "tsv", on_error)  # type: ignore[arg-type]
    try:
        return ("ok", flatten(reader, bulk), reader.skipped, reader.skip_reasons)
    except SourceError as e:
        return ("error", str(e))


@settings(max_examples=300, deadline=None)
@given(content=file_strategy, on_error=st.sampled_from(["raise", "skip"]), block=st.integers(1, 64))
def test_bulk_equals_per_line(
    tmp_path_factory: pytest.TempPathFactory, content: bytes, on_error: str, block: int
) -> None:
    path = tmp_path_factory.mktemp("tsv") / "c.tsv"
    path.write_bytes(content)
    old = lading.tsv_blocks.BLOCK_BYTES
    lading.tsv_blocks.BLOCK_BYTES = block  # tiny blocks: lines cross block edges
    try:
        assert outcome(path, on_error, bulk=True) == outcome(path, on_error, bulk=False)
    finally:
        lading.tsv_blocks.BLOCK_BYTES = old


def test_clean_blocks_are_taken_whole(tmp_path: Path) -> None:
    path = tmp_path / "c.tsv"
    path.write_bytes(b"".join(b"%d\tpassage %d\r\n" % (i, i) for i in range(1000)))
    items = list(SourceReader(path).iter_bulk())
    assert len(items) == 1 and isinstance(items[0], TsvBlock)
    assert items[0].lines.tolist() == list(range(1, 1001))


def test_int_values_are_canonical_only() -> None:
    assert int_values([b"0", b"7", b"8841822"]).tolist() == [0, 7, 8841822]  # type: ignore[union-attr]
    for bad in ([b"07"], [b"1", b"x"], [b"1" * 19], [b"-1"]):
        assert int_values(bad) is None
