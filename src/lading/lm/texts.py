"""Documents of a language-model corpus from text files, JSONL, WikiExtractor output, folders,
lists of files and lading stores, streamed one document at a time.

Plain text splits into documents at blank lines (``split="blank"``: WikiText paragraphs, Tiny
Shakespeare speeches), at every line (``"line"``) or not at all (``"file"``). JSONL records give
their text field (WikiExtractor ``--json`` output included); WikiExtractor's default output,
``<doc id=… title=…>…</doc>`` blocks, gives each block's body. A folder gives every file in it,
sorted by path; a glob pattern (``"wiki/*.jsonl.gz"``) the files it matches, sorted by path
(read as that list of files); a list of files gives each in the order listed; a lading store
gives its texts in row order. Lines are kept as written
(indentation and inner spaces included: code and verse keep their shape); only line ends go,
and lines of nothing but white space separate documents (``"blank"``) or are skipped
(``"line"``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from pathlib import Path
from typing import Any

from lading.disk.meta import META_FILE
from lading.errors import SourceError
from lading.sources import (
    COMPRESSED_SUFFIXES,
    OnError,
    ParseOptions,
    fingerprint,
    fingerprint_changed,
    open_binary,
    read_records,
    refuse_if_changed,
)
from lading.sources.chunks import BOM, numbered_lines, reading
from lading.sources.folders import data_files

SPLITS: tuple[str, ...] = ("blank", "file", "line")
TEXTS_ONLY = ParseOptions(keep_fields=(), need_id=False)  # a token corpus keeps no ids, fields
# a file, a folder, a glob pattern, a lading store, or a list of files
TextSource = (
    str | os.PathLike[str] | list[str | os.PathLike[str]] | tuple[str | os.PathLike[str], ...]
)
_JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")  # after a compression suffix is taken off
# a name that says plain text: never sniffed for JSON (a .txt whose first line is a JSON object
# was read as JSON records, its prose refused, or under on_error="skip" all of it left out)
_TEXT_SUFFIXES = (".txt", ".text", ".md", ".rst")
_SNIFF = 1 << 20  # bytes read to see whether a file of no JSON suffix opens with a JSON object
_PROBE = 8192  # a text file's first bytes with no NUL in them (git's test for binary files)
SKIP_EXAMPLES = 10  # the first skipped records kept, as a store build keeps them


@dataclass
class Skips:
    """What a read under ``on_error="skip"`` left out: ``count`` records, the first
    :data:`SKIP_EXAMPLES` of them in ``examples`` as ``"line L of FILE: why"`` (a store build's
    ``skip_examples``)."""

    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, count: int, examples: Sequence[str]) -> None:
        """Count ``count`` more records skipped, keeping the first of their ``examples``."""
        self.count += count
        self.examples.extend(examples[: max(0, SKIP_EXAMPLES - len(self.examples))])

    def said(self, what: str) -> str:
        """The warning of a build that skipped: ``skipped N malformed record(s) of WHAT; first:
        ...``, worded as a store build's."""
        first = f"; first: {self.examples[0]}" if self.examples else ""
        return f"skipped {self.count} malformed record(s) of {what}{first}"


