"""A Ray Data pipeline writes a token corpus through ``LadingTokenDatasink``: the same tokens, in
the same document order, as a one-process ``TokenCorpus.build`` of the same texts, and exactly
once under failures: a task that raises commits nothing, a task killed mid-write with SIGKILL
and retried by Ray is taken once, a rerun after a failure holds every row once.

The first test drives the sink's two phases in this process (no Ray cluster: fast, in the
default run); the others start a local Ray cluster of real worker processes (slow set)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from ray_cluster import ray_cluster

from conftest import word_tokenizer, write
from lading.lm import TokenCorpus
from lading.lm.texts import Skips

ray = pytest.importorskip("ray")
pytest.importorskip("tokenizers")
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    with ray_cluster():
        yield


def texts(n: int, first: int = 0) -> list[str]:
    """Row ``i``'s text names ``i`` (``w<i>``, unknown to the tokenizer: one [UNK]) among words
    whose count and order vary with ``i``."""
    return [
        " ".join([WORDS[(i * 7 + k) % len(WORDS)] for k in range(i % 13 + 1)] + [f"w{i}"])
        for i in range(first, first + n)
    ]


def one_process(tmp_path: Path, data: list[str], tok: Path) -> TokenCorpus:
    src = write(
        tmp_path / "src.jsonl",
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(data)),
    )
    return TokenCorpus.build(src, tmp_path / "one", tok, progress=False)


def assert_same(corpus: TokenCorpus, one: TokenCorpus) -> None:
    """Bit for bit: the tokens, the offsets, the dtype and the end-of-text id."""
    tokens, offsets = corpus.token_arrays()
    want_tokens, want_offsets = one.token_arrays()
    assert tokens.dtype == want_tokens.dtype and corpus.eos_id == one.eos_id
    assert np.array_equal(offsets, want_offsets)
    assert np.array_equal(tokens, want_tokens)


def test_the_commit_takes_the_returned_shards_only(tmp_path: Path) -> None:
    """Two attempts of task 1 (the first "killed" after its rename, a whole orphan), a partial
    folder of a third: the commit takes the shard each return names, every row once."""
    import pyarrow as pa

    from lading.integrations.ray_tokens import LadingTokenDatasink

    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    data = texts(300)
    one = one_process(tmp_path, data, tok)
    sink = LadingTokenDatasink(tmp_path / "c", tok)
    sink.on_write_start()
    blocks = [pa.table({"text": data[:120]}), pa.table({"text": data[120:]})]
    ret0 = sink.write([blocks[0]], SimpleNamespace(task_idx=0))
    orphan = sink.write([blocks[1]], SimpleNamespace(task_idx=1))  # its return never arrives
    (tmp_path / "c" / sink.build_id / "task-00001-dead.tmp-999999-ab").mkdir()
    ret1 = sink.write([blocks[1]], SimpleNamespace(task_idx=1))
    sink.on_write_complete(SimpleNamespace(write_returns=[ret1, ret0]))
    corpus = TokenCorpus.open(tmp_path / "c")
    assert corpus.snapshot == sink.snapshot and len(corpus) == 300
    assert [p["dir"] for p in corpus.meta["parts"]] == [ret0["dir"], ret1["dir"]]
    assert_same(corpus, one)
    left = sorted(p.name for p in (tmp_path / "c" / sink.build_id).iterdir())
    assert orphan["dir"].split("/")[1] not in left and not any(".tmp-" in n for n in left)


def test_an_empty_dataset_commits_nothing_and_says_so(tmp_path: Path) -> None:
    from lading.errors import SourceError
    from lading.integrations.ray_tokens import LadingTokenDatasink

    sink = LadingTokenDatasink(tmp_path / "c", word_tokenizer(WORDS, tmp_path / "t.json"))
    sink.on_write_start()
    with pytest.raises(SourceError, match="had no rows; nothing committed"):
        sink.on_write_complete(SimpleNamespace(write_returns=[]))
    assert not (tmp_path / "c" / "meta.json").exists()


def test_a_sink_used_for_a_second_job_keeps_the_first_jobs_snapshot(tmp_path: Path) -> None:
    """One sink object written twice (a notebook cell run again): each job draws its own
    build, so a second job that fails leaves the first's snapshot current and whole (also one
    failing before its on_write_start: Ray 2.60 calls it at the first block written), and one
    that commits leaves the first's shards for readers still on it (the grace period)."""
    import pyarrow as pa

    from lading.integrations.ray_tokens import LadingTokenDatasink

    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    sink = LadingTokenDatasink(tmp_path / "c", tok)
    sink.on_write_start()
    ret = sink.write([pa.table({"text": texts(40)})], SimpleNamespace(task_idx=0))
    sink.on_write_complete(SimpleNamespace(write_returns=[ret]))
    first, first_build = TokenCorpus.open(tmp_path / "c"), sink.build_id
    want = first.token_arrays()[0].copy()
    sink.on_write_failed(RuntimeError("upstream"))  # a job that failed before on_write_start
    kept = TokenCorpus.open(tmp_path / "c")  # (Ray 2.60 calls it at the first block written)
    assert kept.snapshot == first.snapshot and np.array_equal(kept.token_arrays()[0], want)
    sink.on_write_start()  # a second job that fails after its task wrote
    assert sink.build_id != first_build
    sink.write([pa.table({"text": texts(10)})], SimpleNamespace(task_idx=0))
    sink.on_write_failed(RuntimeError("a task raised"))
    kept = TokenCorpus.open(tmp_path / "c")
    assert kept.snapshot == first.snapshot and np.array_equal(kept.token_arrays()[0], want)
    sink.on_write_start()  # a third job that commits
    ret = sink.write([pa.table({"text": texts(20)})], SimpleNamespace(task_idx=0))
    sink.on_write_complete(SimpleNamespace(write_returns=[ret]))
    assert len(TokenCorpus.open(tmp_path / "c")) == 20
    assert (tmp_path / "c" / first_build).is_dir()  # the first snapshot's shards stay
    assert np.array_equal(first.token_arrays()[0], want)  # its reader reads on


