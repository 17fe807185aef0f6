"""Readers of queries, relevance judgements and runs: TREC, MS MARCO, BEIR and hard-negative files.

Every reader streams its file once and returns plain dicts keyed by query id, the shapes
training and evaluation code wants. Bad lines raise :class:`~lading.errors.SourceError` with
file and line, or, with ``on_error="skip"``, are skipped and counted on the returned object
(``.skipped``); nothing is dropped silently.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from lading.errors import SourceError
from lading.sources import (
    OnError,
    RecordError,
    check_id,
    import_ir_datasets,
    json_object,
    open_binary,
)
from lading.sources.chunks import numbered_lines, reading
from lading.sources.parsers import HEADER_NAME_BYTES, is_header
from lading.sources.reader import irds_download

Queries = dict[str, str]
QUERY_COLUMNS: tuple[str, ...] = ("id", "text")  # a queries TSV's columns (read_queries)
Qrels = dict[str, dict[str, int]]


class Run(dict[str, list[str]]):
    """Ranked document ids per query, best first, plus optional judged negatives and positives.

    A plain ``dict[qid, list[docid]]`` with two extras: ``positives`` (from hard-negative
    files, ``{"pos": …}``, and MS MARCO id triples, their second field) and ``skipped``
    (lines skipped under ``on_error="skip"``). Id triples are not kept line by line: each
    query's negatives and positives, once each, are what training reads (a list of the
    lines held 183 B a line, 68 GiB for the 397M lines of ``qidpidtriples.train.full``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.positives: dict[str, list[str]] = {}
        self.skipped = 0
        self.source: Path | None = None  # the file read (read_run), for errors to name

    def where(self, qid: str, docid: str | None = None) -> str:
        """`` (line N of FILE)``: the first line of the file read that names query ``qid``
        (and document ``docid``), for an error about them; ``""`` for a run not read from a
        file, or a line not found (the file changed or went since). Reads the file again:
        for an error about to be raised only."""
        if self.source is None:
            return ""
        try:
            for line in _lines(self.source):
                if _names(line.text, qid, docid):
                    return f" (line {line.number:,} of {self.source})"
        except (OSError, ValueError):  # (gone, or unreadable now: the error goes on without)
            return ""
        return ""


class ReadQueries(dict[str, str]):
    """Query id → text, with ``.skipped``."""

    skipped = 0


class ReadQrels(dict[str, dict[str, int]]):
    """Query id → {doc id → relevance}, with ``.skipped``."""

    skipped = 0


class _Line(NamedTuple):
    number: int
    text: str
    bad: str = ""  # why the line does not read (its bytes are not UTF-8); then text is ""


def _names(text: str, qid: str, docid: str | None) -> bool:
    """Whether a run's line ``text`` is of query ``qid`` (and ranks ``docid``), each id read
    from its own field: a TREC run's first and third, an MS MARCO run's or id triple's first
    and second or third, a hard-negative JSON line's ``qid`` and ``pos``/``neg``."""
    if text.lstrip().startswith("{"):
        try:
            found, pos, neg = _hard_negative_line(text)
        except ValueError:
            return False
        return found == qid and (docid is None or docid in pos or docid in neg)
    fields = text.split()
    if not fields or fields[0] != qid:
        return False
    if docid is None:
        return True
    if len(fields) == _TREC_RUN.fields:
        return fields[_TREC_RUN.docid] == docid
    return docid in fields[1:3]


def _lines(path: Path) -> Iterator[_Line]:
    """Decoded, non-blank lines without their line ends; BOM dropped. A line that is not
    UTF-8 comes as one with ``bad`` saying so, for ``on_error`` to judge (:meth:`_Policy.lines`)."""
    with reading(path) as where, open_binary(path) as stream:
        for number, _, _, raw in numbered_lines(stream):
            where[0] = number
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                reason = (
                    f"invalid UTF-8 at byte {e.start} of the line "
                    f"({e.object[e.start : e.end]!r}); re-encode the file as UTF-8, or pass "
                    "on_error='skip' to skip such lines"
                )
                yield _Line(number, "", reason)
                continue
            if number == 1 and "\r" in text and not raw.endswith(b"\n"):  # one line, CRs in
                raise SourceError(  # it: lines ended by a bare CR (old Mac), read as one
                    path,
                    number,
                    "the whole file is one line holding carriage returns: its lines end in a "
                    "bare CR (\\r), not LF; convert the line ends to \\n (tr '\\r' '\\n')",
                )
            if text.strip():
                yield _Line(number, text)


