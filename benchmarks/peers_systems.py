"""bench_peers.py's systems: each built from one TSV through its own route, and read the way a
user of it reads (texts and, where the tool holds them, token ids); the page-cache drop for the
cold measures."""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from lading.bench.peers import build_hf, build_peer, open_peer
from lading.bench.peers import unavailable as peer_unavailable

SYSTEMS: tuple[str, ...] = ("lading", "dict", "hf", "mds", "litdata")
MAX_TOKENS = 512  # every system keeps the same first 512 token ids of a document


def unavailable(system: str) -> str | None:
    """Why ``system`` cannot run here (the peers' reason is lading bench's own), or None."""
    return None if system in ("lading", "dict") else peer_unavailable(system)


def peer(module: str) -> Any:
    """An optional peer's module (the ``peers`` extra; untyped, absent from CI's environment)."""
    return importlib.import_module(module)


def rows(tsv: Path) -> Iterator[tuple[str, str]]:
    with open(tsv, encoding="utf-8") as f:
        for line in f:
            doc_id, text = line.rstrip("\n").split("\t", 1)
            yield doc_id, text


def drop_cache(path: Path) -> None:
    """Evict every file of ``path`` (a file or a directory) from the OS page cache.

    ``fsync`` first (a dirty page cannot be dropped), then ``POSIX_FADV_DONTNEED`` over the
    whole file: no root needed, unlike ``/proc/sys/vm/drop_caches``. Pages another process has
    mapped stay; every measure here runs in a fresh process, so none is mapped.
    """
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_fraction(path: Path) -> float:
    """Fraction of the pages of ``path``'s files in the page cache (``mincore``)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    total = resident = 0
    for file in files:
        size = file.stat().st_size
        if size == 0:
            continue
        pages = -(-size // mmap.PAGESIZE)
        with open(file, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # writable: ctypes can see it
        anchor = ctypes.c_char.from_buffer(m)
        vec = (ctypes.c_ubyte * pages)()
        if libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size), vec):
            raise OSError(ctypes.get_errno(), "mincore failed")
        resident += sum(v & 1 for v in vec)
        total += pages
        del anchor
        m.close()
    return resident / total if total else 0.0


# ----------------------------------------------------------------------------- builds


def _litdata_item(line: str) -> dict[str, str]:
    doc_id, text = line.rstrip("\n").split("\t", 1)
    return {"id": doc_id, "text": text}


class _LitdataTokens:
    """litdata's ``fn`` for a tokenized build (a class: litdata pickles it to its worker)."""

    def __init__(self, tokenizer: str) -> None:
        self.tokenizer = tokenizer
        self._tok: Any = None

    def __call__(self, line: str) -> dict[str, Any]:
        if self._tok is None:
            from lading.stores.tokens import load_tokenizer

            self._tok = load_tokenizer(self.tokenizer)
        item: dict[str, Any] = _litdata_item(line)
        ids = self._tok.encode(item["text"], add_special_tokens=False).ids[:MAX_TOKENS]
        item["input_ids"] = np.asarray(ids, dtype=np.uint16)
        return item


