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

import bisect
import contextvars
import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lading.disk import OFFSET_DTYPE, MappedFile
from lading.disk.meta import META_FILE
from lading.disk.names import check_name, safe_snapshot_id
from lading.disk.snapshot import decode_manifest
from lading.errors import LadingError, StoreFormatError, StoreNotFoundError
from lading.lm.corpus_format import (
    FORMAT_NAME,
    OFFSETS,
    TOKEN_DTYPES,
    TOKENIZER,
    TOKENS,
    check_offsets,
    tokenizer_file,
)
from lading.lm.texts import TextSource
from lading.remote.cache import AroundGets, NodeCache
from lading.remote.clients import check_reachable
from lading.remote.objects import RemoteNotSupportedError
from lading.remote.settings import RemoteSettings
from lading.remote.snapshot import open_snapshot
from lading.remote.stage import verify_remote
from lading.stores.remote.manifest import MAX_BYTES, no_store

_DTYPES = TOKEN_DTYPES
CHUNK = 8 << 20  # bytes a GET of a whole-corpus read (token_arrays) carries


class RemoteTokens:
    """``tokens.bin`` of a remote corpus, read the way the LM modes read a memory map:
    ``tokens[a:b]`` (``tokens[a:b:k]`` too: the span that holds them is read whole, so
    ``tokens[::k]`` reads every token; and ``len``, ``dtype``); each read is an array of its own.

    Shared by every thread and loader of the process, it holds no state of any read: a read
    outside a batch's build goes to the node cache at once (at the building thread's step, if
    any); inside one, the build's own context (:data:`BUILD`, local to its thread) serves the
    slices its batch read in one call of the cache, or records them (how a batch's ranges are
    found: only that build sees what a recording slice answers).
    """

    ndim = 1

    def __init__(self, cache: NodeCache, key: str, dtype: np.dtype[Any], n: int) -> None:
        self.cache, self.key, self.dtype, self.n = cache, key, dtype, n
        self.itemsize = dtype.itemsize

    def __len__(self) -> int:
        return self.n

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    def __getitem__(self, index: slice | int) -> Any:
        if isinstance(index, slice):
            start, stop, stride = index.indices(self.n)
            if stride != 1:  # the span that holds them, read as one range
                picked = range(start, stop, stride)
                if not picked:
                    return np.empty(0, self.dtype)
                low = min(picked[0], picked[-1])
                span = self[low : max(picked[0], picked[-1]) + 1]
                return span[picked[0] - low :: stride].copy()
            stop = max(start, stop)
            build = BUILD.get()
            found = None if build is None else build.slice(self, start, stop)
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

    def read(
        self,
        ranges: Sequence[tuple[int, int]],
        step: int | None = None,
        around: AroundGets | None = None,
    ) -> list[np.ndarray]:
        """Tokens ``[a, b)`` of each range, through the node cache, at ``step`` (default: the
        building thread's, :func:`lading.step.current_step`); ``around``: the reader's GETs
        of ranges fetched around the cache (:mod:`lading.remote.cache.around`), taken first."""
        size = self.itemsize
        spans = [(self.key, a * size, b * size) for a, b in ranges]
        raws = self.cache.read(spans, step, around=around)
        return [np.frombuffer(raw, dtype=self.dtype) for raw in raws]


class Build:
    """One batch's build over remote corpora (in :data:`BUILD` while it runs, in its own
    thread): the slices it reads are served from ``fetched`` (``id(tokens) -> (starts, ends,
    arrays)``: disjoint ranges read for it, sorted; a slice inside one is a view of it), or,
    ``recording``, appended there as ``(part, a, b)`` of the corpus's place in ``parts`` and
    answered with zeros that only this build sees."""

    def __init__(
        self,
        parts: dict[int, int],
        fetched: dict[int, tuple[list[int], list[int], list[np.ndarray]]] | None = None,
        recording: list[tuple[int, int, int]] | None = None,
    ) -> None:
        self.parts, self.fetched, self.recording = parts, fetched or {}, recording

    def slice(self, tokens: RemoteTokens, start: int, stop: int) -> np.ndarray | None:
        """The slice if this build has it (or records it), else None (read it now)."""
        if self.recording is not None and id(tokens) in self.parts:
            self.recording.append((self.parts[id(tokens)], start, stop))
            return np.zeros(stop - start, dtype=tokens.dtype)
        found = self.fetched.get(id(tokens))
        if found is None:
            return None
        starts, ends, arrays = found
        at = bisect.bisect_right(starts, start) - 1
        if at < 0 or ends[at] < stop:
            return None
        return arrays[at][start - starts[at] : stop - starts[at]]