@pytest.mark.slow
def test_a_ray_pipeline_writes_the_corpus_a_one_process_build_writes(
    tmp_path: Path, local_ray: None
) -> None:
    from lading.integrations.ray_tokens import LadingTokenDatasink

    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    data = texts(3000)
    one = one_process(tmp_path, data, tok)
    sink = LadingTokenDatasink(tmp_path / "c", tok)
    ray.data.from_items([{"text": t, "n": i} for i, t in enumerate(data)]).repartition(
        4
    ).write_datasink(sink)
    corpus = TokenCorpus.open(tmp_path / "c")
    assert corpus.snapshot == sink.snapshot and len(corpus.meta["parts"]) == 4
    assert_same(corpus, one)
    assert corpus.tokenizer().to_str() == one.tokenizer().to_str()


@pytest.mark.slow
def test_bad_text_raises_naming_task_and_row_and_commits_nothing_then_a_rerun_holds_every_row_once(
    tmp_path: Path, local_ray: None
) -> None:
    from lading.integrations.ray_tokens import LadingTokenDatasink

    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    dest = tmp_path / "c"
    first = LadingTokenDatasink(dest, tok)
    ray.data.from_items([{"text": t} for t in texts(50)]).write_datasink(first)
    rows: list[dict[str, Any]] = [{"text": t} for t in texts(400)]
    rows[250]["text"] = None  # task 2's 51st record (4 tasks of 100)
    failing = LadingTokenDatasink(dest, tok)
    # numbered from 1, as the store sink (and every file source) numbers its records; once
    # (it said "line 51 of ray write task 2: record 51: ...")
    with pytest.raises(Exception, match=r"ray write task 2, row 51: 'text' is NoneType"):
        ray.data.from_items(rows).repartition(4).write_datasink(failing)
    kept = TokenCorpus.open(dest)
    assert kept.snapshot == first.snapshot and len(kept) == 50  # the old snapshot, untouched
    assert failing.build_id not in json.dumps(kept.meta)  # nothing of the failed job taken
    skipping = LadingTokenDatasink(dest, tok, on_error="skip")
    ray.data.from_items(rows).repartition(4).write_datasink(skipping)
    skipped = TokenCorpus.open(dest)
    assert len(skipped) == 399 and skipped.meta["skipped"] == 1
    assert skipped.meta["skip_examples"] == [  # (was []: a file build names its lines)
        "ray write task 2, row 51: 'text' is NoneType None, not a string"
    ]
    rerun = LadingTokenDatasink(dest, tok)  # the job again, the row fixed
    rows[250]["text"] = texts(1, first=250)[0]
    ray.data.from_items(rows).repartition(4).write_datasink(rerun)
    assert_same(TokenCorpus.open(dest), one_process(tmp_path, texts(400), tok))