class _Policy:
    """Applies ``on_error`` for one file."""

    def __init__(self, path: Path, on_error: OnError) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"unknown on_error {on_error!r}; choose from ['raise', 'skip']")
        self.path, self.on_error, self.skipped = path, on_error, 0

    def bad(self, line: int, reason: str) -> None:
        if self.on_error == "raise":
            raise SourceError(self.path, line, reason)
        self.skipped += 1

    def lines(self) -> Iterator[_Line]:
        """The file's lines (:func:`_lines`), those that do not read judged as bad."""
        for line in _lines(self.path):
            if line.bad:
                self.bad(line.number, line.bad)
            else:
                yield line


def read_queries(
    path: str | os.PathLike[str],
    on_error: OnError = "raise",
    columns: Sequence[str] = QUERY_COLUMNS,
) -> ReadQueries:
    """Queries from TSV (``qid<TAB>text``), JSONL (``_id``/``qid``/``query_id`` and ``text``/
    ``query``; BEIR's ``queries.jsonl``), TREC topics (a file opening with ``<top>``: each
    topic's ``<title>``), or ``irds:<dataset-id>``.

    ``columns``: a TSV's column names, as the documents' TSV reader takes them
    (``ParseOptions(columns=...)``): ``"id"`` and ``"text"`` say where the query id and text
    are, the other columns (a query type, a category) are left out. A line of more columns
    than named is a :class:`~lading.errors.SourceError` naming its columns and the
    ``columns=`` to pass (``--query-columns``), never read with the extra columns glued to
    the text; a tab inside the text of a two-column TSV is refused so too. A line of fewer
    columns than the text's is one as well.

    A query id on two lines with the same text is one query; with another text it is a
    :class:`~lading.errors.SourceError` naming both lines (``on_error="skip"``: the later
    line is skipped and counted). A query whose text is empty or white space is one too
    (skipped and counted).

    Raises:
        ValueError: ``columns`` does not name both ``"id"`` and ``"text"``, or names columns
            of a file that is not TSV.
    """
    columns = check_query_columns(columns)
    out = ReadQueries()
    name = os.fspath(path)
    if columns != QUERY_COLUMNS and (name.startswith("irds:") or ".json" in Path(name).name):
        raise ValueError(
            f"{name}: columns={columns!r} names a TSV's columns; this file's records name "
            "their own id and text: leave columns out"
        )
    if name.startswith("irds:"):
        dataset = import_ir_datasets().load(name[len("irds:") :])
        with irds_download(name[len("irds:") :], "queries"):
            for query in dataset.queries_iter():
                text = getattr(query, "text", None)
                out[str(query.query_id)] = text if isinstance(text, str) else query.default_text()
        return out
    file = Path(name)
    policy = _Policy(file, on_error)
    if ".jsonl" in file.name or ".json" in file.name:
        parse = _json_query
    else:
        parse = functools.partial(_tsv_query, columns=columns)
    first_line: Callable[[str], int | None] = _FirstLines(file, lambda t: parse(t)[0])
    entries: Iterator[tuple[int, str, str]]
    lines = policy.lines()
    opening = next(lines, None)
    lines = itertools.chain([opening] if opening is not None else [], lines)
    if opening is not None and opening.text.lstrip().lower().startswith("<top>"):  # TREC topics
        if columns != QUERY_COLUMNS:
            raise ValueError(f"{name}: columns= names a TSV's columns; TREC topics have none")
        starts: dict[str, int] = {}
        entries, first_line = _trec_topics(policy, lines, starts), starts.get
    else:
        entries = _parsed(policy, lines, parse)
    for number, qid, text in entries:
        if not text.strip():  # ("3<TAB>": a line cut at its tab) a model would train on nothing
            policy.bad(
                number,
                f"query {qid!r} has no text; give it its text, or pass on_error='skip' to "
                "leave it out",
            )
            continue
        before = out.setdefault(qid, text)
        if before != text:  # an exact repeat is one query; another text is a conflict
            first = first_line(qid)
            policy.bad(
                number,
                f"query id {qid!r} again, with another text than on line {first} "
                f"({_short(before)} there, {_short(text)} here); keep one of the two lines, "
                "or give one of the queries another id",
            )
    out.skipped = policy.skipped
    return out


def _parsed(
    policy: _Policy, lines: Iterator[_Line], parse: Callable[[str], tuple[str, str]]
) -> Iterator[tuple[int, str, str]]:
    """(line, query id, text) of each of ``lines`` of a TSV or JSONL queries file that
    parses."""
    for line in lines:
        try:
            qid, text = parse(line.text)
        except ValueError as e:
            policy.bad(line.number, str(e))
            continue
        yield line.number, qid, text


