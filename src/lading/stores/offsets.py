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
    MappedFile,
    RaggedColumn,
    RaggedWriter,
    build_lock,
    current_version,
    publish,
    read_meta,
    remove_dead_temps,
    staging,
    write_file,
    write_meta,
)
from lading.errors import SourceError, StoreFormatError
from lading.sources import (
    OnError,
    ParseOptions,
    Parser,
    SourceReader,
    fingerprint_changed,
    is_compressed,
)
from lading.stores.base import DocStore, IdLike
from lading.stores.index import IdIndex, IntIdCollector, write_index
from lading.stores.writer import Duplicates, compact, empty_source_reason, id_keys, unique_rows

FORMAT_NAME = "lading.offsets"


class OffsetStore(DocStore):
    """Documents read back from their source file by byte offset.

    Open with ``OffsetStore(index_dir)``; build with :meth:`build`. Pickles as its path.
    """

    def __init__(self, index_dir: str | os.PathLike[str]) -> None:
        self.path = Path(index_dir)
        self._pid = -1
        self._state: dict[str, Any] = {}
        self._open()

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
        reader = SourceReader(source, format, on_error, parse or ParseOptions())
        if reader.path is None or is_compressed(reader.path):
            raise ValueError(
                f"OffsetStore reads records back by byte offset, which needs an uncompressed "
                f"file; {source} is not one. Decompress it first, or use build_store."
            )
        dest = Path(index_dir)
        with build_lock(dest):
            remove_dead_temps(dest)
            with staging(dest) as tmp:
                _write(reader, tmp, duplicates)
                publish(tmp, dest)
        return cls(dest)

    def _open(self) -> dict[str, Any]:
        if self._pid == os.getpid():
            return self._state
        meta = read_meta(self.path, FORMAT_NAME)
        source = meta["source"]
        if not os.path.exists(source["path"]):
            raise StoreFormatError(
                f"{self.path} indexes {source['path']}, which is gone; an OffsetStore reads its "
                "source file on every lookup"
            )
        changed = fingerprint_changed(source)
        if changed:
            raise StoreFormatError(f"{self.path} is stale: {changed}; its offsets no longer hold")
        parse = ParseOptions.from_dict(meta["options"])
        parser: Parser = SourceReader(source["path"], meta["file_format"], "raise", parse).parser()
        self._state = {
            "meta": meta,
            "start": MappedFile(self.path / "span.start").array("<u8"),
            "length": MappedFile(self.path / "span.len").array("<u4"),
            "index": IdIndex(self.path, meta["index"]),
            "ids": RaggedColumn(self.path, "ids"),
            "parse": parser,
            "fd": os.open(source["path"], os.O_RDONLY),
        }
        self._pid = os.getpid()
        return self._state

    def __repr__(self) -> str:
        return f"OffsetStore({str(self.path)!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
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
        if not isinstance(doc_id, (str, int)):
            return False
        return self._open()["index"].row(doc_id) >= 0

    def ids(self) -> list[str]:
        ids: RaggedColumn = self._open()["ids"]
        return ids.texts(np.arange(len(ids), dtype=np.int64))

    def find_rows(self, ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
        """Row numbers of ``ids`` (request order), -1 for each absent one: from the id index."""
        rows: npt.NDArray[np.int64] = self._open()["index"].rows(ids)
        return rows

    def ids_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        ids: RaggedColumn = self._open()["ids"]
        return ids.texts(np.asarray(rows, dtype=np.int64))

    def get_many(self, ids: Sequence[IdLike]) -> list[str]:
        return self.texts_at(self.rows(ids))

    def texts_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        state = self._open()
        fd, parse = state["fd"], state["parse"]
        rows = np.asarray(rows, dtype=np.int64)
        starts = state["start"][rows].tolist()
        lengths = state["length"][rows].tolist()
        return [parse(os.pread(fd, n, s)).text for s, n in zip(starts, lengths)]


def _write(reader: SourceReader, directory: Path, duplicates: Duplicates) -> None:
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
    write_meta(
        directory,
        {
            "format": FORMAT_NAME,
            "version": current_version(FORMAT_NAME),
            "count": len(keys),
            "file_format": reader.file_format,
            "source": {**reader.fingerprint(), "format": reader.format},
            "options": reader.options.to_dict(),
            "index": index_meta,
            "skipped": reader.skipped,
            "files": files,
        },
    )