def iter_texts(
    source: TextSource,
    split: str = "blank",
    snapshot: str | None = None,
    on_error: OnError = "raise",
    skipped: Skips | None = None,
    text_field: str | None = None,
) -> Iterator[str]:
    """Every document text of ``source``, in a stable order (a store: its ``snapshot``, by
    default the current one); with ``on_error="skip"``, malformed JSONL records, and the
    documents of text files holding a line of invalid UTF-8, are left out and counted into
    ``skipped``. ``text_field``: the JSON key of a record's text (default: the first of
    ``text``, ``contents``, ``body`` it has)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {sorted(SPLITS)}")
    if on_error == "skip" and skipped is None:
        raise ValueError("iter_texts(on_error='skip') counts what it skips into skipped=Skips()")
    source = expand_glob(source)
    if isinstance(source, (list, tuple)):
        for file in listed_texts(source):
            yield from file_texts(file, split, on_error, skipped, text_field)
        return
    path = Path(source)
    if path.is_dir() and (path / META_FILE).is_file():
        yield from _store_texts(path, snapshot)
    elif path.is_dir():
        files = folder_files(path)
        if not files:
            raise ValueError(f"{path} holds no files")
        for file in files:
            yield from file_texts(file, split, on_error, skipped, text_field)
    elif path.is_file():
        yield from file_texts(path, split, on_error, skipped, text_field)
    else:
        raise FileNotFoundError(f"source {path} does not exist")


def expand_glob(source: TextSource) -> TextSource:
    """``source``, or where it is a glob pattern the files it matches sorted by path (a build
    reads and records them as that list: an open sees a listed file change, not a new match).

    Raises:
        FileNotFoundError: a pattern that matches no file, naming it.
    """
    from lading.stores.building.inputs import glob_matches

    matches = glob_matches(source)
    if matches is None:
        return source
    files: list[str | os.PathLike[str]] = list(matches)
    return files


def refuse_unused_text_field(
    text_field: str | None,
    source: Any,
    files: Iterable[Path] | None = None,
    store: bool = False,
) -> None:
    """Refuse a ``text_field`` that no file of ``source`` would use: it names a key of JSON
    records, and a lading store or plain-text files have none, so it was ignored and the
    corpus built from other texts than the user named. ``files``/``store``: what ``source``
    was resolved to (None: found here from a file, folder or store path; a missing one is
    left to the reader to say).

    Raises:
        ValueError: naming the source, what it is, and the fix.
    """
    if text_field is None:
        return
    source = expand_glob(source)
    if files is None and isinstance(source, (list, tuple)):
        files = [Path(f) for f in source]
    if files is None:
        path = Path(source)
        if not path.exists():
            return
        store = path.is_dir() and (path / META_FILE).is_file()
        files = folder_files(path) if path.is_dir() and not store else [path]
    if store:
        what = "a lading store (its documents' texts are read as they were stored)"
    elif any(is_records(f) for f in files):
        return
    else:
        what = (
            "plain text, with no JSON records file (.jsonl, .json, .ndjson, each also "
            ".gz/.bz2/.zst, or a file whose first line is a JSON object)"
        )
    raise ValueError(
        f"text_field={text_field!r} names the key of a JSON record's text, but {source} is "
        f"{what}: drop text_field (--text-field), or give the JSONL files"
    )


def refuse_unused_split(split: str, source: TextSource, flag: str) -> None:
    """Refuse a ``split`` the user gave (``flag``, as they spelled it) where no file of
    ``source`` is plain text: it divides plain text into documents, and JSON records (a
    document each), WikiExtractor's ``<doc>`` blocks (one each) or a lading store (its rows)
    have none to divide, so every value built the same corpus. A source that is not there
    is left to the reader to name.

    Raises:
        ValueError: naming the split, the source and the fix.
    """
    expanded = expand_glob(source)
    files: list[Path]
    if isinstance(expanded, (list, tuple)):
        store, files = False, [Path(f) for f in expanded]
        if not all(f.is_file() for f in files):
            return
    else:
        path = Path(expanded)
        if not path.exists():
            return
        store = path.is_dir() and (path / META_FILE).is_file()
        files = [] if store else folder_files(path) if path.is_dir() else [path]
    kinds = set() if store else {_kind_of(f) for f in files}
    if store:
        what = "a lading store (a document a row)"
    elif not files or "plain text" in kinds:
        return
    elif len(kinds) == 1:
        what = kinds.pop()
    else:
        what = "JSON records and WikiExtractor output (a document a record, a <doc> block)"
    raise ValueError(
        f"{flag} {split} divides plain text into documents, but {source} is {what}: drop {flag}"
    )


def listed_texts(source: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The files of a list source, read in the order given.

    Raises:
        ValueError: an empty list, or an entry that is a folder (name the folder itself).
        FileNotFoundError: an entry that does not exist.
    """
    from lading.stores.building.inputs import listed_files

    files = listed_files(list(source), globs=False)  # an empty one: says so
    for file in files:
        if file.is_dir():
            raise ValueError(
                f"{file} in the list of sources is a folder: a list names files; pass the "
                "folder itself as the source (its files read sorted by path)"
            )
        if not file.is_file():
            raise FileNotFoundError(f"source {file} (in the list of sources) does not exist")
    return files


def folder_files(path: Path) -> list[Path]:
    """The files of a folder source, in the order they are read: hidden files and folders
    (:func:`~lading.sources.folders.data_files`) and a folder's README and LICENSE (any
    suffix) left out. A dataset's folder holds its README beside the data (WikiText's: 2 of
    2,482 documents its text), where WikiExtractor's files have no suffix: every other file
    is read (``*.md`` too: a corpus of markdown is one)."""
    return sorted(p for p in data_files(path, (".",)) if not _not_data(p.name))


def _not_data(name: str) -> bool:
    return name.split(".", 1)[0].upper() in ("README", "LICENSE")


