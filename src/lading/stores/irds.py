"""IrDatasetsStore: the study's baseline 3, an adapter over an ``ir_datasets`` docstore.

ir_datasets keeps its own lookup structures (numpy-sorted indices, LZ4 blocks) under
``~/.ir_datasets``; this class only gives it lading's store protocol. Optional extra:
``pip install 'lading[irds]'``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from lading.sources import fingerprint, import_ir_datasets, irds_record
from lading.stores.base import DocStore, IdLike, id_list, id_text

_LOCAL = "lading-local/"
# beside ir_datasets' files in <file>.pklz4: the TSV that docstore was built from
_SOURCE_RECORD = "lading-source.json"
_SAME_FILE = ("size", "mtime_ns", "head_tail_sha256")  # not path or inode: a copy2 is the file


def _register_local(dataset_id: str) -> None:
    """Register ``lading-local/<path>`` (a local TSV) with ir_datasets, once per process."""
    ir_datasets = import_ir_datasets()
    if not dataset_id.startswith(_LOCAL) or dataset_id in ir_datasets.registry:
        return
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TsvDocs
    from ir_datasets.util import LocalDownload

    path = Path(dataset_id[len(_LOCAL) :])
    doc_cls = _doc_class(path)

    class LadingTsvDocs(TsvDocs):
        """ir_datasets' TSV docs, its lines read by lading's parser: one answer for every
        store. ir_datasets' own reader opens the file with universal newlines, so a bare
        ``\\r`` ends its line there (a text ending ``two\\r\\r\\n`` loses its ``\\r``, one
        with ``th\\rree`` inside is cut in two) where lading's stores keep it as text."""

        def _iter(self) -> Iterator[Any]:
            return _lading_docs(path, doc_cls)

    docs = LadingTsvDocs(LocalDownload(path), doc_cls=doc_cls, namespace="lading-local")
    ir_datasets.registry.register(dataset_id, Dataset(docs))


def _lading_docs(path: Path, doc_cls: Any) -> Iterator[Any]:
    """The documents of ``path`` as ``doc_cls`` (``GenericDoc`` or ``MsMarcoDocument``), parsed
    as lading's own stores parse it (a malformed line is an error naming file and line)."""
    from lading.sources import ParseOptions, read_records

    if doc_cls.__name__ == "GenericDoc":
        for record in read_records(path, format="tsv"):
            yield doc_cls(record.id, record.text)
        return
    columns = ("id", "url", "title", "text")
    for record in read_records(path, format="tsv", parse=ParseOptions(columns=columns)):
        yield doc_cls(record.id, record.fields["url"], record.fields["title"], record.text)


def _doc_class(path: Path) -> Any:
    """ir_datasets' document type for a local TSV, from its first line's columns.

    ``id<TAB>text`` (MS MARCO passages) reads as ``GenericDoc``; ``id<TAB>url<TAB>title<TAB>
    body`` (``msmarco-docs.tsv``) as ``MsMarcoDocument``, the type ir_datasets itself gives MS
    MARCO documents (its text is title + body).
    """
    from ir_datasets.datasets.msmarco_document import MsMarcoDocument
    from ir_datasets.formats import GenericDoc

    with open(path, "rb") as f:
        first = f.readline()
    tabs = first.count(b"\t")
    if tabs == 1:
        return GenericDoc
    if tabs == 3:
        return MsMarcoDocument
    raise ValueError(
        f"{path}, line 1: {tabs + 1} columns; ir_datasets reads a local TSV of id<TAB>text or "
        "id<TAB>url<TAB>title<TAB>body (msmarco-docs.tsv). Build a lading store of other layouts "
        "instead, naming the columns (--columns, or parse=ParseOptions(columns=[...]))"
    )


def _docstore_dir(dataset_id: str) -> Path | None:
    """``<file>.pklz4``, where ir_datasets keeps the docstore of a local TSV; None otherwise."""
    if not dataset_id.startswith(_LOCAL):
        return None
    path = Path(dataset_id[len(_LOCAL) :])
    return path.with_name(path.name + ".pklz4")


