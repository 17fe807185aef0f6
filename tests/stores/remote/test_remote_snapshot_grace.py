"""A bucket's replaced snapshot is kept for the grace counted from when it was replaced, and a
build into a bucket hands back the snapshot it built.

Found by a review (2026-12-07): the garbage collection after a commit timed each snapshot's
replacement by the next snapshot's ``committed_at``, stamped when the scratch build committed
locally, before its upload; and it took a killed build's snapshot, never committed, for a
successor. So an upload longer than the grace, or one killed build's leftovers, deleted the
snapshot every open reader was pinned to at the moment of the next commit, and each of them
failed with ``RemoteChangedError``. And ``build_store(src, "s3://...")`` opened whatever was
current after its upload: two builds at once each returned the other's store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import lading
from lading.testing import LocalS3

GRACE_S = 2.0


def _tsv(path: Path, docs: int, word: str) -> Path:
    path.write_text("".join(f"d{i}\t{word} {i}\n" for i in range(docs)))
    return path


def _build(src: Path, url: str, tmp_path: Path, name: str) -> Any:
    return lading.build_store(src, url, cache=str(tmp_path / name), progress=False, overwrite=True)


@pytest.mark.slow  # a slowed upload past a 2 s grace: ~6 s
def test_an_upload_longer_than_the_grace_keeps_the_snapshot_it_replaces(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LADING_SNAPSHOT_GRACE_S", str(GRACE_S))
    url = f"s3://{bucket}/slow"
    _build(_tsv(tmp_path / "a.tsv", 50, "first"), url, tmp_path, "b1").close()
    reader = lading.open_store(url, cache=tmp_path / "reader")
    s3.fault("text.bin", 1, "slow", delay=GRACE_S + 1.5, op="put")  # the next upload's
    _build(_tsv(tmp_path / "b.tsv", 50, "second"), url, tmp_path, "b2").close()
    # replaced just now: within its grace, the reader goes on with it
    assert reader.get_many(["d0", "d49"]) == ["first 0", "first 49"]
    reader.close()


@pytest.mark.slow  # a build killed mid-upload: ~4 s
def test_a_killed_builds_snapshot_is_no_successor(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build killed before its commit leaves a snapshot's objects, never current: it
    does not count as what replaced the current one (and its objects stay, a build
    under way beside looks the same, until a day past its start)."""
    from lading.remote.clients import open_client
    from lading.stores.building.build import build_store as build_local
    from lading.stores.building.upload import put_files

    monkeypatch.setenv("LADING_SNAPSHOT_GRACE_S", str(GRACE_S))
    url = f"s3://{bucket}/killed"
    _build(_tsv(tmp_path / "a.tsv", 50, "first"), url, tmp_path, "b1").close()
    killed = build_local(_tsv(tmp_path / "k.tsv", 20, "killed"), tmp_path / "k", progress=False)
    snap = killed.meta["snapshot"]
    stamp = json.loads((tmp_path / "k" / "meta.json").read_text())["committed_at"]
    client = open_client(url)
    files = [
        (p.relative_to(tmp_path / "k").as_posix(), p, p.stat().st_size)
        for p in (tmp_path / "k" / snap).rglob("*")
        if p.is_file()
    ]
    put_files(client, files)  # uploaded, then killed before meta.json
    reader = lading.open_store(url, cache=tmp_path / "reader")
    import time

    time.sleep(max(0.0, stamp + GRACE_S + 0.2 - time.time()))  # the leftover's stamp past the grace
    _build(_tsv(tmp_path / "b.tsv", 50, "second"), url, tmp_path, "b2").close()
    assert reader.get_many(["d0"]) == ["first 0"]
    snaps = {k.split("/")[0] for k in client.list() if k.startswith("snap-")}
    assert snap in snaps  # (not known to be dead: swept a day on)
    reader.close()


def test_a_build_into_a_bucket_returns_its_own_snapshot(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another build commits between this one's upload and its open (two builds at once):
    each is handed the store it built, pinned, not the bucket's current one."""
    from lading.remote.clients import open_client
    from lading.stores.building import upload as module
    from lading.stores.building.build import build_store as build_local

    url = f"s3://{bucket}/race"
    build_local(_tsv(tmp_path / "o.tsv", 30, "other"), tmp_path / "o", progress=False)
    real = module.upload

    def then_another(local: Path, client: Any, *args: Any, **kw: Any) -> Any:
        got = real(local, client, *args, **kw)
        real(tmp_path / "o", open_client(url))  # the other build commits right after
        return got

    monkeypatch.setattr(module, "upload", then_another)
    mine = _build(_tsv(tmp_path / "a.tsv", 50, "mine"), url, tmp_path, "b1")
    assert len(mine) == 50 and mine.get_many(["d0"]) == ["mine 0"]
    assert lading.open_store(url, cache=tmp_path / "c").get_many(["d0"]) == ["other 0"]
    mine.close()


def _ranked_build(rank: int, world: int, src: str, url: str, cache: str) -> tuple[str, int]:
    """One rank of a group in which every rank calls ``build_store`` into ``url``."""
    store = lading.build_store(src, url, cache=f"{cache}/{rank}", progress=False, overwrite=True)
    return store.snapshot, len(store)


def _ranked_failing(rank: int, world: int, src: str, url: str, cache: str) -> str:
    try:
        lading.build_store(src, url, cache=f"{cache}/{rank}", progress=False)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "built"


@pytest.mark.slow  # two spawned ranks in a gloo group: ~10 s
def test_every_rank_opens_the_snapshot_rank_0_built(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """Under a process group rank 0 builds and uploads, then every rank opens the snapshot
    rank 0 committed (its id shared through the group's store, not a collective of
    tensors); rank 0's failure is said on every rank, as a lading error."""
    from distributed import run_processes

    url = f"s3://{bucket}/ranks"
    src = _tsv(tmp_path / "a.tsv", 40, "ranked")
    got = run_processes(_ranked_build, 2, str(src), url, str(tmp_path / "c"))
    assert got[0] == got[1] and got[0][1] == 40 and got[0][0].startswith("snap-")
    bad = write_bad(tmp_path / "bad.tsv")
    said = run_processes(_ranked_failing, 2, str(bad), f"s3://{bucket}/fails", str(tmp_path / "f"))
    assert said[0].startswith("SourceError") and "bad.tsv" in said[0], said
    assert said[1].startswith("RemoteWriteError") and "rank 0's build failed" in said[1], said
    assert "bad.tsv" in said[1], said


def write_bad(path: Path) -> Path:
    path.write_text("d1\tfine\nno tab on this line\n")
    return path
