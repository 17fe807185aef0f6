"""A token corpus in object storage: its small files staged to the node, its tokens read by
ranged GETs through the node cache.

``TokenCorpus.open("s3://bucket/corpora/wiki", cache=DIR, cache_bytes=N)`` reads the corpus's
``meta.json`` (one GET), stages ``tokens.off`` (8 bytes a document) and ``tokenizer.json`` once
per node and snapshot (:mod:`lading.remote.stage`, as a document store's index) and
memory-maps them; ``tokens.bin`` stays in the bucket and :class:`RemoteTokens` reads any
``tokens[a:b]`` the LM modes ask for as the byte range ``[a * itemsize, b * itemsize)`` through
the node cache (one cache and one cap for every store and corpus of the node). The loader tells
the cache what its batches will read (:mod:`lading.lm.remote_reads`), so that ranges come a
window ahead and eviction follows the epoch's order.

An open corpus is pinned to the snapshot it read: a rebuild of the URL (a new ``snap-<id>/``
and a new ``meta.json``) changes nothing it reads, and its GETs are pinned to the ETag of its
``tokens.bin``. A pickled corpus (a DataLoader worker, another rank) reopens that snapshot from
the node's staged copy.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.disk import OFFSET_DTYPE, MappedFile
from lading.disk.meta import META_FILE
from lading.disk.names import check_name, safe_snapshot_id
from lading.disk.snapshot import MANIFEST, SNAP_PREFIX, decode_manifest
from lading.errors import LadingError, StoreFormatError
from lading.lm.corpus_format import FORMAT_NAME, OFFSETS, TOKENIZER, TOKENS
from lading.remote.cache import NodeCache
from lading.remote.clients import check_reachable
from lading.remote.fetch import Fetcher
from lading.remote.objects import PermanentError, RemoteNotSupportedError
from lading.remote.settings import RemoteSettings
from lading.remote.stage import stage_dir, stage_index, staged_etags
from lading.stores.remote.manifest import MAX_BYTES, no_store

_DTYPES = ("<u2", "<u4", "<i4", "|u1")  # what token_dtype writes (uint16 up to 65,536 ids)
CHUNK = 8 << 20  # bytes a GET of a whole-corpus read (token_arrays) carries


class RemoteTokens:
    """``tokens.bin`` of a remote corpus, read the way the LM modes read a memory map:
    ``tokens[a:b]`` (and ``len``, ``dtype``); each read is its own array.

    Reads of a batch are gathered first (:mod:`lading.lm.remote_reads`): the batch's ranges
    are read in one call of the node cache and put in :attr:`ready`, which slices are served
    from; any other slice is one read of the cache of its own. With :attr:`recording` set (a
    list), slices are not read but their ranges appended to it (``(corpus, a, b)``) and zeros
    returned: how a batch's ranges are found without reading it.
    """

    ndim = 1

    def __init__(self, cache: NodeCache, key: str, dtype: np.dtype[Any], n: int) -> None:
        self.cache, self.key, self.dtype, self.n = cache, key, dtype, n
        self.itemsize = dtype.itemsize
        self.ready: dict[tuple[int, int], npt.NDArray[Any]] = {}
        self.recording: list[tuple[int, int, int]] | None = None
        self.part = 0  # the corpus's place in the recording loader's corpora (what it logs)
        self.now: int | None = None  # the step reads without one are at

    def __len__(self) -> int:
        return self.n

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    def __getitem__(self, index: slice | int) -> Any:
        if isinstance(index, slice):
            start, stop, stride = index.indices(self.n)
            if stride != 1:
                raise IndexError("a remote corpus's tokens are read by ranges: tokens[a:b]")
            stop = max(start, stop)
            if self.recording is not None:
                self.recording.append((self.part, start, stop))
                return np.zeros(stop - start, dtype=self.dtype)
            found = self.ready.get((start, stop))
            return found if found is not None else self.read([(start, stop)])[0]
        if isinstance(index, (int, np.integer)):
            at = int(index) + (self.n if int(index) < 0 else 0)
            if not 0 <= at < self.n:
                raise IndexError(f"token {int(index)} is out of range [0, {self.n})")
            return self[at : at + 1][0]
        raise TypeError(
            f"a remote corpus's tokens are read by ranges (tokens[a:b]), not by "
            f"{type(index).__name__}; corpus.token_arrays() reads them all into memory"
        )

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(
            "a remote corpus's tokens are not an array in memory: read ranges (tokens[a:b]), "
            "or call corpus.token_arrays() to read them all by ranged GETs"
        )

    def read(self, ranges: Sequence[tuple[int, int]], now: int | None = None) -> list[np.ndarray]:
        """Tokens ``[a, b)`` of each range, through the node cache, at step ``now``."""
        size = self.itemsize
        spans = [(self.key, a * size, b * size) for a, b in ranges]
        found = self.cache.read(spans, self.now if now is None else now)
        return [np.frombuffer(raw, dtype=self.dtype) for raw in found]


class RemoteTokenFiles:
    """The files of a token corpus in object storage (see the module doc): what a
    :class:`~lading.lm.corpus.TokenCorpus` opened from a URL reads through.

    Args:
        url: ``s3://bucket/prefix/name`` (anything obstore or fsspec reaches).
        settings: the node cache's directory and cap, the client's settings.
        snapshot: open this snapshot (default: the current one).

    Raises:
        StoreFormatError: no corpus there, another format, a damaged manifest or file.
        RemoteReadError: a GET failed for good.
    """

    def __init__(self, url: str, settings: RemoteSettings, snapshot: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.settings = settings
        s = settings
        fetcher = s.fetcher(self.url)
        try:
            raw = _manifest_bytes(fetcher, self.url, s.cache, snapshot)
        except PermanentError as e:
            raise no_corpus(self.url, getattr(fetcher.client, "endpoint", ""), e) from None
        meta = parse(raw, f"{self.url}/{META_FILE}")
        key = f"{meta['dir']}/{TOKENS}" if meta.get("dir") else TOKENS
        staged_names = sorted(name for name in meta["files"] if name != key)
        staged = stage_index(fetcher, self.url, raw, meta, s.cache, staged_names, [key])
        cache = NodeCache(
            s.cache, s.cache_bytes, fetcher, f"{self.url}@{meta['snapshot']}",
            staged_etags(staged), policy=s.policy, max_gap=s.max_gap, max_waste=s.max_waste,
        )  # fmt: skip
        self.path, self.meta, self.snapshot = staged, meta, meta["snapshot"]
        self.dtype = np.dtype(meta["dtype"])
        count = int(meta["files"][key]["size"]) // self.dtype.itemsize
        self.tokens = RemoteTokens(cache, key, self.dtype, count)
        where = staged / meta.get("dir", "") / OFFSETS
        self.offsets = MappedFile(where, random_access=True).array(OFFSET_DTYPE)
        if len(self.offsets) != meta["documents"] + 1 or int(self.offsets[-1]) != count:
            raise StoreFormatError(
                f"{self.url}: tokens.off ({len(self.offsets)} offsets) does not describe "
                f"{key} ({count} tokens) and the manifest's documents = {meta['documents']!r}; "
                "rebuild the corpus"
            )

    @property
    def cache(self) -> NodeCache:
        """The node cache the tokens are read through."""
        return self.tokens.cache

    def cache_stats(self) -> dict[str, Any]:
        """The node's ``gets``, ``bytes_fetched``, ``bytes_used``, ``hits``, ``misses``,
        ``bytes_cached``, ``cap``, ... summed over its processes; this one's under ``process``
        (:meth:`lading.remote.cache.NodeCache.node_stats`)."""
        return self.cache.node_stats()

    def token_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every token back to back and the ``n + 1`` offsets, read whole into this process's
        memory by ranged GETs of 8 MiB around the node cache: what ``device=`` stages (the
        corpus must fit in memory and on the device; the cache keeps nothing of it)."""
        tokens = self.tokens
        size = tokens.n * tokens.itemsize
        etag = self.cache.etags.get(tokens.key)
        requests = [(tokens.key, a, min(a + CHUNK, size), etag) for a in range(0, size, CHUNK)]
        raw = b"".join(self.cache.fetcher.read(requests))
        return np.frombuffer(raw, dtype=self.dtype), np.asarray(self.offsets)

    def close(self) -> None:
        """Stop this process's GETs and hand its unfilled claims back to the node."""
        self.cache.close()


