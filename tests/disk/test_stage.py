"""Staging to node-local disk: a checked copy, reused while current, damage caught, S3 source."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from distributed import run_processes
from lading.bench.synth import synth
from lading.disk import STAGE_MARK
from lading.disk.snapshot import SnapshotGoneError
from lading.disk.stage import stage
from lading.errors import StoreFormatError
from lading.stores import build_store, open_store
from lading.world import World

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml


@pytest.fixture
def built(tmp_path: Path) -> Path:
    files = synth("passages", 400, tmp_path / "c")
    build_store(files.corpus, tmp_path / "shared" / "store")
    return tmp_path / "shared" / "store"


def _mark(dest: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((dest / STAGE_MARK).read_text())
    return result


def _damage_middle(path: Path) -> None:
    """Flip one byte in the middle of a file: the spot checksums of its ends cannot see it."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_stage_copies_checks_and_reuses(built: Path, tmp_path: Path) -> None:
    dest = tmp_path / "node0" / "store"
    assert stage(built, dest) == dest
    original, copy = open_store(built), open_store(dest)
    assert copy.ids() == original.ids() and copy.get_many(copy.ids()[:50]) == original.get_many(
        original.ids()[:50]
    )
    first = _mark(dest)
    assert first["source"] == str(built) and first["format"] == "lading.packed"
    inode = os.stat(dest / "meta.json").st_ino
    stage(built, dest)  # the same source: the copy is reused as it is
    assert _mark(dest)["staged_at"] == first["staged_at"]
    assert os.stat(dest / "meta.json").st_ino == inode
    assert sorted(p.name for p in dest.parent.iterdir()) == ["store"]  # no lock or temp left


def test_open_store_stage_to(built: Path, tmp_path: Path) -> None:
    store = open_store(built, stage_to=tmp_path / "local")
    assert store.path == tmp_path / "local" / "store"
    assert len(store) == 400 and (store.path / STAGE_MARK).is_file()


def test_a_rebuilt_source_is_staged_again(built: Path, tmp_path: Path) -> None:
    dest = tmp_path / "node0" / "store"
    stage(built, dest)
    before = _mark(dest)
    corpus = tmp_path / "c" / "collection.tsv"
    with open(corpus, "a") as f:
        f.write("extra-doc\ta document added after the first build\n")
    build_store(corpus, built)  # the source changed: a rebuild, a new meta.json
    stage(built, dest)
    assert _mark(dest)["fingerprint"] != before["fingerprint"]
    assert len(open_store(dest)) == 401 and open_store(dest)["extra-doc"].startswith("a document")


def _rebuild(built: Path, tmp_path: Path, doc: str) -> None:
    """A new snapshot of the shared store: its corpus gains document ``doc``."""
    corpus = tmp_path / "c" / "collection.tsv"
    with open(corpus, "a") as f:
        f.write(f"{doc}\ta document added after the first build\n")
    build_store(corpus, built)


@pytest.mark.filterwarnings("ignore::lading.errors.StaleStoreWarning")  # older snapshots
def test_a_restage_keeps_the_snapshot_it_replaced_for_the_grace(
    built: Path, tmp_path: Path
) -> None:
    """Job A reads a staged copy and hands it to DataLoader workers pickled; the shared store
    is rebuilt and job B stages it again. The restage deleted the copy's old snapshot at once:
    job A's next workers got SnapshotGoneError claiming a rebuild "more than 600s ago". The
    snapshot a restage replaces stays readable for the grace, as on the shared store."""
    local = tmp_path / "local"
    job_a = open_store(built, stage_to=local)
    ids = job_a.ids()[:20]
    texts = job_a.get_many(ids)
    worker = pickle.dumps(job_a)
    _rebuild(built, tmp_path, "extra-doc")
    job_b = open_store(built, stage_to=local)
    assert job_b.path == job_a.path and job_b.snapshot != job_a.snapshot
    assert len(job_b) == 401 and "extra-doc" in job_b
    again = pickle.loads(worker)
    assert again.snapshot == job_a.snapshot and again.get_many(ids) == texts
    assert len(again) == 400 and "extra-doc" not in again
    pinned = open_store(job_a.path, snapshot=job_a.snapshot)
    assert pinned.get_many(ids) == texts
    # a second restage within the grace keeps both older snapshots
    _rebuild(built, tmp_path, "extra-doc-2")
    job_c = open_store(built, stage_to=local)
    assert len(job_c) == 402
    assert pickle.loads(worker).get_many(ids) == texts
    assert len(open_store(job_c.path, snapshot=job_b.snapshot)) == 401
    assert [p.name for p in local.iterdir()] == ["store"]  # no lock, temp or version aside


