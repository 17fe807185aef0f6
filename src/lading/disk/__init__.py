"""Disk utilities every on-disk format shares; the bottom layer (imports nothing of lading's
but :mod:`lading.errors`).

- :mod:`lading.disk.build`: :class:`BuildContext`, the one way every builder writes: lock,
  remove dead temps, stage, commit (a snapshot's manifest) or publish (a whole directory).
- :mod:`lading.disk.snapshot`: immutable files under version-unique paths and a manifest
  committed last; readers open one snapshot (:func:`open_snapshot`); old ones are collected.
- :mod:`lading.disk.lock`: the build lock (an ``O_EXCL`` file with a heartbeat, no flock).
- :mod:`lading.disk.atomic`: the primitives under the build context (:func:`build_lock`,
  :func:`scratch`, :func:`new_temp_dir`, :func:`publish`, :func:`remove_dead_temps`,
  :func:`recover_aside`).
- :mod:`lading.disk.ragged`: ragged arrays (``.bin`` + ``.off``), written in one pass and mapped.
- :mod:`lading.disk.meta`: ``meta.json`` checked on open (sizes and spot checksums);
  :func:`verify_checksums` reads every byte.
- :mod:`lading.disk.bookkeeping`: what ``lading verify`` checks beside the listed files: the
  snapshot's ``manifest.json``, each shard's ``shard.json``, each build's ``build.json``.
- :mod:`lading.disk.spill`: an int64 array spilled to a scratch file while a build grows it.
- :mod:`lading.disk.formats`: each format's own version, and the versions still readable.
- :mod:`lading.disk.files`: durable writes, directory fsync, read-only maps.
- :mod:`lading.disk.maps`: those maps made through the C library's ``mmap``, keeping no file
  descriptor (a store of thousands of shards opens under a limit of 1,024 open files).
- :mod:`lading.disk.progress`: the byte-counting progress bar of builds and copies.
- :mod:`lading.disk.stage`: copy a finished store to node-local disk once per node (``lading
  stage``); the one module here that also reads :mod:`lading.world`, to know the node.
"""

from __future__ import annotations

from lading.disk.atomic import (
    DATASET_MARK,
    STAGE_MARK,
    build_lock,
    is_ours_to_replace,
    left_aside,
    new_temp_dir,
    publish,
    recover_aside,
    remove_dead_temps,
    scratch,
)
from lading.disk.bookkeeping import verify_bookkeeping
from lading.disk.build import BuildContext, committed, committed_without_lock, has_debris, intact
from lading.disk.files import MappedFile, fsync_dir, write_file
from lading.disk.formats import (
    FORMATS,
    DiskFormat,
    UnsupportedVersionError,
    check_version,
    current_version,
    disk_format,
)
from lading.disk.meta import META_FILE, read_meta, spot_crc32, verify_checksums
from lading.disk.progress import byte_bar
from lading.disk.ragged import (
    OFFSET_DTYPE,
    RaggedColumn,
    RaggedWriter,
    column_files,
    column_paths,
)
from lading.disk.snapshot import (
    SnapshotGoneError,
    load_manifest,
    new_snapshot_id,
    open_snapshot,
)
from lading.disk.spill import SpillArray

__all__ = [
    "DATASET_MARK",
    "FORMATS",
    "META_FILE",
    "OFFSET_DTYPE",
    "STAGE_MARK",
    "BuildContext",
    "DiskFormat",
    "MappedFile",
    "RaggedColumn",
    "RaggedWriter",
    "SnapshotGoneError",
    "SpillArray",
    "UnsupportedVersionError",
    "build_lock",
    "byte_bar",
    "check_version",
    "column_files",
    "column_paths",
    "committed",
    "committed_without_lock",
    "current_version",
    "disk_format",
    "fsync_dir",
    "has_debris",
    "intact",
    "is_ours_to_replace",
    "left_aside",
    "load_manifest",
    "new_snapshot_id",
    "new_temp_dir",
    "open_snapshot",
    "publish",
    "read_meta",
    "recover_aside",
    "remove_dead_temps",
    "scratch",
    "spot_crc32",
    "verify_bookkeeping",
    "verify_checksums",
    "write_file",
]
