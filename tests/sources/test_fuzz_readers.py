"""Random bytes into every reader: a result, or an error naming file and line; never a crash."""

from __future__ import annotations

import bz2
import contextlib
import decimal
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lading.errors import SourceError
from lading.ir import read_qrels, read_queries, read_run
from lading.sources import read_records

PIECES = [
    b"1",
    b"d7",
    b"\t",
    b" ",
    b"\n",
    b"\r\n",
    b"\x00",
    b"\xff",
    b"\xef\xbb\xbf",
    b"{",
    b"}",
    b'"id": 3',
    b'"text": "x"',
    b'"qid": "q"',
    b'"neg": ["a"]',
    b",",
    b":",
    b"<DOC>",
    b"</DOC>",
    b"<DOCNO>",
    b"</DOCNO>",
    b"<TEXT>",
    b"Q0",
    b"0",
    b"2.5",
    b"\xc3\xa9",
]
content = st.lists(st.sampled_from(PIECES), max_size=60).map(b"".join)
fuzz = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def check(call, path: Path) -> None:  # type: ignore[no-untyped-def]
    try:
        result = call()
    except SourceError as e:
        assert str(path) in str(e) and ("line" in str(e) or "compressed" in str(e)), str(e)
        return
    assert result is not None


@pytest.mark.parametrize("suffix", ["tsv", "jsonl", "trec"])
@fuzz
@given(data=content, skip=st.booleans())
def test_document_readers(tmp_path: Path, suffix: str, data: bytes, skip: bool) -> None:
    path = tmp_path / f"c.{suffix}"
    path.write_bytes(data)
    reader = read_records(path, on_error="skip" if skip else "raise")
    check(lambda: [(r.id, r.text) for r in reader], path)


@pytest.mark.parametrize("read", [read_queries, read_qrels, read_run])
@fuzz
@given(data=content)
def test_ir_readers(tmp_path: Path, read, data: bytes) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "input.txt"
    path.write_bytes(data)
    check(lambda: read(path), path)


# ---------------------------------------------------------------- hard-negative JSONL

ids = st.one_of(st.sampled_from(["q1", "q2", "d1", "d2", "d3"]), st.integers(0, 3))
good_line = st.fixed_dictionaries(
    {"qid": ids, "neg": st.lists(ids, max_size=4)}, optional={"pos": st.lists(ids, max_size=2)}
)
bad_value = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=False), st.just(" d1"), st.just(""),
    st.just("abc"), st.dictionaries(st.just("k"), st.integers(), max_size=1),
)  # fmt: skip


@st.composite
def hard_negative_lines(draw: st.DrawFn) -> tuple[str, bool]:
    """A JSONL line and whether it is valid."""
    obj = draw(good_line)
    kind = draw(st.sampled_from(["good", "good", "good", "value", "missing", "junk", "list"]))
    if kind == "good":
        return json.dumps(obj), True
    if kind == "value":  # one field, or one id inside a list, becomes something else
        field = draw(st.sampled_from(["qid", "neg", "pos"]))
        bad = draw(bad_value)
        if field == "qid" and bad == "abc":  # a fine id; only a list field refuses a string
            bad = None
        if field != "qid" and bad == "abc":
            obj[field] = bad  # a string where a list belongs: must not become ['a', 'b', 'c']
        elif field != "qid" and obj.get(field):
            obj[field][0] = bad
        else:
            obj[field] = bad
        return json.dumps(obj), False
    if kind == "missing":
        del obj[draw(st.sampled_from(["qid", "neg"]))]
        return json.dumps(obj), False
    if kind == "list":
        return json.dumps([obj]), False
    return json.dumps(obj)[: draw(st.integers(1, 8))], False


