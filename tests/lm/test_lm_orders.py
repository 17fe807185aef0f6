"""A local loader's windows find their order a run of batches at once: the Feistel network of
the shuffle evaluated over :data:`~lading.lm.modes.windows.ORDERS_RUN` batches' positions in
one numpy pass, not once a batch in Python integers (the block shuffle spent ~60 % of a
local build there: benchmarks/RESULTS.md, "Local token corpora: window orders a run at a
time"). Every batch stays the one its own order gives, in every window mode, on every rank,
the partial last batch and a resumed epoch included."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conftest import word_corpus
from lading.lm import LanguageModelLoader, Packed, TokenCorpus, Windows
from lading.lm.modes.windows import ORDERS_RUN, WindowsMode
from lading.world import World

pytest.importorskip("tokenizers")

MODES: dict[str, Any] = {
    "windows": lambda: Windows(6),
    "stored": lambda: Windows(6, shuffle_documents=False),
    "blocks": lambda: Windows(6, shuffle_documents=False, block_tokens=30, block_buffer=3),
    "packed": lambda: Packed(6),
    "backwards": lambda: Windows(6, backwards=True),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> TokenCorpus:
    return word_corpus(
        tmp_path_factory.mktemp("orders") / "c", docs=400, lengths=(2, 30), words=300, seed=5
    )


def _epochs(corpus: TokenCorpus, mode: str, rank: int, resume: bool = False) -> list[Any]:
    """Two epochs of rank ``rank`` of 2 (batches of 3, the partial one kept); ``resume``:
    the second epoch from a state saved after its 7th batch, by a new loader."""
    world = World(rank=rank, world_size=2)

    def loader() -> LanguageModelLoader:
        return LanguageModelLoader(corpus, 3, MODES[mode](), seed=4, world=world)

    ld, out = loader(), []
    for epoch in range(2):
        ld.set_epoch(epoch)
        for i, (x, y) in enumerate(ld):
            out.append((x.numpy().copy(), y.numpy().copy()))
            if resume and epoch == 1 and i == 6:
                state = ld.state_dict()
                ld = loader()
                ld.load_state_dict(state)
                out += [(x.numpy().copy(), y.numpy().copy()) for x, y in ld]
                break
    return out


@pytest.mark.parametrize("mode", list(MODES))
def test_the_orders_of_a_run_of_batches_are_each_batchs_own(
    corpus: TokenCorpus, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    per_batch = WindowsMode._order
    calls = {"alone": 0, "runs": 0}
    orders_of = WindowsMode.orders_of

    def counted(self: WindowsMode, *args: Any) -> Any:
        calls["runs"] += 1
        return orders_of(self, *args)

    def alone(self: WindowsMode, *args: Any) -> Any:
        calls["alone"] += 1
        return per_batch(self, *args)

    monkeypatch.setattr(WindowsMode, "orders_of", counted)
    monkeypatch.setattr(WindowsMode, "_order", alone)
    got = {r: _epochs(corpus, mode, r) for r in range(2)}
    resumed = _epochs(corpus, mode, 1, resume=True)
    batches = len(got[0]) // 2
    assert batches > ORDERS_RUN  # several runs an epoch
    # no batch's order alone; a run of ORDERS_RUN batches at a time: per rank and epoch
    # ceil(batches / ORDERS_RUN), the resumed loader one more before and one after its state
    assert calls["alone"] == 0
    assert 0 < calls["runs"] <= 6 * -(-batches // ORDERS_RUN) + 2

    def old(self: WindowsMode, seg: Any, key: Any, reading: Any) -> Any:
        return alone(self, seg, key, reading)

    monkeypatch.setattr(WindowsMode, "order", old)  # the old route: a batch at a time
    want = {r: _epochs(corpus, mode, r) for r in range(2)}
    assert calls["alone"] >= 2 * batches
    for r in range(2):
        assert len(got[r]) == len(want[r])
        for (gx, gy), (wx, wy) in zip(got[r], want[r]):
            np.testing.assert_array_equal(gx, wx)
            np.testing.assert_array_equal(gy, wy)
    assert len(resumed) == len(want[1])
    for (gx, gy), (wx, wy) in zip(resumed, want[1]):
        np.testing.assert_array_equal(gx, wx)
        np.testing.assert_array_equal(gy, wy)


def test_a_build_after_orders_were_dropped_finds_its_own(
    corpus: TokenCorpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With room for fewer orders than a run (the kept orders begun afresh at every run),
    every batch is still its own."""
    monkeypatch.setattr("lading.lm.modes.windows.ORDERS_KEPT", 5)
    small = _epochs(corpus, "blocks", 0)
    monkeypatch.undo()
    assert [x.tolist() for x, _ in small] == [x.tolist() for x, _ in _epochs(corpus, "blocks", 0)]
