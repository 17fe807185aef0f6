"""The corpora of bench_remote_lm.py: a tokenized Wikipedia slice (or synthetic tokens), the
session parquet files, and their copies on the local S3.

Wikipedia: the first documents of ../shared/data/lm/enwiki-2015-wikiextractor.jsonl (2,006
articles, 30.9 MB; see its SOURCES.md) up to about ``--tokens`` tokens, tokenized with an
8,000-entry byte-level BPE trained here on the first 300 articles (uint16 tokens: 2 bytes a
token). Synthetic (``--synthetic``): documents of Zipf-distributed words ``w0 .. w7999``
(lengths log-normal around 600 words) through a word-level vocabulary, so every word is one
token. Sessions: the YOOCHOOSE training days of ../shared/data/recsys (or synthetic sessions
with ``--synthetic``). Built once under the output folder and reused.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from common import data_dir
from lading.lm import TokenCorpus

WIKI = "lm/enwiki-2015-wikiextractor.jsonl"
SESSIONS = "recsys/yoochoose_t4r_preproc_sessions_by_day"


def find_data() -> Path | None:
    """../shared/data beside the repository ($LADING_DATA first), or beside the main
    checkout when this is a git worktree."""
    found = data_dir()
    if found is not None:
        return found
    try:
        common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
                                capture_output=True, text=True, check=True,
                                cwd=Path(__file__).parent).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    candidate = Path(common).parent.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


def _wiki_source(out: Path, tokens: int) -> tuple[Path, Path, str]:
    """A JSONL slice of about ``tokens`` tokens (4 bytes of text a token, about) and a BPE."""
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    root = find_data()
    if root is None or not (root / WIKI).is_file():
        raise SystemExit(
            f"the Wikipedia text ({WIKI}) is not in ../shared/data: set LADING_DATA to the folder "
            "that holds it, or run with --synthetic"
        )
    lines = (root / WIKI).read_text(encoding="utf-8").splitlines()
    slice_, size = [], 0
    for line in lines:
        slice_.append(line)
        size += len(json.loads(line)["text"])
        if size >= 4 * tokens:
            break
    src = out / f"wiki-{len(slice_)}.jsonl"
    if not src.is_file():
        src.write_text("\n".join(slice_) + "\n", encoding="utf-8")
    tok = out / "bpe8000.json"
    if not tok.is_file():
        texts = (json.loads(line)["text"] for line in lines[:300])
        save_tokenizer(train_tokenizer(texts, "bpe", 8000), tok)
    origin = (f"the first {len(slice_):,} of 2,006 English Wikipedia articles "
              f"({WIKI}), an 8,000-entry byte-level BPE trained here")  # fmt: skip
    return src, tok, origin


def _synthetic_source(out: Path, tokens: int, doc_tokens: int = 680) -> tuple[Path, Path, str]:
    """Zipf words in log-normal documents (sigma 0.8, mean ``doc_tokens``), and a word-level
    vocabulary that maps them 1:1."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(8000)}
    vocab.update({"<|endoftext|>": 8000, "[UNK]": 8001})
    tok = out / "words8000.json"
    if not tok.is_file():
        words = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        words.save(str(tok))
    mu = float(np.log(doc_tokens) - 0.32)  # a log-normal's mean is exp(mu + sigma^2 / 2)
    src = (
        out / f"synthetic-{tokens}.jsonl"
        if doc_tokens == 680
        else (out / f"synthetic-{tokens}-{doc_tokens}.jsonl")
    )
    if not src.is_file():
        rng = np.random.default_rng(0)
        with open(src, "w", encoding="utf-8") as f:
            made = doc = 0
            while made < tokens:
                n = int(min(20_000, max(5, rng.lognormal(mu, 0.8))))
                ids = np.minimum(rng.zipf(1.2, n) - 1, 7999)
                text = " ".join(f"w{i}" for i in ids.tolist())
                f.write(json.dumps({"id": str(doc), "text": text}) + "\n")
                made, doc = made + n + 1, doc + 1
    return (
        src,
        tok,
        (
            f"synthetic documents (Zipf words, log-normal lengths of mean ~{doc_tokens}), "
            "one token "
            "a word"
        ),
    )


