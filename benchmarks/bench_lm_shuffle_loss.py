"""The locality shuffle's price in learning: the tiny GPT trained on the same tokens in the
exact global window order and in the block orders (issue 48 item 2's loss curve).

    python benchmarks/bench_lm_shuffle_loss.py [--seeds 3] [--epochs 1] [--write]

The corpus is the first ``--text-mb`` MB of the Wikipedia sample of ../shared/data/lm (its
articles in the dump's order, page ids from "Anarchism" upward: neighbouring articles are
not topically shuffled), every 20th article held out; a byte-level BPE of 1,024 entries is
trained on the training articles here. Every order reads the same windows of ``SEQ + 1``
tokens of the stored document order, each once an epoch, in batches of 16:

- ``global``: ``Windows(SEQ, shuffle_documents=False)``, the exact shuffle of the windows;
- ``blocks 0.6%`` / ``blocks 7%``: ``Windows(SEQ, shuffle_documents=False, block_tokens=B,
  block_buffer=4)`` with blocks of 0.6 % and 6.9 % of the corpus's windows (the sizes of the
  10 % and 110 % caps' blocks in the issue-48 head to head, scaled to this corpus);
- ``documents``: ``Windows(SEQ)``, the default (documents permuted, then cut): other windows.

For each seed every order starts from the same initial weights (``torch.manual_seed(seed)``)
and the loader's ``seed``; one intra-op thread. The held-out loss is over a fixed set of
windows of the held-out articles, at evenly spaced steps. Writes the section "Remote token
corpora: the locality shuffle's loss curve (issue 48)" of benchmarks/RESULTS.md (``--write``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from common import HERE, add_write_flag, data_dir, write_section
from lading.lm import LanguageModelLoader, TokenCorpus, Windows
from lading.lm.gpt import GPTLanguageModel
from lading.stores.tokens import save_tokenizer, train_tokenizer

BATCH, SEQ, VOCAB = 16, 128, 1024
BLOCK_SHARES = {"blocks 0.6%": 0.006, "blocks 7%": 0.069}  # of the corpus's windows
TITLE = "Remote token corpora: the locality shuffle's loss curve (issue 48)"


def build(out: Path, text_mb: float) -> tuple[TokenCorpus, TokenCorpus, str]:
    """(train, held out) corpora of the first ``text_mb`` MB of articles, every 20th held out."""
    source = data_dir()
    if source is None:
        raise SystemExit("skipped: no ../shared/data (set LADING_DATA): the Wikipedia sample")
    src = source / "lm" / "enwiki-2015-wikiextractor.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    train: list[str] = []
    held: list[str] = []
    size = 0
    with open(src, encoding="utf-8") as f:
        for i, line in enumerate(f):
            (held if i % 20 == 19 else train).append(line)
            size += len(line)
            if size > text_mb * 1e6 and held:  # (at least one article held out)
                break
    (out / "train.jsonl").write_text("".join(train))
    (out / "held.jsonl").write_text("".join(held))
    texts = (json.loads(line)["text"] for line in train)
    tok = save_tokenizer(train_tokenizer(texts, "bpe", VOCAB), out / "bpe.json")
    corpora = [
        TokenCorpus.build(out / f"{n}.jsonl", out / n, tok, progress=False, overwrite=True)
        for n in ("train", "held")
    ]
    origin = f"{len(train):,} Wikipedia articles ({len(held):,} held out) of {src.name}"
    return corpora[0], corpora[1], origin


def orders(windows: int) -> dict[str, Windows]:
    """The window orders compared, blocks sized as shares of the corpus's ``windows``."""
    modes = {"global": Windows(SEQ, shuffle_documents=False)}
    for name, share in BLOCK_SHARES.items():
        per_block = max(1, round(share * windows))
        modes[name] = Windows(
            SEQ, shuffle_documents=False, block_tokens=per_block * SEQ, block_buffer=4
        )
    modes["documents"] = Windows(SEQ)
    return modes


