"""``litdata``: the collection optimized by Lightning's ``litdata`` into a local directory.

Built with ``litdata.optimize`` (the library's one route to its format): the TSV is the one
input, the function yields ``{"id", "text"}`` per line (the library's pattern for many small
samples from a file), 64 MB chunks, one worker. Read with
``litdata.StreamingDataset(input_dir=DIR)``, a sample fetched by index (``dataset[row]``).
litdata keeps no column apart, so the id map each rank builds
(:class:`~lading.bench.peers.base.IdMapStore`) reads every sample once, text included, then
holds the id strings and the dict. (litdata 0.2.76 can also write a ``keys/`` index,
``optimize(key_fn=...)``, read by ``dataset[key]``; it needs polars and scans a parquet file per
key: not the route measured here.)

What the library does in a process: ``optimize`` writes its chunks and merge files under
``DATA_OPTIMIZER_CACHE_FOLDER`` / ``DATA_OPTIMIZER_DATA_CACHE_FOLDER`` (``/tmp/chunks`` and
``/tmp/data`` by default): set here to a folder beside the destination and removed after. A
local ``input_dir`` is read in place (no cache copy). Under torch.distributed ``len(dataset)``
is this rank's share of an epoch, so the row count comes from the dataset's ``index.json``.
Pickled into a ``spawn`` worker as its path (the worker opens the directory again: litdata's
constructor reads files only, joins no group).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lading.bench.peers.base import IdMapStore, peer_module, publish, read_tsv

DONE = "index.json"  # optimize writes it last, merging the workers' indexes


def tsv_samples(corpus: str) -> Iterator[dict[str, str]]:
    """``optimize``'s function: every line of ``corpus`` as a sample (importable by its
    worker processes)."""
    for doc_id, text in read_tsv(Path(corpus)):
        yield {"id": doc_id, "text": text}


def build_litdata(corpus: Path, dest: Path, workers: int = 1) -> Path:
    """``corpus`` (``id<TAB>text``) optimized into ``dest`` (kept when already there)."""

    def build(tmp: Path) -> None:
        cache = tmp.with_name(tmp.name + ".cache")
        folders = {
            "DATA_OPTIMIZER_CACHE_FOLDER": str(cache / "chunks"),
            "DATA_OPTIMIZER_DATA_CACHE_FOLDER": str(cache / "data"),
        }
        before = {key: os.environ.get(key) for key in folders}
        os.environ.update(folders)  # read by optimize and inherited by its workers
        try:
            peer_module("litdata").optimize(
                fn=tsv_samples,
                inputs=[str(corpus)],
                output_dir=str(tmp),
                chunk_bytes="64MB",
                num_workers=workers,
                verbose=False,
            )
        finally:
            for key, value in before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            shutil.rmtree(cache, ignore_errors=True)

    return publish(dest, build, DONE)


class LitdataStore(IdMapStore):
    """An optimized litdata directory read as a document store, through a per-process id map."""

    def _open(self) -> None:
        self.data = peer_module("litdata").StreamingDataset(input_dir=str(self.path))

    def _count(self) -> int:
        index = json.loads((self.path / "index.json").read_text())
        return sum(int(chunk["chunk_size"]) for chunk in index["chunks"])

    def close(self) -> None:
        """Release the semaphore litdata makes when imported (``multiprocessing.Lock()`` in
        ``litdata.utilities.breakpoint``) through the finalizer the interpreter's exit would
        run (it then runs no more): a bench rank leaves with ``os._exit``, and the resource
        tracker would warn of a "leaked semaphore"."""
        self.data = None
        module = sys.modules.get("litdata.utilities.breakpoint")
        name = getattr(
            getattr(getattr(module, "_stdin_lock", None), "_semlock", None), "name", None
        )
        if not name:
            return
        from multiprocessing import util

        registry: dict[Any, Any] = getattr(util, "_finalizer_registry", {})
        for finalizer in list(registry.values()):
            if getattr(finalizer, "_args", None) == (name,):
                with contextlib.suppress(OSError):  # gone already
                    finalizer()
