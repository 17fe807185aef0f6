"""Training a language model: the LSTM (hidden state carried across batches) or a tiny GPT
(windows with document boundaries), DDP via torchrun.

The proof that continuity matters: with ``break_continuity=True`` the rows of every batch are
shuffled before the step, so the hidden state a row inherits belongs to another stream, which
is what a loader that serves unrelated windows does to an RNN. Validation perplexity is
computed on held-out documents with the state carried through them, on every rank's share.

``arch="gpt"`` reads windows of ``bptt + 1`` tokens with their document boundaries (packed
whole with ``packed=True``) and trains :class:`GPTLanguageModel`; ``document_mask=False`` is
the ablation that lets attention and positions run across document boundaries.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from lading.errors import EmptyEpochError, LadingError
from lading.lm.boundaries import DocumentBatch
from lading.lm.corpus import TokenCorpus
from lading.lm.gpt import GPTLanguageModel
from lading.lm.loader import LanguageModelLoader
from lading.lm.model import LSTMLanguageModel, State, detach
from lading.lm.modes import Packed, SequenceOptions, Streams, Windows
from lading.loading.order import Salt, generator, permutation
from lading.loading.resumable import Resumable
from lading.train import (
    LoopConfig,
    LoopResult,
    StepResult,
    Trainer,
    TrainingTask,
    ddp,
    jsonable,
    write_summary,
)
from lading.train.config import RunConfig, data_location
from lading.train.weights import check_replaceable, load_weights, model_dir, save_model
from lading.world import World

ARCHS: tuple[str, ...] = ("lstm", "gpt")
# the options only one arch reads (field: that arch); the other would ignore them
ARCH_OPTIONS: dict[str, str] = {
    "hidden": "lstm",
    "break_continuity": "lstm",
    "heads": "gpt",
    "packed": "gpt",
    "document_mask": "gpt",
}


class ArchOptionError(LadingError, ValueError):
    """An :class:`LMConfig` that sets options of the other ``arch`` (away from their defaults):
    its ``arch`` would ignore them. ``options`` maps each field to its value;
    :meth:`line` spells the message as the caller's interface names them."""

    def __init__(self, arch: str, options: dict[str, Any]) -> None:
        super().__init__(arch, options)  # (args: an instance pickles and unpickles whole)
        self.arch, self.options = arch, options

    def __str__(self) -> str:
        return self.line(lambda field, value: f"{field}={value!r}", lambda a: f"arch={a!r}")

    def line(self, option: Callable[[str, Any], str], arch: Callable[[str], str]) -> str:
        """The message, each option spelled ``option(field, value)``, an arch ``arch(name)``."""
        other = next(a for a in ARCHS if a != self.arch)
        given = ", ".join(option(f, v) for f, v in self.options.items())
        them = "them" if len(self.options) > 1 else "it"
        return (
            f"{arch(self.arch)} ignores {given} (read by {arch(other)} only); leave {them} "
            f"out, or train {arch(other)}"
        )


@dataclass(kw_only=True)
class LMConfig(RunConfig):
    """Everything ``lading train lm`` takes (see ``lading train lm -h``).

    ``corpus`` is a TokenCorpus folder or an object-store URL (``"s3://bucket/corpora/wiki"``,
    a string: ``Path()`` merges a URL's slashes), read by ranged GETs through the node cache
    every rank of the node shares, with :func:`lading.open_store`'s defaults (``remote/`` in
    ``$LADING_CACHE``, capped at ``$LADING_REMOTE_CACHE_BYTES``).

    ``hidden`` and ``break_continuity`` are the LSTM's, ``heads``, ``packed`` and
    ``document_mask`` the GPT's (:data:`ARCH_OPTIONS`): one of the other ``arch`` set away
    from its default raises :class:`ArchOptionError` rather than being ignored.
    """

    corpus: Path | str
    valid_fraction: float = 0.02
    bptt: int = 70
    clip: float | None = 0.25
    emb: int = 256
    hidden: int = 256
    layers: int = 2
    dropout: float = 0.2
    break_continuity: bool = False
    eval_every: int = 0
    eval_batches: int | None = None
    arch: str = "lstm"
    heads: int = 4
    packed: bool = False
    document_mask: bool = True
    # RunConfig fields with this workload's defaults
    batch_size: int = 32
    lr: float = 3e-3

    def __post_init__(self) -> None:
        self.check_arch()
        self.corpus = data_location(self.corpus, "corpus")
        if not 0 <= self.valid_fraction < 1:  # (1.5 held out every document, said nothing)
            raise ValueError(
                f"--valid-fraction {self.valid_fraction:g}: the share of documents held out "
                "for validation is at least 0 and below 1 (0: no validation split)"
            )

    def check_arch(self) -> None:
        """Refuse an unknown ``arch``, and options of the other arch set away from their
        defaults (:class:`ArchOptionError`): this arch would silently ignore them."""
        if self.arch not in ARCHS:
            raise ValueError(f"unknown arch {self.arch!r}; choose 'lstm' or 'gpt'")
        defaults = {f.name: f.default for f in fields(self)}
        foreign = {
            name: getattr(self, name)
            for name, arch in ARCH_OPTIONS.items()
            if arch != self.arch and getattr(self, name) != defaults[name]
        }
        if foreign:
            raise ArchOptionError(self.arch, foreign)