def corpus_for(args: Any, out: Path) -> dict[str, Any]:
    """Build (once) the token corpus; what every system needs to know about it."""
    if args.synthetic:
        src, tok, origin = _synthetic_source(out, args.tokens, getattr(args, "doc_tokens", 680))
    else:
        src, tok, origin = _wiki_source(out, args.tokens)
    corpus = TokenCorpus.build(src, out / f"corpus-{src.stem}", tok, progress=False)
    tokens = corpus.tokens
    token_bytes = int(tokens.nbytes)
    return {
        "local": corpus.path, "tokens": tokens, "origin": origin, "documents": len(corpus),
        "tokens_path": corpus.path / corpus.meta.get("dir", "") / "tokens.bin",
        "n_tokens": len(tokens), "token_bytes": token_bytes,
        "cap": int(args.share * token_bytes), "seq_len": args.seq_len, "batch": args.batch,
        "window_bytes": (args.seq_len + 1) * tokens.dtype.itemsize,
    }  # fmt: skip


def upload_folder(local: Path, url: str) -> None:
    """A built token corpus to ``url``: every file under it, ``meta.json`` last (the commit),
    as ``lading.stores.building.upload.upload`` does for a document store."""
    from lading.remote.clients import open_client

    client, local = open_client(url), Path(local)
    names = [p for p in local.rglob("*") if p.is_file() and p.name != "meta.json"]
    for path in sorted(names):
        client.put(path.relative_to(local).as_posix(), path.read_bytes())
    client.put("meta.json", (local / "meta.json").read_bytes())


def _synthetic_sessions(out: Path) -> list[Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = out / "sessions-synthetic"
    files = [folder / f"part-{i}.parquet" for i in range(4)]
    if all(f.is_file() for f in files):
        return files
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i, f in enumerate(files):
        n = 20_000
        lengths = rng.integers(1, 20, n)
        items = [rng.integers(1, 50_000, k).tolist() for k in lengths.tolist()]
        table = pa.table({"session_id": np.arange(i * n, (i + 1) * n), "item_id-list_seq": items})
        pq.write_table(table, f, row_group_size=2_000)
    return files


def _regrouped(files: list[Path], folder: Path) -> list[Path]:
    """``files`` rewritten in row groups of 2,048 sessions: the originals hold one row group a
    file (up to 28,511 sessions), one GET an epoch and larger than the node cache."""
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for f in files:
        target = folder / f"{f.parent.name}-{f.name}"
        if not target.is_file():
            pq.write_table(pq.read_table(f), target, row_group_size=2048)
        out.append(target)
    return out


def sessions_for(args: Any, out: Path, bucket: str) -> dict[str, Any]:
    """The session files on disk and on the bucket (``s3://bucket/sessions/part-i.parquet``)."""
    from lading.remote.clients import open_client

    root = find_data()
    if not args.synthetic and root is not None and (root / SESSIONS).is_dir():
        days = [root / SESSIONS / str(d) / "train.parquet" for d in (178, 179, 180, 181)]
        files = _regrouped(days, out / "sessions-yoochoose")
        origin = "YOOCHOOSE training days 178-181 (T4R preprocessing), row groups of 2,048"
    else:
        files = _synthetic_sessions(out)
        origin = "synthetic sessions (4 files of 20,000, row groups of 2,000)"
    client = open_client(f"s3://{bucket}/sessions")
    urls = []
    for i, f in enumerate(files):
        client.put(f"part-{i}.parquet", f.read_bytes())
        urls.append(f"s3://{bucket}/sessions/part-{i}.parquet")
    size = sum(f.stat().st_size for f in files)
    return {"parquet_files": [str(f) for f in files], "parquet_urls": urls,
            "parquet_cap": int(args.share * size), "parquet_bytes": size,
            "parquet_origin": origin}  # fmt: skip
