"""README's Accelerate recipe, run by ``accelerate launch``: lading's loader, Accelerate's model.

Every rank reads its own share with ``lading.loader`` (only model and optimizer go to
``accelerator.prepare``), trains a tiny cross-encoder for one epoch, and writes
``rank{R}.json``: the positive pairs it read, its losses, and a checksum of its parameters
after training (equal on every rank when Accelerate synchronised the gradients).

Usage: ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 \
           tests/accelerate_job.py DATA OUT   (on CPU: 2 processes, gloo)
DATA holds store/ (built with a tokenizer), tokenizer.json, queries.tsv, qrels.txt, run.trec.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import accelerate
import torch

import lading
from lading.ir import (
    CrossEncoder,
    CrossEncoderCollator,
    TrainingGroups,
    read_qrels,
    read_queries,
    read_run,
)
from lading.ir.model import ranking_loss, tiny_bert_config
from lading.stores.tokens import load_tokenizer


def main(data: Path, out: Path) -> None:
    accelerator = accelerate.Accelerator(cpu=True)
    store = lading.open_store(data / "store")
    groups = TrainingGroups(
        store,
        read_queries(data / "queries.tsv"),
        read_qrels(data / "qrels.txt"),
        read_run(data / "run.trec"),
        group_size=4,
        on_missing="skip",
    )
    collate = CrossEncoderCollator(store, max_length=128, max_query_length=32)
    loader = lading.loader(groups, 4, collate)
    torch.manual_seed(0)
    vocab = load_tokenizer(data / "tokenizer.json").get_vocab_size()
    model = CrossEncoder.from_config(tiny_bert_config(vocab))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)  # not the loader: it is sharded
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    pairs: list[str] = []
    losses: list[float] = []
    loader.set_epoch(0)
    for batch in loader:
        logits = model(
            **{
                k: batch[k].to(accelerator.device)
                for k in ("input_ids", "attention_mask", "token_type_ids")
            }
        )
        loss = ranking_loss(logits, batch["labels"].to(accelerator.device), batch["group_size"])
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        pairs += batch["pairs"]
        losses.append(float(loss))
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    record = {
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type),
        "backend": accelerator.state.backend,
        "dataset_len": len(groups),
        "pairs": pairs,
        "losses": losses,
        "checksum": float(after.double().sum()),
        "changed": float((after - before).abs().max()),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{accelerator.process_index}.json").write_text(json.dumps(record))
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
    # the group accelerate started must not outlive the script (pytorch#190489)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    # and leaves without the interpreter's finalization: the framework still holds the group
    # object, and gloo's threads torn down there abort the process now and then ("terminate
    # called without an active exception", SIGABRT after every result was written: CI saw it
    # once in ~40 runs; pytorch#179291). The results are on disk; nothing else is left to do.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
