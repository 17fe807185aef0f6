"""A node's local ranks staging one copy: no rank waits for a copy nobody will make, and a
copy is of one snapshot, checked, whatever the source does meanwhile.

Found by two reviews (2026-12-07), each seen failing on the code before:
- a local rank 0 SIGKILLed mid-copy: the others polled for the copy for the whole timeout (an
  hour by default), with the dead rank's lock beside them;
- rank 0 failing where it cannot write its failure beside ``dest`` (a read-only or full
  disk): the same wait;
- a rebuild landing between rank 0's start and rank 1's: rank 0 staged the snapshot it read,
  rank 1 waited for a copy of the newer one, which nobody made;
- a rebuild committing while the copy ran: the stage failed ("rebuilt while it was staged")
  where docs/stores.md says a rebuild does not disturb it (its files stay for the grace);
- a file of a plain folder growing mid-copy: staged with exit 0, its mark recording the size
  listed, not the size copied;
- a store whose ``meta.json`` is no JSON: staged as a plain folder, nothing checked.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lading.bench.synth import synth
from lading.disk import STAGE_MARK
from lading.disk import stage as staging
from lading.disk.stage import stage
from lading.errors import StoreFormatError
from lading.stores import build_store, open_store
from lading.world import World

RANK1 = World(rank=1, world_size=2, local_rank=1, local_world_size=2)


@pytest.fixture
def built(tmp_path: Path) -> Path:
    files = synth("passages", 300, tmp_path / "c")
    build_store(files.corpus, tmp_path / "shared" / "store")
    return tmp_path / "shared" / "store"


def _rebuild(built: Path, tmp_path: Path, doc: str) -> None:
    corpus = tmp_path / "c" / "collection.tsv"
    with open(corpus, "a") as f:
        f.write(f"{doc}\ta document added after the first build\n")
    build_store(corpus, built)


def _mark(dest: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((dest / STAGE_MARK).read_text())
    return found


def test_a_rank_takes_over_the_stage_of_a_local_rank_0_killed_mid_copy(
    built: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "node" / "store"
    dest.parent.mkdir()
    holder = (
        "import sys, time; from pathlib import Path; from lading.disk.atomic import build_lock\n"
        "with build_lock(Path(sys.argv[1])):\n"
        "    print('held', flush=True); time.sleep(120)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", holder, str(dest)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    child.kill()  # local rank 0, SIGKILLed while it held the lock (out of memory)
    child.wait()
    started = time.monotonic()
    assert stage(built, dest, world=RANK1, timeout=30) == dest
    assert time.monotonic() - started < 20  # the old code polled the whole 30 s, then raised
    assert len(open_store(dest)) == 300


def test_a_rank_0_that_could_not_record_its_failure_leaves_no_rank_waiting(
    built: Path, tmp_path: Path
) -> None:
    """Rank 0 failed (here: a damaged source) and could not write ``DEST.stage-error`` (here:
    a folder in its place; a read-only or full disk in the review): rank 1 does not wait for
    a copy, it meets the failure itself."""
    big = max((p for p in built.rglob("*.bin")), key=lambda p: p.stat().st_size)
    data = bytearray(big.read_bytes())
    data[len(data) // 2] ^= 0xFF
    big.write_bytes(bytes(data))
    dest = tmp_path / "node" / "store"
    (tmp_path / "node" / "store.stage-error").mkdir(parents=True)  # no failure written
    with pytest.raises(StoreFormatError, match="the source is damaged"):
        stage(built, dest, world=World(0, 2, 0, 2))
    started = time.monotonic()
    with pytest.raises(StoreFormatError, match="the source is damaged"):
        stage(built, dest, world=RANK1, timeout=30)
    assert time.monotonic() - started < 20


def test_a_rank_whose_lock_cannot_be_made_fails_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only or full disk under ``dest``: rank 0 failed there and could not record it
    (review B); rank 1 meets the same error at once, naming the lock, where it waited."""
    from lading.disk import lock

    def read_only(self: Any) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self.path))

    monkeypatch.setattr(lock.FileLock, "acquire", read_only)
    src = tmp_path / "plain"
    src.mkdir()
    (src / "a.parquet").write_bytes(b"x" * 10)
    started = time.monotonic()
    with pytest.raises(OSError) as e:
        stage(src, tmp_path / "ro" / "store", world=RANK1, timeout=30)
    assert e.value.errno == errno.EROFS and str(e.value.filename).endswith("store.lock")
    assert time.monotonic() - started < 20


