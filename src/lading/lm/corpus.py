"""TokenCorpus: every document's token ids in one memory-mapped ragged array.

``tokens.bin`` holds the ids back to back in the smallest dtype the vocabulary allows (uint16 up
to 65,536 entries: 2 bytes a token, a quarter of fastai v1's int64), each document followed by
an end-of-text id when ``append_eos``; ``tokens.off`` holds ``n + 1`` uint64 offsets. The build
streams the source once, tokenizes batches of documents in the tokenizers library's threads,
and commits the files as a new snapshot (``snap-<id>/tokens.bin``...; the same build context and
snapshot format as the stores: :mod:`lading.disk.snapshot`). An open corpus reads one snapshot
and compares its source with the one it was built from (:attr:`TokenCorpus.stale`).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from lading.disk import (
    OFFSET_DTYPE,
    BuildContext,
    MappedFile,
    committed_without_lock,
    intact,
    open_snapshot,
)
from lading.errors import (
    SkippedRecordsWarning,
    SourceError,
    StaleStoreWarning,
    StoreFormatError,
)
from lading.lm.corpus_format import (
    FORMAT_NAME,
    OFFSETS,
    check_dtype,
    check_offsets,
    tokenizer_file,
)
from lading.lm.parts import PartOffsets, PartTokens, part_offsets, token_parts
from lading.lm.texts import (
    Skips,
    TextSource,
    expand_glob,
    iter_texts,
    listed_texts,
    refuse_if_source_changed,
    refuse_unused_text_field,
    source_identity,
    stale_reason,
)
from lading.lm.tokenize import find_eos, progress_bar, write_tokens
from lading.remote.objects import is_remote
from lading.stores.tokens import describe_tokenizer, load_tokenizer, tokenizer_from_json

if TYPE_CHECKING:
    from lading.lm.remote import RemoteTokenFiles

__all__ = ["FORMAT_NAME", "TokenCorpus", "find_eos", "verify_corpus"]

OnStale = Literal["warn", "raise", "ignore"]


class TokenCorpus:
    """A tokenized corpus opened as memory maps; see :meth:`build` and :meth:`open`.

    Attributes:
        snapshot: the id of the snapshot it reads (fixed when it opened; a pickled corpus
            reopens that one).
        stale: why the source differs from what was tokenized, or None.
        remote: where it was opened from a URL, the files it reads through the node cache
            (:mod:`lading.lm.remote`); None for a local corpus.
    """

    remote: RemoteTokenFiles | None = None
    url: str | None = None  # the URL it was opened from (a local corpus: None)

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path, self.meta = path, meta
        self.snapshot: str = meta["snapshot"]
        self.stale: str | None = None
        self.dtype = check_dtype(meta, str(path))
        where = path / meta.get("dir", "")  # version 1: every file at the top
        self.tokens: npt.NDArray[Any] | PartTokens = token_parts(path, meta, self.dtype)
        self.offsets: npt.NDArray[np.uint64] | PartOffsets = (
            part_offsets(path, meta, self.tokens)
            if isinstance(self.tokens, PartTokens)
            else MappedFile(where / OFFSETS).array(OFFSET_DTYPE)
        )
        in_order = isinstance(self.offsets, PartOffsets)  # (part_offsets checked each part)
        check_offsets(self.offsets, len(self.tokens), meta, str(path), in_order)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        cache: str | os.PathLike[str] | None = None,
        cache_bytes: int | str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        snapshot: str | None = None,
        stage_to: str | os.PathLike[str] | None = None,
        on_stale: OnStale = "warn",
        timeout: float | None = None,
        index_bytes: int | str | None = None,
    ) -> TokenCorpus:
        """Map a corpus built by :meth:`build` (checked: format, version, file sizes); with
        ``stage_to``, a node-local copy in ``stage_to/<name>`` (:func:`lading.disk.stage.stage`).

        An object-store URL (``s3://bucket/corpora/wiki``) is read without a copy: its offsets
        and tokenizer are staged to the node, its tokens read by ranged GETs through the node
        cache ``cache`` (at most ``cache_bytes``; defaults as :func:`lading.open_store`'s),
        with ``storage_options`` for the client, ``timeout`` seconds an attempt and the cache
        folder's second budget ``index_bytes`` (as :func:`lading.open_store`'s; see
        :mod:`lading.lm.remote`).
        ``cache``, ``cache_bytes``, ``storage_options``, ``timeout`` and ``index_bytes`` are
        for URLs only.

        ``on_stale``: when the source changed since the build, ``"warn"`` (default) emits a
        :class:`~lading.errors.StaleStoreWarning`, ``"raise"`` refuses, ``"ignore"`` says
        nothing; :attr:`stale` holds the reason either way (a URL's source is not checked).
        ``snapshot``: open that one.
        """
        if on_stale not in ("warn", "raise", "ignore"):
            raise ValueError(
                f"unknown on_stale {on_stale!r}; choose from ['ignore', 'raise', 'warn']"
            )
        staged_file = stage_to is not None and os.fspath(path).startswith("file://")
        if not staged_file and is_remote(path):  # (file:// stages: lading.disk.stage)
            from lading.lm import remote

            if stage_to is not None:
                remote.refuse_stage_to(os.fspath(path))
            more: dict[str, Any] = {} if timeout is None else {"timeout": float(timeout)}
            if index_bytes is not None:
                more["index_bytes"] = index_bytes
            files = remote.open_files(
                os.fspath(path), cache, cache_bytes, storage_options, snapshot, **more
            )
            return cls.of_remote(files)
        if stage_to is not None:
            from lading.disk.stage import stage

            name = os.fspath(path).rstrip("/").rsplit("/", 1)[-1]
            path = stage(path, Path(stage_to) / name)
        root = Path(path)
        corpus = open_snapshot(root, FORMAT_NAME, lambda meta: cls(root, meta), snapshot)
        return cls._opened(root, corpus, on_stale)

    @staticmethod
    def _opened(root: Path, corpus: TokenCorpus, on_stale: OnStale) -> TokenCorpus:
        """``corpus`` with its :attr:`stale` found, and said as ``on_stale`` asks (see
        :meth:`open`)."""
        corpus.stale = stale_reason(corpus.meta.get("recipe"))
        if corpus.stale and on_stale == "raise":
            raise StoreFormatError(f"token corpus {root} is stale: {corpus.stale}; rebuild it")
        if corpus.stale and on_stale == "warn":
            warnings.warn(
                f"token corpus {root} is stale: {corpus.stale}", StaleStoreWarning, stacklevel=3
            )
        return corpus

    @property
    def content_id(self) -> str:
        """A digest of the tokens, the documents' lengths and the tokenizer
        (:func:`lading.lm.content.tokens_content_id`): equal for two builds of the same tokens,
        in one process or in shards, what a loader state or a cache can be keyed on (an older
        corpus whose manifest has no CRC32 of its tokens: :attr:`files_content_id`). Computed
        once a corpus (a pass over its offsets)."""
        found = self.__dict__.get("_content_id")
        if found is None:
            from lading.lm.content import tokens_content_id

            offsets = self.offsets
            parts = offsets.parts if isinstance(offsets, PartOffsets) else [offsets]
            found = tokens_content_id(self.meta, parts) or self.files_content_id
            self.__dict__["_content_id"] = found
        return found

    @property
    def files_content_id(self) -> str:
        """The snapshot's file-level id (:func:`lading.disk.snapshot.content_id`: each file's
        role, size and CRC32): what loader states saved before :attr:`content_id` recorded."""
        from lading.disk.snapshot import content_id

        return content_id(self.meta)

    def __reduce__(self) -> tuple[Any, ...]:
        # pickles as its path (URL and settings) and snapshot; the copy opens that snapshot
        # again (a remote one from the node's staged copy: maps, cache and client are per process)
        if self.remote is not None:
            return (_reopen_remote, (self.remote.url, self.remote.settings, self.snapshot))
        return (_reopen, (str(self.path), self.snapshot))

    def __repr__(self) -> str:
        return f"TokenCorpus({self.url or str(self.path)!r})"

    @classmethod
    def of_remote(cls, files: RemoteTokenFiles) -> TokenCorpus:
        """The corpus reading ``files`` (opened from a URL): its tokens by ranged GETs through
        the node cache, its offsets and tokenizer from the node's staged copy."""
        corpus = cls.__new__(cls)
        corpus.path, corpus.meta, corpus.snapshot = files.path, files.meta, files.snapshot
        corpus.stale = None  # the source was read on the build's machine: not checked
        corpus.dtype, corpus.offsets, corpus.remote = files.dtype, files.offsets, files
        corpus.url = files.url
        corpus.tokens = files.tokens  # read by ranges, as a map
        return corpus

    def cache_stats(self) -> dict[str, Any]:
        """A corpus opened from a URL: the node cache's figures (``gets``, ``bytes_fetched``,
        ``bytes_used``, ``hits``, ``misses``, ``bytes_cached``, ``cap``, ...: see
        :meth:`lading.remote.cache.NodeCache.node_stats`); empty for a local corpus. The
        top-level figures are this process's: with DataLoader workers the reads (``hits``,
        ``bytes_used``) are theirs, while the GETs the window sends ahead are this
        process's, so compare ``bytes_fetched`` with ``bytes_used`` under ``"node"``."""
        return {} if self.remote is None else self.remote.cache_stats()

    def token_arrays(self) -> tuple[npt.NDArray[Any], npt.NDArray[np.uint64]]:
        """Every token back to back and the ``n + 1`` offsets, in memory: the maps of a local
        corpus; a remote one's read whole by ranged GETs (what ``device=`` puts on a device)."""
        if self.remote is not None:
            return self.remote.token_arrays()
        if isinstance(self.tokens, PartTokens):  # a corpus built in shards: one copy
            return self.tokens.concatenated(), np.asarray(self.offsets)
        return self.tokens, np.asarray(self.offsets)  # a one-file corpus: the map itself

    def parts(self) -> tuple[list[Any], npt.NDArray[np.int64]]:
        """(the token files read in place, where each starts in the corpus's token count
        (``len + 1``)): one file for a corpus built by one process, one per shard for one built
        in shards (:mod:`lading.lm.parts`); what the LM modes slice a document's tokens from."""
        if isinstance(self.tokens, PartTokens):
            return self.tokens.parts, self.tokens.bases
        return [self.tokens], np.array([0, len(self.tokens)], dtype=np.int64)

    def close(self) -> None:
        """A remote corpus: stop this process's GETs and hand its unfilled claims back to the
        node (done at exit too). Nothing to do for a local one."""
        if self.remote is not None:
            self.remote.close()

    @classmethod
    def build(
        cls,
        source: TextSource,
        dest: str | os.PathLike[str],
        tokenizer: Any,
        append_eos: bool = True,
        *,
        eos_token: str | None = None,
        split: str = "blank",
        overwrite: bool = False,
        progress: bool | None = None,
        cache: str | os.PathLike[str] | None = None,
        cache_bytes: int | str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        shard: Literal["auto"] | None = None,
        build_id: str | None = None,
        on_error: Literal["raise", "skip"] = "raise",
        text_field: str | None = None,
    ) -> TokenCorpus:
        """Tokenize every document of ``source`` into ``dest``.

        Args:
            source: a text file, JSONL, WikiExtractor output, a folder (its files sorted by
                path), a glob pattern (``"wiki/*.jsonl.gz"``: the files it matches, sorted by
                path), a list of such files (read in the order given) or a lading store (see
                :mod:`lading.lm.texts`).
            dest: the corpus directory to create, or an object-store URL
                (``s3://bucket/corpora/wiki``): built in a scratch folder beside the node
                cache ``cache``, uploaded (the manifest last) and opened there, every build a
                new snapshot (an open corpus keeps reading its own).
            tokenizer: a ``tokenizers.Tokenizer``, HF fast tokenizer or ``tokenizer.json`` path.
            append_eos: end every document with the end-of-text id, so the model sees where
                one document stops and the next (in shuffled order) begins.
            eos_token: name of that token (default: the first usual name the vocabulary has).
            split: how plain text files divide into documents.
            overwrite: rebuild even if ``dest`` holds a corpus of this source and tokenizer.
            progress: show a progress bar (default: on a terminal).
            cache, cache_bytes, storage_options: a URL ``dest``'s node cache and client (as
                :meth:`open`'s).
            shard: ``"auto"``: under an initialised process group (torchrun), rank ``r`` of
                ``w`` tokenizes shard ``r`` of ``w`` (:meth:`build_shard`), rank 0 merges
                (:meth:`merge`) and every rank opens the snapshot it committed (``dest`` on a
                filesystem every rank sees); without a group, one process builds.
            build_id: with ``shard="auto"``, the build directory of the shards.
            on_error: ``"raise"``: a malformed JSONL record, or a line of invalid UTF-8 in
                a text file, stops the build, naming file and line; ``"skip"``: the record
                (the text's document: its paragraph, line or file, as ``split`` cuts it) is
                left out, counted in ``meta["skipped"]`` (the first
                few named in ``meta["skip_examples"]``) and a
                :class:`~lading.errors.SkippedRecordsWarning` naming the first.
            text_field: the JSON key of a JSONL record's text (The Stack's ``"content"``);
                default: the first of ``text``, ``contents``, ``body`` the record has.
        """
        from lading.stores.building.inputs import refuse_dest_in_source

        source = expand_glob(source)
        refuse_dest_in_source(source, dest, every_file=True)
        if shard not in (None, "auto"):
            raise ValueError(
                f"TokenCorpus.build(shard={shard!r}): one shard of a parallel build is "
                "TokenCorpus.build_shard(source, dest, (i, n), tokenizer), then "
                "TokenCorpus.merge(dest); build takes shard='auto' or None"
            )
        if shard == "auto":
            from lading.world import process_group

            group = process_group(min_size=2)
            if group is not None and is_remote(dest):
                raise ValueError(  # (as build_store's: a URL is not a folder every rank sees)
                    f"TokenCorpus.build(shard='auto') builds on a filesystem every rank sees; "
                    f"into {os.fspath(dest)} each worker builds its shard with "
                    "TokenCorpus.build_shard(source, url, (i, n), tokenizer) (lading lm build "
                    "SOURCE URL --shard I/N: uploaded once whole), then one "
                    "TokenCorpus.merge(url) (lading lm merge URL) commits it in the bucket"
                )
            if group is not None:
                from lading.lm.cluster import build_in_group
                from lading.lm.shards import DocumentOptions
                from lading.stores.building.build import refuse_shard_args

                refuse_shard_args(source, overwrite)  # (it was taken and ignored)
                from lading.stores.building.group import say_group_skips
                from lading.stores.building.shardset import current_snapshot

                documents = DocumentOptions(append_eos, eos_token, split, on_error, text_field)
                before = current_snapshot(Path(dest))
                snapshot = build_in_group(source, dest, tokenizer, build_id, progress, documents)
                built = cls.open(Path(dest), snapshot=snapshot, on_stale="ignore")
                say_group_skips(built.meta, before, snapshot, source, dest, stacklevel=3)
                return built
        listed = listed_texts(source) if isinstance(source, (list, tuple)) else None
        one = "" if isinstance(source, (list, tuple)) else source  # (a file, folder or store)
        refuse_unused_text_field(text_field, source, listed)
        if is_remote(dest):
            from lading.lm.remote import build_corpus

            options: dict[str, Any] = dict(append_eos=append_eos, eos_token=eos_token)
            options.update(split=split, overwrite=overwrite, progress=progress, tokenizer=tokenizer)
            options.update(on_error=on_error, text_field=text_field)
            where, of_remote = os.fspath(dest), cls.of_remote
            made: TokenCorpus = build_corpus(
                cls.build, of_remote, source, where, cache, cache_bytes, storage_options, **options
            )
            return made
        tok = load_tokenizer(tokenizer)
        info = describe_tokenizer(tok)
        eos = find_eos(tok, eos_token) if append_eos else None
        identity = source_identity(source)  # before reading: a change while reading is seen
        recipe = {
            "source": [str(f.resolve()) for f in listed] if listed else str(Path(one).resolve()),
            "source_identity": identity,  # an edited source is tokenized again
            "tokenizer": info["sha256"],
            "append_eos": append_eos,
            "eos_id": eos,
            "split": split,
        }
        if on_error == "skip":  # a build that raised on a bad record is not one that skipped it
            recipe["on_error"] = on_error
        if text_field is not None:  # the texts of another key are another corpus
            recipe["text_field"] = text_field
        current = None if overwrite else committed_without_lock(dest, FORMAT_NAME)
        if current is not None and current.get("recipe") == recipe:
            reused = cls._reopened(dest, current)  # a read: no lock, so also on a
            if reused is not None:  # read-only mount
                return reused
        with BuildContext(dest, FORMAT_NAME, "token corpus") as build:
            previous = build.previous  # again under the lock: a racing builder's commit
            if not overwrite and previous is not None and previous.get("recipe") == recipe:
                reused = cls._reopened(dest, previous)
                if reused is not None:
                    return reused
            build.check_ours()
            with build.scratch() as tmp:
                name = f"{listed[0].name} (+{len(listed) - 1})" if listed else Path(one).name
                bar = progress_bar(name, progress)
                skipped = Skips()
                store = identity.get("store")
                texts = iter_texts(source, split, store, on_error, skipped, text_field)
                with bar:
                    meta = write_tokens(tmp, texts, tok, info, eos, bar)
                if meta["documents"] == 0:
                    where = f"{listed[0]} (+{len(listed) - 1} listed)" if listed else os.fspath(one)
                    every = ""
                    if skipped.count:
                        first = f"; first: {skipped.examples[0]}" if skipped.examples else ""
                        every = f" (all {skipped.count} skipped as malformed{first})"
                    raise SourceError(
                        where, None, f"holds no documents{every}; a corpus of 0 is refused"
                    )
                meta["recipe"], meta["skipped"] = recipe, skipped.count
                meta["skip_examples"] = skipped.examples
                refuse_if_source_changed(source, identity)
                meta["dir"] = build.snapshot
                meta["files"] = {f"{build.snapshot}/{k}": v for k, v in meta["files"].items()}
                build.commit(tmp, meta)
        if skipped.count:
            warnings.warn(
                skipped.said(f"{source} building {dest}"),
                SkippedRecordsWarning,
                stacklevel=2,
            )
        return cls.open(dest, snapshot=build.snapshot)

    @classmethod
    def _reopened(
        cls, dest: str | os.PathLike[str], manifest: dict[str, Any]
    ) -> TokenCorpus | None:
        """The corpus at ``manifest``'s snapshot, to reuse, or None where it is damaged as an
        open sees (a file's size or end pages, offsets out of order): such a corpus is built
        again, never reused, as its open's error advises. Damage only a full read finds
        (``lading verify``) is not seen; its fix is a build with ``overwrite``."""
        if not intact(dest, manifest, FORMAT_NAME):
            return None
        try:
            return cls.open(dest, snapshot=manifest["snapshot"])
        except StoreFormatError:
            return None

    @classmethod
    def build_shard(
        cls,
        source: Any,
        dest: str | os.PathLike[str],
        shard: tuple[int, int],
        tokenizer: Any,
        append_eos: bool = True,
        *,
        eos_token: str | None = None,
        split: str = "blank",
        on_error: Literal["raise", "skip"] = "raise",
        text_field: str | None = None,
        build_id: str | None = None,
        progress: bool | None = None,
        cache: str | os.PathLike[str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> Any:
        """Tokenize shard ``i`` of ``n`` (``shard=(i, n)``) of ``source`` into ``dest`` (a
        folder, or an object-store URL: the shard is uploaded once whole); once all ``n`` are
        there, :meth:`merge` commits them. Any worker, any order; a shard already there is
        not written again. ``on_error="skip"`` counts malformed JSONL records (and text
        documents of invalid UTF-8) instead of raising (naming file and line); ``text_field``
        as :meth:`build`'s (shards of another are another build). Returns what was done
        (:class:`lading.lm.shards.CorpusShardReport`); see :mod:`lading.lm.shards`."""
        from lading.lm.shards import DocumentOptions, build_corpus_shard
        from lading.stores.building.inputs import refuse_dest_in_source

        source = expand_glob(source)
        refuse_dest_in_source(source, dest, every_file=True)
        documents = DocumentOptions(append_eos, eos_token, split, on_error, text_field)
        if is_remote(dest):
            from lading.lm.remote_shards import upload_shard

            return upload_shard(
                source,
                os.fspath(dest),
                shard,
                tokenizer,
                cache,
                storage_options,
                documents,
                build_id=build_id,
                progress=progress,
            )
        return build_corpus_shard(
            source, Path(dest), shard, tokenizer, documents, build_id=build_id, progress=progress
        )

    @classmethod
    def merge(
        cls,
        dest: str | os.PathLike[str],
        *,
        build_id: str | None = None,
        cache: str | os.PathLike[str] | None = None,
        cache_bytes: int | str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> TokenCorpus:
        """Commit the shards written by :meth:`build_shard` as ``dest``'s new snapshot, their
        token and offset files read in place (the merge writes the manifest only:
        :mod:`lading.lm.merge`); open it."""
        if is_remote(dest):
            from lading.lm.remote_shards import merge_remote

            snapshot = merge_remote(os.fspath(dest), build_id, cache, cache_bytes, storage_options)
            remote: dict[str, Any] = dict(cache=cache, cache_bytes=cache_bytes)
            remote.update(storage_options=storage_options, snapshot=snapshot)
            return cls.open(os.fspath(dest), **remote)
        from lading.lm.merge import merge_corpus

        done = merge_corpus(Path(dest), build_id)
        if isinstance(done, str):  # that build was committed already: open what is there
            return cls.open(Path(dest), snapshot=done, on_stale="ignore")
        # the manifest just committed, under the lock, over files the merge checked (names,
        # symlinks, sizes, the spot checksums it wrote): opened as committed, not read back
        # and checked again (~0.6 ms of a ~6 ms merge). As a reader parses meta.json: keys
        # sorted, every value a JSON value.
        meta = json.loads(json.dumps(done, sort_keys=True))
        return cls._opened(Path(dest), cls(Path(dest), meta), "ignore")

    def __len__(self) -> int:
        return int(self.meta["documents"])

    @property
    def n_tokens(self) -> int:
        """Tokens in all documents (end-of-text ids included)."""
        return len(self.tokens)

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    @property
    def eos_id(self) -> int | None:
        return self.meta["eos_id"]

    def lengths(self) -> npt.NDArray[np.int64]:
        """Tokens per document (one int64 per document: the corpus's small index)."""
        return np.diff(np.asarray(self.offsets)).astype(np.int64)

    def document(self, i: int) -> npt.NDArray[Any]:
        """Token ids of document ``i`` (a view of the map; ``-1`` is the last document).

        Raises:
            IndexError: ``i`` past either end.
        """
        n, i = len(self), int(i)
        if not -n <= i < n:
            raise IndexError(f"document {i} of a corpus of {n:,} documents")
        i %= n
        return self.tokens[int(self.offsets[i]) : int(self.offsets[i + 1])]

    def tokenizer(self) -> Any:
        """The tokenizer the corpus was built with (a copy is kept beside the tokens; a remote
        corpus's was read at its open)."""
        if self.remote is not None:
            return tokenizer_from_json(self.remote.tokenizer_json)
        return load_tokenizer(self.path / tokenizer_file(self.meta))


def verify_corpus(path: str | os.PathLike[str]) -> list[str]:
    """Every check :meth:`TokenCorpus.open` makes, then every byte of every file of that
    snapshot against its CRC32 (at a URL: the objects by ranged GETs, and the node's staged
    copy of the offsets), and in a local directory the records beside it against its manifest
    (:func:`lading.disk.verify_bookkeeping`); the problems found (empty: intact).

    Raises:
        OtherFormatError: a manifest of another lading format (a document store: check it
            with :func:`lading.stores.verify_store`); that is no damage.
        RemoteError: a URL whose corpus could not be reached to check (no bucket, access
            denied, no answer), as :func:`lading.stores.verify_store`.
    """
    from lading.disk import verify_bookkeeping, verify_checksums
    from lading.errors import (
        OtherFormatError,
        RemoteChangedError,
        RemoteError,
        StoreNotFoundError,
    )

    try:
        corpus = TokenCorpus.open(path, on_stale="ignore")
    except (StoreFormatError, ValueError, OSError) as e:
        if isinstance(e, OtherFormatError | StoreNotFoundError) or (
            isinstance(e, RemoteError) and not isinstance(e, RemoteChangedError)
        ):
            raise  # no damage: another format, or nothing there (no bucket, denied, no answer)
        return [str(e)]
    if corpus.remote is None:
        problems = verify_checksums(path, FORMAT_NAME, corpus.meta)
        return problems + verify_bookkeeping(Path(path), corpus.meta, FORMAT_NAME)
    try:
        return corpus.remote.verify()
    finally:
        corpus.close()


def _reopen(path: str, snapshot: str) -> TokenCorpus:
    return TokenCorpus.open(path, on_stale="ignore", snapshot=snapshot)


def _reopen_remote(url: str, settings: Any, snapshot: str) -> TokenCorpus:
    from lading.lm.remote import RemoteTokenFiles

    return TokenCorpus.of_remote(RemoteTokenFiles(url, settings, snapshot))
