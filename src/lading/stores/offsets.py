"""OffsetStore: the study's baseline 2, a lookup table of byte offsets into the original file.

TREC DL's ``get_document`` seeks into the MS MARCO file at a stored offset and reads one line.
This is the same idea with the table kept as numpy arrays (``span.start`` uint64, ``span.len``
uint32, plus the shared id index), not a pickled dict, and the read done with ``os.pread``:
positional, so no file offset is shared between threads or across a fork. Each lookup parses
the record again with the parser the build used, so it costs a system call and a parse per
document; the text itself stays in the page cache, shared.
"""

from __future__ import annotations

import contextlib
import os
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.disk import (
    BuildContext,
    MappedFile,
    RaggedColumn,
    RaggedWriter,
    column_paths,
    current_version,
    open_snapshot,
    write_file,
)
from lading.disk.snapshot import content_id
from lading.errors import SourceError, StoreFormatError
from lading.sources import (
    OnError,
    ParseOptions,
    Parser,
    SourceReader,
    fingerprint_changed,
    is_compressed,
    read_records,
    refuse_if_changed,
)
from lading.stores.base import DocStore, IdLike, checked_rows, id_list, is_id
from lading.stores.building.writer import (
    Duplicates,
    compact,
    empty_source_reason,
    id_keys,
    unique_rows,
)
from lading.stores.index import IdIndex, IntIdCollector, manifest_version, write_index

FORMAT_NAME = "lading.offsets"


