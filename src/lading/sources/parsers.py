"""Per-format record parsers: one raw TSV line, JSON line or TREC ``<DOC>`` block to a Record.

A parser takes the bytes of one record as a chunker of :mod:`lading.sources.chunks` cut them and
returns a :class:`Record`, or raises :class:`RecordError` saying what is wrong; the reader
(:class:`lading.sources.SourceReader`) adds the file and line. The same parser serves the build
and :class:`~lading.stores.offsets.OffsetStore`, which reads a span back with ``os.pread``.
What a parser looks for (JSON keys, TSV columns, fields kept) is one :class:`ParseOptions`,
the ``parse=`` of every public function that reads a source, recorded in stores' meta as its
:meth:`~ParseOptions.to_dict`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, NamedTuple

from lading.errors import LadingError
from lading.sources.chunks import trec_second_mark

JSON_ID_FIELDS: tuple[str, ...] = ("id", "doc_id", "docid", "_id", "pid")
JSON_TEXT_FIELDS: tuple[str, ...] = ("text", "contents", "body")

# What a TSV's header line calls its id and text columns (lowercased): lading's JSON keys and
# the usual names of MS MARCO, BEIR, TREC and ir_datasets exports. A first line whose id and
# text are among them, and whose other columns read as names, is a header, not a document
# ("pid<TAB>passage" was stored as document "pid").
HEADER_ID_NAMES = frozenset(
    (*JSON_ID_FIELDS, "qid", "query_id", "query-id", "corpus-id", "docno", "passage_id", "topic")
)
HEADER_TEXT_NAMES = frozenset(
    (*JSON_TEXT_FIELDS, "passage", "document", "doc", "content", "query", "question", "title")
)
HEADER_NAME_BYTES = 24  # the longest column name looked at (a field past it is data)
_COLUMN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,23}")
# a CR with a column after it, in a line with no LF at its end (a file of lone-CR line ends
# is one such line): taken for a line's end. A CR inside a column of an LF line stays text
_CR_THEN_COLUMN = re.compile(r"\r[^\t]*\t")
LONE_CR = (
    "a carriage return inside the line with more columns after it: the file's lines end "
    "with a lone CR (classic Mac OS), so its records read as one line; give it LF line "
    "ends (tr '\\r' '\\n' < FILE > FIXED) and build from that"
)


class Record(NamedTuple):
    """One document: its id, its text and any extra named fields (``title``, extra columns)."""

    id: str
    text: str
    fields: Mapping[str, str]


class RecordError(LadingError, ValueError):
    """A parser's complaint about one record; the reader adds file and line."""


