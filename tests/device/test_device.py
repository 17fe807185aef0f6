"""The device layer: prefetcher (order, states, resume with batches in flight), narrow batches
widened on the device, GPU-resident gathers. Run on CPU tensors; the CUDA variants skip
without a GPU."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import lading
from conftest import word_corpus
from lading.device import DevicePrefetcher, batch_bytes, to_device
from lading.device.prefetch import map_tensors, tensors
from lading.ir.layouts import assemble, expand, layout, model_inputs
from lading.lm import LanguageModelLoader, Streams, TokenCorpus
from lading.lm.resident import ResidentLanguageModelLoader, ResidentStream
from lading.lm.stream import EpochStream
from lading.world import World

pytest.importorskip("tokenizers")
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="CUDA is not available on this machine")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


# ---------------------------------------------------------------------------- loaders under test


def rows_collate(items: list[int]) -> dict[str, Any]:
    ids = torch.tensor(items, dtype=torch.int64)
    return {"ids": ids, "x": ids[:, None] * torch.ones(3, dtype=torch.int64), "n": len(items)}


def map_loader(num_workers: int = 0) -> Any:
    return lading.loader(
        list(range(53)), 4, rows_collate, num_workers=num_workers, seed=3, world=World(0, 1)
    )


@pytest.fixture
def corpus(tmp_path: Path) -> TokenCorpus:
    """29 documents of 2..30 words over 300 words (ids 2..301)."""
    return word_corpus(tmp_path, docs=29, lengths=(2, 30), words=300, seed=5)


def lm_loader(corpus: TokenCorpus, chunk_batches: int = 128) -> LanguageModelLoader:
    sequence = Streams(5, chunk_batches=chunk_batches)
    return LanguageModelLoader(corpus, 3, sequence, seed=2, world=World(0, 1))


def plain(batch: Any) -> list[Any]:
    """A batch as comparable values (tensors to CPU lists, others as they are)."""
    if isinstance(batch, dict):
        return [(k, plain(v)) for k, v in sorted(batch.items())]
    if isinstance(batch, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in batch):
        return [plain(v) for v in batch]
    if isinstance(batch, torch.Tensor):
        return [str(batch.dtype), batch.cpu().tolist()]
    return batch


def run(loader: Any, steps: int | None = None) -> list[Any]:
    out: list[Any] = []
    if steps == 0:
        return out  # iterating would start the next epoch of a loader read to its end
    for batch in loader:
        out.append(plain(batch))
        if steps is not None and len(out) == steps:
            break
    return out


# ---------------------------------------------------------------------------- prefetcher


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("depth", [None, 0, 1, 2, 5])
def test_prefetcher_yields_the_loaders_batches_in_order(device: str, depth: int | None) -> None:
    want = run(map_loader())
    pre = DevicePrefetcher(map_loader(), device, depth)
    assert len(pre) == len(want) == 14
    got = [plain(b) for b in pre]
    assert got == want
    for batch in DevicePrefetcher(map_loader(), device, depth):
        assert all(t.device.type == device for t in tensors(batch))


@pytest.mark.parametrize("depth", [0, 1, 2])
@pytest.mark.parametrize("move", ["iter", "set_epoch", "load_state_dict"])
@pytest.mark.parametrize("at", ["first", "last"])
def test_a_prefetched_pass_read_on_after_a_move_says_so(depth: int, move: str, at: str) -> None:
    """As a loader's own pass: read on after a move (a second ``iter()``, ``set_epoch``, a
    loaded state) a prefetched pass raises PassEndedError where batches were left, and ends
    where the caller held its last batch. It ended without a word after its first batch (a
    review of this change: 1 of 10 batches, in all three moves)."""
    from lading.errors import PassEndedError

    pre = DevicePrefetcher(lading.loader(list(range(40)), 4, collate_fn=list), "cpu", depth)
    training = iter(pre)
    for _ in range(1 if at == "first" else len(pre)):
        next(training)
    if move == "iter":
        next(iter(pre))
    elif move == "set_epoch":
        pre.set_epoch(3)
    else:
        pre.load_state_dict(pre.state_dict())
    if at == "last":
        assert list(training) == []
        return
    with pytest.raises(PassEndedError, match="ended after its batch 1, batches left"):
        next(training)


@pytest.mark.parametrize("depth", [1, 2, 4])
@pytest.mark.parametrize("stop", [1, 5, 12, 14])
def test_state_counts_only_the_batches_handed_out(depth: int, stop: int) -> None:
    """With batches in flight, the state is the loader's after ``stop`` batches, and a fresh
    loader resumed from it yields exactly the rest of the epoch."""
    reference = map_loader()
    reference.set_epoch(1)
    whole = run(reference)
    want, want_rest = whole[:stop], whole[stop:]
    head = map_loader()
    head.set_epoch(1)
    run(head, stop)
    want_state = head.state_dict()
    pre = DevicePrefetcher(map_loader(), "cpu", depth)
    pre.set_epoch(1)
    assert run(pre, stop) == want
    assert pre.state_dict() == want_state
    assert pre.remaining() == len(want_rest) and len(pre) == 14
    resumed = DevicePrefetcher(map_loader(), "cpu", depth)
    resumed.load_state_dict(pre.state_dict())
    assert run(resumed, resumed.remaining()) == want_rest
    assert pre.epoch == resumed.epoch == 1


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_every_pass_starts_an_epoch_as_the_loaders_own_does(depth: int) -> None:
    """A loop that breaks, a peek, or one that takes exactly ``len()`` batches (never seeing
    the end): the next pass reads the next epoch whole, as the loader itself and a DataLoader
    do; the batches in flight are dropped, and the state after the break counts what was
    handed out. ``depth=0`` once read 0 batches on the pass after one of ``len()`` batches."""
    epochs = []
    for epoch in range(4):
        made = map_loader()
        made.set_epoch(epoch)
        epochs.append(run(made))
    pre = DevicePrefetcher(map_loader(), "cpu", depth=depth)
    assert run(pre, 4) == epochs[0][:4]
    assert pre.state_dict()["batches"] == 4 and pre.state_dict()["epoch"] == 0
    assert len(pre) == len(epochs[1])  # the coming pass's
    next(iter(pre))  # a peek: epoch 1's first batch
    assert [plain(b) for b in itertools.islice(pre, len(pre))] == epochs[2]
    assert run(pre) == epochs[3]


def test_set_epoch_passes_through_and_drops_what_is_in_flight() -> None:
    reference = map_loader()
    reference.set_epoch(2)
    want = run(reference)
    pre = DevicePrefetcher(map_loader(), "cpu", depth=2)
    run(pre, 3)  # epoch 0, batches in flight
    pre.set_epoch(2)
    assert pre.epoch == 2 and run(pre) == want
    assert pre.num_workers == 0 and pre.workers is pre.loader.workers  # the rest is the loader's


def test_workers_loader_resumes_exactly_with_batches_in_flight() -> None:
    reference = map_loader(num_workers=2)
    want = run(reference)
    pre = DevicePrefetcher(map_loader(num_workers=2), "cpu", depth=2)
    head = run(pre, 6)
    state = pre.state_dict()
    assert state["batches"] == 6
    resumed = DevicePrefetcher(map_loader(num_workers=2), "cpu", depth=2)
    resumed.load_state_dict(state)
    assert head + run(resumed) == want


@pytest.mark.parametrize("depth", [0, 2])
def test_lm_tuples_pulled_ahead_stay_intact(corpus: TokenCorpus, depth: int) -> None:
    """The LM loader hands out views of a chunk of stream (a new one every batch with
    ``chunk_batches=1``); pulled ahead they must not change."""
    want = run(lm_loader(corpus, chunk_batches=1))
    pre = DevicePrefetcher(lm_loader(corpus, chunk_batches=1), "cpu", depth)
    head = run(pre, 4)
    resumed = DevicePrefetcher(lm_loader(corpus, chunk_batches=1), "cpu", depth)
    resumed.load_state_dict(pre.state_dict())
    assert head + run(resumed) == want


def test_len_is_the_epochs_while_batches_are_in_flight(corpus: TokenCorpus) -> None:
    """Read ahead to its epoch's end, the loader's len() is the next epoch's (jittered streams
    differ epoch to epoch): the prefetcher's stays the epoch's being handed out."""
    plain = LanguageModelLoader(corpus, 3, Streams(5), seed=1)
    counts = [len(plain) for _ in plain]
    ahead = DevicePrefetcher(LanguageModelLoader(corpus, 3, Streams(5), seed=1), "cpu", depth=2)
    assert [len(ahead) for _ in ahead] == counts
    assert len(ahead) == len(plain)  # between epochs: the next one's, as the loader's


def test_a_mapping_batch_keeps_its_type_and_its_tensors_are_walked() -> None:
    """A transformers BatchEncoding (a Mapping, not a dict) was passed over whole: on CUDA its
    tensors stayed on the CPU, here its promised clone was skipped."""
    from collections import OrderedDict, UserDict

    class Encoding(UserDict):  # type: ignore[type-arg]  # (BatchEncoding is a UserDict)
        pass

    for kind in (Encoding, OrderedDict):
        batch = kind(input_ids=torch.arange(4), labels=[torch.ones(2)])
        moved = map_tensors(batch, lambda t: t.to("meta"))
        assert type(moved) is kind
        assert moved["input_ids"].device.type == "meta" == moved["labels"][0].device.type
        assert len(tensors(batch)) == 2


def test_resident_tokens_of_another_corpus_are_refused(corpus: TokenCorpus, tmp_path: Path) -> None:
    """The training corpus's tokens given to a validation loader were gathered (clamped) as
    the validation corpus's: every batch another corpus's tokens."""
    other = word_corpus(tmp_path / "other", docs=11, lengths=(2, 9), words=50, seed=7)
    with pytest.raises(ValueError, match="resident= holds the tokens of another corpus"):
        LanguageModelLoader(other, 3, Streams(5), resident=to_device(corpus, "cpu"))
    mine = LanguageModelLoader(corpus, 3, Streams(5), resident=to_device(corpus, "cpu"), seed=1)
    expected = len(mine)
    assert len(list(mine)) == expected


def test_pin_memory_with_device_is_refused(corpus: TokenCorpus) -> None:
    """Batches built on the device cannot be pinned (torch refuses at the first batch on
    CUDA): refused when the loader is made, naming what to leave out."""
    with pytest.raises(ValueError, match="leave pin_memory out"):
        LanguageModelLoader(corpus, 3, Streams(5), device="cpu", pin_memory=True)


def test_bad_depth_is_refused() -> None:
    with pytest.raises(ValueError, match="depth must be >= 0"):
        DevicePrefetcher(map_loader(), "cpu", -1)


def test_import_lading_stays_torch_free_and_the_prefetcher_is_exported() -> None:
    code = (
        "import sys, lading; assert 'torch' not in sys.modules; "
        "P = lading.DevicePrefetcher; assert 'torch' in sys.modules; print(P.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "DevicePrefetcher"


# ---------------------------------------------------------------------------- narrow batches


@pytest.fixture(scope="module")
def ir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A synthetic passage collection, a WordPiece tokenizer, stores with and without tokens."""
    from lading.bench.synth import synth
    from lading.ir import TrainingGroups, read_qrels, read_queries
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    tmp = tmp_path_factory.mktemp("device-ir")
    files = synth("passages", 400, tmp / "synth", queries=20)
    texts = [line.split("\t", 1)[1] for line in files.corpus.read_text().splitlines()]
    tok = save_tokenizer(train_tokenizer(texts, "wordpiece", 2000), tmp / "tok.json")
    tokens = lading.build_store(files.corpus, tmp / "tokens", tokenizer=tok, progress=False)
    text = lading.build_store(files.corpus, tmp / "text", progress=False)
    out: dict[str, Any] = {"tok": tok, "tokens": tokens, "text": text}
    for kind in ("tokens", "text"):
        out[f"{kind}_groups"] = TrainingGroups(
            out[kind],
            read_queries(files.queries),
            read_qrels(files.qrels),
            None,
            group_size=8,
            sampling="random",
            on_missing="skip",
        )
    return out


