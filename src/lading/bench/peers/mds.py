"""``mds``: the collection as Mosaic ``streaming`` MDS shards in a local directory.

Built with ``streaming.MDSWriter`` (columns ``id`` and ``text``, both ``str``; the writer's
default 64 MiB shards, no compression): the library's documented way to convert a dataset.
Read with ``streaming.StreamingDataset(local=DIR)`` and no ``remote``, which the library
documents for data that is already local; a sample fetched by index (``dataset[row]``, the
map-style access). MDS keeps no column apart, so the id map each rank builds
(:class:`~lading.bench.peers.base.IdMapStore`) reads every sample once, text included (~40k
samples/s on 2 cores), then holds the id strings and the dict.

What the library does in a process: ``StreamingDataset`` joins torch.distributed when it is
initialized (two barriers in its constructor, so every rank must open it together, as the
bench's ranks do) and initializes it itself from ``RANK``/``WORLD_SIZE`` when it is not; it
keeps its shard states in shared memory (``/dev/shm``) and its file locks in the temporary
directory. Nothing is downloaded and no cache is written: the shards are read where they lie.
A DataLoader worker started with ``spawn`` gets the dataset pickled, as the library intends
(its shared memory is attached again by name), never a second constructor, which would join
the rank's process group a second time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lading.bench.peers.base import IdMapStore, peer_module, publish, read_tsv

DONE = "index.json"  # MDSWriter writes it when it finishes


def build_mds(corpus: Path, dest: Path) -> Path:
    """``corpus`` (``id<TAB>text``) as MDS shards at ``dest`` (kept when already there)."""

    def build(tmp: Path) -> None:
        columns = {"id": "str", "text": "str"}
        with peer_module("streaming").MDSWriter(out=str(tmp), columns=columns) as out:
            for doc_id, text in read_tsv(corpus):
                out.write({"id": doc_id, "text": text})

    return publish(dest, build, DONE)


def open_mds(path: Path) -> Any:
    """The shards at ``path`` as a ``StreamingDataset`` (local only, in order)."""
    streaming = peer_module("streaming")
    return streaming.StreamingDataset(local=str(path), shuffle=False, batch_size=1)


class MDSStore(IdMapStore):
    """MDS shards read as a document store: rows found through a per-process id map."""

    def _open(self) -> None:
        self.data = open_mds(self.path)

    def _count(self) -> int:
        count: int = self.data.num_samples  # len(dataset) is this rank's share of an epoch
        return count

    def close(self) -> None:
        """Release the dataset's shared memory now, as its ``atexit`` handlers would: a bench
        rank leaves with ``os._exit``, which runs none (the resource tracker would then warn of
        "leaked shared_memory objects" and unlink them at the bench's end)."""
        memory = peer_module("streaming.base.shared.memory").SharedMemory
        for shm in _owned(self.data, memory, depth=3):
            shm.cleanup()
        self.data = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "data": self.data}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self.data = state["data"]  # the rank's dataset, attached again (no new constructor)
        self._ids = self._read_ids(self._count())
        self._rows = {doc_id: row for row, doc_id in enumerate(self._ids)}


def _owned(obj: Any, kind: type, depth: int) -> list[Any]:
    """The ``kind`` objects among ``obj``'s attributes, and theirs, ``depth`` levels down,
    through streaming's own objects only (its shared arrays, scalars and barrier)."""
    found = []
    for value in vars(obj).values():
        if isinstance(value, kind):
            found.append(value)
        elif (
            depth > 1
            and type(value).__module__.startswith("streaming.")
            and hasattr(value, "__dict__")
        ):
            found += _owned(value, kind, depth - 1)
    return found