def split_documents(count: int, valid_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, valid) document indices: a fixed random ``valid_fraction`` held out."""
    order = permutation(count, seed, Salt.HOLDOUT)
    n_valid = max(1, round(count * valid_fraction)) if valid_fraction > 0 else 0
    if (
        n_valid and n_valid >= count
    ):  # (the loader said "documents= selects...", a flag never typed)
        raise ValueError(
            f"--valid-fraction {valid_fraction:g} holds out {n_valid:,} of the corpus's "
            f"{count:,} document(s) for validation, leaving none to train on: lower it, or "
            "pass --valid-fraction 0 to train without a validation split"
        )
    return np.sort(order[n_valid:]), np.sort(order[:n_valid])


def perplexity(total: float, tokens: float) -> float:
    """``exp`` of the mean loss a token; ``inf`` past what a float holds (a run at a too
    high ``--lr`` whose loss stayed finite, ~1,600 a token: ``math.exp`` raised
    ``OverflowError`` at the last validation, and the run kept no model or summary); NaN
    for a NaN loss."""
    mean = total / max(tokens, 1.0)
    if math.isnan(mean):
        return mean
    return math.exp(mean) if mean < _LOG_MAX else math.inf


_LOG_MAX = math.log(sys.float_info.max)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: LanguageModelLoader,
    device: torch.device,
    max_batches: int | None = None,
) -> float:
    """Perplexity over the loader's epoch 0 (state carried), summed over all ranks."""
    model.eval()
    loader.set_epoch(0)
    state: State | None = None
    loss_sum, count = 0.0, 0
    for i, batch in enumerate(loader):
        assert not isinstance(batch, DocumentBatch), "the LSTM reads (x, y) streams"
        x, y = batch
        if max_batches is not None and i >= max_batches:
            break
        logits, state = model(x.to(device), state)
        loss = nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), y.to(device).flatten(), reduction="sum"
        )
        loss_sum += loss.item()
        count += y.numel()
    model.train()
    total, tokens = ddp.sum_over_ranks([loss_sum, float(count)], device)
    return perplexity(total, tokens)