BUILD: contextvars.ContextVar[Build | None] = contextvars.ContextVar("lading_build", default=None)


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
        meta, staged, cache = open_snapshot(self.url, settings, parse, _files, no_corpus, snapshot)
        key = _tokens_key(meta)
        self.path, self.meta, self.snapshot = staged, meta, meta["snapshot"]
        # read now: the staged copy may be evicted while the corpus is open (its maps stay open)
        self.tokenizer_json = (staged / tokenizer_file(meta)).read_text()
        self.dtype = np.dtype(meta["dtype"])
        if meta.get("parts"):  # built in shards: each part's tokens by GETs, offsets staged
            self.tokens, self.offsets = remote_parts(staged, meta, cache, self.dtype)
            return
        count = int(meta["files"][key]["size"]) // self.dtype.itemsize
        self.tokens = RemoteTokens(cache, key, self.dtype, count)
        where = staged / meta.get("dir", "") / OFFSETS
        self.offsets = MappedFile(where, random_access=True).array(OFFSET_DTYPE)
        check_offsets(self.offsets, count, meta, self.url)

    @property
    def cache(self) -> NodeCache:
        """The node cache the tokens are read through (one for every part of a merged corpus)."""
        cache: NodeCache = getattr(self.tokens, "parts", [self.tokens])[0].cache
        return cache

    def cache_stats(self) -> dict[str, Any]:
        """This process's figures of the corpus and the node's under ``"node"``
        (:meth:`lading.remote.cache.NodeCache.node_stats`)."""
        return self.cache.node_stats()

    def token_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every token back to back and the ``n + 1`` offsets, read whole into this process's
        memory by ranged GETs of 8 MiB around the node cache: what ``device=`` stages (the
        corpus must fit in memory and on the device; the cache keeps nothing of it)."""
        parts = getattr(self.tokens, "parts", [self.tokens])  # several for a merged corpus
        requests = []
        for tokens in parts:
            size, etag = tokens.n * tokens.itemsize, self.cache.etags.get(tokens.key)
            requests += [(tokens.key, a, min(a + CHUNK, size), etag) for a in range(0, size, CHUNK)]
        raw = b"".join(self.cache.fetcher.read(requests))
        return np.frombuffer(raw, dtype=self.dtype), np.asarray(self.offsets)

    def verify(self) -> list[str]:
        """Read every byte of the corpus's objects in the bucket and of the node's staged copy
        of its offsets, and compare each file's CRC32 with the manifest's; the problems
        (empty: intact)."""
        return verify_remote(self.cache.fetcher, self.url, self.meta, self.cache.etags)

    def close(self) -> None:
        """Stop this corpus's GETs (those in flight fail, saying so); nothing is fetched
        after: a read raises, naming the fix (open it again)."""
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
    source: TextSource,
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
        build_local,
        source,
        url,
        cache=None if cache is None else str(cache),
        cache_bytes=cache_bytes,
        storage_options=storage_options,
        format_name=FORMAT_NAME,
        opener=lambda at, settings, snapshot: wrap(RemoteTokenFiles(at, settings, snapshot)),
        **kwargs,
    )


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
    for key in listed_keys(meta) or [f"{folder}/{n}" if folder else n for n in _ONE_FILE]:
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


_ONE_FILE = (TOKENS, OFFSETS, TOKENIZER)  # a one-process build's files, in its ``dir``


def listed_keys(meta: dict[str, Any]) -> list[str]:
    """A corpus built in shards: every file its layout reads (each part's tokens and offsets,
    the tokenizer); empty for a one-process build."""
    parts = meta.get("parts")
    if not isinstance(parts, list) or not parts:
        return []
    keys = [f"{p.get('dir')}/{n}" for p in parts if isinstance(p, dict) for n in _ONE_FILE[:2]]
    return [*keys, str(meta.get("tokenizer_file"))]


def remote_parts(
    staged: Any, meta: dict[str, Any], cache: NodeCache, dtype: np.dtype[Any]
) -> tuple[Any, Any]:
    """(tokens, offsets) of a corpus built in shards: each part's ``tokens.bin`` read by
    ranged GETs through the node cache, its ``tokens.off`` from the staged copy, as one
    (:mod:`lading.lm.parts`)."""
    from lading.lm.parts import PartTokens, part_offsets

    files = meta["files"]
    parts = [
        RemoteTokens(cache, key, dtype, int(files[key]["size"]) // dtype.itemsize)
        for key in (f"{p['dir']}/{TOKENS}" for p in meta["parts"])
    ]
    tokens = PartTokens(parts, dtype)
    return tokens, part_offsets(staged, meta, tokens)


def _tokens_key(meta: dict[str, Any]) -> str:
    return f"{meta['dir']}/{TOKENS}" if meta.get("dir") else TOKENS


def _files(meta: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Staged: every file but ``tokens.bin`` (offsets, tokenizer); read by GETs: the tokens
    (each part's, for a corpus built in shards)."""
    keys = [f"{p['dir']}/{TOKENS}" for p in meta["parts"]] if meta.get("parts") else []
    keys = keys or [_tokens_key(meta)]
    return sorted(name for name in meta["files"] if name not in keys), keys


def no_corpus(url: str, endpoint: str, error: Exception) -> LadingError:
    """The one-line error of an open whose ``meta.json`` is not there."""
    found = no_store(url, endpoint, error)
    if not str(found).startswith("no store at"):  # no bucket, access denied, ...
        return found
    return StoreNotFoundError(
        f"no token corpus at {url}: {url}/{META_FILE} does not exist (endpoint "
        f"{endpoint or 'the default endpoint'}); check the URL, or build one there with "
        f"TokenCorpus.build(SOURCE, {url!r}, tokenizer=...) or `lading lm build SOURCE {url}`"
    )