def expected_run(lines: list[tuple[str, bool]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for text, good in lines:
        if good:
            obj = json.loads(text)
            negatives = out.setdefault(str(obj["qid"]), [])
            negatives += [str(d) for d in obj["neg"] if str(d) not in negatives]
            negatives[:] = list(dict.fromkeys(negatives))
    return out


@fuzz
@given(lines=st.lists(hard_negative_lines(), min_size=1, max_size=12), skip=st.booleans())
def test_hard_negative_jsonl(tmp_path: Path, lines: list[tuple[str, bool]], skip: bool) -> None:
    lines[0] = (json.dumps({"qid": "q0", "neg": ["d0"]}), True)  # the format is told by line 1
    path = tmp_path / "negatives.jsonl"
    path.write_text("\n".join(text for text, _ in lines) + "\n")
    bad = [number for number, (_, good) in enumerate(lines, start=1) if not good]
    if bad and not skip:
        with pytest.raises(SourceError, match=rf"line {bad[0]} of {path}"):
            read_run(path)
        return
    run = read_run(path, on_error="skip" if skip else "raise")
    assert run.skipped == len(bad)
    assert dict(run) == expected_run(lines)  # nothing silently dropped or invented


# ---------------------------------------------------------------- truncated compressed files

COMPRESSORS = {"gz": gzip.compress, "bz2": bz2.compress}
with contextlib.suppress(ImportError):
    import zstandard

    COMPRESSORS["zst"] = lambda data: zstandard.ZstdCompressor().compress(data)


@pytest.mark.slow  # hypothesis over three compressors: ~7 s each, run by .ci/run
@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
@fuzz
@given(fraction=st.floats(0.001, 1, exclude_max=True), skip=st.booleans())
def test_truncated_compressed_sources(
    tmp_path: Path, suffix: str, fraction: float, skip: bool
) -> None:
    rows = "".join(f"d{i}\tpassage {i} " + "word " * (i % 17) + "\n" for i in range(3000))
    packed = COMPRESSORS[suffix](rows.encode())
    path = tmp_path / f"c.tsv.{suffix}"
    path.write_bytes(packed[: int(fraction * len(packed))])
    with pytest.raises(SourceError, match=r"compressed stream is corrupt or truncated") as e:
        list(read_records(path, on_error="skip" if skip else "raise"))  # skip never hides it
    assert str(path) in str(e.value)


# ---------------------------------------------------------------- enormous lines


@pytest.mark.parametrize("suffix", ["tsv", "jsonl", "tsv.gz"])
def test_enormous_lines_are_read_whole(tmp_path: Path, suffix: str) -> None:
    """A 20 MiB record (longer than the 8 MiB blocks the TSV path reads) between small ones."""
    big = "x" * (20 << 20)
    records = [("a", "small"), ("huge", big), ("z", "after")]
    if suffix.startswith("tsv"):
        text = "".join(f"{i}\t{t}\n" for i, t in records)
    else:
        text = "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in records)
    path = tmp_path / f"c.{suffix}"
    path.write_bytes(gzip.compress(text.encode(), 1) if suffix.endswith("gz") else text.encode())
    got = [(r.id, r.text) for r in read_records(path)]
    assert [i for i, _ in got] == ["a", "huge", "z"] and got[1][1] == big


# ---------------------------------------------------------------- parquet with unexpected types

ARROW_TYPES: dict[str, tuple[Callable[[Any], Any], bool]] = {
    "int8": (lambda pa: pa.int8(), True),
    "uint32": (lambda pa: pa.uint32(), True),
    "int64": (lambda pa: pa.int64(), True),
    "float32": (lambda pa: pa.float32(), True),
    "float64": (lambda pa: pa.float64(), True),
    "bool": (lambda pa: pa.bool_(), True),
    "string": (lambda pa: pa.string(), False),
    "binary": (lambda pa: pa.binary(), False),
    "timestamp": (lambda pa: pa.timestamp("ms"), False),
    "decimal": (lambda pa: pa.decimal128(5, 2), False),
    "dictionary": (lambda pa: pa.dictionary(pa.int8(), pa.string()), False),
    "struct": (lambda pa: pa.struct([("a", pa.int32())]), False),
    "null": (lambda pa: pa.null(), False),
}


@fuzz
@given(
    kind=st.sampled_from(sorted(ARROW_TYPES)),
    as_list=st.booleans(),
    nulls=st.booleans(),
    declare_list=st.booleans(),
)
def test_parquet_with_unexpected_types(
    tmp_path: Path, kind: str, as_list: bool, nulls: bool, declare_list: bool
) -> None:
    """A column loads exactly as written, or the error names the file, the column and a fix."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from lading.tabular import PartitionedParquet

    make_type, numeric = ARROW_TYPES[kind]
    value_type = make_type(pa)
    rows = 12
    if kind == "null":
        values: list[Any] = [None] * rows
    elif kind in ("string", "dictionary"):
        values = [f"s{i}" for i in range(rows)]
    elif kind == "binary":
        values = [b"b%d" % i for i in range(rows)]
    elif kind == "struct":
        values = [{"a": i} for i in range(rows)]
    elif kind == "timestamp":
        values = [i * 1000 for i in range(rows)]
    elif kind == "decimal":
        values = [decimal.Decimal(i) / 4 for i in range(rows)]
    elif kind == "bool":
        values = [i % 3 == 0 for i in range(rows)]
    else:
        values = list(range(rows))
    if nulls and kind != "null":
        values[3] = None
    column_type = value_type
    if as_list:
        values = [[v, v] if v is not None else None for v in values]
        column_type = pa.list_(value_type)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"c": pa.array(values, column_type)}), path)
    list_columns = {"c": 3} if declare_list else None
    try:
        ds = PartitionedParquet(
            path, columns=["c"], batch_size=rows, list_columns=list_columns, shuffle=False
        )
        (batch,) = list(ds)
    except ValueError as e:
        assert str(path) in str(e) and "'c'" in str(e), str(e)
        return
    assert numeric and not (nulls and kind != "null") and as_list == declare_list
    if as_list:
        assert batch["c"][:, :2].tolist() == values and batch["c_lengths"].tolist() == [2] * rows
    else:
        assert batch["c"].tolist() == [float(v) if kind.startswith("float") else v for v in values]
