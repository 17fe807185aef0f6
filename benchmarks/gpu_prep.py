"""Data and a model for the GPU leg (benchmarks/gpu_leg.sh), made offline from nothing.

    python benchmarks/gpu_prep.py DIR [--documents 20000] [--sessions 200000] [--queries N]

Writes into DIR:

- ``docs/``: ``lading synth documents`` (docs.jsonl, queries.tsv, qrels.txt), most documents
  longer than 512 tokens, so a 32x8x512 batch is full; ``--queries`` queries (default: one a
  100 documents, so 10,000 documents make epochs of 4 batches of 32 groups, and a run meets an
  epoch start every 4th step: 800 make epochs of 25).
- ``model/``: a DistilBERT-sized cross-encoder (a BERT of 6 layers, 768 wide, 12 heads, 62M
  parameters: BERT rather than DistilBERT because the collator's pairs carry token types) with
  random weights,
  saved by :meth:`lading.ir.CrossEncoder.save`, and ``model/tokenizer.json``, a WordPiece
  vocabulary of 30,522 trained on the documents.
- ``bpe.json``: a byte-level BPE of 8,192 for the language model (``lading lm build``).
- ``sessions/``: parquet sessions per day (:func:`lading.bench.examples.write_sessions`).

Nothing is downloaded; the same arguments give the same files.
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

import argparse
import itertools
from pathlib import Path

import lading
from lading.bench.examples import write_sessions
from lading.bench.synth import synth
from lading.ir import CrossEncoder
from lading.stores.tokens import save_tokenizer, train_tokenizer


def bert_6x768(vocab_size: int) -> object:
    """DistilBERT's size (62M parameters with a 30,522 vocabulary, no pooler), BERT's layers."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=768,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
        type_vocab_size=2,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="folder to write into")
    parser.add_argument("--documents", type=int, default=20_000, help="synthetic documents")
    parser.add_argument("--sessions", type=int, default=200_000, help="train sessions per day")
    parser.add_argument("--queries", type=int, default=None, help="default: documents // 100")
    args = parser.parse_args()
    out = Path(args.dir)
    files = synth("documents", args.documents, out / "docs", queries=args.queries,
                  workers=os.cpu_count() or 1)  # fmt: skip
    texts = [r.text for r in itertools.islice(lading.read_records(files.corpus), 5000)]
    wordpiece = train_tokenizer(texts, "wordpiece", 30_522)
    model = CrossEncoder.from_config(bert_6x768(wordpiece.get_vocab_size()))
    model.save(out / "model")
    save_tokenizer(wordpiece, out / "model" / "tokenizer.json")
    save_tokenizer(train_tokenizer(texts, "bpe", 8_192), out / "bpe.json")
    write_sessions(out / "sessions", sessions=args.sessions)
    print(f"wrote {out}: {files.corpus}, model/ ({sum(p.numel() for p in model.parameters()):,}")
    print("parameters), bpe.json, sessions/")


if __name__ == "__main__":
    main()