def _pinned_then_restaged(built: Path, tmp_path: Path) -> tuple[Path, Any, bytes]:
    """A staged copy, a store opened on it as a DataLoader worker gets it (pickled), then the
    source rebuilt and staged again: (the copy, that store, its pickle)."""
    dest = tmp_path / "local" / "store"
    stage(built, dest)
    first = open_store(dest)
    worker = pickle.dumps(first)
    _rebuild(built, tmp_path, "extra-doc")
    stage(built, dest)
    return dest, first, worker


@pytest.mark.filterwarnings("ignore::lading.errors.StaleStoreWarning")  # older snapshots
def test_a_staged_snapshot_past_the_grace_is_removed_by_the_next_stage(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept for the grace, not for ever: once it is over, the next stage of the same copy
    (a reuse as well as a restage) removes the old snapshot's files, and a reader pinned to it
    is told it is gone, naming the current snapshot."""
    dest, first, worker = _pinned_then_restaged(built, tmp_path)
    assert (dest / first.snapshot).is_dir()
    monkeypatch.setenv("LADING_SNAPSHOT_GRACE_S", "0")
    stage(built, dest)  # the same source: a reuse, which collects what is past the grace
    current = open_store(dest).snapshot
    assert sorted(p.name for p in dest.iterdir()) == sorted(["meta.json", STAGE_MARK, current])
    with pytest.raises(SnapshotGoneError, match=f"{first.snapshot} was removed") as e:
        pickle.loads(worker).get_many(first.ids()[:3])
    assert current in str(e.value)
    # it names what replaced it (a restage, how long ago), not a rebuild 600 s ago
    assert "a new stage of this staged copy replaced it" in str(e.value)
    assert "600s" not in str(e.value)
    # a restage past the grace carries nothing older than the copy it replaces
    _rebuild(built, tmp_path, "extra-doc-2")
    stage(built, dest)
    assert not (dest / first.snapshot).exists() and (dest / current).is_dir()


@pytest.mark.filterwarnings("ignore::lading.errors.StaleStoreWarning")  # older snapshots
def test_a_snapshot_a_restage_could_not_keep_is_not_said_to_be_600s_old(
    built: Path, tmp_path: Path
) -> None:
    """A copy an older lading staged kept nothing of what it replaced: the pinned reader's
    error said a rebuild replaced it "more than 600s ago" (it was 0 s). It names the restage
    and when the copy was last staged."""
    dest, first, worker = _pinned_then_restaged(built, tmp_path)
    # what an older lading left: no kept snapshot beside the copy, no "kept" in its mark
    shutil.rmtree(dest / first.snapshot)
    mark = _mark(dest)
    del mark["kept"]
    (dest / STAGE_MARK).write_text(json.dumps(mark))
    with pytest.raises(SnapshotGoneError, match=f"{first.snapshot} was removed") as e:
        pickle.loads(worker).get_many(first.ids()[:3])
    message = str(e.value)
    assert "a new stage of this staged copy replaced it" in message, message
    assert "more than 600s ago" not in message and "the latest 0s ago" in message


@pytest.mark.filterwarnings("ignore::lading.errors.StaleStoreWarning")  # older snapshots
def test_a_restage_cut_before_its_publish_leaves_the_copy_and_its_kept_snapshots(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restage killed after linking the kept snapshots into its new copy, before the
    publish: the copy in place still opens as the snapshot it held, its kept snapshot still
    opens, nothing half-made is left beside it, and the next stage completes."""
    dest = tmp_path / "local" / "store"
    stage(built, dest)
    first = open_store(dest).snapshot
    _rebuild(built, tmp_path, "extra-doc")
    stage(built, dest)
    second = open_store(dest).snapshot

    def killed(tmp: Path, target: Path) -> None:
        assert (tmp / first / "manifest.json").is_file()  # the kept snapshots were carried
        raise KeyboardInterrupt

    _rebuild(built, tmp_path, "extra-doc-2")
    monkeypatch.setattr("lading.disk.stage.publish", killed)
    with pytest.raises(KeyboardInterrupt):
        stage(built, dest)
    monkeypatch.undo()
    assert open_store(dest).snapshot == second and len(open_store(dest)) == 401
    assert len(open_store(dest, snapshot=first)) == 400
    assert sorted(p.name for p in dest.parent.iterdir() if "stage-error" not in p.name) == ["store"]
    stage(built, dest)
    assert len(open_store(dest)) == 402 and len(open_store(dest, snapshot=first)) == 400


def test_a_damaged_source_is_refused_and_nothing_is_staged(built: Path, tmp_path: Path) -> None:
    big = max((p for p in built.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    _damage_middle(big)
    dest = tmp_path / "node0" / "store"
    with pytest.raises(StoreFormatError, match=f"{big.name}: CRC32 .* the source is damaged"):
        stage(built, dest)
    assert not dest.exists() and not list(dest.parent.glob("store.tmp-*"))


def test_a_damaged_staged_copy_is_copied_again(built: Path, tmp_path: Path) -> None:
    dest = tmp_path / "node0" / "store"
    stage(built, dest)
    big = max((p for p in dest.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    # zeroed ends (what a crash can leave): the spot checksums catch it on a plain reuse
    data = big.read_bytes()
    big.write_bytes(b"\0" * 4096 + data[4096:])
    stage(built, dest)
    assert big.read_bytes() == data
    # one flipped byte mid-file: only verify=True, which reads every byte, catches it
    _damage_middle(big)
    stage(built, dest)
    assert big.read_bytes() != data
    stage(built, dest, verify=True)
    assert big.read_bytes() == data


def test_a_plain_folder_stages_and_a_changed_file_restages(tmp_path: Path) -> None:
    src = tmp_path / "parquet"
    (src / "part").mkdir(parents=True)
    (src / "part" / "a.parquet").write_bytes(os.urandom(10_000))
    (src / "_lading.json").write_text("{}")
    dest = tmp_path / "local" / "parquet"
    stage(src, dest)
    assert (dest / "part" / "a.parquet").read_bytes() == (src / "part" / "a.parquet").read_bytes()
    (src / "part" / "a.parquet").write_bytes(os.urandom(20_000))
    stage(src, dest)
    assert (dest / "part" / "a.parquet").read_bytes() == (src / "part" / "a.parquet").read_bytes()


def _stage_as(rank: int, world: int, src: str, dest: str) -> str:
    me = World(rank=rank, world_size=world, local_rank=rank, local_world_size=world)
    try:
        stage(src, dest, world=me, timeout=60)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return str(_mark(Path(dest))["staged_at"])


@pytest.mark.slow  # ranks as real processes
def test_local_rank_0_copies_and_the_others_wait(built: Path, tmp_path: Path) -> None:
    dest = tmp_path / "node0" / "store"
    times = run_processes(_stage_as, 3, str(built), str(dest), gloo=False)
    assert len(set(times)) == 1  # one copy, seen by all three


@pytest.mark.slow  # ranks as real processes
def test_the_waiting_ranks_hear_that_local_rank_0_failed(built: Path, tmp_path: Path) -> None:
    big = max((p for p in built.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    _damage_middle(big)
    said = run_processes(_stage_as, 2, str(built), str(tmp_path / "n" / "store"), gloo=False)
    # whichever rank took the lock first copied and failed; the other raised its failure
    first = 0 if said[0].startswith("StoreFormatError") else 1
    assert said[first].startswith("StoreFormatError") and "the source is damaged" in said[first]
    other = said[1 - first]
    assert other.startswith(f"RuntimeError: local rank {first} failed to stage"), other
    assert "the source is damaged" in other


def test_a_failure_of_an_earlier_launch_is_not_taken_for_this_ones(
    built: Path, tmp_path: Path
) -> None:
    """A relaunch within a minute of a failed stage (torchrun --max-restarts after an S3
    timeout): the failed rank 0 left ``DEST.stage-error``, which this launch's rank 0 removes
    only once it holds the lock, and a waiting rank read it first and raised the old error
    (6 runs in 8). A failure counts for a waiting rank when its own launch wrote it, or after
    the rank started."""
    import threading
    import time

    dest = tmp_path / "node" / "store"
    dest.parent.mkdir(parents=True)
    from lading.disk import stage as staging

    # an earlier launch failed 10 s before this one started (this process stands for it)
    when = min(time.time(), getattr(staging, "_STARTED", time.time())) - 10
    old = {"time": when, "error": "no answer from endpoint", "launch": "another"}
    (dest.parent / "store.stage-error").write_text(json.dumps(old))
    rank0 = threading.Timer(0.5, stage, (built, dest), {"world": World(0, 2, 0, 2)})
    rank0.start()
    try:
        assert stage(built, dest, world=World(1, 2, 1, 2), timeout=60) == dest
    finally:
        rank0.join(60)
    assert _mark(dest)["fingerprint"]


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """A real S3-compatible server (moto's standalone server) on a port the kernel picks as it
    binds (one found free earlier can be taken by then, and moto's start then waits for ever)."""
    pytest.importorskip("s3fs", reason="S3 staging needs s3fs: pip install 'lading[remote]'")
    server_mod = pytest.importorskip(
        "moto.server", reason="the local S3 server needs moto: pip install 'moto[server]'"
    )
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "endpoint_url": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {k: os.environ.get(k) for k in env if k.startswith("AWS")}
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS")})
    try:
        yield env
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _upload(s3: dict[str, str], local: Path, url: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3["endpoint_url"], skip_instance_cache=True)
    bucket = url.removeprefix("s3://").split("/", 1)[0]
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    fs.put(str(local), url.removeprefix("s3://"), recursive=True)


def test_stage_from_s3(built: Path, tmp_path: Path, s3: dict[str, str]) -> None:
    _upload(s3, built, "s3://corpora/msmarco/store")
    options = {"endpoint_url": s3["endpoint_url"], "skip_instance_cache": True}
    store = open_store("s3://corpora/msmarco/store", stage_to=tmp_path / "nvme",
                       storage_options=options)  # fmt: skip
    assert store.path == tmp_path / "nvme" / "store"
    assert store.ids() == open_store(built).ids()
    assert _mark(store.path)["source"] == "s3://corpora/msmarco/store"
    # the CLI, in a fresh process; the copy is current, so it is reused
    staged_at = _mark(store.path)["staged_at"]
    cli = [sys.executable, "-m", "lading", "stage", "s3://corpora/msmarco/store", str(store.path)]
    cli += ["-o", f"endpoint_url={s3['endpoint_url']}", "--quiet"]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _mark(store.path)["staged_at"] == staged_at


def test_a_damaged_object_in_the_bucket_is_refused(
    built: Path, tmp_path: Path, s3: dict[str, str]
) -> None:
    big = max((p for p in built.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    _damage_middle(big)
    _upload(s3, built, "s3://corpora/damaged/store")
    cli = [sys.executable, "-m", "lading", "stage", "s3://corpora/damaged/store"]
    cli += [str(tmp_path / "nvme" / "store"), "-o", f"endpoint_url={s3['endpoint_url']}"]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert f"s3://corpora/damaged/store/{big.relative_to(built).as_posix()}: CRC32" in done.stderr
    assert not (tmp_path / "nvme" / "store").exists()


@pytest.mark.parametrize("held", ["a file", "a folder of the user's", "a token corpus"])
def test_a_destination_stage_may_not_replace_is_refused_before_the_copy(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: str
) -> None:
    """`lading stage SRC FILE` copied the whole source into a scratch folder beside FILE, then
    refused to publish it there: the time (and the room) of a full copy for a refusal it could
    make at once. What is there is left as it was."""
    dest = tmp_path / "node0" / "dest"
    dest.parent.mkdir()
    if held == "a file":
        dest.write_text("mine")
    else:
        dest.mkdir()
        name, text = ("notes.txt", "mine") if "user" in held else ("meta.json", "")
        text = text or json.dumps({"format": "lading.tokens", "version": 2, "files": {}})
        (dest / name).write_text(text)
    before = sorted((p.name, p.read_bytes()) for p in dest.parent.rglob("*") if p.is_file())
    copies: list[object] = []
    monkeypatch.setattr("lading.disk.stage._copy", lambda *args: copies.append(args))
    with pytest.raises(FileExistsError, match=f"{dest} .*(refusing|choose another)") as e:
        stage(built, dest)
    assert "destination" in str(e.value) and copies == []
    monkeypatch.undo()
    after = sorted((p.name, p.read_bytes()) for p in dest.parent.rglob("*") if p.is_file())
    assert after == before  # not even a DEST.stage-error: a process alone tells no rank


def _files_of(directory: Path) -> list[tuple[str, bytes]]:
    return sorted(
        (p.relative_to(directory).as_posix(), p.read_bytes())
        for p in directory.rglob("*")
        if p.is_file()
    )


def test_staging_a_store_onto_itself_is_refused_and_leaves_it_whole(
    built: Path, tmp_path: Path
) -> None:
    """``open_store(s, stage_to=<the folder holding s>)`` replaced the built store with a copy
    of its current snapshot: the older snapshots and their manifests were deleted, and a reader
    pinned to one of them failed. DEST is SRC (or inside it, or holds it): refused at once."""
    corpus = tmp_path / "c" / "collection.tsv"
    build_store(corpus, built, overwrite=True)  # a second snapshot, the first kept
    before = _files_of(built)
    with pytest.raises(ValueError, match="is the source itself") as e:
        open_store(built, stage_to=built.parent)
    assert str(built) in str(e.value) and "Stage to a folder outside" in str(e.value)
    with pytest.raises(ValueError, match="inside the source") as e:
        stage(built, built / "copy")
    assert str(built / "copy") in str(e.value)
    with pytest.raises(ValueError, match="inside the destination"):
        stage(built, built.parent)
    assert _files_of(built) == before
    assert [p.name for p in built.parent.iterdir()] == ["store"]  # no lock, temp, error file


def test_a_built_store_at_the_destination_is_not_replaced(built: Path, tmp_path: Path) -> None:
    """``lading stage a.store b.store`` with b.store a built store (arguments swapped) replaced
    it with a copy of a.store and exited 0. Only a staged copy (its mark), an empty folder or
    nothing is replaced; what a build made is left as it was."""
    other = synth("passages", 30, tmp_path / "c2")
    dest = tmp_path / "other.store"
    build_store(other.corpus, dest)
    before = _files_of(dest)
    with pytest.raises(FileExistsError, match="not a staged copy") as e:
        stage(built, dest)
    assert str(dest) in str(e.value) and str(built) in str(e.value)
    assert _files_of(dest) == before and len(open_store(dest)) == 30
    (tmp_path / "empty").mkdir()
    assert len(open_store(stage(built, tmp_path / "empty"))) == 400  # an empty folder: filled


def test_lading_stage_onto_a_built_store_fails_naming_both(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lading.cli import main

    other = synth("passages", 30, tmp_path / "c2")
    dest = tmp_path / "other.store"
    build_store(other.corpus, dest)
    assert main(["stage", str(built), str(dest), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert str(dest) in err and str(built) in err and len(open_store(dest)) == 30