_TOPIC_TAG = re.compile(r"(</?(?:top|num|title|desc|narr)>)", re.IGNORECASE)


def _trec_topics(
    policy: _Policy, lines: Iterator[_Line], starts: dict[str, int]
) -> Iterator[tuple[int, str, str]]:
    """(line of its ``<top>``, number, title) of each topic of a TREC topics file
    (``<top> <num> Number: 301 <title> Topic: ... <desc> ... </top>``; Vaswani's ``<num>1</num>
    <title>...</title>``): the title is the query, its lines joined by spaces; the
    description and narrative are left out. ``starts`` gets each number's first line. A topic
    without a number or a title, or cut off by the end of the file, is ``policy``'s to judge."""
    start, field = 0, ""  # the open topic's line (0: none) and the field its text goes to
    fields: dict[str, list[str]] = {}
    for line in lines:
        for piece in _TOPIC_TAG.split(line.text):
            tag = piece.lower()
            if tag == "<top>":
                if start:
                    policy.bad(start, "<top> has no </top> before the next <top>")
                start, field, fields = line.number, "", {"num": [], "title": []}
            elif tag == "</top>":
                if start:
                    yield from _topic(policy, start, fields, starts)
                else:
                    policy.bad(line.number, "</top> without <top>")
                start, field = 0, ""
            elif tag.startswith("<"):
                field = tag.strip("<>") if start and not tag.startswith("</") else ""
            elif field in fields:
                fields[field].append(piece)
    if start:
        policy.bad(start, "<top> has no </top> before the end of the file")


def _topic(
    policy: _Policy, start: int, fields: dict[str, list[str]], starts: dict[str, int]
) -> Iterator[tuple[int, str, str]]:
    """The topic of line ``start`` from its ``fields``, or ``policy``'s judgement of it."""
    num = " ".join(" ".join(fields["num"]).split())
    num = re.sub(r"^number:\s*", "", num, flags=re.IGNORECASE)
    title = " ".join(" ".join(fields["title"]).split())
    title = re.sub(r"^topic:\s*", "", title, flags=re.IGNORECASE)
    if not num:
        policy.bad(start, "a topic has no <num>; give it its number")
    elif not title:
        policy.bad(start, f"topic {num!r} has no <title>; give it one, or pass on_error='skip'")
    else:
        starts.setdefault(num, start)
        yield start, num, title


class _FirstLines:
    """The number of the first line of ``file`` with each key, for the message of a key found
    twice: the file is read again once, at the first such key, and every key's first line
    kept from then on (keeping them from the start would cost as much as the dict; reading
    the file again at every repeat made a file of many repeats quadratic). ``detail_of``
    picks what else of that line to keep (:meth:`detail`), such as a qrels line's iteration.
    """

    def __init__(
        self,
        file: Path,
        key_of: Callable[[str], object],
        detail_of: Callable[[str], object] | None = None,
    ) -> None:
        self.file, self.key_of, self.detail_of = file, key_of, detail_of
        self._first: dict[object, tuple[int, object]] | None = None

    def _found(self, key: object) -> tuple[int, object] | None:
        if self._first is None:
            self._first = {}
            for line in _lines(self.file):
                if line.bad:
                    continue
                try:
                    key_here = self.key_of(line.text)
                    detail = self.detail_of(line.text) if self.detail_of else None
                except ValueError:
                    continue
                self._first.setdefault(key_here, (line.number, detail))
        return self._first.get(key)

    def __call__(self, key: object) -> int | None:
        found = self._found(key)
        return None if found is None else found[0]

    def detail(self, key: object) -> object:
        """What ``detail_of`` kept of the first line with ``key`` (None where none is)."""
        found = self._found(key)
        return None if found is None else found[1]


def _short(text: str, most: int = 60) -> str:
    """``text`` quoted, cut to ``most`` characters for a one-line message."""
    return repr(text if len(text) <= most else text[: most - 3] + "...")


def check_query_columns(columns: Sequence[str]) -> tuple[str, ...]:
    """A queries TSV's ``columns`` (:func:`read_queries`) as a tuple, checked: one string is
    refused (``tuple("id,text")`` would be its letters), and so are names without ``"id"``
    and ``"text"``."""
    if isinstance(columns, str):
        raise TypeError(
            f"columns is a sequence of names, not one string: columns={tuple(columns.split(','))!r}"
        )
    names = tuple(columns)
    if "id" not in names or "text" not in names:
        raise ValueError(
            f"queries TSV columns {list(names)} must name both 'id' and 'text' (the others "
            "are left out), e.g. ('id', 'text', 'type')"
        )
    return names