def source_identity(source: TextSource) -> dict[str, Any]:
    """What identifies the texts of ``source`` for a corpus's reuse decision: a lading store's
    current snapshot; a file's fingerprint (size, mtime, head/tail hash, inode); every file of
    a folder's relative path, size and mtime (a folder of Wikipedia dumps is thousands of files:
    reading 128 KiB of each would cost more than the check is worth); a list of files, each
    file's fingerprint."""
    if isinstance(source, (list, tuple)):
        return {"files": [fingerprint(file) for file in listed_texts(source)]}
    path = Path(source)
    if path.is_dir() and (path / META_FILE).is_file():
        from lading.stores import open_store

        return {"store": open_store(path, on_stale="ignore").snapshot}
    if path.is_dir():
        stats = [(f, f.stat()) for f in folder_files(path)]
        return {"folder": [[str(f.relative_to(path)), s.st_size, s.st_mtime_ns] for f, s in stats]}
    return {"file": fingerprint(path)}


def identity_changed(source: TextSource, recorded: dict[str, Any]) -> str | None:
    """Why ``source`` no longer holds what ``recorded`` (its :func:`source_identity` at build
    time) described, or None: a file by size, head/tail hash and mtime; a folder by its listing;
    a store by its snapshot. A source that is gone is not a change (the corpus may have been
    copied to another machine); a list by each file's fingerprint."""
    if "files" in recorded:
        files = recorded["files"] if isinstance(recorded["files"], list) else []
        return next(filter(None, map(fingerprint_changed, files)), None)
    if isinstance(source, (list, tuple)):  # (recorded of another kind: a manifest is input)
        return None
    path = Path(source)
    if not path.exists():
        return None
    if "file" in recorded:
        return fingerprint_changed(recorded["file"])
    now = source_identity(path)
    if now == recorded:
        return None
    if "store" in recorded:
        return (
            f"the store {path} was rebuilt (snapshot {now.get('store')}, was {recorded['store']})"
        )
    return f"the files of {path} changed (added, removed, resized or modified)"


def _store_texts(path: Path, snapshot: str | None) -> Iterator[str]:
    import numpy as np

    from lading.stores import PackedStore

    store = PackedStore(path, on_stale="ignore", snapshot=snapshot)
    for lo in range(0, len(store), 10_000):
        yield from store.texts_at(np.arange(lo, min(lo + 10_000, len(store))))


def _kind_of(path: Path) -> str:
    """What documents ``path`` holds, in the words of :func:`refuse_unused_split`."""
    if is_records(path):
        return "JSON records (a document a record)"
    if is_doc_blocks(path):
        return "WikiExtractor output (a document a <doc> block)"
    return "plain text"


def is_doc_blocks(path: Path) -> bool:
    """Whether ``path`` is WikiExtractor's default output: ``<doc id=… title=…>`` blocks (a
    document each), compressed or not. A file that cannot be read is left to the reader."""
    try:
        with open_binary(path) as stream:
            head = stream.read(64 + len(BOM))
    except (OSError, EOFError, ValueError, ImportError):
        return False
    return _opens_a_doc_block(head)


def _opens_a_doc_block(head: bytes) -> bool:
    """Whether a file's first bytes open a WikiExtractor ``<doc`` block (a BOM before it)."""
    return head.removeprefix(BOM).lstrip().startswith(b"<doc ")


def is_records(path: Path) -> bool:
    """Whether ``path`` holds JSON records (a document a record), compressed or not: its name
    says so (``.jsonl``, ``.json``, ``.ndjson``, each also ``.gz``/``.bz2``/``.zst``: C4
    ships ``.json.gz``), or, unless its name says plain text (``.txt``, ``.md``, ...), its
    first line that is not blank is a JSON object (WikiExtractor ``--json`` writes
    ``text/AA/wiki_00``). A file that cannot be read is left to the reader to name."""
    stem = path.name
    for suffix in COMPRESSED_SUFFIXES:
        stem = stem.removesuffix(suffix)
    if stem.endswith(_JSON_SUFFIXES):
        return True
    if stem.lower().endswith(_TEXT_SUFFIXES):
        return False
    try:
        with open_binary(path) as stream:
            head = stream.read(_SNIFF)
    except (OSError, EOFError, ValueError, ImportError):
        return False
    head = head.removeprefix(BOM)  # a file saved by a Windows tool: the readers drop it too
    first = next((line for line in head.splitlines(keepends=True) if line.strip()), b"")
    if not first.lstrip().startswith(b"{"):
        return False
    if not first.endswith(b"\n") and len(head) == _SNIFF:  # a line longer than the sniff
        return first.lstrip().startswith(b'{"')
    try:
        return isinstance(json.loads(first), dict)
    except ValueError:
        return False


