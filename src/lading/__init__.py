"""lading: training data from disk to RAM to GPU for multi-GPU PyTorch, without a copy per process.

Quick start, in a folder made by ``lading example .``:

```python
import lading

store = lading.build_store("collection.tsv", "msmarco.store")  # once; every rank may call it
store = lading.open_store("msmarco.store")                     # free in every process
store["42"], store.get_many(["0", "1"])
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lading._lazy import lazy_attributes
from lading._version import __version__
from lading.disk.stage import stage
from lading.errors import (
    AbandonedBuildWarning,
    BuilderGoneError,
    DeviceUnavailableError,
    DivergedError,
    DuplicateIdError,
    EmptyEpochError,
    EmptyTextWarning,
    IncompleteBuildWarning,
    LadingError,
    LoaderClosedError,
    LoaderStateError,
    LongIdWarning,
    NoRowsError,
    OtherFormatError,
    OutOfSpaceError,
    ParquetError,
    PassEndedError,
    RanksDisagreeError,
    RemoteAccessError,
    RemoteChangedError,
    RemoteError,
    RemoteNotFoundError,
    RemotePermanentError,
    RemoteReadError,
    RemoteURLError,
    RemoteWriteError,
    SkippedFilesWarning,
    SkippedRecordsWarning,
    SourceError,
    StaleStoreWarning,
    StoreFormatError,
    StoreNotFoundError,
    UnrankedQueriesWarning,
    WorldChangedError,
)
from lading.sources import ParseOptions, Record, read_records
from lading.stores import (
    DocStore,
    InMemoryStore,
    IrDatasetsStore,
    OffsetStore,
    PackedStore,
    build_shard,
    build_store,
    merge_store,
    open_store,
)
from lading.world import World

if TYPE_CHECKING:  # what the names below are, for a user's type checker
    from lading.device import DevicePrefetcher
    from lading.loading.map_workload import loader

# ``lading.loader`` and ``lading.DevicePrefetcher``: imported on first use, so ``import lading``
# does not import torch
__getattr__ = lazy_attributes(
    __name__,
    {"loader": "lading.loading.map_workload", "DevicePrefetcher": "lading.device"},
)


__all__ = [
    "AbandonedBuildWarning",
    "BuilderGoneError",
    "DevicePrefetcher",
    "DeviceUnavailableError",
    "DivergedError",
    "DocStore",
    "DuplicateIdError",
    "EmptyEpochError",
    "EmptyTextWarning",
    "InMemoryStore",
    "IncompleteBuildWarning",
    "IrDatasetsStore",
    "LadingError",
    "LoaderClosedError",
    "LoaderStateError",
    "LongIdWarning",
    "NoRowsError",
    "OffsetStore",
    "OtherFormatError",
    "OutOfSpaceError",
    "PackedStore",
    "ParquetError",
    "ParseOptions",
    "PassEndedError",
    "RanksDisagreeError",
    "Record",
    "RemoteAccessError",
    "RemoteChangedError",
    "RemoteError",
    "RemoteNotFoundError",
    "RemotePermanentError",
    "RemoteReadError",
    "RemoteURLError",
    "RemoteWriteError",
    "SkippedFilesWarning",
    "SkippedRecordsWarning",
    "SourceError",
    "StaleStoreWarning",
    "StoreFormatError",
    "StoreNotFoundError",
    "UnrankedQueriesWarning",
    "World",
    "WorldChangedError",
    "__version__",
    "build_shard",
    "build_store",
    "loader",
    "merge_store",
    "open_store",
    "read_records",
    "stage",
]