def _drop_stale_docstore(dataset_id: str) -> None:
    """Remove the docstore of a local TSV unless it records being built from the TSV as it is
    now (size, modification time, head/tail hash): ir_datasets builds a docstore once and
    then trusts it, so after an edit of the TSV it answered with the old texts. A docstore
    without the record (built before lading kept one) is built again too."""
    docstore = _docstore_dir(dataset_id)
    if docstore is None or not docstore.exists():
        return
    try:
        recorded = json.loads((docstore / _SOURCE_RECORD).read_text())
    except (OSError, ValueError):
        recorded = None
    now = fingerprint(Path(dataset_id[len(_LOCAL) :]))
    if not isinstance(recorded, dict) or any(recorded.get(k) != now[k] for k in _SAME_FILE):
        shutil.rmtree(docstore, ignore_errors=True)  # another rank may be removing it too


def _record_source(dataset_id: str, before: dict[str, Any]) -> None:
    """Write beside the docstore just built the TSV's identity taken ``before`` it was read (a
    TSV changed while read then differs from it, and the next open builds again)."""
    docstore = _docstore_dir(dataset_id)
    if docstore is None or not docstore.is_dir() or (docstore / _SOURCE_RECORD).exists():
        return
    tmp = docstore / f"{_SOURCE_RECORD}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps({k: before[k] for k in _SAME_FILE}))
    os.replace(tmp, docstore / _SOURCE_RECORD)  # whole or absent, whoever writes it


class IrDatasetsStore(DocStore):
    """Documents of ``ir_datasets.load(dataset_id)``, looked up in its docstore.

    Pickles as the dataset id; each process opens the docstore itself on first use.
    """

    def __init__(self, dataset_id: str) -> None:
        self.dataset_id = dataset_id
        self._dataset: Any = None
        self._docstore: Any = None
        self._count: int | None = None
        _register_local(dataset_id)
        _drop_stale_docstore(dataset_id)
        ir_datasets = import_ir_datasets()
        dataset = ir_datasets.load(dataset_id)
        if not dataset.has_docs():
            raise ValueError(f"ir_datasets dataset {dataset_id!r} has no documents")

    def _store(self) -> Any:
        if self._docstore is None:
            _register_local(self.dataset_id)  # a spawned worker starts with an empty registry
            self._dataset = import_ir_datasets().load(self.dataset_id)
            docstore = self._dataset.docs_store()
            local = _docstore_dir(self.dataset_id)
            if local is not None:  # built now, from the TSV as it is, and that recorded
                before = fingerprint(Path(self.dataset_id[len(_LOCAL) :]))
                docstore.build()
                _record_source(self.dataset_id, before)
            self._docstore = docstore
        return self._docstore

    def __repr__(self) -> str:
        return f"IrDatasetsStore({self.dataset_id!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"dataset_id": self.dataset_id}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.dataset_id = state["dataset_id"]
        self._dataset = self._docstore = None
        self._count = None

    @classmethod
    def from_tsv(cls, path: str | os.PathLike[str]) -> IrDatasetsStore:
        """Register a local ``id<TAB>text`` file as an ir_datasets dataset and open it.

        ir_datasets builds its docstore beside the file (``<file>.pklz4``, its own format), so
        ``path`` must be in a writable folder. Used to compare the baselines on one corpus; the
        lines are parsed by lading's TSV parser, so every store reads the file alike (a
        ``\\r`` that is not part of a CRLF ending stays text).
        """
        resolved = Path(path).resolve()
        if not resolved.is_file():
            raise FileNotFoundError(f"no file {resolved}")
        name = f"{_LOCAL}{resolved}"
        _register_local(name)
        return cls(name)

    def __len__(self) -> int:
        if self._count is None:
            self._store()
            count = self._dataset.docs_count()  # None for datasets registered without a count
            self._count = (
                int(count) if count is not None else sum(1 for _ in self._dataset.docs_iter())
            )
        return self._count

    def __contains__(self, doc_id: object) -> bool:
        """Whether the docstore holds exactly ``doc_id``: its ``get_many`` also answers for a
        key it pads or cuts to one it holds (``"D1\\x00"`` for ``"D1"``), under that key."""
        key = id_text(doc_id)
        return key is not None and key in self._store().get_many([key])

    def ids(self) -> list[str]:
        self._store()
        return [str(doc.doc_id) for doc in self._dataset.docs_iter()]

    def get_many(self, ids: Sequence[IdLike]) -> list[str]:
        keys = [id_text(i) for i in id_list(ids)]  # None: no id, found by no lookup
        found = self._store().get_many([k for k in keys if k is not None])
        out = []
        for doc_id, key in zip(ids, keys):
            doc = found.get(key)
            if doc is None:
                raise self.missing(doc_id if key is None else key)
            out.append(irds_record(doc).text)
        return out