def _hf_tokens(tsv: Path, dest: Path, tokenizer: str) -> None:
    """HF datasets' route: the saved Dataset, ``map(batched=True)`` with the fast tokenizer's
    ``encode_batch`` into a uint16 ``input_ids`` column, ``save_to_disk``."""
    datasets = peer("datasets")
    from lading.stores.tokens import load_tokenizer

    tok = load_tokenizer(tokenizer)
    plain = build_hf(tsv, dest.with_name(dest.name + ".text"))
    table = datasets.load_from_disk(str(plain))
    text = datasets.Value("string")
    features = datasets.Features(
        {"id": text, "text": text, "input_ids": datasets.Sequence(datasets.Value("uint16"))}
    )

    def encode(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        found = tok.encode_batch(batch["text"], add_special_tokens=False)
        return {"input_ids": [e.ids[:MAX_TOKENS] for e in found]}

    table = table.map(encode, batched=True, features=features, keep_in_memory=True)
    table.save_to_disk(str(dest))
    shutil.rmtree(plain, ignore_errors=True)


def build(system: str, tsv: Path, dest: Path, tokenizer: str | None = None) -> None:
    """``tsv`` into ``dest`` through ``system``'s own route (the dict has none: it reads);
    with ``tokenizer``, the documents' token ids too."""
    shutil.rmtree(dest, ignore_errors=True)
    if system == "lading":
        import lading

        max_length = MAX_TOKENS if tokenizer else None
        lading.build_store(tsv, dest, tokenizer=tokenizer, max_length=max_length, progress=False)
    elif system in ("hf", "mds", "litdata") and not tokenizer:
        build_peer(system, tsv, dest)  # the route lading bench's peer strategies take
    elif system == "hf" and tokenizer:
        _hf_tokens(tsv, dest, tokenizer)
    elif system == "litdata" and tokenizer:
        with open(tsv, encoding="utf-8") as f:
            lines = f.readlines()
        peer("litdata").optimize(
            fn=_LitdataTokens(tokenizer),
            inputs=lines,
            output_dir=str(dest),
            chunk_bytes="64MB",
            num_workers=1,
        )
    elif system != "dict":
        raise ValueError(f"no {'tokenized ' if tokenizer else ''}build for system {system!r}")


# ----------------------------------------------------------------------------- readers


class Reader:
    """Texts (or token ids) by id and in order, through the route a user of ``system`` takes.

    ``dest`` is the system's store; for the dict it is the TSV it loads (texts) or lading's
    tokenized store whose arrays it copies into a dict (token ids: the dict has no build).
    """

    def __init__(self, system: str, tsv: Path, dest: Path, tokens: bool = False) -> None:
        self.system = system
        self.get: Callable[[list[str]], list[Any]]
        self.scan: Callable[[], int] = lambda: 0
        # before a timed scan, outside the timing: what a first scan pays once per process
        self.before_scan: Callable[[], object] = lambda: None
        if system == "lading":
            self._lading(dest, tokens)
        elif system == "dict":
            self._dict(tsv, dest, tokens)
        elif tokens and system == "hf":  # memory-mapped Arrow, an id -> row dict in this process
            table = open_peer("hf", dest)
            column = table.data.select_columns(["input_ids"])  # python lists, its default
            self.get = lambda ids: column[[int(r) for r in table.find_rows(ids)]]["input_ids"]
        elif tokens and system == "litdata":
            self._litdata_tokens(dest)
        elif system in ("hf", "mds", "litdata"):  # lading bench's peer stores: the same route
            store = open_peer(system, dest)
            self.get, self.scan = store.get_many, store.scan
        else:
            raise ValueError(f"unknown system {system!r}")

    def _lading(self, dest: Path, tokens: bool) -> None:
        import lading

        store = lading.open_store(dest)
        n = len(store)
        self.get = store.tokens_many if tokens else store.get_many
        self.scan = lambda: sum(
            len(store.texts_at(np.arange(lo, min(lo + 1024, n)))) for lo in range(0, n, 1024)
        )
        # a scan's first call imports pyarrow (78 ms, 4.3 MiB private here): HF's reader has
        # imported it before its timing too; lookups never import it
        self.before_scan = lambda: store.texts_range(0, min(n, 1024))

    def _dict(self, tsv: Path, dest: Path, tokens: bool) -> None:
        if tokens:
            import lading

            store = lading.open_store(dest)
            ids = store.ids()
            arrays = [a.copy() for a in store.tokens_at(np.arange(len(ids)))]
            docs: dict[str, Any] = dict(zip(ids, arrays))
        else:
            docs = dict(rows(tsv))
        self.get = lambda ids: [docs[i] for i in ids]
        self.scan = lambda: sum(1 for _ in docs.values())

    def _litdata_tokens(self, dest: Path) -> None:
        """litdata's token arrays by id, through the id map a user builds (as for its texts)."""
        store = open_peer("litdata", dest)
        data = store.data  # the StreamingDataset the store opened; read by row, as its texts
        self.get = lambda ids: [data[int(row)]["input_ids"] for row in store.find_rows(ids)]
