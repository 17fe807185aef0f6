"""Everything README's examples read, made offline in one folder (``lading example DIR``).

A fresh clone has no MS MARCO, no model and no network; README's examples still run as written
in a folder this module fills, under the names README uses:

- ``collection.tsv`` and ``docs.tsv`` (``id<TAB>text``: :func:`lading.bench.synth.synth` passages,
  integer ids ``0``..``n-1``), ``docs.jsonl`` (``{"doc_id", "title", "text"}``, the same
  documents), ``queries.tsv``, ``qrels.txt`` and ``bm25.run`` (synth's term-overlap run);
- ``tokenizer.json`` (WordPiece trained here on the documents and queries), ``bert-tokenizer/``
  and ``tiny-bert/`` (that tokenizer as a Hugging Face folder; ``tiny-bert`` adds a 2-layer
  BERT built from :func:`lading.ir.model.tiny_bert_config`, random weights), needing
  ``transformers``;
- ``wiki.jsonl`` (the documents as LM text) with ``wiki/tokenizer.json`` (byte-level BPE) and
  ``wiki/corpus`` (a :class:`lading.lm.TokenCorpus`), and ``code/corpus`` (small Python
  functions in the same tokenizer) to mix with it;
- ``sessions/<day>/{train,valid,test}.parquet`` for days 178-182 (``session_id`` and a ragged
  ``item_id-list_seq``: YOOCHOOSE's columns, its lists not padded as the T4R files' are),
  needing ``pyarrow``: without it the rest is made and an :class:`ExampleLeftOutWarning`
  names what was not and the extra.

Same (passages, seed), same texts, runs, model weights and sessions; the WordPiece vocabulary
may number entries of equal frequency in another order from run to run (``tokenizers``' trainer
breaks ties in hash order). ~5 s on a shared core, most of it importing transformers.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

from lading.bench.synth import synth

SESSION_DAYS: tuple[int, ...] = (178, 179, 180, 181, 182)
SESSION_ITEMS = 2_000  # item ids 1..1999 (0 pads), well inside README's 60,000-row embedding
DOC_ID = "42"  # a document README's examples fetch by id: synth passages have ids 0..n-1
_LM_VOCAB = 2_000
_WORDPIECE_VOCAB = 2_000  # what ~500 synthetic passages hold; fewer entries than asked is fine


def make_example(
    out: str | os.PathLike[str], *, passages: int = 500, queries: int = 50, seed: int = 0
) -> dict[str, Path]:
    """Write README's example inputs into ``out`` (created); name -> path of what was made.

    Files already there of the same name are replaced, nothing else in ``out`` is touched.
    """
    if passages <= int(DOC_ID):
        raise ValueError(
            f"passages={passages}: README's examples read document {DOC_ID}; give at least "
            f"{int(DOC_ID) + 1}"
        )
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path] = {}
    files = synth("passages", passages, folder, queries=queries, seed=seed)
    made.update(
        collection=files.corpus, queries=files.queries, qrels=files.qrels, run=folder / "bm25.run"
    )
    files.run.replace(made["run"])  # README's name for a first-stage run
    made["docs.tsv"] = Path(shutil.copyfile(files.corpus, folder / "docs.tsv"))
    made["docs.jsonl"] = _docs_jsonl(files.corpus, folder / "docs.jsonl")
    made["tokenizer"] = _wordpiece(files.corpus, files.queries, folder / "tokenizer.json")
    made.update(_hf_folders(made["tokenizer"], folder))
    made.update(_language_model(made["docs.jsonl"], folder))
    try:
        made["sessions"] = write_sessions(folder / "sessions", seed=seed)
    except ImportError as e:  # README's first command installs no pyarrow: the rest still runs
        if e.name != "pyarrow":
            raise
        warnings.warn(SESSIONS_NOT_MADE, ExampleLeftOutWarning, stacklevel=2)
    return made


class ExampleLeftOutWarning(UserWarning):
    """Part of the example folder was not made: an optional extra is not installed."""


SESSIONS_NOT_MADE = (
    'sessions/ (parquet needs pyarrow: pip install "lading[parquet]"); the session-based '
    "recommendation examples read it"
)


def _records(corpus: Path) -> list[tuple[str, str]]:
    with open(corpus, encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in f]  # type: ignore[misc]


def _docs_jsonl(corpus: Path, path: Path) -> Path:
    """The passages as ``{"doc_id", "title", "text"}`` lines (title: the first 5 words)."""
    with open(path, "w", encoding="utf-8") as f:
        for doc_id, text in _records(corpus):
            title = " ".join(text.split()[:5])
            f.write(json.dumps({"doc_id": doc_id, "title": title, "text": text}) + "\n")
    return path


def _wordpiece(corpus: Path, queries: Path, path: Path) -> Path:
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    texts = [text for _, text in _records(corpus)] + [text for _, text in _records(queries)]
    return save_tokenizer(train_tokenizer(texts, "wordpiece", _WORDPIECE_VOCAB), path)


def hf_tokenizer_folder(tokenizer: Path, out: Path, max_length: int = 128) -> Path:
    """A Hugging Face tokenizer folder (what ``AutoTokenizer`` and sentence-transformers load)
    from a BERT-style ``tokenizer.json``."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer),
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=max_length,
    )
    fast.save_pretrained(out)
    return out