def _tsv_query(text: str, columns: tuple[str, ...] = QUERY_COLUMNS) -> tuple[str, str]:
    """(query id, text) of a TSV line of ``columns``; a ValueError says why a line does not
    read, a line of more columns than named with the columns to name."""
    if columns == QUERY_COLUMNS:
        qid, sep, rest = text.partition("\t")
        if not sep:
            raise ValueError('expected "<qid>\\t<text>", found no tab')
        if "\t" not in rest:
            if len(rest) <= HEADER_NAME_BYTES and is_header([qid, rest], columns):
                raise ValueError(_query_header(qid, rest))
            return check_id(qid), rest
    parts = text.split("\t")
    id_pos, text_pos = columns.index("id"), columns.index("text")
    if len(parts) > len(columns):
        raise ValueError(_too_many_query_columns(columns, parts))
    if len(parts) <= max(id_pos, text_pos):
        expected = "<" + ">\\t<".join(columns) + ">"
        raise ValueError(f'expected "{expected}", found {len(parts)} columns')
    if is_header(parts, columns):
        raise ValueError(_query_header(*parts))
    return check_id(parts[id_pos]), parts[text_pos]


def _query_header(*names: str) -> str:
    """Why a queries line that names its columns (``qid<TAB>query``) is refused: kept, it
    would be a query of id "qid" (as the documents' TSV reader refuses one)."""
    return (
        f"a header line (column names: {', '.join(names)}), not a query; remove it "
        "(tail -n +2 FILE > BODY), or pass on_error='skip' to skip it"
    )


def _too_many_query_columns(columns: tuple[str, ...], parts: list[str]) -> str:
    """Why a queries line of more columns than named is refused, with its columns and the
    columns to name (as the documents' TSV reader says it: sources.parsers)."""
    n = len(parts)
    shown = " | ".join(repr(p if len(p) <= 24 else p[:23] + "…") for p in parts[:6])
    expected = "<" + ">\\t<".join(columns) + ">"
    found = f'expected "{expected}", found {n} columns ({shown}{" | …" if n > 6 else ""})'
    if columns != QUERY_COLUMNS:
        return f"{found}, {len(columns)} named ({', '.join(columns)}): name every column"
    names = ("id", "text", *(f"field{i}" for i in range(2, n)))
    return (
        f"{found}: a queries TSV of more than two columns needs every column named, the "
        f"query's text as 'text', e.g. columns={names!r} (--query-columns {','.join(names)}), "
        "or only its id and text kept (cut -f1,2 FILE, the text being the second column); a "
        "tab inside the text of a two-column TSV is refused too"
    )


def _json_query(text: str) -> tuple[str, str]:
    obj = json_object(text)
    qid = next((obj[k] for k in ("_id", "qid", "query_id", "id") if k in obj), None)
    body = next((obj[k] for k in ("text", "query") if k in obj), None)
    if qid is None or not isinstance(body, str):
        raise ValueError(
            "expected a query id (_id, qid, query_id or id) and a text (text or query)"
        )
    return _json_id(qid, "query id"), body


_TREC_QRELS = '"<qid> 0 <docid> <rel>" lines (TREC, 4 fields)'
_BEIR_QRELS = (
    'a first line "query-id<TAB>corpus-id<TAB>score", then "<qid><TAB><docid><TAB><score>" '
    "lines (BEIR, 3 fields)"
)
_SMART_CODES = frozenset({"-1", "1", "2", "3", "4"})  # Cranfield's cranqrel: 1 best .. 4, -1


