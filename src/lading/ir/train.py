"""Training a cross-encoder with DDP, DP or one process: the study's task, measured honestly.

Launch with ``torchrun --nproc_per_node N -m lading train cross-encoder …`` (NCCL on GPUs, gloo
on CPUs; multi-node through torchrun's own flags) or as one process. Throughput counts the whole
loop: waiting for the batch, the host-to-device copy, and the step. Checkpoints hold model,
optimizer, scheduler, loader position and RNG state; ``resume=True`` continues exactly.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lading.device import ResidentTokens
from lading.ir.collate import CrossEncoderCollator
from lading.ir.groups import TrainingGroups
from lading.ir.inputs import QUERY_COLUMNS, read_qrels, read_queries, read_run
from lading.ir.layouts import DOC_ROWS, model_inputs
from lading.ir.model import CrossEncoder, check_positions, ranking_loss, tiny_bert_config
from lading.loading.map_workload import loader
from lading.sources import ParseOptions
from lading.stores import build_store, open_store
from lading.stores.base import DocStore
from lading.stores.tokens import save_tokenizer, train_tokenizer
from lading.train import LoopConfig, StepResult, Trainer, TrainingTask, ddp, jsonable, write_summary
from lading.train.config import RunConfig, data_location
from lading.world import World

PRECISION: tuple[str, ...] = ("bf16", "fp16", "fp32")
INPUTS: tuple[str, ...] = ("input_ids", "attention_mask", "token_type_ids")
# the settings of a config that are TrainingGroups options
GROUP_OPTIONS: tuple[str, ...] = ("group_size", "sampling", "depth", "min_relevance", "seed")


@dataclass(kw_only=True)
class TrainConfig(RunConfig):
    """Everything ``lading train cross-encoder`` takes (see ``lading train cross-encoder -h``)."""

    queries: Path
    qrels: Path
    store: Path | str | None = None  # a folder, or an object-store URL (s3://...)
    corpus: Path | None = None
    columns: tuple[str, ...] | None = None  # a TSV --corpus's column names (default: id, text)
    prefix_fields: tuple[str, ...] = ()  # a --corpus's fields put before its texts (title)
    query_columns: tuple[str, ...] | None = None  # a TSV --queries' (default: id, text)
    negatives: Path | None = None
    model: str = "tiny"
    tokenizer: str | None = None
    group_size: int = 8
    warmup: float = 0.1
    weight_decay: float = 0.01
    precision: str = "fp32"
    loss: str = "bce"
    sampling: str = "run"
    depth: int = 100
    min_relevance: int = 1
    max_length: int = 512
    max_query_length: int = 64
    pin_memory: bool | None = None
    trace: bool = False
    use_tokens: bool | None = None
    # RunConfig fields with this workload's defaults
    batch_size: int = 8
    lr: float = 2e-5
    log_every: int = 10
    narrow: bool | None = None  # ids in the store's dtype, widened on the device

    def __post_init__(self) -> None:
        if self.store is not None:  # Path("s3://b/x") is the local s3:/b/x: refused, naming why
            self.store = data_location(self.store, "store")


def _tiny_tokenizer(texts: list[str], path: Path, world: World) -> Path:
    """Rank 0 trains a BERT-style WordPiece tokenizer on ``texts`` into ``path``; all wait."""
    if world.rank == 0 and not path.is_file():
        save_tokenizer(train_tokenizer(texts, "wordpiece", 8000), path)
    ddp.barrier()
    return path


def _sample_texts(store: DocStore, limit: int = 20_000) -> list[str]:
    ids = store.ids()
    step = max(1, len(ids) // limit)
    return store.get_many(ids[::step][:limit])


def read_ahead(store: DocStore, num_workers: int) -> int:
    """Batches built ahead on a thread of the training process (``lading.loader``'s
    ``read_ahead``): 2 for a remote store read in this process, whose batches are the node
    cache's reads (~40 ms of CPU a batch of 256 pairs on 2 cores, benchmarks/remote_step.py)
    and then run beside the GPU step; else 0 (with workers, the loader warns: the groups say
    their store's ``remote_url``). The collator and the groups draw only from their own seeded
    generators, so the thread changes no draw."""
    from lading.stores.remote.store import RemoteStore

    return 2 if num_workers == 0 and isinstance(store, RemoteStore) else 0


def prepare(config: TrainConfig, world: World) -> tuple[DocStore, Any, CrossEncoder]:
    """Open (or build) the store, and make the tokenizer and the model."""
    out = Path(config.out)
    if config.corpus is None and config.store is None:
        raise ValueError("pass --store (a built store) or --corpus (a file to build one from)")
    if config.columns and config.corpus is None:
        raise ValueError(
            "--columns names the columns of a TSV --corpus; a --store keeps the ones it was "
            "built with: leave --columns out"
        )
    if config.prefix_fields and config.corpus is None:
        raise ValueError(
            "--prefix-fields says what a --corpus's build puts before each text; a --store "
            "keeps the texts it was built with: leave --prefix-fields out, or rebuild the store"
        )
    if config.columns and config.corpus is not None:
        from lading.sources import detect_format

        fmt = detect_format(config.corpus)
        if fmt != "tsv":
            raise ValueError(
                f"--columns names the columns of a TSV --corpus; {config.corpus} is {fmt}, "
                "whose records name their own id and text: leave --columns out"
            )
    tokenizer: Any = config.tokenizer
    if config.model != "tiny" and tokenizer is None:
        tokenizer = config.model  # a local HF model folder holds tokenizer.json
    if config.corpus is not None:
        parse = ParseOptions(
            columns=config.columns or ("id", "text"), prefix_fields=config.prefix_fields
        )
        if tokenizer is None:  # tiny: learn a vocabulary from the corpus head, offline
            from lading.sources import read_records

            head = itertools.islice(read_records(config.corpus, parse=parse), 20_000)
            texts = [r.text for r in head] if world.rank == 0 else []
            tokenizer = _tiny_tokenizer(texts, out / "tokenizer" / "tokenizer.json", world)
        store: DocStore = build_store(
            config.corpus,
            out / "store",
            tokenizer=tokenizer,
            max_length=config.max_length,
            parse=parse,
            progress=False,
        )
    else:
        assert config.store is not None
        store = open_store(config.store)
        if tokenizer is None:
            if store.has_tokens:
                tokenizer = store.tokenizer()  # (a remote store's was read at its open)
            else:
                tokenizer = _tiny_tokenizer(
                    _sample_texts(store) if world.rank == 0 else [],
                    out / "tokenizer" / "tokenizer.json",
                    world,
                )
    from lading.stores.tokens import load_tokenizer

    tok = load_tokenizer(tokenizer)
    # the same initial weights on every rank and in every run of one seed: the tiny model's,
    # and the classifier head drawn new over a pretrained backbone (with any weight the
    # folder lacks), as the HF Trainer seeds before it makes a model
    torch.manual_seed(config.seed)
    if config.model == "tiny":
        model = CrossEncoder.from_config(
            tiny_bert_config(tok.get_vocab_size(), max(512, config.max_length))
        )
    else:
        model = CrossEncoder.from_pretrained(config.model)
        check_positions(model, config.max_length, config.model)
    return store, tok, model


def groups_from_files(
    store: DocStore, queries: Path, qrels: Path, negatives: Path | None, settings: Any
) -> TrainingGroups:
    """Training groups from the queries, judgements and (optional) negatives files, with the
    :data:`GROUP_OPTIONS` that ``settings`` has, and the queries TSV's columns where it has
    ``query_columns``; pairs whose document the store lacks are skipped (said in one line),
    a store of under 5% of the judged pairs refused, and under the run policies so is a run
    that gives no query a negative (:class:`TrainingGroups`)."""
    return read_group_files(queries, qrels, negatives, settings)(store)


def read_group_files(
    queries: Path, qrels: Path, negatives: Path | None, settings: Any
) -> Callable[[DocStore], TrainingGroups]:
    """:func:`groups_from_files` in two steps: the files are read (and a malformed line
    refused) now, the groups made of them over a store later. Training reads them before it
    builds or opens its store: a bad queries line was refused only after a store build of
    minutes to hours."""
    options = {k: getattr(settings, k) for k in GROUP_OPTIONS if hasattr(settings, k)}
    columns = getattr(settings, "query_columns", None) or QUERY_COLUMNS
    negative_run = read_run(negatives) if negatives else None
    read, judged = read_queries(queries, columns=columns), read_qrels(qrels)
    sources = {"queries": str(queries), "qrels": str(qrels)}
    if negatives:
        sources["negatives"] = str(negatives)

    def groups(store: DocStore) -> TrainingGroups:
        return TrainingGroups(
            store, read, judged, negative_run, on_missing="skip", sources=sources, **options
        )

    return groups


def _linear_schedule(total: int, warmup: float) -> Any:
    warm = max(1, int(total * warmup))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total - step) / max(1, total - warm))

    return factor


class CrossEncoderStep(TrainingTask):
    """A cross-encoder step: the batch to the device, forward (autocast), ranking loss.

    Without a network it only copies the batch to the device: the bench's loader mode, which
    times the data path alone. Narrow batches are widened on the device
    (:func:`lading.ir.layouts.expand`); rows batches are built there from ``resident``, the store's
    tokens on the device.
    """

    def __init__(
        self,
        net: nn.Module | None,
        device: torch.device,
        precision: str = "fp32",
        loss: str = "bce",
        resident: ResidentTokens | None = None,
    ) -> None:
        if precision not in PRECISION:
            raise ValueError(f"unknown precision {precision!r}; choose from {sorted(PRECISION)}")
        self.net, self.device, self.precision, self.loss = net, device, precision, loss
        self.resident = resident
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[
            precision
        ]

    def inputs(self, batch: dict[str, Any]) -> dict[str, Any]:
        """``batch`` on the device with the model's int64 inputs, however it came."""
        return model_inputs(batch, self.device, self.resident)

    def step(self, batch: dict[str, Any]) -> StepResult:
        moved = self.inputs(batch)
        inputs = {k: moved[k] for k in INPUTS}
        if self.net is None:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            return StepResult(None, int(inputs["input_ids"].shape[0]))
        labels = moved["labels"]
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.precision != "fp32"):
            logits = self.net(**inputs)
            loss = ranking_loss(logits.float(), labels, batch["group_size"], self.loss)
        return StepResult(loss, int(labels.shape[0]))

    def trace(self, batch: dict[str, Any]) -> dict[str, Any]:
        ids = batch["input_ids"] if "input_ids" in batch else batch[DOC_ROWS]
        return {"pairs": batch["pairs"], "input_sum": int(ids.to(torch.int64).sum())}