def _hf_folders(tokenizer: Path, folder: Path) -> dict[str, Path]:
    """``bert-tokenizer/`` and ``tiny-bert/`` (tokenizer + a tiny BERT, random weights)."""
    import torch
    from transformers import BertModel
    from transformers.utils import logging as hf_logging

    from lading.ir.model import tiny_bert_config
    from lading.stores.tokens import load_tokenizer

    bert_tokenizer = hf_tokenizer_folder(tokenizer, folder / "bert-tokenizer")
    tiny = hf_tokenizer_folder(tokenizer, folder / "tiny-bert")
    torch.manual_seed(0)  # the same weights every time
    vocab = load_tokenizer(tokenizer).get_vocab_size()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # ("Writing model shards" on stderr: one file, instant)
    try:
        BertModel(tiny_bert_config(vocab, max_position=128)).save_pretrained(tiny)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return {"bert-tokenizer": bert_tokenizer, "tiny-bert": tiny}


def _language_model(docs: Path, folder: Path) -> dict[str, Path]:
    """``wiki.jsonl`` (WikiExtractor ``--json`` fields), its BPE tokenizer and token corpus:
    what README's LM commands make, made already so the LM python examples run alone."""
    from lading.lm.corpus import TokenCorpus
    from lading.lm.texts import iter_texts
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    wiki = folder / "wiki.jsonl"
    with open(docs, encoding="utf-8") as src, open(wiki, "w", encoding="utf-8") as f:
        for line in src:
            doc = json.loads(line)
            record = {"id": doc["doc_id"], "url": "", "title": doc["title"], "text": doc["text"]}
            f.write(json.dumps(record) + "\n")
    tok = save_tokenizer(
        train_tokenizer(iter_texts(wiki), "bpe", _LM_VOCAB), folder / "wiki" / "tokenizer.json"
    )
    corpus = TokenCorpus.build(wiki, folder / "wiki" / "corpus", tok, progress=False)
    # a second corpus to mix with (README's TokenMixture): small Python functions, in the same
    # byte-level tokenizer (no unknown tokens), documents split at blank lines
    code = folder / "code.txt"
    code.write_text(
        "\n\n".join(
            f"def f{i}(x):\n    y = x * {i % 7 + 1}\n    return y + {i}\n" for i in range(300)
        )
    )
    mix = TokenCorpus.build(code, folder / "code" / "corpus", tok, progress=False)
    return {
        "wiki.jsonl": wiki,
        "wiki/tokenizer.json": tok,
        "wiki/corpus": corpus.path,
        "code.txt": code,
        "code/corpus": mix.path,
    }


def write_sessions(
    folder: Path, days: tuple[int, ...] = SESSION_DAYS, sessions: int = 600, seed: int = 0
) -> Path:
    """Parquet sessions per day, ``<day>/{train,valid,test}.parquet``: ``session_id`` (int64)
    and ``item_id-list_seq`` (2-12 item ids, popular items more often), 4 row groups a file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lading.tabular.train import ITEMS

    for day in days:
        for k, split in enumerate(("train", "valid", "test")):
            rng = np.random.default_rng([seed, day, k])
            n = sessions if split == "train" else sessions // 4
            lengths = rng.integers(2, 13, n)
            # Zipf-like popularity: a most-popular baseline has something to find
            items = np.minimum(rng.zipf(1.3, int(lengths.sum())), SESSION_ITEMS - 1)
            table = pa.table(
                {
                    "session_id": pa.array(np.arange(n) + day * 100_000, pa.int64()),
                    ITEMS: pa.ListArray.from_arrays(
                        pa.array(np.concatenate([[0], np.cumsum(lengths)]), pa.int32()),
                        pa.array(items, pa.int64()),
                    ),
                }
            )
            path = folder / str(day) / f"{split}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path, row_group_size=-(-n // 4), write_page_checksum=True)
    return folder


def describe(made: dict[str, Any]) -> str:
    """One line per thing made, as ``lading example`` prints it."""
    return "\n".join(f"{name:20s} {path}" for name, path in made.items())