def read_qrels(path: str | os.PathLike[str], on_error: OnError = "raise") -> ReadQrels:
    """Judgements from TREC qrels (``qid 0 docid rel``) or BEIR ``qrels/*.tsv``
    (``query-id<TAB>corpus-id<TAB>score`` with a header line).

    The first line that is not blank says which: the BEIR header (its first two fields
    ``query-id`` and ``corpus-id``), or a TREC line. Lines of three fields are read only
    after the BEIR header: without it they are refused (a
    :class:`~lading.errors.SourceError`, under ``on_error="skip"`` too: the file's layout,
    not one bad line) naming both layouts lading reads, and SMART's where the third fields
    look like its codes (Cranfield's ``cranqrel``: ``qid docid code``, 1 the most relevant
    .. 4 the least, -1 not relevant; read as grades, its least relevant documents would
    rank highest). A line of three fields in a file of four (a TREC line missing its
    iteration or its grade), or of four in one of three, is an error naming the line, the
    file's first line of the other count and both layouts (``on_error="skip"``: skipped
    and counted).

    A (query, document) judged twice with the same relevance and iteration (the second
    field; a run's ``Q0`` is iteration ``0``) is one judgement (TREC files carry such
    repeats); with another relevance, or another iteration, it is a
    :class:`~lading.errors.SourceError` naming both lines (``on_error="skip"``: the later
    line is skipped and counted). Another iteration is what a SMART file
    (``qid docid 0 0``, CACM's ``qrels.text``) looks like read as TREC: every line a
    judgement of document ``"0"``."""
    file = Path(path)
    policy = _Policy(file, on_error)
    out = ReadQrels()
    layout: list[int] = []  # the file's (fields a line, first line of them), once a line says
    first_line = _FirstLines(
        file, lambda t: _qrel(t.split(), layout[0] if layout else 0)[:2], _iteration_field
    )
    opening, header = True, 0  # the first line that is not blank: a BEIR header may be there
    for line in policy.lines():
        parts = line.text.split()
        if opening:
            opening = False
            if parts[:2] == ["query-id", "corpus-id"]:
                header = line.number
                continue  # BEIR header
        if len(parts) in (3, 4) and not layout:
            if len(parts) == 3 and not header:
                raise SourceError(file, line.number, _no_beir_header(file))
            layout += [len(parts), line.number]
        elif len(parts) in (3, 4) and len(parts) != layout[0]:
            policy.bad(line.number, _mixed_qrels(parts, layout, header))
            continue
        try:
            qid, docid, value = _qrel(parts, layout[0] if layout else (3 if header else 4))
        except ValueError as e:
            policy.bad(line.number, str(e))
            continue
        judged = out.setdefault(qid, {})
        before = judged.get(docid)
        if before is None:  # the first judgement of (qid, docid): the common case
            judged[docid] = value
            continue
        if before != value:  # an exact repeat is one judgement; another grade is a conflict
            policy.bad(
                line.number,
                f"query {qid!r} and document {docid!r} judged again: relevance {value} here, "
                f"{before} on line {first_line((qid, docid))}; keep one of the two lines",
            )
            continue
        was = first_line.detail((qid, docid))
        if len(parts) == 4 and isinstance(was, str) and _iteration(parts[1]) != _iteration(was):
            policy.bad(
                line.number,
                f"query {qid!r} and document {docid!r} judged again, with iteration "
                f"{parts[1]!r} here and {was!r} on line {first_line((qid, docid))}: a TREC "
                'qrels line is "<qid> <iteration> <docid> <rel>"; rewrite a file of '
                '"<qid> <docid> 0 0" lines (SMART, e.g. CACM\'s qrels.text) as '
                '"<qid> 0 <docid> 1" lines; of a TREC file, keep one of the two lines',
            )
    out.skipped = policy.skipped
    return out


def _no_beir_header(file: Path) -> str:
    """Why a qrels file of three-field lines without the BEIR header is refused: the layouts
    lading reads, and SMART's where the third fields are all among its codes with -1 or 4
    among them (grades 0 .. 3 have a 0; BEIR's 1 and 2 alone are not taken for codes)."""
    codes: set[str] = set()
    for line in _lines(file):
        parts = line.text.split()
        if len(parts) == 3:
            codes.add(parts[2])
            if not codes <= _SMART_CODES:
                break
    said = (
        f"3 fields a line and no BEIR header: lading reads qrels of {_TREC_QRELS} or of "
        f"{_BEIR_QRELS}; put the header first in a BEIR file, or rewrite the lines as TREC's"
    )
    if codes <= _SMART_CODES and codes & {"-1", "4"}:
        said += (
            f"; its third fields are all among {', '.join(sorted(codes, key=int))}, as in "
            'SMART qrels (Cranfield\'s cranqrel: "<qid> <docid> <code>", code 1 the most '
            "relevant .. 4 the least, -1 not relevant), where a smaller code is more relevant: "
            "read as grades they would rank the least relevant documents highest; rewrite them "
            f"as TREC grades, e.g. awk '{{print $1, 0, $2, ($3 < 0 ? 0 : 5 - $3)}}' {file.name}"
        )
    return said


def _mixed_qrels(parts: list[str], layout: list[int], header: int) -> str:
    """Why a qrels line of three fields in a file of four, or four in one of three, is
    refused, with what the line likely lacks."""
    fields, first = layout
    lacks = ""
    if len(parts) == 3 and not _is_int(parts[2]):
        lacks = ": a TREC line without its grade, it seems"
    elif len(parts) == 3:
        lacks = ': a TREC line without its iteration ("<qid> 0 <docid> <rel>"), it seems'
    theirs = f"BEIR, after the header on line {header}" if fields == 3 else "TREC"
    return (
        f"{len(parts)} fields in a file whose lines have {fields} (from line {first}: "
        f"{theirs}){lacks}; lading reads qrels of {_TREC_QRELS} or of {_BEIR_QRELS}, not both "
        "in one file: give the line the layout of the others, or pass on_error='skip' to "
        "skip such lines"
    )


