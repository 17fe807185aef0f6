"""Damaged compressed sources: every kind of damage is lading's one SourceError naming the file,
never a shorter corpus and never a decompressor's own exception."""

from __future__ import annotations

import bz2
import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import write
from lading.errors import SourceError
from lading.sources import read_records
from lading.sources.chunks import open_binary


def rows(prefix: str, n: int) -> bytes:
    return b"".join(
        b"%s%d\t%s member row %d\n" % (prefix.encode(), i, prefix.encode(), i) for i in range(n)
    )


def zstd_compress(data: bytes) -> bytes:
    zstandard = pytest.importorskip("zstandard")
    return zstandard.ZstdCompressor().compress(data)  # type: ignore[no-any-return]


COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gz": gzip.compress,
    "bz2": bz2.compress,
    "zst": zstd_compress,
}


def damaged(payload: bytes, at: int) -> bytes:
    flipped = bytearray(payload)
    flipped[at] ^= 0xFF
    return bytes(flipped)


def assert_corrupt(path: Path, modes: tuple[str, ...] = ("raise", "skip")) -> None:
    for on_error in modes:  # skipping records never hides a damaged stream
        with pytest.raises(SourceError, match="compressed stream is corrupt or truncated") as e:
            list(read_records(path, on_error=on_error))
        assert str(path) in str(e.value)


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_a_damaged_later_member_is_an_error_not_half_the_rows(tmp_path: Path, suffix: str) -> None:
    """``cat a.bz2 b.bz2`` (or pbzip2) whose second member is damaged at its first byte."""
    compress = COMPRESS[suffix]
    payload = compress(rows("a", 1000)) + damaged(compress(rows("b", 1000)), 0)
    assert_corrupt(write(tmp_path / f"c.tsv.{suffix}", payload))


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_garbage_after_the_last_member_is_an_error(tmp_path: Path, suffix: str) -> None:
    payload = COMPRESS[suffix](rows("a", 1000)) + b"garbage!!"
    assert_corrupt(write(tmp_path / f"c.tsv.{suffix}", payload))


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_a_flipped_byte_inside_the_stream_is_an_error(tmp_path: Path, suffix: str) -> None:
    payload = COMPRESS[suffix](
        b"".join(b"%d\tdoc %d %s\n" % (i, i, b"z" * 50) for i in range(20000))
    )
    # garbled rows may come out before the check that fails (a record error under "raise")
    assert_corrupt(
        write(tmp_path / f"c.tsv.{suffix}", damaged(payload, len(payload) // 2)), ("skip",)
    )


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_many_members_read_whole(tmp_path: Path, suffix: str) -> None:
    """Members of every size, some smaller than a read, some larger, one empty: every row."""
    parts = [rows(f"m{k}-", n) for k, n in enumerate([1, 0, 3, 40000, 2, 7, 50000, 1])]
    payload = b"".join(COMPRESS[suffix](part) for part in parts)
    path = write(tmp_path / f"c.tsv.{suffix}", payload)
    with open_binary(path) as stream:
        assert stream.read() == b"".join(parts)
    with open_binary(path) as stream:  # line by line, as the chunkers read
        assert b"".join(stream) == b"".join(parts)
    assert len(list(read_records(path))) == sum(part.count(b"\n") for part in parts)


def test_a_truncated_bz2_member_is_an_error(tmp_path: Path) -> None:
    first, second = bz2.compress(rows("a", 1000)), bz2.compress(rows("b", 1000))
    assert_corrupt(write(tmp_path / "c.tsv.bz2", first + second[: len(second) // 2]))
    assert_corrupt(write(tmp_path / "d.tsv.bz2", first + second[:3]))  # the header only


TEXT_KINDS = {  # a plain text file of lines, and the IR inputs' line formats
    "text": lambda i: b"line number %d of some running text here\n" % i,
    "queries": lambda i: b"q%d\tquery number %d\n" % (i, i),
    "qrels": lambda i: b"q%d 0 d%d 1\n" % (i, i),
    "run": lambda i: b"q%d Q0 d%d 1 %d.5 sys\n" % (i, i, 30000 - i),
}


def read_kind(kind: str, path: Path) -> int:
    """Every record of ``path`` read under ``on_error="skip"``: garbled lines that come out of
    a flipped byte before the stream's check fails are skipped, never the damage itself."""
    from lading.ir.inputs import read_qrels, read_queries, read_run
    from lading.lm.texts import Skips, iter_texts

    if kind == "text":
        return sum(1 for _ in iter_texts(path, split="line", on_error="skip", skipped=Skips()))
    read = {"queries": read_queries, "qrels": read_qrels, "run": read_run}[kind]
    return len(read(path, on_error="skip"))


@pytest.mark.parametrize("kind", sorted(TEXT_KINDS))
@pytest.mark.parametrize("damage", ["flipped", "truncated"])
def test_text_and_ir_inputs_name_the_damaged_file(tmp_path: Path, kind: str, damage: str) -> None:
    """A token corpus's plain text and the rankers' queries, qrels and runs read compressed
    files through the same reader: damage is the one SourceError naming the file, not
    gzip's ``BadGzipFile``/``EOFError`` without a name (a traceback from ``lading lm build``)."""
    payload = gzip.compress(b"".join(TEXT_KINDS[kind](i) for i in range(20000)))
    bad = damaged(payload, len(payload) // 2) if damage == "flipped" else payload[:-100]
    path = write(tmp_path / f"c.{kind}.txt.gz", bad)
    good = write(tmp_path / f"good.{kind}.txt.gz", payload)
    assert read_kind(kind, good) == 20000
    with pytest.raises(SourceError, match="compressed stream is corrupt or truncated") as e:
        read_kind(kind, path)
    assert str(path) in str(e.value)