@torch.no_grad()
def held_loss(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Mean cross-entropy (nats a token) over the fixed held-out windows."""
    model.eval()
    total = count = 0.0
    for x, y in batches:
        logits = model(x)
        total += nn.functional.cross_entropy(
            logits.flatten(0, 1), y.flatten(), reduction="sum"
        ).item()
        count += y.numel()
    model.train()
    return total / count


def run(
    corpus: TokenCorpus,
    mode: Windows,
    seed: int,
    epochs: int,
    evals: list[tuple[torch.Tensor, torch.Tensor]],
    every: int,
) -> dict[str, Any]:
    """Train from the seed's initial weights; the held-out loss every ``every`` steps."""
    torch.manual_seed(seed)
    model = GPTLanguageModel(corpus.vocab_size, 64, 2, 4, SEQ, 0.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = LanguageModelLoader(corpus, BATCH, mode, seed=seed)
    total = len(data) * epochs
    curve = {0: held_loss(model, evals)}
    train_loss: list[float] = []
    step, started = 0, time.perf_counter()
    for epoch in range(epochs):
        data.set_epoch(epoch)
        for x, y in data:
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            train_loss.append(loss.item())
            step += 1
            if step % every == 0 or step == total:
                curve[step] = held_loss(model, evals)
    return {"curve": curve, "train": train_loss, "steps": step, "s": time.perf_counter() - started}


def spread(values: list[float]) -> str:
    return f"{np.mean(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def table(results: dict[str, list[dict[str, Any]]], window: int) -> str:
    """Held-out loss by step (mean [min-max] over seeds), and the training loss of the last
    ``window`` steps of each run."""
    names = list(results)
    steps = sorted(results[names[0]][0]["curve"])
    lines = [
        "| step | " + " | ".join(names) + " |",
        "|---:|" + "---|" * len(names),
    ]
    for s in steps:
        cells = [spread([r["curve"][s] for r in results[n]]) for n in names]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    last = [spread([float(np.mean(r["train"][-window:])) for r in results[n]]) for n in names]
    lines.append(f"| train loss, last {window} steps | " + " | ".join(last) + " |")
    return "\n".join(lines)


def ratios(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Final held-out loss of each order / the global shuffle's, paired by seed."""
    final = {n: [r["curve"][r["steps"]] for r in rs] for n, rs in results.items()}
    out = []
    for name in results:
        if name == "global":
            continue
        pairs = [a / b for a, b in zip(final[name], final["global"], strict=True)]
        out.append(
            f"- {name} / global, final held-out loss: {np.mean(pairs):.3f} "
            f"[{min(pairs):.3f}-{max(pairs):.3f}] (perplexity x"
            f"{math.exp(np.mean(final[name]) - np.mean(final['global'])):.2f})"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE.parent / "bench-out" / "shuffle-loss")
    parser.add_argument("--text-mb", type=float, default=3.0)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--points", type=int, default=8, help="held-out evaluations a run")
    parser.add_argument("--eval-batches", type=int, default=24)
    parser.add_argument("--orders", default="global,blocks 0.6%,blocks 7%,documents",
                        help="the orders compared, of those above (global first)")  # fmt: skip
    add_write_flag(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started, load0 = time.time(), os.getloadavg()[0]
    train, held, origin = build(args.out, args.text_mb)
    held_data = LanguageModelLoader(held, BATCH, Windows(SEQ, shuffle_documents=False), seed=0)
    evals = [b for _, b in zip(range(args.eval_batches), held_data, strict=False)]
    windows = len(LanguageModelLoader(train, 1, Windows(SEQ, shuffle_documents=False), seed=0))
    modes = {n: m for n, m in orders(windows).items() if n in args.orders.split(",")}
    steps = len(LanguageModelLoader(train, BATCH, modes["global"], seed=0)) * args.epochs
    every = max(1, steps // args.points)
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in modes}
    loads = [load0]
    for seed in range(args.seeds):
        names = list(modes)
        for name in names[seed % len(names) :] + names[: seed % len(names)]:  # rotated
            results[name].append(run(train, modes[name], seed, args.epochs, evals, every))
            loads.append(os.getloadavg()[0])
            done = results[name][-1]
            print(f"seed {seed} {name}: {done['curve'][steps]:.3f} ({done['s']:.0f} s)", flush=True)
    per_block = {n: m.block_tokens // SEQ for n, m in modes.items() if m.block_tokens}
    body = "\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, "
            f"{(time.time() - started) / 60:.1f} min, load {min(loads):.1f}-{max(loads):.1f} "
            f"on {os.cpu_count()} cores (one intra-op thread). {origin}: {len(train):,} "
            f"training documents, {windows:,} windows of {SEQ} + 1 tokens, batches of {BATCH}, "
            f"{args.epochs} epoch(s) = {steps} steps; the GPT of `lading train lm --arch gpt` "
            f"(2 layers, width 64, 4 heads, vocabulary {VOCAB}), AdamW 3e-3, clip 1.0; "
            f"{args.seeds} seeds, each order from the seed's initial weights, orders rotated. "
            f"Blocks: {', '.join(f'{n}: {w} windows' for n, w in per_block.items())}, "
            f"buffer 4. Held-out loss (nats a token) over {len(evals) * BATCH} fixed windows "
            "of the held-out articles, mean [min-max] over seeds:",
            "",
            table(results, every),
            "",
            *ratios(results),
        ]
    )
    print(body)
    (args.out / "results.json").write_text(
        json.dumps({"args": str(vars(args)), "results": results})
    )
    command = "python benchmarks/bench_lm_shuffle_loss.py " + " ".join(
        f"--{k.replace('_', '-')} {v!r}" if k == "orders" else f"--{k.replace('_', '-')} {v}"
        for k, v in vars(args).items()
        if k not in ("out", "write")
    )
    write_section(HERE / "RESULTS.md", TITLE, body, command, write=args.write)


if __name__ == "__main__":
    main()