def data_settings(config: TrainConfig) -> dict[str, Any]:
    """What makes the training groups besides the files, by flag (a resume whose loader
    refuses the checkpoint's state names those that differ: :mod:`lading.train.state`)."""
    names = ("group_size", "sampling", "depth", "min_relevance", "seed")
    found: dict[str, Any] = {k: getattr(config, k) for k in names if hasattr(config, k)}
    for flag in ("negatives", "queries", "qrels", "store", "corpus"):  # by name: a copy of
        value = getattr(config, flag)  # the same files elsewhere resumes (the loader's check)
        found[flag] = None if value is None else Path(str(value)).name
    return found


def train(config: TrainConfig) -> dict[str, Any]:
    """Run training; return a summary (steps, final loss, epoch, world size) on every rank."""
    if config.precision not in PRECISION:
        raise ValueError(f"unknown precision {config.precision!r}; choose from {sorted(PRECISION)}")
    return ddp.run(config, functools.partial(_train, config))


def _train(config: TrainConfig, world: World, device: torch.device, out: Path) -> dict[str, Any]:
    if config.precision == "fp16" and device.type != "cuda":  # (before any file is read)
        raise ValueError(
            f"--precision fp16 on {device}: its loss scaling (a GradScaler) runs on CUDA only, "
            "and unscaled fp16 gradients underflow; use --precision bf16 (autocast's type on "
            "the CPU) or fp32 here, fp16 where a GPU is"
        )
    groups_of = read_group_files(config.queries, config.qrels, config.negatives, config)
    store, tok, model = prepare(config, world)  # (a store built from --corpus: after the files)
    groups = groups_of(store)
    narrow = device.type == "cuda" if config.narrow is None else config.narrow
    collate = CrossEncoderCollator(
        store,
        tok,
        config.max_length,
        config.max_query_length,
        use_tokens=config.use_tokens,
        emit="narrow" if narrow else "wide",
    )
    pin = device.type == "cuda" if config.pin_memory is None else config.pin_memory
    data = loader(
        groups,
        config.batch_size,
        collate,
        num_workers=config.num_workers,
        pin_memory=pin,
        shuffle=True,
        seed=config.seed,
        world=world,
        read_ahead=read_ahead(store, config.num_workers),
    )
    total = config.steps if config.steps is not None else len(data) * config.epochs
    model.to(device)
    net = ddp.wrap(model, config.parallel, device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    scaler = torch.amp.GradScaler(
        "cuda", enabled=config.precision == "fp16" and device.type == "cuda"
    )
    result = Trainer(
        CrossEncoderStep(net, device, config.precision, config.loss),
        data,
        LoopConfig.of(
            config, total, desc="train cross-encoder", data_settings=data_settings(config)
        ),
        world,
        device,
        model,
        optimizer,
        torch.optim.lr_scheduler.LambdaLR(optimizer, _linear_schedule(total, config.warmup)),
        scaler,
    ).run()
    summary = {
        "steps": result.steps,
        "last_loss": result.last_loss,
        "epoch": result.epoch,
        "world_size": world.world_size,
        "resumed": result.resumed,
        "config": jsonable(asdict(config)),
    }
    if world.rank == 0:
        model.save(
            out / "model",
            {
                "max_length": config.max_length,
                "max_query_length": config.max_query_length,
                "use_tokens": collate.use_tokens,  # lading rerank's default with this model
            },
        )
        tok.save(str(out / "model" / "tokenizer.json"))
    write_summary(out, summary, world)
    return summary
