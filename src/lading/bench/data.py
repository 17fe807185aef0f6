"""The study's inputs, prepared once: corpus, queries, judgements, tokenizer and every store.

Without arguments ``lading bench`` generates an MS MARCO-shaped passage collection with
:func:`lading.bench.synth.synth` under the user's cache directory and builds, from that one TSV, the
stores the strategies need: a pre-tokenized PackedStore (read as token ids by ``packed``, as
text by ``packed-text``), an OffsetStore and an ir_datasets
docstore (when ir_datasets is installed). A real collection can be given instead.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from lading.bench.peers import DOCUMENTS_LIVE_IN as PEERS_LIVE_IN
from lading.bench.peers import PEER_STRATEGIES, build_peer
from lading.bench.synth import synth
from lading.sources.fingerprint import fingerprint, fingerprint_changed

STRATEGIES: tuple[str, ...] = ("irds", "memory", "offsets", "packed", "packed-text")
# what each strategy includes: where the documents live, and where their text is tokenized
# (``packed`` and ``packed-text`` read the same store; only the first uses its token ids)
DOCUMENTS_LIVE_IN: dict[str, str] = {
    "memory": "a dict in every rank",
    "offsets": "source TSV, read at offsets",
    "packed": "PackedStore (memory map)",
    "packed-text": "PackedStore (memory map)",
    "irds": "ir_datasets docstore",
}
TOKENIZED_IN: dict[str, str] = {
    "memory": "collator",
    "offsets": "collator",
    "packed": "at build (stored ids)",
    "packed-text": "collator",
    "irds": "collator",
}
# the GPU leg (lading.device): the packed store's batches copied ahead on a side stream in
# narrow types, or built on the device from its resident tokens
DEVICE_STRATEGIES: tuple[str, ...] = ("packed+prefetch", "gpu-resident")
STRATEGIES += DEVICE_STRATEGIES
READS_PACKED: tuple[str, ...] = ("packed", "packed-text", *DEVICE_STRATEGIES)
DOCUMENTS_LIVE_IN.update(
    {"packed+prefetch": "PackedStore (memory map)", "gpu-resident": "GPU memory"}
)
TOKENIZED_IN.update(
    {"packed+prefetch": "at build (stored ids)", "gpu-resident": "at build (stored ids)"}
)
# how they send a batch: packed+prefetch narrow ids copied ahead on a side stream, gpu-resident
# row numbers into the store's tokens held on the device (CUDA only)
EMIT: dict[str, str] = {"packed+prefetch": "narrow", "gpu-resident": "rows"}
PREFETCHED: frozenset[str] = frozenset({"packed+prefetch", "gpu-resident"})
CUDA_ONLY: frozenset[str] = frozenset({"gpu-resident"})
# the packed store read from object storage (--remote URL) through the node cache
STRATEGIES += ("remote",)
DOCUMENTS_LIVE_IN["remote"] = "object storage, node cache"
TOKENIZED_IN["remote"] = "at build (stored ids)"
# the peers users pick today (lading.bench.peers); a peer not installed is skipped, saying why
STRATEGIES += PEER_STRATEGIES
DOCUMENTS_LIVE_IN.update(PEERS_LIVE_IN)
TOKENIZED_IN.update({peer: "collator" for peer in PEER_STRATEGIES})


def unavailable(strategy: str, pin_memory: bool = False) -> str | None:
    """Why a cell of ``strategy`` (pinned or not) cannot run on this machine (reported as n/a),
    or None."""
    if strategy in CUDA_ONLY or pin_memory:
        import torch

        if torch.cuda.is_available():
            return None
        if strategy in CUDA_ONLY:
            return f"{strategy} needs a CUDA device (tokens held in GPU memory)"
        # run unpinned, it would be reported as pinned: a "pin memory True" row of nothing
        return "pinned memory needs a CUDA device: n/a on CPU (nothing would be pinned)"
    return None


def cache_dir() -> Path:
    """``$LADING_CACHE``, else ``$XDG_CACHE_HOME/lading``, else ``~/.cache/lading``."""
    if os.environ.get("LADING_CACHE"):
        return Path(os.environ["LADING_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lading"


@dataclass(frozen=True)
class BenchData:
    """Paths of everything a cell opens (the same files for every strategy)."""

    corpus: Path
    queries: Path
    qrels: Path
    negatives: Path | None
    tokenizer: Path
    packed: Path
    offsets: Path
    irds_tsv: Path | None
    hf: Path | None = None  # the peers' directories (lading.bench.peers), by strategy name
    mds: Path | None = None
    litdata: Path | None = None
    remote: str | None = None  # the URL the "remote" strategy opens (--remote)

    def peer(self, strategy: str) -> Path:
        """The directory peer ``strategy`` reads (built by :func:`prepare`)."""
        path: Path | None = getattr(self, strategy)
        if path is None:
            raise ValueError(f"peer {strategy!r} was not prepared")
        return path

    def as_dict(self) -> dict[str, str | None]:
        return {k: (str(v) if v is not None else None) for k, v in self.__dict__.items()}


def default_collection(passages: int) -> tuple[Path, Path, Path, Path]:
    """(corpus, queries, qrels, run) of the cached synthetic collection, made on first use."""
    folder = cache_dir() / "bench" / f"synth-passages-{passages}"
    if not (folder / "run.trec").is_file():
        # made aside and renamed into place: the folder exists only whole. Nodes sharing one
        # cache may race here; the first rename wins and the others' copies are dropped
        tmp = folder.with_name(folder.name + f".tmp-{socket.gethostname()}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        synth("passages", passages, tmp)
        if folder.is_dir() and not (folder / "run.trec").is_file():
            shutil.rmtree(folder, ignore_errors=True)  # an incomplete folder of an older version
        try:
            tmp.rename(folder)
        except OSError:  # another process published it first: it is the same collection
            shutil.rmtree(tmp, ignore_errors=True)
    return (
        folder / "collection.tsv",
        folder / "queries.tsv",
        folder / "qrels.txt",
        folder / "run.trec",
    )


def _records(file: Path, corpus: Path, key: str | None = None) -> bool:
    """Whether the fingerprint in the JSON ``file`` (under ``key``: an index's ``meta.json``
    ``source``) names ``corpus``, unchanged since it was taken: a second ``--corpus`` into
    one ``--out`` benched the first corpus's offsets index, nothing said, and an edited
    corpus failed the cell as a stale index (a review's repros)."""
    try:
        said = json.loads(file.read_text())
        said = said.get(key) if key is not None else said
    except (OSError, ValueError, AttributeError):
        return False
    if not isinstance(said, dict) or said.get("path") != str(corpus.resolve()):
        return False
    return fingerprint_changed(said) is None


def prepare(
    corpus: Path,
    queries: Path,
    qrels: Path,
    negatives: Path | None,
    work: Path,
    strategies: list[str],
    tokenizer: str | None = None,
    remote: str | None = None,
) -> BenchData:
    """Build (or reuse) the tokenizer and the stores of ``strategies`` under ``work``; for
    ``remote``, upload the packed store to that URL unless its manifest is there already."""
    from lading.sources import read_records
    from lading.stores import OffsetStore, build_store
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    work.mkdir(parents=True, exist_ok=True)
    if tokenizer is None:
        tok_path = work / "tokenizer" / "tokenizer.json"
        trained_on = tok_path.parent / "trained_on.json"  # the corpus it was trained on
        if not (tok_path.is_file() and _records(trained_on, corpus)):
            texts = [r.text for _, r in zip(range(20_000), read_records(corpus))]
            save_tokenizer(train_tokenizer(texts, "wordpiece", 8000), tok_path)
            trained_on.write_text(json.dumps(fingerprint(corpus)))
    else:
        tok_path = Path(tokenizer)
        if tok_path.is_dir():
            tok_path = tok_path / "tokenizer.json"
    packed = work / "packed"
    if any(s in (*READS_PACKED, "remote") for s in strategies):
        build_store(corpus, packed, tokenizer=tok_path, max_length=512, progress=True)
    if "remote" in strategies:
        if remote is None:
            raise ValueError("strategy 'remote' reads the packed store from --remote URL")
        _publish(packed, remote)
    offsets = work / "offsets"
    if "offsets" in strategies and not _records(offsets / "meta.json", corpus, "source"):
        OffsetStore.build(corpus, offsets)  # (another --corpus's, or this one's before an edit)
    irds_tsv = None
    if "irds" in strategies:
        from lading.stores import IrDatasetsStore

        irds_tsv = work / "irds" / "collection.tsv"  # ir_datasets writes its docstore beside it
        if not _same_file(corpus, irds_tsv):  # copied again after an edit of the corpus
            irds_tsv.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(corpus, irds_tsv)  # its mtime too: the docstore's record compares it
        logging.disable(logging.INFO)  # ir_datasets' "[INFO]" lines would break the output
        try:
            IrDatasetsStore.from_tsv(irds_tsv).get_many([])  # build the docstore now, not in a cell
        finally:
            logging.disable(logging.NOTSET)
    peers = {s: build_peer(s, corpus, work / s) for s in PEER_STRATEGIES if s in strategies}
    return BenchData(
        corpus,
        queries,
        qrels,
        negatives,
        tok_path,
        packed,
        offsets,
        irds_tsv,
        **peers,
        remote=remote,
    )


def _same_file(source: Path, copy: Path) -> bool:
    """Whether ``copy`` (made by ``shutil.copy2``) is still a copy of ``source``: the same
    size and modification time."""
    if not copy.exists():
        return False
    a, b = source.stat(), copy.stat()
    return (a.st_size, a.st_mtime_ns) == (b.st_size, b.st_mtime_ns)


def _publish(packed: Path, url: str) -> None:
    """Upload the packed store to ``url`` unless the same manifest is there already."""
    from lading.remote.clients import open_client
    from lading.remote.objects import PermanentError
    from lading.stores.building.upload import upload

    client = open_client(url)
    try:
        current = client.get("meta.json")
    except PermanentError:  # no store there yet
        current = b""
    if current != (packed / "meta.json").read_bytes():
        upload(packed, client)


def to_ramdisk(data: BenchData, strategy: str, root: Path) -> BenchData:
    """A copy of what ``strategy`` reads, under ``root`` (a tmpfs such as /dev/shm)."""
    root.mkdir(parents=True, exist_ok=True)

    def copy(path: Path) -> Path:
        target = root / path.name
        if path.is_dir():
            shutil.copytree(path, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(path, target)
        return target

    if strategy in READS_PACKED:
        return BenchData(**{**data.__dict__, "packed": copy(data.packed)})
    if strategy == "remote":  # its documents are in the bucket and the node cache
        return data
    if strategy == "memory":
        return BenchData(**{**data.__dict__, "corpus": copy(data.corpus)})
    if strategy in PEER_STRATEGIES:
        return BenchData(**{**data.__dict__, strategy: copy(data.peer(strategy))})
    if strategy == "offsets":
        from lading.stores import OffsetStore

        corpus = copy(data.corpus)
        return BenchData(
            **{
                **data.__dict__,
                "corpus": corpus,
                "offsets": OffsetStore.build(corpus, root / "offsets").path,
            }
        )
    assert data.irds_tsv is not None
    folder = root / "irds"
    folder.mkdir(parents=True, exist_ok=True)
    tsv = folder / data.irds_tsv.name
    shutil.copy2(data.irds_tsv, tsv)  # the same mtime: its docstore's record still matches
    docstore = data.irds_tsv.with_name(data.irds_tsv.name + ".pklz4")
    if docstore.exists():
        shutil.copytree(docstore, folder / docstore.name, dirs_exist_ok=True)
    return BenchData(**{**data.__dict__, "irds_tsv": tsv})