class OffsetStore(DocStore):
    """Documents read back from their source file by byte offset.

    Open with ``OffsetStore(index_dir)``; build with :meth:`build`. Like a packed store it reads
    one snapshot of the index (:attr:`snapshot`) and pickles as its path and that snapshot.
    """

    def __init__(self, index_dir: str | os.PathLike[str], *, snapshot: str | None = None) -> None:
        self.path = Path(index_dir)
        self._pid = -1
        self._state: dict[str, Any] = {}
        self.snapshot = snapshot
        self.snapshot = self._open()["meta"]["snapshot"]

    @classmethod
    def build(
        cls,
        source: str | os.PathLike[str],
        index_dir: str | os.PathLike[str],
        format: str | None = None,
        on_error: OnError = "raise",
        *,
        duplicates: Duplicates = "error",
        parse: ParseOptions | None = None,
    ) -> OffsetStore:
        """Index the records of an uncompressed ``source`` file into ``index_dir`` (atomic).

        Arguments as :func:`lading.build_store`'s; ``parse`` is recorded in ``meta.json``, since
        every lookup parses its record again with it.
        """
        reader = read_records(source, format, on_error, parse=parse)
        if reader.path is None or is_compressed(reader.path):
            raise ValueError(
                f"OffsetStore reads records back by byte offset, which needs an uncompressed "
                f"file; {source} is not one. Decompress it first, or use build_store."
            )
        with BuildContext(index_dir, FORMAT_NAME, "offsets index") as build:
            build.check_ours()
            with build.scratch() as tmp:
                meta = _write(reader, tmp, build.snapshot, duplicates)
                build.commit(tmp, meta)
        return cls(index_dir, snapshot=build.snapshot)

    def _open(self) -> dict[str, Any]:
        if self._state:  # a forked child keeps the parent's maps and descriptor (pread)
            return self._state
        self._state = open_snapshot(self.path, FORMAT_NAME, self._map, self.snapshot)
        self._pid = os.getpid()
        return self._state

    def _map(self, meta: dict[str, Any]) -> dict[str, Any]:
        source = meta["source"]
        if not isinstance(source["path"], str) or not os.path.isfile(source["path"]):
            raise StoreFormatError(  # a regular file only: a FIFO or a device would hang reads
                f"{self.path} indexes {source['path']!r}, which is gone or not a regular file "
                "(meta.json source.path); an OffsetStore reads its source file on every lookup"
            )
        changed = fingerprint_changed(source)
        if changed:
            raise StoreFormatError(f"{self.path} is stale: {changed}; its offsets no longer hold")
        parse = ParseOptions.from_dict(meta["options"])
        parser: Parser = SourceReader(source["path"], meta["file_format"], "raise", parse).parser()
        where = self.path / meta.get("dir", "")  # version 1: every file at the top
        state = {
            "meta": meta,
            "start": MappedFile(where / "span.start").array("<u8"),
            "length": MappedFile(where / "span.len").array("<u4"),
            "index": IdIndex(where, meta["index"], count=meta.get("count")),
            "ids": RaggedColumn(*column_paths(where, "ids")),
            "parse": parser,
            "fd": os.open(source["path"], os.O_RDONLY),
        }
        _check_options(state, self.path)
        return state

    def __repr__(self) -> str:
        return f"OffsetStore({str(self.path)!r})"

    @property
    def content_id(self) -> str:
        """A digest of this snapshot's files and its source's identity (see
        :func:`lading.disk.snapshot.content_id`)."""
        meta = self._open()["meta"]
        source = {
            "source": {
                "size": meta["source"].get("size"),
                "crc32": meta["source"].get("head_tail_sha256"),
            }
        }
        return content_id({"files": {**meta["files"], **source}})

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), "snapshot": self.snapshot}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
        self.snapshot = state["snapshot"]
        self._pid = -1
        self._state = {}

    def __del__(self) -> None:
        fd = self.__dict__.get("_state", {}).get("fd")
        if fd is not None and self.__dict__.get("_pid") == os.getpid():
            with contextlib.suppress(OSError):
                os.close(fd)

    def __len__(self) -> int:
        return len(self._open()["start"])

    def __contains__(self, doc_id: object) -> bool:
        if not is_id(doc_id):
            return False
        return self._open()["index"].row(doc_id) >= 0

    def ids(self) -> list[str]:
        ids: RaggedColumn = self._open()["ids"]
        return ids.texts(np.arange(len(ids), dtype=np.int64))

    def find_rows(self, ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
        """Row numbers of ``ids`` (request order), -1 for each absent one: from the id index."""
        rows: npt.NDArray[np.int64] = self._open()["index"].rows(id_list(ids, "find_rows"))
        return rows

    def ids_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        ids: RaggedColumn = self._open()["ids"]
        return ids.texts(np.asarray(rows, dtype=np.int64))

    def get_many(self, ids: Sequence[IdLike]) -> list[str]:
        return self.texts_at(self.rows(id_list(ids)))

    def texts_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        state = self._open()
        fd, parse = state["fd"], state["parse"]
        rows = checked_rows(rows, len(state["start"]))  # numpy alone reads -1 as the last
        starts = state["start"][rows].tolist()
        lengths = state["length"][rows].tolist()
        return [parse(os.pread(fd, n, s)).text for s, n in zip(starts, lengths)]


def _check_options(state: dict[str, Any], path: Path) -> None:
    """The recorded parse options read the first record back as the build did: a manifest is
    input, and options of the wrong type would otherwise fail every lookup, not the open."""
    if not len(state["start"]):
        return
    raw = os.pread(state["fd"], int(state["length"][0]), int(state["start"][0]))
    try:
        state["parse"](raw)
    except Exception as e:  # any failure here is the manifest's options
        os.close(state["fd"])
        shown = repr(state["meta"].get("options"))[:100]
        raise StoreFormatError(
            f"{path}/meta.json: options = {shown} do not read its first record back "
            f"({type(e).__name__}: {str(e)[:100]}); rebuild it with OffsetStore.build"
        ) from None


def _write(
    reader: SourceReader, directory: Path, snapshot: str, duplicates: Duplicates
) -> dict[str, Any]:
    """Index ``reader``'s records into ``directory`` (to become ``snapshot``); the manifest."""
    before = reader.fingerprint()  # before reading: a source changed while read is refused
    starts, lengths, lines = array("Q"), array("I"), array("q")
    ids = RaggedWriter(directory, "ids")
    int_ids = IntIdCollector()
    for record, chunk in reader.iter_spans():
        starts.append(chunk.start)
        lengths.append(chunk.end - chunk.start)
        lines.append(chunk.line)
        ids.append(record.id.encode("utf-8"))
        int_ids.add(record.id)
    if not starts:
        raise SourceError(reader.source, None, empty_source_reason(reader))
    files = ids.finish()
    refuse_if_changed(before)
    keys = id_keys(directory, int_ids)
    keep = unique_rows(keys, lines, duplicates, reader)
    start_arr = np.frombuffer(starts, dtype=np.uint64)
    len_arr = np.frombuffer(lengths, dtype=np.uint32)
    if keep is not None:
        files = compact(directory, files, keep, [ids])
        keys, start_arr, len_arr = keys[keep], start_arr[keep], len_arr[keep]
    files["span.start"] = write_file(directory / "span.start", start_arr.astype("<u8").tobytes())
    files["span.len"] = write_file(directory / "span.len", len_arr.astype("<u4").tobytes())
    index_meta, index_files = write_index(directory, keys, int_ids.values is not None)
    files.update(index_files)
    assert reader.path is not None
    return {
        "format": FORMAT_NAME,
        "version": manifest_version(index_meta, current_version(FORMAT_NAME)),
        "dir": snapshot,
        "count": len(keys),
        "file_format": reader.file_format,
        "source": {**before, "format": reader.format},
        "options": reader.options.to_dict(),
        "index": index_meta,
        "skipped": reader.skipped,
        "files": {f"{snapshot}/{name}": info for name, info in files.items()},
    }