def json_object(text: str) -> dict[str, Any]:
    """``text`` parsed as one JSON object, or a RecordError saying what it is instead."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        if e.lineno > 1 and not text.rstrip("\r\n").count("\n"):  # at the line's end: cut
            try:  # the record's own column (json's was 1 of the line after its newline)
                json.loads(text.rstrip("\r\n"))
            except json.JSONDecodeError as at_end:
                e = at_end
        what = e.msg.removesuffix(" at")  # json's own "Invalid control character ... at"
        raise RecordError(
            f"invalid JSON ({what} at column {e.colno}); fix the line (a JSON object a line), "
            "or pass on_error='skip' to skip such records"
        ) from None
    if not isinstance(obj, dict):
        raise RecordError(
            f"expected a JSON object, found {type(obj).__name__}; give each line one object, "
            "or pass on_error='skip' to skip such records"
        )
    return obj


Parser = Callable[[bytes], Record]


@dataclass(frozen=True)
class ParseOptions:
    """Where a source's records keep their id, text and fields: the one parameter (``parse=``)
    of every function that reads a source.

    Attributes:
        id_field: JSON/parquet/Arrow key of the id (default: the first of ``JSON_ID_FIELDS``
            present; a record where another of them holds a different value is refused,
            naming both: MS MARCO v2's passages hold ``docid`` and ``pid``).
        text_field: key of the text (default: the first of ``JSON_TEXT_FIELDS`` present).
        columns: TSV column names; must contain ``"id"`` and ``"text"``. The other named
            columns become fields. A line with more columns than named is a malformed record
            (the default names two: ``msmarco-docs.tsv`` read as ``id<TAB>text`` would store
            its URL as the text), refused with its columns and the ``columns=`` to pass.
        keep_fields: JSON/parquet/Arrow keys kept as fields besides the id and text (default:
            ``title``). TSV keeps every column; TREC keeps its title element.
        prefix_fields: fields whose values, where a record has them non-empty, go before its
            text, each followed by one space: ``("title",)`` gives a model a document's
            title and then its body, as BEIR's and ir_datasets' readers do (CACM keeps half its
            documents' words in titles: 1,617 of its 3,204 have an empty text). Each must be
            one the source keeps: in ``keep_fields`` (JSON, tables), a named TSV column, or
            TREC's ``title``. The fields are stored as fields too.
        need_id: a JSON record without an id is malformed (a store's); a reader of texts alone
            (a token corpus keeps no ids) passes False, and such a record gets the id ``""``;
            a record without its text is then told to name the key with that reader's own
            ``text_field=`` (``--text-field``), not ``parse=``.
            Not recorded by :meth:`to_dict`: a store's records always have ids.

    Sequences are stored as tuples, so options compare, hash and pickle as values.
    """

    id_field: str | None = None
    text_field: str | None = None
    columns: Sequence[str] = ("id", "text")
    keep_fields: Sequence[str] = ("title",)
    prefix_fields: Sequence[str] = ()
    need_id: bool = True

    KEYS: ClassVar[tuple[str, ...]] = (
        "id_field",
        "text_field",
        "columns",
        "keep_fields",
        "prefix_fields",
    )

    def __post_init__(self) -> None:
        for name in ("columns", "keep_fields", "prefix_fields"):
            value = getattr(self, name)
            if isinstance(value, str):  # tuple("url") would be ('u', 'r', 'l')
                raise TypeError(
                    f"{name} is a sequence of names, not one string: "
                    f"{name}={tuple(value.split(','))!r}"
                )
            object.__setattr__(self, name, tuple(value))
        if "id" not in self.columns or "text" not in self.columns:
            raise ValueError(f"TSV columns {list(self.columns)} must name both 'id' and 'text'")
        kept = {*self.keep_fields, *self.columns} - {"id", "text"}
        unkept = [name for name in self.prefix_fields if name not in kept]
        if unkept:
            raise ValueError(
                f"prefix_fields {unkept} are not kept: name them in keep_fields= (JSON keys, "
                "table columns) or columns= (a TSV's), e.g. keep_fields=('title',)"
            )

    def to_dict(self) -> dict[str, Any]:
        """The options as plain JSON values, as stores record them in ``meta.json``
        (``prefix_fields`` only where set: a store built without them records what it did
        before they existed, so its build id and its up-to-date check stay as they were)."""
        return {
            "id_field": self.id_field,
            "text_field": self.text_field,
            "columns": list(self.columns),
            "keep_fields": list(self.keep_fields),
            **({"prefix_fields": list(self.prefix_fields)} if self.prefix_fields else {}),
        }

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> ParseOptions:
        """The options :meth:`to_dict` wrote, read from ``record`` (other keys are ignored, so a
        store's whole build record will do). A key missing is the default: stores built before
        ``keep_fields`` was recorded were all built with the default."""
        return cls(**{key: record[key] for key in cls.KEYS if key in record})

    def read_by(self, fmt: str | None) -> ParseOptions:
        """These options as a ``fmt`` source reads them: those it never reads set to their
        defaults (``id_field``, ``text_field`` and ``keep_fields`` for TSV, TREC and
        ir_datasets, which have no keys; ``columns`` for anything but TSV). Two option sets
        that a format reads alike build the same store from it."""
        default = ParseOptions()
        ignored = ["id_field", "text_field", "keep_fields"] if fmt in _OWN_ID_AND_TEXT else []
        if fmt != "tsv":
            ignored.append("columns")
        return replace(self, **{name: getattr(default, name) for name in ignored})

    def refuse_ignored(self, fmt: str | None, source: object) -> None:
        """Raise ``ValueError`` naming ``source`` and the fix where these options set one that
        a ``fmt`` source never reads (:meth:`read_by`: it would be taken and silently ignored).
        Called where a source is read for a build or by
        :func:`~lading.sources.read_records`, not where a store reopens the options it
        recorded."""
        read = self.read_by(fmt)
        ignored = [
            f"{name}={getattr(self, name)!r}"
            for name in ("id_field", "text_field", "keep_fields")
            if getattr(self, name) != getattr(read, name)
        ]
        if ignored:
            named = ", ".join(ignored)
            raise ValueError(
                f"{source}: ParseOptions({named}) names JSON keys or table columns (jsonl, "
                f"parquet, arrow, beir); this {fmt} source {_OWN_ID_AND_TEXT[fmt or '']}; "
                f"leave {named} out"
            )
        if self.columns != read.columns:
            raise ValueError(
                f"{source}: ParseOptions(columns={self.columns!r}) names a TSV's columns; this "
                f"{fmt} source has keys or its own fields: name its id and text with "
                "id_field=/text_field=, and leave columns out"
            )
        fields = self.columns if fmt == "tsv" else ("title",) if fmt in _OWN_ID_AND_TEXT else ()
        absent = [
            name for name in self.prefix_fields if fmt in _OWN_ID_AND_TEXT and name not in fields
        ]
        if absent:
            raise ValueError(
                f"{source}: ParseOptions(prefix_fields={self.prefix_fields!r}) names "
                f"{absent}, which this {fmt} source does not have; "
                + (
                    "name the TSV's columns with columns=(...), e.g. ('id', 'url', 'title', 'text')"
                    if fmt == "tsv"
                    else "its only field is 'title'"
                )
            )


def prefixed(parse: Parser, fields: Sequence[str]) -> Parser:
    """``parse`` whose records' texts start with their ``fields`` (:attr:`ParseOptions.
    prefix_fields`); ``parse`` itself where there are none."""
    if not fields:
        return parse

    def parse_prefixed(raw: bytes) -> Record:
        return with_prefix(parse(raw), fields)

    return parse_prefixed


def with_prefix(record: Record, fields: Sequence[str]) -> Record:
    """``record`` with the non-empty values of its ``fields`` before its text, each followed
    by one space (a record with neither keeps its empty text)."""
    parts = [record.fields.get(name, "") for name in fields]
    text = " ".join([*(part for part in parts if part), *([record.text] if record.text else [])])
    return record if text == record.text else record._replace(text=text)


# where a source of a format without keys takes its id and text from (ParseOptions.refuse_ignored)
_OWN_ID_AND_TEXT = {
    "tsv": "has columns, not keys: name them with columns=(...) (e.g. ('id', 'url', 'title', "
    "'text'); default ('id', 'text')) and every column is kept",
    "trec": "is TREC: its documents name their own id, text and title (<DOCNO>, <TEXT>, <TITLE>)",
    "irds": "is an ir_datasets dataset: it gives its own ids and texts",
}


def check_id(doc_id: str) -> str:
    """Return ``doc_id`` if it is usable as a key, else raise :class:`RecordError` saying why."""
    if not doc_id:
        raise RecordError("empty id")
    if doc_id != doc_id.strip():
        raise RecordError(
            f"id {doc_id!r} has leading or trailing whitespace; strip it in the source"
        )
    if "\x00" in doc_id:
        raise RecordError(f"id {doc_id!r} contains a NUL character")
    if "\t" in doc_id or "\n" in doc_id or "\r" in doc_id:
        raise RecordError(
            f"id {doc_id!r} holds a tab or a line break: no TSV, qrels or run file can name "
            "it (each line is split there); replace it in the source"
        )
    return doc_id


# a \u escape of a UTF-16 surrogate (\ud800-\udfff), in either case: JSON may spell half a pair,
# which decodes to a str UTF-8 cannot encode; only records holding one are searched further
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def refuse_lone_surrogates(values: Iterable[tuple[str, str]]) -> None:
    """Raise :class:`RecordError` naming the first ``(key, value)`` whose value holds a lone
    surrogate (a JSON ``"\\ud800"``, a Python string from anywhere): no UTF-8 holds it, so
    the build's encode (or a tokenizer) would fail on it far from the record."""
    for key, value in values:
        found = _SURROGATE.search(value)
        if found is not None:
            raise RecordError(
                f"a lone surrogate \\u{ord(found.group()):04x} in {json.dumps(key)} (a \\u "
                "escape of half a UTF-16 pair); write the pair whole or drop the escape, or "
                "pass on_error='skip' to skip such records"
            )


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = e.object[e.start : e.end]
        raise RecordError(
            f"invalid UTF-8 at byte {e.start} of the record ({bad!r}); re-encode the file as "
            "UTF-8, or pass on_error='skip' to skip such records"
        ) from None


def _strip_line_end(raw: bytes) -> bytes:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
    return raw


# --------------------------------------------------------------------------- parsers


def make_tsv_parser(options: ParseOptions) -> Parser:
    """Parser of one TSV line into a Record, columns named by ``options.columns``."""
    columns = options.columns
    id_pos = columns.index("id")
    text_pos = columns.index("text")
    need = max(id_pos, text_pos) + 1
    expected = "<" + ">\\t<".join(columns) + ">"
    simple = columns == ("id", "text")

    def parse_tsv(raw: bytes) -> Record:
        line = _decode(_strip_line_end(raw))
        if simple:
            doc_id, sep, rest = line.partition("\t")
            if not sep:
                raise RecordError(
                    f'expected "{expected}", found no tab: a line of a TSV (or .txt) file is '
                    "an id, a tab and the text (a file of texts alone: give each line an id, "
                    "e.g. its line number, or write JSONL with an id field)"
                )
            if "\t" not in rest:
                if len(rest) <= HEADER_NAME_BYTES and is_header([doc_id, rest], columns):
                    raise _header_line([doc_id, rest])
                return Record(check_id(doc_id), rest, {})
        if "\r" in line and not raw.endswith(b"\n") and _CR_THEN_COLUMN.search(line):
            raise RecordError(LONE_CR)  # (a file of CR line ends is one line, with no LF)
        parts = line.split("\t")
        if len(parts) < need:
            raise RecordError(f'expected "{expected}", found {len(parts)} column(s)')
        if len(parts) > len(columns):
            raise RecordError(_too_many_columns(expected, columns, parts))
        if is_header(parts, columns):
            raise _header_line(parts)
        extra = {columns[i]: v for i, v in enumerate(parts) if i not in (id_pos, text_pos)}
        return Record(check_id(parts[id_pos]), parts[text_pos], extra)

    return parse_tsv


def is_header(parts: Sequence[str], columns: Sequence[str]) -> bool:
    """Whether a TSV line of ``columns`` is their names (pandas' ``to_csv(sep="\\t")``, an
    export's ``pid<TAB>passage``): its id and text are names of such columns
    (:data:`HEADER_ID_NAMES`, :data:`HEADER_TEXT_NAMES`, or the columns' own, in any case)
    and its other fields are names too (a word of letters, digits, ``_.-``, no space)."""
    if len(parts) != len(columns):
        return False
    for part, name in zip(parts, columns):
        low = part.lower()
        if name == "id":
            if low not in HEADER_ID_NAMES:
                return False
        elif name == "text":
            if low not in HEADER_TEXT_NAMES:
                return False
        elif low != name.lower() and not _COLUMN_NAME.fullmatch(part):
            return False
    return True


def _header_line(parts: Sequence[str]) -> RecordError:
    """The error for a line that names columns (:func:`is_header`): stored, it would be a
    document of id "pid" and text "passage"."""
    return RecordError(
        f"a header line (column names: {', '.join(parts)}), not a document; remove it "
        "(tail -n +2 FILE > BODY for a first line), or pass on_error='skip' to skip it"
    )


def _too_many_columns(expected: str, columns: Sequence[str], parts: list[str]) -> str:
    """Why a line of more columns than named is refused, with its columns and the fix."""
    n = len(parts)
    shown = " | ".join(repr(p if len(p) <= 24 else p[:23] + "…") for p in parts[:6])
    found = f'expected "{expected}", found {n} columns ({shown}{" | …" if n > 6 else ""})'
    if tuple(columns) == ("id", "text"):
        names = {3: "id,title,text", 4: "id,url,title,text"}.get(
            n, ",".join(["id", "text", *(f"field{i}" for i in range(2, n))])
        )
        spelled = ", ".join(repr(c) for c in names.split(","))
        return (
            f"{found}: a TSV of more than two columns needs every column named, e.g. "
            f"--columns {names} (parse=ParseOptions(columns=({spelled}))); a tab inside the "
            "text of a two-column TSV is refused too"
        )
    return f"{found}, {len(columns)} named ({', '.join(columns)}): name every column"


def _json_scalar_id(value: Any, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RecordError(f"id field {key!r} must be a string or an integer, found {value!r}")
    return check_id(str(value))


def same_id(record: Mapping[str, Any], key: str, others: Sequence[str]) -> None:
    """Refuse a record whose id fields after ``key`` (the first present of the defaults)
    hold another id: which one is the record's is the user's to say. MS MARCO v2's passages
    hold ``docid`` (their document's, shared by its passages) and ``pid`` (their own)."""
    for other in others:
        if other in record and str(record[other]) != str(record[key]):
            raise RecordError(
                f"two id fields differ: {key!r} is {record[key]!r:.40} and {other!r} is "
                f"{record[other]!r:.40}; name the one that is the record's id: "
                f"parse=ParseOptions(id_field={other!r}) or --id-field {other}, or the other"
            )


def make_jsonl_parser(options: ParseOptions) -> Parser:
    """Parser of one JSON object per line into a Record.

    The common record (valid UTF-8 and JSON, an object) takes the shortest way; anything else
    goes through :func:`_decode` and :func:`json_object`, the one statement of what is refused
    and how it is worded.
    """
    id_keys = (options.id_field,) if options.id_field else JSON_ID_FIELDS
    text_keys = (options.text_field,) if options.text_field else JSON_TEXT_FIELDS
    keep, need_id = options.keep_fields, options.need_id
    # the id fields after each (checked by same_id); none where no id is asked for (a token
    # corpus's texts: which id a record has is no matter there)
    later = {key: id_keys[n + 1 :] if need_id else () for n, key in enumerate(id_keys)}
    # the setting that names the key where it exists: a reader of texts alone (a token corpus,
    # need_id False) takes text_field= itself (--text-field); a store build takes parse=
    if need_id:
        name_text_field = "parse=ParseOptions(text_field=...) or --text-field"
    else:
        name_text_field = "text_field= (--text-field)"
    # json's C scanner called directly: json.loads's own layers (decode, raw_decode and two
    # white-space matches) were 2 of its 4.8 us a record. A line it does not take whole (white
    # space first, something after the value) goes the long way, which says what is wrong
    scan: Callable[[str, int], tuple[Any, int]]
    scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # (set by __init__)
    new = tuple.__new__  # Record(...) without the Python-level __new__ of a NamedTuple

    def parse_jsonl(raw: bytes) -> Record:
        try:
            line = raw.decode("utf-8")
            obj, end = scan(line, 0)
            if end != len(line) and not line[end:].isspace():
                raise ValueError(end)
        except (ValueError, StopIteration):  # invalid UTF-8 or JSON: said by the helpers
            obj = json_object(_decode(raw))
        if type(obj) is not dict:
            obj = json_object(_decode(raw))
        for id_key in id_keys:
            if id_key in obj:
                for other in later[id_key]:  # (the defaults: no other may say another id)
                    if other in obj:
                        same_id(obj, id_key, later[id_key])  # (checks every other)
                        break
                break
        else:
            if need_id:
                raise RecordError(
                    f"no id field: expected one of {list(id_keys)}; name it: "
                    "parse=ParseOptions(id_field=...) or --id-field"
                )
            id_key = ""  # (a reader of texts alone: no id asked for)
        for text_key in text_keys:
            if text_key in obj:
                break
        else:
            raise RecordError(
                f"no text field: expected one of {list(text_keys)}; name it: {name_text_field}"
            )
        body = obj[text_key]
        if not isinstance(body, str):
            raise RecordError(f"text field {text_key!r} must be a string, found {body!r:.40}")
        fields = {}
        for key in keep:
            value = obj.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                raise RecordError(f"field {key!r} must be a string, found {value!r:.40}")
            fields[key] = value
        doc_id = ""  # (no id asked for)
        if id_key:
            value = obj[id_key]
            # str() of an int is never empty, padded or holding a NUL: check_id would pass it
            doc_id = str(value) if type(value) is int else _json_scalar_id(value, id_key)
        if _SURROGATE_ESCAPE.search(raw) is not None:  # then only: a \u escape of a pair or half
            refuse_lone_surrogates(((id_key, doc_id), (text_key, body), *fields.items()))
        return new(Record, (doc_id, body, fields))

    return parse_jsonl


_DOCNO = re.compile(r"<DOCNO>(.*?)</DOCNO>", re.DOTALL | re.IGNORECASE)
_TEXT = re.compile(r"<TEXT>(.*?)</TEXT>", re.DOTALL | re.IGNORECASE)
_DOCHDR = re.compile(r"<DOCHDR>.*?</DOCHDR>", re.DOTALL | re.IGNORECASE)
_TITLE = re.compile(r"<(TITLE|HEADLINE|HEAD)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)


def make_trec_parser(options: ParseOptions) -> Parser:
    """Parser of one ``<DOC>…</DOC>`` block into a Record.

    The text is the content of the ``<TEXT>`` elements when there are any (joined by a blank
    line), else everything after ``</DOCNO>`` except a ``<DOCHDR>`` header; leading and
    trailing white space is stripped, inner line breaks are kept. A ``<TITLE>``, ``<HEADLINE>``
    or ``<HEAD>`` element becomes the ``title`` field.
    """
    del options  # TREC documents name their own parts

    def parse_trec(raw: bytes) -> Record:
        second = trec_second_mark(raw)
        if second is not None:  # the chunk's line is that of this mark
            raise RecordError(
                f"a second {second[1]} here, inside the document above it (its </DOC> is "
                "missing, or </DOC><DOC> share a line: a cut or concatenated file?); close "
                "every document with a </DOC> line of its own, or pass "
                "on_error='skip' to leave this block out"
            )
        doc = _decode(raw).replace("\r\n", "\n")
        match = _DOCNO.search(doc)
        if match is None:
            raise RecordError("<DOC> without <DOCNO>…</DOCNO>")
        doc_id = check_id(match.group(1).strip())
        body = doc[match.end() :]
        close = body.upper().rfind("</DOC>")
        if close < 0:  # the chunker hands over a last block the end of the file cut off
            raise RecordError(
                "<DOC> has no </DOC> before the end of the file (truncated?); pass "
                "on_error='skip' to leave this last document out"
            )
        body = body[:close]
        texts = _TEXT.findall(body)
        text = "\n\n".join(t.strip() for t in texts) if texts else _DOCHDR.sub("", body).strip()
        title = _TITLE.search(body)
        fields = {"title": title.group(2).strip()} if title else {}
        return Record(doc_id, text, fields)

    return parse_trec