def _is_int(field: str) -> bool:
    try:
        int(field)
    except ValueError:
        return False
    return True


def _qrel(parts: list[str], fields: int = 0) -> tuple[str, str, int]:
    """(query id, document id, relevance) of a TREC (4 fields) or BEIR (3) qrels line;
    ``fields``: the file's count (0: either), a line of another count a ValueError."""
    if len(parts) == 4 and fields in (0, 4):
        qid, _, docid, rel = parts
    elif len(parts) == 3 and fields in (0, 3):
        qid, docid, rel = parts
    elif fields == 3:
        raise ValueError(f'expected "<qid>\\t<docid>\\t<score>", found {len(parts)} fields')
    else:
        raise ValueError(f'expected "<qid> 0 <docid> <rel>", found {len(parts)} fields')
    try:
        return qid, docid, int(rel)
    except ValueError:
        raise ValueError(
            f'relevance {rel!r} is not an integer: a TREC qrels line is "<qid> <iteration> '
            '<docid> <grade>", the grade an integer; a SMART .REL file ("<qid> <docid> 0 '
            '0.000000") must be rewritten as "<qid> 0 <docid> 1" lines'
        ) from None


def _iteration_field(text: str) -> str | None:
    """The second field of a TREC qrels line (its iteration), None for a BEIR line."""
    parts = text.split()
    return parts[1] if len(parts) == 4 else None


def _iteration(field: str) -> str:
    """A TREC iteration as compared: a run's ``Q0`` is iteration ``0``, as some qrels spell it."""
    return field.removeprefix("Q")


def read_run(path: str | os.PathLike[str], on_error: OnError = "raise") -> Run:
    """A ranking per query from a TREC run (``qid Q0 docid rank score tag``, ordered by score,
    tied scores by doc id descending, as trec_eval orders them) or an MS MARCO
    run (``qid<TAB>docid<TAB>rank``, ordered by rank: Pyserini's ``--output-format msmarco``),
    a hard-negative JSONL (``{"qid", "pos": [...], "neg": [...]}``, negatives in file order),
    or MS MARCO id triples (``qid<TAB>pos<TAB>neg``).

    An MS MARCO run and id triples both have three tab-separated fields: a file whose
    first query's lines end in ranks counting up by one from 0 or 1 (0, 1, 2, … or 1, 2, 3,
    …, in any order; a query of one line: the next query's starting again at its rank) is a
    run. Where three or more of them count up by one from another number, each once (a run
    cut after its top 10, ranks from 11), the file is refused, naming its first line: read as
    triples, its ranks would be taken as negatives."""
    file = Path(path)
    policy = _Policy(file, on_error)
    run = Run()
    run.source = file
    lines = policy.lines()
    first = next(lines, None)
    if first is None:  # (no line, or, under "skip", none that reads: counted)
        run.skipped = policy.skipped
        return run
    stripped = first.text.lstrip()
    if stripped.startswith("{"):
        _hard_negatives(run, first, lines, policy)
    elif len(first.text.split("\t")) == 3 and len(first.text.split()) == 3:
        head, after = _first_query(first, lines)
        rest = itertools.chain(head[1:], [after] if after is not None else [], lines)
        if _ranked(policy.path, head, after):
            _ranking(run, first, rest, policy, _MSMARCO_RUN)
        else:
            _triples(run, first, rest, policy)
    else:
        _ranking(run, first, lines, policy, _TREC_RUN)
    run.skipped = policy.skipped
    return run


_LOOKAHEAD = 100_000  # lines of the first query read ahead to tell a run from triples


def _rank_field(line: _Line) -> int | None:
    """The third tab-separated field of ``line`` as a rank (digits, no sign and no leading
    zero: ``"007"`` is an id), None where it is not one or the line has not three fields."""
    parts = line.text.split("\t")
    if len(parts) != 3:
        return None
    field = parts[2]  # (at most 18 digits: int() refuses thousands)
    if not (field.isascii() and field.isdigit() and len(field) <= 18):
        return None
    return int(field) if str(int(field)) == field else None