def texts_only(text_field: str | None) -> ParseOptions:
    """How a token corpus reads JSON records: their text under ``text_field`` (default: the
    usual keys), no id needed, no field kept."""
    return TEXTS_ONLY if text_field is None else replace(TEXTS_ONLY, text_field=text_field)


def file_texts(
    path: Path,
    split: str,
    on_error: OnError = "raise",
    skipped: Skips | None = None,
    text_field: str | None = None,
) -> Iterator[str]:
    """The documents of one file (see the module doc); malformed JSONL records, and documents
    holding a line of invalid UTF-8, as :func:`iter_texts` says; ``text_field`` as there."""
    if is_records(path):
        parse = texts_only(text_field)
        reader = read_records(path, format="jsonl", on_error=on_error, parse=parse)
        yield from map(attrgetter("text"), reader)
        if skipped is not None:
            skipped.add(reader.skipped, reader.skip_reasons)
        return
    skips = skipped if skipped is not None else Skips()
    with reading(path), open_binary(path) as stream:  # (one that cannot be opened: named)
        head = stream.read(_PROBE)
    refuse_binary(path, head)
    if _opens_a_doc_block(head[: 64 + len(BOM)]):
        yield from _wikiextractor(path, on_error, skips)
    else:
        yield from _plain(path, split, on_error, skips)


# what a file that is not text most often is, by its first bytes, and what to do with it
_BINARY = (
    (b"PAR1", "a parquet file: build a lading store from it (lading build FILE STORE), then "
     "the corpus from the store"),
    (b"\xfd7zXZ\x00", "compressed with xz, which lading does not read: decompress it (xz -d) "
     "or recompress it with gzip, bzip2 or zstd"),
    (b"PK\x03\x04", "a zip archive: extract it and build from its files"),
)  # fmt: skip