def collated(ir: dict[str, Any], kind: str, emit: str, max_length: int) -> dict[str, Any]:
    from lading.ir import CrossEncoderCollator

    groups = ir[f"{kind}_groups"]
    collate = CrossEncoderCollator(
        ir[kind], ir["tok"], max_length, min(64, max_length // 3), emit=emit
    )
    return collate([groups[i] for i in range(min(len(groups), 12))])


def assert_same_inputs(got: dict[str, Any], want: dict[str, Any]) -> None:
    for key in ("input_ids", "attention_mask", "token_type_ids", "labels"):
        assert got[key].dtype == want[key].dtype, key
        assert torch.equal(got[key].cpu(), want[key]), key
    assert got["group_size"] == want["group_size"] and got["pairs"] == want["pairs"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("max_length", [24, 64, 512])
@pytest.mark.parametrize("kind", ["tokens", "text"])
def test_narrow_expanded_equals_todays_batch(
    ir: dict[str, Any], kind: str, max_length: int, device: str
) -> None:
    wide = collated(ir, kind, "wide", max_length)
    narrow = collated(ir, kind, "narrow", max_length)
    assert narrow["input_ids"].dtype == torch.uint16  # the store's dtype (vocab 2,000)
    assert "attention_mask" not in narrow and "token_type_ids" not in narrow
    assert_same_inputs(expand(narrow, device), wide)
    assert_same_inputs(expand(wide, device), wide)  # a wide batch is only moved
    assert batch_bytes(narrow) * 4 <= batch_bytes(wide)


def test_bytes_per_step_of_a_32x8x512_batch() -> None:
    """The issue's shape: int64 ids + mask + types against uint16 ids + two int32 per row."""
    rows, width = 32 * 8, 512
    wide = {k: torch.zeros(rows, width, dtype=torch.int64) for k in ("a", "b", "c")}
    narrow = {
        "input_ids": torch.zeros(rows, width, dtype=torch.uint16),
        "lengths": torch.zeros(rows, dtype=torch.int32),
        "segment_starts": torch.zeros(rows, dtype=torch.int32),
    }
    assert batch_bytes(wide) == 3 * 2**20
    assert batch_bytes(narrow) / batch_bytes(wide) < 1 / 11


def test_unknown_emit_and_rows_without_tokens_are_refused(ir: dict[str, Any]) -> None:
    from lading.ir import CrossEncoderCollator

    with pytest.raises(ValueError, match="unknown emit"):
        CrossEncoderCollator(ir["tokens"], ir["tok"], emit="thin")
    with pytest.raises(ValueError, match="needs a store with tokens"):
        CrossEncoderCollator(ir["text"], ir["tok"], emit="rows")


# ---------------------------------------------------------------------------- GPU-resident


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("max_length", [24, 64, 512])
def test_resident_store_gather_equals_the_host_batch(
    ir: dict[str, Any], max_length: int, device: str
) -> None:
    resident = to_device(ir["tokens"], device)
    tokens, offsets = ir["tokens"].token_arrays()
    assert resident.nbytes == tokens.nbytes + offsets.nbytes
    rows = collated(ir, "tokens", "rows", max_length)
    wide = collated(ir, "tokens", "wide", max_length)
    assert batch_bytes(rows) * 20 < batch_bytes(wide)  # a few integers per row cross the bus
    assert_same_inputs(assemble(rows, resident), wide)


def test_a_rows_batch_assembled_on_another_stores_tokens_is_refused(
    ir: dict[str, Any], tmp_path: Path
) -> None:
    """``assemble`` took any resident tokens: a store of the same ids in another row order
    gave a batch of other documents without a word (a smaller store, an IndexError). A rows
    batch carries its store's content id now; tokens of another store are refused."""
    corpus = tmp_path / "reversed.tsv"
    store = ir["tokens"]
    texts = store.texts_range(0, len(store))
    corpus.write_text("".join(f"{i}\t{t}\n" for i, t in reversed(list(zip(store.ids(), texts)))))
    other = lading.build_store(corpus, tmp_path / "rev", tokenizer=ir["tok"], progress=False)
    rows = collated(ir, "tokens", "rows", 64)
    with pytest.raises(ValueError, match=r"another store's rows.*to_device\(the collator's"):
        assemble(rows, to_device(other, "cpu"))
    assert_same_inputs(assemble(rows, to_device(ir["tokens"], "cpu")), collated(ir, "tokens",
                       "wide", 64))  # fmt: skip


def test_one_dispatcher_takes_every_layout_to_the_model_inputs(ir: dict[str, Any]) -> None:
    """``model_inputs`` (what the training step calls) gives the wide batch from each layout,
    and a rows batch without the resident tokens is refused, naming the fix."""
    wide = collated(ir, "tokens", "wide", 64)
    resident = to_device(ir["tokens"], "cpu")
    for emit in ("wide", "narrow", "rows"):
        batch = collated(ir, "tokens", emit, 64)
        assert layout(batch) == emit
        assert_same_inputs(model_inputs(batch, "cpu", resident), wide)
    rows = collated(ir, "tokens", "rows", 64)
    with pytest.raises(ValueError, match=r"resident=lading\.device\.to_device"):
        model_inputs(rows, "cpu")
    with pytest.raises(ValueError, match="assemble"):
        expand(rows, "cpu")


def test_resident_gather_of_unsigned_ids_above_the_signed_range() -> None:
    class Ragged:
        tokens = np.array([65535, 40000, 7, 32768, 1], dtype=np.uint16)
        offsets = np.array([0, 2, 5], dtype=np.uint64)

    resident = to_device(Ragged(), "cpu")
    assert resident.take(torch.arange(5)).tolist() == [65535, 40000, 7, 32768, 1]
    wide = Ragged()
    wide.tokens = np.array([2**32 - 1, 5], dtype=np.uint32)
    wide.offsets = np.array([0, 2], dtype=np.uint64)
    assert to_device(wide, "cpu").take(torch.arange(2)).tolist() == [2**32 - 1, 5]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backwards", [False, True])
def test_resident_stream_reads_what_the_host_stream_reads(
    corpus: TokenCorpus, backwards: bool, device: str, rng: Any
) -> None:
    docs = np.arange(len(corpus), dtype=np.int64)
    host = EpochStream(corpus, docs, seed=4, epoch=1, shuffle=True, backwards=backwards)
    on_device = ResidentStream(
        to_device(corpus, device), host.doc_start, host.lengths, backwards=backwards
    )
    starts = [rng.randrange(3 * host.total) for _ in range(20)] + [0, host.total - 1]
    for n in (1, 7, host.total + 5):  # longer than the stream: wraps around
        got = on_device.read(starts, n)
        for row, start in enumerate(starts):
            want = np.zeros(n, dtype=np.int64)
            host.read(start, want)
            assert got[row].cpu().tolist() == want.tolist(), (start, n)


@pytest.mark.parametrize("device", DEVICES)
def test_resident_lm_loader_keeps_continuity_and_resumes_exactly(
    corpus: TokenCorpus, device: str
) -> None:
    host = lm_loader(corpus)
    want = [run(host) for host_epoch in range(2) if host.set_epoch(host_epoch) is None]
    resident = LanguageModelLoader(corpus, 3, Streams(5), seed=2, world=World(0, 1), device=device)
    got = [run(resident) for epoch in range(2) if resident.set_epoch(epoch) is None]
    assert got == want  # the same batches: streams continue from batch to batch as on the host
    # a host state resumes on the device and a device state on the host
    host.set_epoch(1)
    head = run(host, 3)
    moved = LanguageModelLoader(corpus, 3, Streams(5), seed=2, world=World(0, 1), device=device)
    moved.load_state_dict(host.state_dict())
    rest = run(moved)
    assert head + rest == want[1]
    back = lm_loader(corpus)
    moved.load_state_dict(host.state_dict())
    assert run(moved, 2) == want[1][3:5]
    back.load_state_dict(moved.state_dict())
    assert run(back) == want[1][5:]
    with pytest.raises(ValueError, match=r"device= builds batches on the device in this process"):
        LanguageModelLoader(corpus, 3, Streams(5), device=device, num_workers=2)
    with pytest.raises(TypeError, match=r"is now LanguageModelLoader\(corpus, batch_size, seq"):
        ResidentLanguageModelLoader(corpus, 3, Streams(5), device=device)


class CountingLoader:
    """A loader without a cursor: its state is only what ``state_dict`` says."""

    def __init__(self, n: int) -> None:
        self.n, self.i, self.epoch = n, 0, 0

    def __iter__(self) -> Any:
        while self.i < self.n:
            self.i += 1
            yield {"i": torch.tensor([self.i])}

    def __len__(self) -> int:
        return self.n - self.i

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.i = epoch, 0

    def state_dict(self) -> dict[str, Any]:
        return {"i": self.i}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.i = state["i"]


def test_a_loader_without_a_cursor_is_snapshotted_whole() -> None:
    pre = DevicePrefetcher(CountingLoader(10), "cpu", depth=3)
    assert run(pre, 4) == [[("i", ["torch.int64", [k]])] for k in (1, 2, 3, 4)]
    assert pre.loader.i == 7 and pre.state_dict() == {"i": 4}
    assert pre.remaining() == 6  # its len() (what it has left) and the 3 in flight


@needs_cuda
def test_trainer_prefetches_on_cuda_and_checkpoints_what_it_stepped(tmp_path: Path) -> None:
    from lading.train import LoopConfig, StepResult, Trainer, TrainingTask

    seen: list[list[int]] = []

    class Step(TrainingTask):
        def step(self, batch: dict[str, Any]) -> StepResult:
            assert batch["ids"].device.type == "cuda"
            seen.append(batch["ids"].cpu().tolist())
            return StepResult(None, len(batch["ids"]))

    model = torch.nn.Linear(1, 1).cuda()
    config = LoopConfig(5, out=tmp_path, checkpoint_every=5, progress=False, memory=False)
    trainer = Trainer(Step(), map_loader(), config, World(0, 1), torch.device("cuda"), model)
    assert isinstance(trainer.loader, DevicePrefetcher)
    trainer.run()
    reference = map_loader()
    reference.set_epoch(0)
    want = run(reference, 5)
    assert seen == [dict(b)["ids"][1] for b in want]
    assert trainer.loader.state_dict() == reference.state_dict()


@pytest.mark.parametrize(
    ("kind", "required"),
    [
        ("cross-encoder", ["--out", "o", "--queries", "q", "--qrels", "r"]),
        ("lm", ["--corpus", "c", "--out", "o"]),
        ("sessions", ["--data", "d", "--out", "o"]),
    ],
)
def test_no_prefetch_flag_reaches_the_loop_config(
    kind: str, required: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lading.cli import build_parser
    from lading.train import LoopConfig

    monkeypatch.chdir(tmp_path)
    for name in ("q", "r", "c", "d"):  # inputs are checked to exist when the line is read
        (tmp_path / name).write_text("")
    parser = build_parser()
    on = parser.parse_args(["train", kind, *required])
    off = parser.parse_args(["train", kind, *required, "--no-prefetch"])
    assert on.prefetch is True and off.prefetch is False
    assert LoopConfig.of(off, 1).prefetch is False and LoopConfig.of(on, 1).prefetch is True


def test_resident_lm_loader_reads_each_epoch_in_its_own_order(corpus: TokenCorpus) -> None:
    # The device stream was cached under id(segment): after set_epoch the old segment is freed
    # and the new one may get its address, so an epoch was read in the previous epoch's order.
    host = LanguageModelLoader(corpus, 2, Streams(4), seed=7, world=World(0, 2))
    resident = LanguageModelLoader(corpus, 2, Streams(4), seed=7, world=World(0, 2), device="cpu")
    wrong = []
    for epoch in range(60):
        host.set_epoch(epoch)
        resident.set_epoch(epoch)
        if run(resident) != run(host):
            wrong.append(epoch)
    assert wrong == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where CUDA is absent")
def test_prefetcher_without_cuda_names_the_fix() -> None:
    from lading.errors import DeviceUnavailableError

    with pytest.raises(DeviceUnavailableError, match=r"'cuda'.*CUDA is not available.*'cpu'"):
        DevicePrefetcher([1, 2], "cuda")
    assert list(DevicePrefetcher([1, 2], "cpu")) == [1, 2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where CUDA is absent")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_every_device_entry_without_cuda_names_the_fix(corpus: TokenCorpus, device: str) -> None:
    """A loader's ``device=``, ``to_device`` and ``expand`` raised torch's bare
    ``AssertionError: Torch not compiled with CUDA enabled`` on a CPU build, where the
    prefetcher's refusal names the build and ``device='cpu'``; now each raises that."""
    from lading.errors import DeviceUnavailableError

    refusal = r"CUDA is not available.*device='cpu'"
    with pytest.raises(DeviceUnavailableError, match=refusal):
        LanguageModelLoader(corpus, 2, Streams(8), world=World(), device=device)
    with pytest.raises(DeviceUnavailableError, match=refusal):
        to_device(corpus, device)
    narrow = {"input_ids": torch.ones(2, 4, dtype=torch.int16), "lengths": torch.tensor([4, 3]),
              "segment_starts": torch.tensor([2, 2])}  # fmt: skip
    with pytest.raises(DeviceUnavailableError, match=refusal):
        expand(narrow, device)


@pytest.mark.parametrize("depth", [None, 0, 2])
def test_an_iterable_without_a_len_is_passed_through(depth: int | None) -> None:
    """The docstring takes "any iterable of batches"; one without ``len()`` (a DataLoader
    over an IterableDataset) raised ``TypeError: ... has no len()`` at its first batch."""

    class Stream(torch.utils.data.IterableDataset[int]):
        def __iter__(self) -> Any:
            return iter(range(10))

    loader = torch.utils.data.DataLoader(Stream(), batch_size=2)
    got = [b.tolist() for b in DevicePrefetcher(loader, "cpu", depth=depth)]
    assert got == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]


def test_the_prefetcher_is_a_context_manager_closing_its_loader(corpus: TokenCorpus) -> None:
    """``with DevicePrefetcher(loader, ...)``: ``close`` passed through, but ``with`` looks
    ``__enter__`` up on the class and raised "does not support the context manager protocol"."""
    closed: list[bool] = []
    loader = LanguageModelLoader(corpus, 2, Streams(8), seed=1)
    loader.close = lambda: closed.append(True)  # type: ignore[method-assign]
    with DevicePrefetcher(loader, "cpu", depth=1) as pre:
        assert next(iter(pre))[0].shape == (2, 8)
    assert closed == [True]


def test_a_strided_view_is_pinned_as_its_own_bytes_not_its_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream batch is a view of the loader's chunk (rows ``stride`` tokens apart): pinning
    the view pinned its whole span (3 MB for 18 KB of a 32 x 72 batch), and the copy to the
    device went through a pageable temporary anyway, the pinned view not being dense. CUDA's
    pinning is faked here (this machine may have no GPU): what is pinned is recorded."""
    from lading.device import prefetch

    pinned: list[tuple[int, bool]] = []

    def pin(t: torch.Tensor) -> torch.Tensor:
        pinned.append((t.untyped_storage().nbytes(), t.is_contiguous()))
        return t.clone()

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda t: False)
    chunk = torch.arange(32 * 12161, dtype=torch.int64).view(32, 12161)
    view = chunk[:, 100:172]
    out = prefetch.pinned(view)
    assert torch.equal(out, view) and out.is_contiguous()
    assert pinned == [(view.numel() * 8, True)]  # the batch's 18,432 bytes, dense


@pytest.mark.parametrize("depth", [None, 0, 2])
def test_batches_arrive_on_a_device_other_than_cuda(depth: int | None) -> None:
    """Batches "arrive already on ``device``": every device but CUDA (``mps``, ``xpu``; here
    ``meta``, which every torch has) was passed through as the CPU is, its batches left on the
    CPU. They are copied there (synchronously: no side stream), in order."""
    loader = lading.loader(list(range(6)), 2, rows_collate, shuffle=False)
    got = list(DevicePrefetcher(loader, "meta", depth=depth))
    assert len(got) == 3
    assert {t.device.type for b in got for t in (b["ids"], b["x"])} == {"meta"}
    assert [b["n"] for b in got] == [2, 2, 2]


@pytest.mark.parametrize("depth", [0, 2])
def test_a_pass_read_on_after_its_with_block_says_the_block_closed_it(depth: int) -> None:
    """A pass read on after ``with prefetcher:`` ended: with batches pulled ahead it said that
    close() moved it on and to finish one pass before starting another (a review's find);
    it names the block now, and without batches ahead the loader's own closed error says it."""
    from lading.errors import LoaderClosedError, PassEndedError

    pre = DevicePrefetcher(lading.loader(list(range(40)), 4, collate_fn=list), "cpu", depth)
    with pre:
        training = iter(pre)
        next(training)
        next(training)
    with pytest.raises((PassEndedError, LoaderClosedError)) as ended:
        next(training)
    said = str(ended.value)
    assert "the end of its with block closed it" in said or "nothing is read after close()" in said
    assert "one pass at a time" not in said, said
