"""Peer data layers as bench strategies: documents read through another tool's route.

Each peer is built from the bench's collection TSV through the tool's own recommended path and
read the way a user of that tool reads documents by id: the tool has no lookup by id, so every
rank opens the dataset, reads every id once and keeps an ``id -> row`` dict, which the bench
counts as that rank's memory (:mod:`lading.bench.peers.base` says what it costs).

- ``hf``: HF ``datasets``, ``save_to_disk`` + ``load_from_disk`` (:mod:`.hf`);
- ``mds``: Mosaic ``streaming``, ``MDSWriter`` + ``StreamingDataset(local=...)`` (:mod:`.mds`);
- ``litdata``: ``litdata.optimize`` + ``litdata.StreamingDataset`` (:mod:`.lit`).

A peer whose package cannot be imported here is skipped with the reason (:func:`unavailable`),
never a failure. ``benchmarks/bench_peers.py`` builds and reads through the same functions
(:func:`build_peer`, :func:`open_peer`).
"""

from __future__ import annotations

from pathlib import Path

from lading.bench.peers.base import IdMapStore, peer_module
from lading.bench.peers.hf import HFDatasetStore, build_hf
from lading.bench.peers.lit import LitdataStore, build_litdata
from lading.bench.peers.mds import MDSStore, build_mds

PEER_STRATEGIES: tuple[str, ...] = ("hf", "mds", "litdata")
# the module each peer imports, and the distribution that installs it (the ``peers`` extra)
MODULES: dict[str, tuple[str, str]] = {
    "hf": ("datasets", "datasets"),
    "mds": ("streaming", "mosaicml-streaming"),
    "litdata": ("litdata", "litdata"),
}
DOCUMENTS_LIVE_IN: dict[str, str] = {
    "hf": "HF datasets (Arrow, memory map) + an id map per rank",
    "mds": "Mosaic MDS shards (StreamingDataset) + an id map per rank",
    "litdata": "litdata chunks (StreamingDataset) + an id map per rank",
}

__all__ = [
    "DOCUMENTS_LIVE_IN",
    "PEER_STRATEGIES",
    "HFDatasetStore",
    "IdMapStore",
    "LitdataStore",
    "MDSStore",
    "build_hf",
    "build_litdata",
    "build_mds",
    "build_peer",
    "open_peer",
    "preload",
    "unavailable",
]


def unavailable(strategy: str) -> str | None:
    """Why peer ``strategy`` cannot run here (its package is missing or fails to import), or
    None. Any exception counts: mosaicml-streaming imports torchvision, whose PyPI wheel raises
    RuntimeError beside a torch it was not built for."""
    if strategy not in MODULES:
        return None
    module, package = MODULES[strategy]
    try:
        __import__(module)
    except Exception as e:
        return f"import {module} ({package}): {type(e).__name__}: {e}; pip install 'lading[peers]'"
    return None


def preload(strategy: str) -> None:
    """Import peer ``strategy``'s package now (nothing for another strategy).

    A cell calls it before taking its memory baseline, so that what it reports as the store's
    memory is the documents and the id map, not the package (108 MiB of anonymous memory for
    ``streaming``, which imports torchvision; 52 MiB for ``datasets``; 16 MiB for ``litdata``,
    measured with torch 2.14.1): the process's totals still hold the import.
    """
    if strategy in MODULES:
        peer_module(MODULES[strategy][0])


def build_peer(strategy: str, corpus: Path, dest: Path) -> Path:
    """``corpus`` (``id<TAB>text``) in peer ``strategy``'s format at ``dest`` (kept when a
    finished build is already there); ``dest``."""
    builders = {"hf": build_hf, "mds": build_mds, "litdata": build_litdata}
    if strategy not in builders:
        raise ValueError(f"unknown peer {strategy!r}; choose from {list(builders)}")
    return builders[strategy](corpus, dest)


def open_peer(strategy: str, path: Path) -> IdMapStore:
    """Peer ``strategy``'s dataset at ``path`` as a document store (its id map built here)."""
    stores: dict[str, type[IdMapStore]] = {
        "hf": HFDatasetStore,
        "mds": MDSStore,
        "litdata": LitdataStore,
    }
    if strategy not in stores:
        raise ValueError(f"unknown peer {strategy!r}; choose from {list(stores)}")
    return stores[strategy](path)