def refuse_binary(path: Path, head: bytes) -> None:
    """Refuse ``path`` whose first (decompressed) bytes ``head`` hold a NUL byte: not text,
    whatever ``on_error`` says (its runs of valid UTF-8 became documents under ``skip``, a
    parquet file's pages with its NUL bytes in them), named with what it looks like."""
    at = head.find(b"\x00")
    if at < 0:
        return
    what = next((hint for magic, hint in _BINARY if head.startswith(magic)), None)
    pairs = head[:64]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or (
        len(pairs) >= 8 and (pairs[1::2].count(0) == len(pairs) // 2 or not any(pairs[::2]))
    ):  # a BOM, or every other byte a NUL: text saved as UTF-16 (Notepad's "Unicode")
        what = "text saved as UTF-16: re-encode it as UTF-8 (iconv -f UTF-16 -t UTF-8)"
    raise SourceError(
        path,
        None,
        f"is not text (a NUL byte at byte {at}): "
        + (what or "a binary file; leave it out of the source")
        + ". A token corpus reads text, JSONL and WikiExtractor files (.gz, .bz2, .zst too) "
        "and lading stores",
    )


def _lines(path: Path, on_error: OnError) -> Iterator[tuple[int, str, str | None]]:
    """Each line of ``path``: its number, its text and None; a line of invalid UTF-8 raises
    naming it and the fix, or, with ``on_error="skip"``, comes with its bad bytes replaced
    and, instead of None, why it is bad (``"line L of FILE: why"``), for the caller to skip
    the document it is in."""
    with reading(path) as where, open_binary(path) as stream:
        for number, _, _, raw in numbered_lines(stream):
            where[0] = number
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                why = f"invalid UTF-8 at byte {e.start} of the line ({e.object[e.start : e.end]!r})"
                if on_error == "raise":
                    raise SourceError(
                        path,
                        number,
                        f"{why}; re-encode the file as UTF-8, or pass on_error='skip' to skip "
                        "the document it is in",
                    ) from None
                yield number, raw.decode("utf-8", "replace"), str(SourceError(path, number, why))
                continue
            yield number, text, None


def unix_line(line: str) -> str:
    """``line`` (its line end included) with a Windows line end made ``"\\n"``, as
    ``"blank"`` and ``"line"`` read one: a CRLF file gives its LF twin's documents (a lone CR
    inside a line is text, kept)."""
    return line[:-2] + "\n" if line.endswith("\r\n") else line


def _plain(path: Path, split: str, on_error: OnError, skips: Skips) -> Iterator[str]:
    """The documents of a plain text file; one holding a line of invalid UTF-8 (its
    paragraph, its line, the file) skipped into ``skips`` under ``on_error="skip"``."""
    if split == "file":
        lines = list(_lines(path, on_error))
        bad = next((why for _, _, why in lines if why is not None), None)
        text = "".join(map(unix_line, (line for _, line, _ in lines))).strip()
        if bad is not None:
            skips.add(1, [bad])
        elif text:
            yield text
        return
    block: list[str] = []
    block_bad: str | None = None
    for _, raw, why in _lines(path, on_error):
        line = raw.rstrip("\r\n")  # the text as written: indentation kept (code, verse)
        if split == "line":
            if why is not None:
                skips.add(1, [why])
            elif line.strip():
                yield line
            continue
        if line.strip():
            block.append(line)
            block_bad = block_bad or why
        elif block:
            if block_bad is None:
                yield "\n".join(block)
            else:
                skips.add(1, [block_bad])
            block, block_bad = [], None
    if block_bad is not None:
        skips.add(1, [block_bad])
    elif block:
        yield "\n".join(block)


def _wikiextractor(path: Path, on_error: OnError, skips: Skips) -> Iterator[str]:
    """The bodies of WikiExtractor's ``<doc>`` blocks; one holding a line of invalid UTF-8
    skipped into ``skips`` under ``on_error="skip"``, as is each run of lines of text
    outside every block (raised otherwise: :func:`_outside_blocks`)."""
    body: list[str] | None = None
    bad: str | None = None
    start = 0
    stray = False  # in a run of lines outside every block
    for number, line, why in _lines(path, on_error):
        if body is None and not line.startswith("<doc ") and line.strip():
            if not stray:
                _outside_blocks(path, number, on_error, skips)
            stray = True
            continue
        stray = False
        if line.startswith("<doc "):
            if body is not None:  # the open block is cut: left out under "skip"
                why_cut = f"<doc> inside the <doc> of line {start} (its </doc> is missing)"
                _broken_block(path, number, why_cut, on_error, skips)
            body, start, bad = [], number, why
        elif line.startswith("</doc>"):
            assert body is not None  # (a stray one is text outside a block: above)
            text, bad = "".join(body).strip(), bad or why
            if bad is not None:
                skips.add(1, [bad])
            elif text:
                yield text
            body = None
        elif body is not None:
            body.append(unix_line(line))
            bad = bad or why
    if body is not None:
        why_cut = "<doc> has no </doc> before the end of the file"
        _broken_block(path, start, why_cut, on_error, skips)


def _outside_blocks(path: Path, number: int, on_error: OnError, skips: Skips) -> None:
    """Text at line ``number`` outside every ``<doc>`` block is no document's: raise naming
    it and the fix, or, under ``on_error="skip"``, count its run of lines as one skipped."""
    _broken_block(path, number, "text outside a <doc> block", on_error, skips)


def _broken_block(path: Path, number: int, why: str, on_error: OnError, skips: Skips) -> None:
    """A ``<doc>`` block cut or joined at line ``number`` (text outside every block, one opened
    inside another, one left open at the end): raise naming it and the fix, or, under
    ``on_error="skip"``, count it skipped (a cut block stopped the build whatever on_error
    said, where a cut JSONL line was counted)."""
    why = f"{why} (is the file cut, or two files joined?)"
    if on_error == "raise":
        raise SourceError(
            path,
            number,
            f"{why}; give WikiExtractor's files as it wrote them, or pass on_error='skip' to "
            "leave such text out",
        )
    skips.add(1, [str(SourceError(path, number, why))])


def stale_reason(recipe: object) -> str | None:
    """Why the recorded source differs from it now, or None (also when the manifest's recipe
    is not what a build writes: a manifest is input, and staleness is advice)."""
    if not isinstance(recipe, dict) or not isinstance(recipe.get("source"), (str, list)):
        return None
    if not isinstance(recipe.get("source_identity"), dict):
        return None
    try:
        return identity_changed(recipe["source"], recipe["source_identity"])
    except (OSError, ValueError):  # a path this system cannot look at (too long, no access)
        return None


def refuse_if_source_changed(source: TextSource, before: dict[str, Any]) -> None:
    """Fail a build whose source changed while it was read (a store source is read at the
    snapshot ``before`` names, so it cannot)."""
    if "file" in before:
        refuse_if_changed(before["file"])
    elif "files" in before:
        for file in before["files"]:
            refuse_if_changed(file)
    elif "folder" in before and source_identity(source) != before:
        assert not isinstance(source, (list, tuple))  # (a list's identity is its "files")
        raise SourceError(
            source,
            None,
            "its files changed while they were read; nothing was committed. "
            "Build again once the folder is final",
        )