def open_files(
    url: str,
    cache: str | os.PathLike[str] | None = None,
    cache_bytes: int | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    snapshot: str | None = None,
    **settings: Any,
) -> RemoteTokenFiles:
    """The corpus files at ``url`` through the node cache ``cache`` capped at ``cache_bytes``
    (defaults from the environment, as :func:`lading.open_store`'s)."""
    check_reachable(url, "TokenCorpus.open")
    options = RemoteSettings.of(cache, cache_bytes, storage_options, **settings)
    return RemoteTokenFiles(url, options, snapshot)


def build_corpus(
    build_local: Callable[..., Any],
    wrap: Callable[[RemoteTokenFiles], Any],
    source: str | os.PathLike[str],
    url: str,
    cache: str | os.PathLike[str] | None = None,
    cache_bytes: int | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Build ``source`` into a scratch folder beside the node cache with ``build_local``,
    upload it to ``url`` (the manifest last: a reader sees the old corpus or the new one) and
    open it there, its files handed to ``wrap`` (the corpus class). Every build is a new
    snapshot; a corpus opened before keeps reading its own
    (:func:`lading.stores.building.upload.build_remote`, as for a store)."""
    from lading.stores.building.upload import build_remote

    check_reachable(url, "TokenCorpus.build")
    return build_remote(
        build_local, source, url, cache=None if cache is None else str(cache),
        cache_bytes=cache_bytes, storage_options=storage_options, format_name=FORMAT_NAME,
        opener=lambda at, settings: wrap(RemoteTokenFiles(at, settings)), **kwargs,
    )  # fmt: skip


def refuse_stage_to(path: str) -> None:
    """``stage_to=`` copies a local or shared folder; a URL is read through the node cache."""
    raise RemoteNotSupportedError(
        f"TokenCorpus.open({path!r}, stage_to=...): a corpus in object storage is read "
        "through the node cache; pass cache= and cache_bytes= instead of stage_to="
    )


def parse(raw: bytes, where: str) -> dict[str, Any]:
    """A token corpus's manifest from the bytes of its ``meta.json``, checked before a byte
    is staged: format and version, every file name (relative, inside), the snapshot id (a
    folder of the cache), ``tokens.bin``, ``tokens.off`` and ``tokenizer.json`` listed with
    sizes, the dtype and the document count.

    Raises:
        StoreFormatError: naming the field and the fix.
    """
    try:
        meta = decode_manifest(raw, where, FORMAT_NAME)
    except StoreFormatError as e:
        if "'lading.store'" not in str(e):
            raise
        raise StoreFormatError(
            f"{where} is a document store, not a token corpus: open it with "
            "lading.open_store, or build a token corpus with TokenCorpus.build(SOURCE, URL, "
            "tokenizer=...)"
        ) from None
    if not meta.get("snapshot"):  # version 1: one flat folder, named by its manifest's hash
        meta["snapshot"] = "v1-" + hashlib.sha256(raw).hexdigest()[:16]
    safe_snapshot_id(meta["snapshot"], where)
    folder = meta.get("dir", "")
    if folder:
        check_name(folder, "dir", where)
    for name in (TOKENS, OFFSETS, TOKENIZER):
        key = f"{folder}/{name}" if folder else name
        info = meta["files"].get(key)
        size = info.get("size") if isinstance(info, dict) else None
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_BYTES:
            raise _damaged(where, f"files[{key!r}].size is {repr(size)[:40]}")
    if meta.get("dtype") not in _DTYPES:
        raise _damaged(where, f"dtype is {repr(meta.get('dtype'))[:40]}, not one of {_DTYPES}")
    documents = meta.get("documents")
    if isinstance(documents, bool) or not isinstance(documents, int) or documents < 0:
        raise _damaged(where, f"documents is {repr(documents)[:40]}")
    return meta


def _damaged(where: str, what: str) -> StoreFormatError:
    return StoreFormatError(f"{where}: {what}; the manifest is damaged, rebuild the corpus")


def _manifest_bytes(fetcher: Fetcher, url: str, cache: Path, snapshot: str | None) -> bytes:
    """The manifest of ``snapshot`` (the node's staged copy when there is one, else the one
    the bucket keeps in ``snap-<id>/``), or the current one."""
    if snapshot is not None:
        staged = stage_dir(cache, url, snapshot) / META_FILE
        if staged.is_file():
            return staged.read_bytes()
    raw = fetcher.get_object(META_FILE)
    if snapshot is None or parse(raw, url)["snapshot"] == snapshot:
        return raw
    if snapshot.startswith(SNAP_PREFIX) and "/" not in snapshot:
        return fetcher.get_object(f"{snapshot}/{MANIFEST}")
    raise StoreFormatError(
        f"{url}: snapshot {snapshot} is no longer the current one and this node has no staged "
        "copy of it; open the corpus again to read its current snapshot"
    )


def no_corpus(url: str, endpoint: str, error: Exception) -> LadingError:
    """The one-line error of an open whose ``meta.json`` is not there."""
    found = no_store(url, endpoint, error)
    if not str(found).startswith("no store at"):  # no bucket, access denied, ...
        return found
    return StoreFormatError(
        f"no token corpus at {url}: {url}/{META_FILE} does not exist (endpoint "
        f"{endpoint or 'the default endpoint'}); check the URL, or build one there with "
        f"TokenCorpus.build(SOURCE, {url!r}, tokenizer=...) or `lading lm build SOURCE {url}`"
    )