def test_a_rank_that_read_a_newer_snapshot_than_rank_0_copied_stages_it_itself(
    built: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "node" / "store"
    stage(built, dest, world=World(0, 2, 0, 2))  # rank 0 staged the snapshot it read
    _rebuild(built, tmp_path, "late-doc")  # a rebuild before rank 1 reads the source
    started = time.monotonic()
    assert stage(built, dest, world=RANK1, timeout=30) == dest
    assert time.monotonic() - started < 20
    assert len(open_store(dest)) == 301 and "late-doc" in open_store(dest).ids()


def test_a_rebuild_committing_mid_copy_leaves_the_copy_of_the_snapshot_read(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = staging.snapshot_of

    def then_rebuilt(source: Any) -> Any:
        found = real(source)
        _rebuild(built, tmp_path, "mid-doc")  # commits while the copy is about to run
        return found

    monkeypatch.setattr(staging, "snapshot_of", then_rebuilt)
    dest = tmp_path / "node" / "store"
    stage(built, dest)
    assert len(open_store(dest)) == 300  # the snapshot read at the start, whole
    monkeypatch.setattr(staging, "snapshot_of", real)
    stage(built, dest)  # the next stage sees the rebuild
    assert len(open_store(dest)) == 301


def test_a_plain_file_that_grows_mid_copy_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "parquet"
    src.mkdir()
    (src / "b.parquet").write_bytes(b"x" * 100_000)
    real = staging.snapshot_of

    def then_written(source: Any) -> Any:
        found = real(source)
        with open(src / "b.parquet", "ab") as f:
            f.write(b"y" * 100_000)  # a writer appends after the listing
        return found

    monkeypatch.setattr(staging, "snapshot_of", then_written)
    dest = tmp_path / "node" / "parquet"
    with pytest.raises(StoreFormatError, match=r"b\.parquet changed while it was staged"):
        stage(src, dest)
    assert not dest.exists()


@pytest.mark.parametrize("text", ["cut", '["lading.packed"]'])
def test_a_store_whose_meta_json_is_damaged_is_refused_not_copied_as_plain_files(
    built: Path, tmp_path: Path, text: str
) -> None:
    if text == "cut":  # a manifest cut short before its format (keys sorted: "build" first)
        text = (built / "meta.json").read_text()[:1000]
    (built / "meta.json").write_text(text)
    dest = tmp_path / "node" / "store"
    with pytest.raises(
        StoreFormatError,
        match=r"meta\.json (is not valid JSON|names a lading format but holds a JSON list)",
    ):
        stage(built, dest)
    assert not dest.exists()


def test_a_listed_format_with_a_damaged_file_list_is_refused(built: Path, tmp_path: Path) -> None:
    meta = json.loads((built / "meta.json").read_text())
    first = next(iter(meta["files"]))
    del meta["files"][first]["crc32"]
    (built / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(StoreFormatError, match="is not a list of files"):
        stage(built, tmp_path / "node" / "store")


def test_a_stage_run_again_after_another_commands_failure_copies(
    built: Path, tmp_path: Path
) -> None:
    """Every rank now reads the failure file: a `lading stage` run again from the same shell
    within a minute of a failed one (the same launcher, the shell) raised that old failure,
    and a long-lived process kept raising another's interrupted stage (a review of this
    change). A process alone reads none; an interrupt is never recorded."""
    dest = tmp_path / "node" / "store"
    dest.parent.mkdir()
    old = {
        "time": time.time(),
        "error": "StoreFormatError: the source is damaged",
        "launch": staging._launch(),
        "pid": os.getpid() + 1,
        "rank": 0,
    }
    (dest.parent / "store.stage-error").write_text(json.dumps(old))
    assert stage(built, dest, world=World(0, 1, 0, 1)) == dest
    assert len(open_store(dest)) == 300


def test_an_interrupted_stage_records_no_failure(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(staging, "_copy", interrupted)
    dest = tmp_path / "node" / "store"
    with pytest.raises(KeyboardInterrupt):
        stage(built, dest, world=World(0, 2, 0, 2))
    assert not (tmp_path / "node" / "store.stage-error").exists()


def test_an_object_of_a_bucket_rewritten_mid_copy_is_refused(
    s3: Any, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bucket's plain folder: the ranged reads stop at the listed size, so an object
    rewritten larger meanwhile was staged cut, with exit 0 (a review of this change)."""
    from lading.remote.clients import open_client

    url = f"s3://{bucket}/plain"
    client = open_client(url)
    client.put("a.parquet", b"a" * 100_000)
    real = staging.snapshot_of

    def then_rewritten(source: Any) -> Any:
        found = real(source)
        client.put("a.parquet", b"b" * 150_000)
        return found

    monkeypatch.setattr(staging, "snapshot_of", then_rewritten)
    dest = tmp_path / "node" / "plain"
    with pytest.raises(StoreFormatError, match=r"a\.parquet changed while it was staged"):
        stage(url, dest)
    assert not dest.exists()


@pytest.mark.parametrize("text", ["[1, 2, 3]", '{"a": 1}\n{"a": 2}\n'])
def test_a_plain_folder_with_another_tools_meta_json_stages(tmp_path: Path, text: str) -> None:
    """Another tool's ``meta.json`` (a JSON list, JSON Lines) is a plain file: the folder
    stages."""
    src = tmp_path / "plain"
    src.mkdir()
    (src / "meta.json").write_text(text)
    (src / "a.parquet").write_bytes(b"x" * 1000)
    dest = tmp_path / "node" / "plain"
    stage(src, dest)
    assert (dest / "meta.json").read_text() == text