class LanguageModelStep(TrainingTask):
    """An LSTM step: the hidden state carried from batch to batch, detached between them.

    Row ``i`` of every batch continues stream ``i`` of the loader, so its state is the one the
    previous batch's row ``i`` left; a new epoch starts new streams (no state). The state is
    checkpointed per rank and restored only when the streams are the same (same world size
    and batch size); otherwise no row has a predecessor whose state it could carry. So is the
    generator of the ``break_continuity`` row shuffles: a resume draws the shuffles it would
    have drawn.
    """

    def __init__(
        self,
        model: LSTMLanguageModel,
        device: torch.device,
        config: LMConfig,
        world: World,
        valid: LanguageModelLoader | None,
    ) -> None:
        self.model, self.net = model, ddp.wrap(model, config.parallel, device)
        self.device, self.world = device, world
        self.config, self.valid = config, valid
        self.shuffle_rng = generator(config.seed, Salt.ROW_ORDER, world.rank)
        self.hidden: State | None = None
        self.evaluations: list[dict[str, float]] = []

    def step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> StepResult:
        x, y = (t.to(self.device, non_blocking=True) for t in batch)
        if self.config.break_continuity:  # the ablation: rows inherit another stream's state
            perm = torch.from_numpy(self.shuffle_rng.permutation(x.shape[0])).to(self.device)
            x, y = x[perm], y[perm]
        logits, self.hidden = self.net(x, detach(self.hidden) if self.hidden is not None else None)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
        return StepResult(loss, y.numel())

    def on_epoch(self, epoch: int) -> None:
        self.hidden = None  # a new epoch starts new streams

    def evaluate(self, step: int) -> dict[str, Any]:
        """The validation perplexity every ``eval_every`` steps (all ranks evaluate)."""
        every = self.config.eval_every
        if self.valid is None or not every or step % every:
            return {}
        ppl = evaluate(self.model, self.valid, self.device, self.config.eval_batches)
        self.evaluations.append({"step": step, "valid_ppl": ppl})
        return {"valid_ppl": ppl}

    def state(self) -> dict[str, Any]:
        """The hidden state and the row shuffles' generator (its bit generator's state: plain
        numbers, JSON in the checkpoint) of this rank."""
        hidden = [t.detach().cpu() for t in self.hidden] if self.hidden is not None else None
        return {
            "hidden": hidden,
            "row_order": self.shuffle_rng.bit_generator.state,
            "evaluations": self.evaluations,
        }

    def load_state(self, saved: dict[str, Any], exact: bool) -> None:
        """This rank's saved state where the streams are the same (``exact``); otherwise no
        hidden state and, as the loop's torch RNG, shuffles reseeded from the step."""
        self.evaluations = saved_evaluations(saved)
        ranks = len(saved["loaders"])
        kept = saved.get("hidden", [None] * ranks)[self.world.rank] if exact else None
        self.hidden = (kept[0].to(self.device), kept[1].to(self.device)) if kept else None
        rows = saved.get("row_order")  # absent from checkpoints before it was saved
        if exact and rows is not None:
            self.shuffle_rng.bit_generator.state = rows[self.world.rank]
        elif not exact:
            step = int(saved["step"])
            self.shuffle_rng = generator(self.config.seed, Salt.ROW_ORDER, self.world.rank, step)