@pytest.mark.slow
@pytest.mark.parametrize("when", ["mid-write", "after-rename"])
def test_a_task_killed_and_retried_by_ray_is_taken_once(
    tmp_path: Path, local_ray: None, when: str
) -> None:
    """The worker of task 1 kills itself with SIGKILL (first attempt only: a marker file),
    after 1,500 of its 2,000 texts were read (a batch of 1,000 tokenized and on disk) or after
    its whole shard was renamed into place; Ray retries the task."""
    from lading.integrations.ray_tokens import LadingTokenDatasink

    marker = tmp_path / "killed"

    def die() -> None:
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)

    class Dying(LadingTokenDatasink):
        def texts(self, blocks: Any, task: int, skipped: Skips) -> Iterator[str]:
            for i, text in enumerate(LadingTokenDatasink.texts(self, blocks, task, skipped)):
                if when == "mid-write" and task == 1 and i == 1500 and not marker.exists():
                    die()
                yield text

        def _write_local(self, root: Path, rel: str, blocks: Any, task: int) -> dict[str, Any]:
            wrote = LadingTokenDatasink._write_local(self, root, rel, blocks, task)
            if when == "after-rename" and task == 1 and not marker.exists():
                die()
            return wrote

    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    data = texts(4000)
    sink = Dying(tmp_path / "c", tok)
    ds = ray.data.from_items([{"text": t} for t in data]).repartition(2)
    ds.write_datasink(sink, ray_remote_args={"max_retries": 2})
    assert marker.exists(), "the first attempt of task 1 was not killed"
    corpus = TokenCorpus.open(tmp_path / "c")
    assert len(corpus.meta["parts"]) == 2
    assert_same(corpus, one_process(tmp_path, data, tok))
    left = {p.name for p in (tmp_path / "c" / sink.build_id).iterdir() if p.is_dir()}
    assert left == {p["dir"].split("/")[1] for p in corpus.meta["parts"]}


KILLED_DRIVER = """
import os, sys, ray
from lading.integrations.ray_tokens import LadingTokenDatasink

class KillsTheDriver(LadingTokenDatasink):  # task 1 kills the job's driver once its shard is whole
    def write(self, blocks, ctx):
        wrote = LadingTokenDatasink.write(self, blocks, ctx)
        if ctx.task_idx == 1:
            os.kill(self.driver, 9)
        return wrote

address, dest, tok, n = sys.argv[1:]
ray.init(address=address, log_to_driver=False)
ray.data.DataContext.get_current().execution_options.preserve_order = True
sink = KillsTheDriver(dest, tok)
sink.driver = os.getpid()
data = [{"text": t} for t in sys.stdin.read().split("\\n")]
ray.data.from_items(data).repartition(int(n)).write_datasink(sink)
"""


@pytest.mark.slow
def test_a_job_whose_driver_is_killed_commits_nothing_and_its_rerun_holds_every_row_once(
    tmp_path: Path, local_ray: None
) -> None:
    """A driver in its own process (joined to the local cluster) is SIGKILLed by task 1 once
    that task's shard is whole: nothing is committed; the job rerun commits every row once,
    none of the killed job's shards among them."""
    import subprocess
    import sys

    from lading.integrations.ray_tokens import LadingTokenDatasink

    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    data, dest = texts(1200), tmp_path / "c"
    address = ray.get_runtime_context().gcs_address
    script = write(tmp_path / "driver.py", KILLED_DRIVER)
    killed = subprocess.run(
        [sys.executable, str(script), address, str(dest), str(tok), "3"],
        input="\n".join(data), text=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (dest / "meta.json").exists()
    (left,) = dest.glob("build-*")  # the killed job's build: shards, never committed
    assert list(left.glob("task-00001-*/shard.json"))
    rerun = LadingTokenDatasink(dest, tok)
    ray.data.from_items([{"text": t} for t in data]).repartition(3).write_datasink(rerun)
    corpus = TokenCorpus.open(dest)
    assert left.name not in json.dumps(corpus.meta) and len(corpus.meta["parts"]) == 3
    assert_same(corpus, one_process(tmp_path, data, tok))