def _first_query(first: _Line, lines: Iterator[_Line]) -> tuple[list[_Line], _Line | None]:
    """The lines of the file's first query (from ``first``, while they end in a rank, at most
    :data:`_LOOKAHEAD`), and the line after them (None at the end of the file), read ahead
    of ``lines``."""
    head = [first]
    if _rank_field(first) is None:
        return head, None  # (ids, not ranks: the next line changes nothing)
    qid = first.text.split("\t")[0]
    for line in lines:
        if line.text.split("\t")[0] != qid or _rank_field(line) is None:
            return head, line
        head.append(line)
        if len(head) >= _LOOKAHEAD:
            break
    return head, None


def _ranked(path: Path, head: list[_Line], after: _Line | None) -> bool:
    """Whether a file of three tab-separated fields whose first query's lines are ``head``
    (``after``: the line after them) is an MS MARCO run (``qid<TAB>docid<TAB>rank``): the
    first query's ranks count up by one from 0 or 1, in file order from its first line or
    once sorted (each rank once); a query of one line is a run's where the next query starts
    again at its rank. Triples end in document ids, which do not count up so. Three or more
    first ranks counting up by one from another number, each once, are refused
    (:class:`SourceError`): a run whose ranks would be read as negatives (two ids one apart
    stay triples)."""
    ranks = [_rank_field(line) for line in head]
    if ranks[0] is None:
        return False
    numbers = [r for r in ranks if r is not None]  # (all are: _first_query stops at others)
    if len(numbers) == 1:
        if numbers[0] not in (0, 1):
            return False
        if after is None:
            return True
        return after.text.split("\t")[0] != head[0].text.split("\t")[0] and (
            _rank_field(after) == numbers[0]
        )
    low = min(numbers)
    contiguous = sorted(numbers) == list(range(low, low + len(numbers)))  # shuffled ranks too
    counts_up = numbers[1] == numbers[0] + 1  # (a rank left out further down, or repeated)
    if (contiguous and low in (0, 1)) or (counts_up and numbers[0] in (0, 1)):
        return True
    if not (contiguous and len(numbers) >= 3):  # two ids one apart: triples, as before
        return False
    start = low
    qid, where = head[0].text.split("\t")[0], f"{head[0].number}-{head[-1].number}"
    shown = ", ".join(map(str, numbers[:3])) + (", …" if len(numbers) > 3 else "")
    raise SourceError(
        path,
        head[0].number,
        f"the lines of query {qid!r} (lines {where}) end in numbers counting up by one from "
        f'{start} ({shown}): an MS MARCO run ("<qid>\\t<docid>\\t<rank>") whose ranks '
        f'start at {start}, not id triples ("<qid>\\t<pos docid>\\t<neg docid>"), which '
        "would take its ranks for negatives; lading reads a run of three fields whose first "
        "query ranks from 0 or 1: renumber each query's ranks from 1 (a file in rank order: "
        "awk -F'\\t' -v OFS='\\t' '{print $1, $2, ++n[$1]}'), or write it as a TREC run "
        '("<qid> Q0 <docid> <rank> <score> <tag>"); if these are id triples, put a line '
        "of another negative first",
    )


class _RunLayout(NamedTuple):
    """Where a run line keeps its fields: how many, at which positions, and how it reads."""

    fields: int
    qid: int
    docid: int
    rank: int
    score: int | None  # None: ordered by rank alone
    expected: str

    def key(self, text: str) -> tuple[str, str]:
        """(query id, document id) of a line of this layout (ValueError for another)."""
        parts = text.split()
        if len(parts) != self.fields:
            raise ValueError(f"{len(parts)} fields")
        return parts[self.qid], parts[self.docid]


_TREC_RUN = _RunLayout(6, 0, 2, 3, 4, "<qid> Q0 <docid> <rank> <score> <tag>")
_MSMARCO_RUN = _RunLayout(3, 0, 1, 2, None, "<qid>\\t<docid>\\t<rank>")