def gpt_loss(
    model: nn.Module, batch: DocumentBatch, document_mask: bool, reduction: str = "mean"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy over the scored labels (``loss_mask``) and how many there were.

    With ``document_mask`` attention stops at document boundaries and positions restart
    at each document; without it (the ablation) every window is one causal sequence.
    """
    if document_mask:
        logits = model(batch.input_ids, batch.position_ids, batch.attention_mask())
    else:
        logits = model(batch.input_ids)
    each = nn.functional.cross_entropy(
        logits.flatten(0, 1).float(), batch.labels.flatten(), reduction="none"
    )
    mask = batch.loss_mask.flatten()
    total, count = (each * mask).sum(), mask.sum()
    return (total / count.clamp(min=1) if reduction == "mean" else total), count


@torch.no_grad()
def evaluate_gpt(
    model: nn.Module,
    loader: LanguageModelLoader,
    device: torch.device,
    document_mask: bool,
    max_batches: int | None = None,
) -> float:
    """Validation perplexity over the loader's epoch 0, summed over all ranks."""
    model.eval()
    loader.set_epoch(0)
    loss_sum, count = 0.0, 0.0
    for i, batch in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        assert isinstance(batch, DocumentBatch)
        summed, n = gpt_loss(model, batch.to(device), document_mask, reduction="sum")
        loss_sum, count = loss_sum + summed.item(), count + n.item()
    model.train()
    total, tokens = ddp.sum_over_ranks([loss_sum, count], device)
    return perplexity(total, tokens)


class GPTStep(TrainingTask):
    """A transformer step on a :class:`DocumentBatch`: no state between batches."""

    def __init__(
        self,
        model: GPTLanguageModel,
        device: torch.device,
        config: LMConfig,
        valid: LanguageModelLoader | None,
    ) -> None:
        self.model, self.net = model, ddp.wrap(model, config.parallel, device)
        self.device, self.config, self.valid = device, config, valid
        self.evaluations: list[dict[str, float]] = []

    def step(self, batch: DocumentBatch) -> StepResult:
        loss, count = gpt_loss(self.net, batch.to(self.device), self.config.document_mask)
        return StepResult(loss, int(count.item()))

    def evaluate(self, step: int) -> dict[str, Any]:
        """The validation perplexity every ``eval_every`` steps (all ranks evaluate)."""
        every = self.config.eval_every
        if self.valid is None or not every or step % every:
            return {}
        ppl = evaluate_gpt(
            self.model, self.valid, self.device, self.config.document_mask, self.config.eval_batches
        )
        self.evaluations.append({"step": step, "valid_ppl": ppl})
        return {"valid_ppl": ppl}

    def state(self) -> dict[str, Any]:
        """The validations so far (the summary lists a resumed run's earlier ones too)."""
        return {"evaluations": self.evaluations}

    def load_state(self, saved: dict[str, Any], exact: bool) -> None:
        """Take back the validations made before the checkpoint."""
        self.evaluations = saved_evaluations(saved)


def saved_evaluations(saved: dict[str, Any]) -> list[dict[str, float]]:
    """The validations a checkpoint holds (rank 0's: every rank evaluates the same), none in
    one written before they were saved."""
    ranks = saved.get("evaluations") or [[]]
    return [dict(e) for e in ranks[0]]


def train_lm(config: LMConfig) -> dict[str, Any]:
    """Train; return a summary with the validation perplexities (on every rank)."""
    config.check_arch()  # again: a config's fields may have been set since it was made
    return ddp.run(config, functools.partial(_train_lm, config))


def _train_lm(config: LMConfig, world: World, device: torch.device, out: Path) -> dict[str, Any]:
    check_replaceable(model_dir(out))  # refused now, not after the training
    # a URL: every rank opens it, and the node's ranks share one node cache (the defaults)
    corpus = TokenCorpus.open(config.corpus)
    train_docs, valid_docs = split_documents(len(corpus), config.valid_fraction, config.seed)
    if config.arch == "gpt":
        return _train_gpt(config, corpus, world, device, train_docs, valid_docs)
    # in-process iteration (num_workers=0) reads a buffer of many batches at once; workers
    # only pay off for a corpus far away (a network filesystem)
    data, valid = _loaders(
        config,
        corpus,
        world,
        (Streams(config.bptt), Streams(config.bptt, jitter=None)),
        (train_docs, valid_docs),
    )
    torch.manual_seed(config.seed)  # the same initial weights on every rank
    model = LSTMLanguageModel(
        corpus.vocab_size, config.emb, config.hidden, config.layers, config.dropout
    ).to(device)
    workload = LanguageModelStep(model, device, config, world, valid)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    result = _fit(config, data, workload, model, optimizer, world, device, "train lm")
    final = math.nan if valid is None else evaluate(model, valid, device, config.eval_batches)
    summary = {
        "steps": result.steps,
        "valid_ppl": final,
        "evaluations": workload.evaluations,
        "world_size": world.world_size,
        "break_continuity": config.break_continuity,
        "resumed": result.resumed,
        "train_documents": len(train_docs),
        "valid_documents": len(valid_docs),
        "config": jsonable(asdict(config)),
    }
    summary["model_dir"] = _keep_model(model, config, corpus.vocab_size, out, world)
    write_summary(out, summary, world)
    return summary


def model_settings(config: LMConfig, vocab_size: int) -> dict[str, Any]:
    """What rebuilds the model ``config`` trains (``OUT/model/config.json``): its kind, arch
    and constructor arguments."""
    sizes: dict[str, Any] = (
        {"dim": config.emb, "layers": config.layers, "heads": config.heads, "max_len": config.bptt}
        if config.arch == "gpt"
        else {"emb": config.emb, "hidden": config.hidden, "layers": config.layers}
    )
    sizes["dropout"] = config.dropout
    return {"kind": "lm", "arch": config.arch, "vocab_size": vocab_size, **sizes}


def _keep_model(
    model: nn.Module, config: LMConfig, vocab_size: int, out: Path, world: World
) -> str:
    """Rank 0 writes the trained model to ``OUT/model`` (:func:`load_lm` reads it back);
    its path."""
    folder = model_dir(out)
    if world.rank == 0:
        save_model(model, folder, model_settings(config, vocab_size))
    return str(folder)


def load_lm(directory: str | os.PathLike[str]) -> LSTMLanguageModel | GPTLanguageModel:
    """The model a ``lading train lm`` run kept in ``OUT/model`` (``directory``), on the CPU.

    Raises:
        FileNotFoundError, ValueError: ``directory`` holds no model of ``lading train lm``'s,
            naming the file and the fix (:func:`lading.train.weights.load_weights`).
    """
    saved, state = load_weights(directory, "lm")
    sizes = {k: v for k, v in saved.items() if k not in ("kind", "arch")}
    arch = saved.get("arch")
    if arch not in ARCHS:
        raise ValueError(
            f"{Path(directory) / 'config.json'}: arch {arch!r} is not one of {', '.join(ARCHS)}; "
            "point at the OUT/model folder a `lading train lm` run wrote, or train again"
        )
    make = GPTLanguageModel if arch == "gpt" else LSTMLanguageModel
    model: LSTMLanguageModel | GPTLanguageModel = make(**sizes)
    model.load_state_dict(state)
    return model


def _fit(
    config: LMConfig,
    data: Resumable,
    task: TrainingTask,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    world: World,
    device: torch.device,
    desc: str,
) -> LoopResult:
    """The shared loop for ``steps`` (or ``epochs`` epochs) of either architecture."""
    total = config.steps
    if total is None:  # each epoch its own count: jittered streams draw lengths an epoch
        assert isinstance(data, LanguageModelLoader)
        total = sum(data.batches_in(epoch) for epoch in range(config.epochs))
    made_by = ("emb", "layers") + (
        ("heads", "document_mask") if config.arch == "gpt" else ("hidden",)
    )
    shape = {"arch": config.arch, **{name: getattr(config, name) for name in made_by}}
    # what draws the documents and splits them (a resume whose loader refuses the state
    # names those that differ: the loader's own words name a digest of the documents)
    drawn: dict[str, Any] = {"seed": config.seed, "valid_fraction": config.valid_fraction}
    drawn["corpus"] = Path(str(config.corpus)).name
    settings = LoopConfig.of(
        config, total, desc=desc, rate_key="tokens_per_s", model_settings=shape, data_settings=drawn
    )
    return Trainer(task, data, settings, world, device, model, optimizer).run()


def _loaders(
    config: LMConfig,
    corpus: TokenCorpus,
    world: World,
    modes: tuple[SequenceOptions, SequenceOptions],
    documents: tuple[np.ndarray, np.ndarray],
) -> tuple[LanguageModelLoader, LanguageModelLoader | None]:
    """The training loader (shuffled by the run's seed, ``config.num_workers`` workers) and
    the validation one (in order; None where no document is held out), each of its mode in
    ``modes`` over its documents in ``documents``."""
    train_docs, valid_docs = documents
    data = LanguageModelLoader(
        corpus,
        config.batch_size,
        modes[0],
        seed=config.seed,
        documents=train_docs,
        world=world,
        num_workers=config.num_workers,
    )
    if not len(valid_docs):
        return data, None
    try:
        valid = LanguageModelLoader(
            corpus, config.batch_size, modes[1], shuffle=False, documents=valid_docs, world=world
        )
    except EmptyEpochError as e:  # the corpus has windows; the documents held out have none
        tokens = int(np.asarray(corpus.lengths())[valid_docs].sum())
        raise EmptyEpochError(
            f"the validation split holds no batch: --valid-fraction {config.valid_fraction:g} "
            f"holds out {len(valid_docs):,} of {len(corpus):,} documents, {tokens:,} tokens, "
            f"with no window of --bptt {config.bptt} + 1 tokens; raise --valid-fraction, "
            "lower --bptt, or pass --valid-fraction 0 to train without one"
        ) from e
    return data, valid


def _train_gpt(
    config: LMConfig,
    corpus: TokenCorpus,
    world: World,
    device: torch.device,
    train_docs: np.ndarray,
    valid_docs: np.ndarray,
) -> dict[str, Any]:
    """The ``arch="gpt"`` run: windows with boundaries (packed or not), the GPT, AdamW; its
    summary adds the loss, the document mask and the packing figures to the LSTM's."""
    train: Windows | Packed = (
        Packed(config.bptt, boundaries=True)
        if config.packed
        else Windows(config.bptt, boundaries=True)
    )
    data, valid = _loaders(
        config,
        corpus,
        world,
        (train, Windows(config.bptt, boundaries=True)),
        (train_docs, valid_docs),
    )
    torch.manual_seed(config.seed)
    model = GPTLanguageModel(
        corpus.vocab_size, config.emb, config.layers, config.heads, config.bptt, config.dropout
    ).to(device)
    workload = GPTStep(model, device, config, valid)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    result = _fit(config, data, workload, model, optimizer, world, device, "train gpt")
    final = (
        math.nan
        if valid is None
        else evaluate_gpt(model, valid, device, config.document_mask, config.eval_batches)
    )
    summary = {
        "steps": result.steps,
        "valid_ppl": final,
        "valid_loss": math.log(final),
        "evaluations": workload.evaluations,
        "world_size": world.world_size,
        "arch": "gpt",
        "document_mask": config.document_mask,
        "packing": data.packing_stats() if config.packed else None,
        "resumed": result.resumed,
        "train_documents": len(train_docs),
        "valid_documents": len(valid_docs),
        "config": jsonable(asdict(config)),
    }
    out = Path(config.out)
    summary["model_dir"] = _keep_model(model, config, corpus.vocab_size, out, world)
    write_summary(out, summary, world)
    return summary