def _ranking(
    run: Run, first: _Line, rest: Iterator[_Line], policy: _Policy, layout: _RunLayout
) -> None:
    """A document ranked twice for one query with another rank or score is refused naming
    both lines, as trec_eval refuses it (``on_error="skip"``: the later line skipped and
    counted); an exact repeat is one entry."""
    scored: dict[str, list[tuple[float, int, str]]] = {}
    seen: dict[tuple[str, str], tuple[float, int, str]] = {}
    first_line = _FirstLines(policy.path, layout.key)
    for line in itertools.chain([first], rest):
        parts = line.text.split()
        if len(parts) != layout.fields:
            policy.bad(line.number, f'expected "{layout.expected}", found {len(parts)} fields')
            continue
        qid, docid, rank = parts[layout.qid], parts[layout.docid], parts[layout.rank]
        score = "0" if layout.score is None else parts[layout.score]
        try:
            key = (-float(score), int(rank), docid)
        except ValueError:
            what = f"rank {rank!r}" + ("" if layout.score is None else f" or score {score!r}")
            policy.bad(line.number, f"{what} is not a number")
            continue
        if math.isnan(key[0]):  # sorts nowhere: the query's ranking would be chance
            policy.bad(line.number, f"score {score!r} is not a number (NaN)")
            continue
        before = seen.setdefault((qid, docid), key)
        if before is not key:
            if before != key:
                where = first_line((qid, docid))
                here, there = f"rank {rank}", f"rank {before[1]}"
                if layout.score is not None:
                    here, there = f"{here}, score {score}", f"{there}, score {-before[0]:g}"
                policy.bad(
                    line.number,
                    f"query {qid!r} ranks document {docid!r} again ({here} here; {there} on "
                    f"line {where}); keep one of the two lines",
                )
            continue
        scored.setdefault(qid, []).append(key)
    for qid, entries in scored.items():
        if layout.score is None:
            entries.sort()  # by rank, then doc id
        else:  # trec_eval's order (it reads no rank): score descending, ties by doc id reversed
            entries.sort(key=lambda entry: entry[2], reverse=True)
            entries.sort(key=lambda entry: entry[0])  # (stable: the ties stay reversed)
        run[qid] = [docid for _, _, docid in entries]


def _hard_negatives(run: Run, first: _Line, rest: Iterator[_Line], policy: _Policy) -> None:
    """One JSON object per line; lines of the same query add to it (files often hold one line
    per positive), keeping the first occurrence of each document."""
    negatives: dict[str, dict[str, None]] = {}  # ordered sets: a membership test is O(1)
    positives: dict[str, dict[str, None]] = {}
    for line in itertools.chain([first], rest):
        try:
            qid, pos, neg = _hard_negative_line(line.text)
        except ValueError as e:
            policy.bad(line.number, f'expected {{"qid": …, "pos": […], "neg": […]}}: {e}')
            continue
        negatives.setdefault(qid, {}).update(dict.fromkeys(neg))
        positives.setdefault(qid, {}).update(dict.fromkeys(pos))
    _keep_in_order(run, negatives, positives)


def _keep_in_order(
    run: Run, negatives: dict[str, dict[str, None]], positives: dict[str, dict[str, None]]
) -> None:
    """Each query's documents, gathered as ordered sets, into ``run`` as lists."""
    for qid, docs in negatives.items():
        run[qid] = list(docs)
    for qid, docs in positives.items():
        run.positives[qid] = list(docs)


def _hard_negative_line(text: str) -> tuple[str, list[str], list[str]]:
    obj = json_object(text)
    if "qid" not in obj or "neg" not in obj:
        raise ValueError(f"missing {'qid' if 'qid' not in obj else 'neg'}")
    qid = _json_id(obj["qid"], "qid")
    pos, neg = obj.get("pos", []), obj["neg"]
    for name, value in (("pos", pos), ("neg", neg)):
        if not isinstance(value, list):
            raise ValueError(f"{name} is a JSON {type(value).__name__}, not a list of ids")
    return qid, [_json_id(d, "pos") for d in pos], [_json_id(d, "neg") for d in neg]


def _json_id(value: object, field: str) -> str:
    """An id given as a JSON string or integer (never a bool, float, null or container)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{field} holds {json.dumps(value)[:40]}, not a string or integer id")
    try:
        return check_id(str(value))
    except RecordError as e:
        raise ValueError(f"{field}: {e}") from None


def _triples(run: Run, first: _Line, rest: Iterator[_Line], policy: _Policy) -> None:
    """MS MARCO id triples; each query's negatives and positives in first-seen order, kept in
    ordered sets while reading (a list searched at every triple cost a query of n negatives
    n²/2 comparisons: an hour over qidpidtriples' ~1,000 negatives for each of 400k queries)."""
    negatives: dict[str, dict[str, None]] = {}
    positives: dict[str, dict[str, None]] = {}
    for line in itertools.chain([first], rest):
        parts = line.text.split("\t")
        if len(parts) != 3:
            policy.bad(line.number, 'expected "<qid>\\t<pos docid>\\t<neg docid>"')
            continue
        try:
            qid, pos, neg = (check_id(part) for part in parts)
        except RecordError as e:  # as the hard-negative and store readers check theirs
            policy.bad(line.number, f"{e} (a triple is <qid>\t<pos docid>\t<neg docid>)")
            continue
        negatives.setdefault(qid, {})[neg] = None
        positives.setdefault(qid, {})[pos] = None
    _keep_in_order(run, negatives, positives)
