"""What a bucket's garbage collection does with leftovers, judged by when the bucket says each
object was last written (S3's ``LastModified``), where it used to have no time but ids.

Left open by the reviews of 2026-12-07: a killed build's write probe stayed for ever; a killed
Ray job's or Slurm array's shards (a ``build-<id>/`` no snapshot names) stayed for ever,
named by nothing; and a snapshot still uploading beside another commit was dated by its id
(its start), so an upload longer than a day was deleted under it. Here a "day" is made 2 s
(``bucket_gc.ABANDONED_S``), and the objects age for real on the local S3.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import lading
from lading.errors import AbandonedBuildWarning
from lading.stores.building import bucket_gc
from lading.testing import LocalS3

DAY_S = 2.0  # stands in for a day; LastModified has whole seconds, so waits are DAY_S + 1.2


def _tsv(path: Path, docs: int, word: str) -> Path:
    path.write_text("".join(f"d{i}\t{word} {i}\n" for i in range(docs)))
    return path


def _commit(tmp_path: Path, url: str, word: str) -> list[warnings.WarningMessage]:
    """One build into ``url`` (a commit, then its garbage collection); its warnings."""
    src = _tsv(tmp_path / f"{word}.tsv", 20, word)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        lading.build_store(src, url, cache=str(tmp_path / f"c-{word}"), progress=False).close()
    return said


def _shown_on_stderr(message: Any, category: Any, filename: str, lineno: int, *_: Any) -> None:
    """Python's own display of a warning (which pytest replaces by its record)."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno))


def _keys(url: str) -> set[str]:
    from lading.remote.clients import open_client

    return set(open_client(url).list())


def test_the_listing_carries_each_objects_time_of_last_write(s3: LocalS3, bucket: str) -> None:
    """Both clients read ``LastModified`` (as POSIX seconds); a version compares without it."""
    from lading.remote.clients import open_client
    from lading.remote.objects import ObjectInfo

    url = f"s3://{bucket}/times"
    before = time.time()
    for backend in ("obstore", "fsspec"):
        client = open_client(url, backend)
        client.put("x", b"abc")
        info = client.list()["x"]
        assert info.written is not None and before - 2 <= info.written <= time.time() + 2
        assert client.head("x") == info
    assert ObjectInfo(3, "e", None, 1.0) == ObjectInfo(3, "e", None, 2.0)


@pytest.mark.slow  # objects aged for real past a 2 s 'day': ~5-9 s
def test_a_killed_builds_write_probe_goes_a_day_after_it_was_written(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lading.disk.snapshot import WRITE_PROBE
    from lading.remote.clients import open_client

    monkeypatch.setattr(bucket_gc, "ABANDONED_S", DAY_S)
    url = f"s3://{bucket}/probe"
    client = open_client(url)
    client.put(f"{WRITE_PROBE}dead", b"")  # a build killed between its probe's PUT and DELETE
    time.sleep(DAY_S + 1.2)
    client.put(f"{WRITE_PROBE}live", b"")  # a build starting now
    _commit(tmp_path, url, "first")
    keys = _keys(url)
    assert f"{WRITE_PROBE}dead" not in keys
    assert f"{WRITE_PROBE}live" in keys


@pytest.mark.slow  # objects aged for real past a 2 s 'day': ~5-9 s
def test_a_snapshot_still_uploading_is_dated_by_its_last_write_not_its_start(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot no history names was kept a day from its start (its ``committed_at``, or
    its id): an upload of more than a day beside another commit was deleted under it. Now
    it is kept until a day after its last object was written."""
    from lading.remote.clients import open_client
    from lading.stores.building.build import build_store as build_local
    from lading.stores.building.upload import put_files

    monkeypatch.setattr(bucket_gc, "ABANDONED_S", DAY_S)
    url = f"s3://{bucket}/slow"
    _commit(tmp_path, url, "first")
    other = build_local(_tsv(tmp_path / "o.tsv", 20, "other"), tmp_path / "o", progress=False)
    snap = other.meta["snapshot"]
    files = [
        (p.relative_to(tmp_path / "o").as_posix(), p, p.stat().st_size)
        for p in sorted((tmp_path / "o" / snap).rglob("*"))
        if p.is_file()
    ]
    time.sleep(DAY_S + 1.2)  # its start is now more than a "day" ago ...
    put_files(open_client(url), files[-1:])  # ... and it is still uploading
    _commit(tmp_path, url, "second")
    assert any(k.startswith(f"{snap}/") for k in _keys(url)), "deleted while uploading"
    time.sleep(DAY_S + 1.2)  # then nothing more came: a killed upload's leftovers
    _commit(tmp_path, url, "third")
    assert not any(k.startswith(f"{snap}/") for k in _keys(url))


def _warned(said: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in said if issubclass(w.category, AbandonedBuildWarning)]


@pytest.mark.slow  # objects aged for real past a 2 s 'day': ~5-9 s
def test_a_build_no_snapshot_names_is_named_once_untouched_for_a_day(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shards of a build never merged (a killed job) are named at the next commit with
    the merge and the removal, once nothing in them was written for a day, and left in place
    (no lock in a bucket keeps a late merge of them from racing a removal)."""
    monkeypatch.setattr(bucket_gc, "ABANDONED_S", DAY_S)
    url = f"s3://{bucket}/jobs"
    src = _tsv(tmp_path / "s.tsv", 30, "shard")
    lading.build_shard(src, url, (0, 2), cache=tmp_path / "w", progress=False)
    build = next(k.split("/")[0] for k in _keys(url) if k.startswith("build-"))
    assert _warned(_commit(tmp_path, url, "first")) == []  # written just now: under way
    time.sleep(DAY_S + 1.2)
    said = _warned(_commit(tmp_path, url, "second"))
    assert len(said) == 1, said
    assert f"{url}/{build}/" in said[0]
    assert f"`lading merge {url} --build-id {build}`" in said[0]  # the id its workers print
    assert "delete every object under" in said[0]
    assert any(k.startswith(f"{build}/") for k in _keys(url))  # left in place


@pytest.mark.slow  # objects aged for real past a 2 s 'day': ~5-9 s
def test_an_old_build_a_snapshot_names_is_not_named(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merged build's shards are the current snapshot's: old, but in use, never named."""
    monkeypatch.setattr(bucket_gc, "ABANDONED_S", DAY_S)
    url = f"s3://{bucket}/merged"
    src = _tsv(tmp_path / "s.tsv", 30, "shard")
    for i in range(2):
        lading.build_shard(src, url, (i, 2), cache=tmp_path / f"w{i}", progress=False)
    time.sleep(DAY_S + 1.2)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        merged: Any = lading.merge_store(url, cache=tmp_path / "m")
    assert len(merged) == 30
    assert _warned(said) == []


@pytest.mark.slow  # objects aged for real past a 2 s 'day': ~5-9 s
@pytest.mark.parametrize("command", ["build", "merge"])
def test_the_cli_says_an_abandoned_build_in_one_line(
    s3: LocalS3,
    bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """``lading build`` and ``lading merge`` into a bucket say an abandoned build as they say
    their other warnings, ``lading build: warning: ...`` on one line of a job's log, not
    Python's ``file:line: AbandonedBuildWarning`` and a source line."""
    from lading.cli import main

    monkeypatch.setattr(bucket_gc, "ABANDONED_S", DAY_S)
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache"))
    url = f"s3://{bucket}/cli-{command}"
    src = _tsv(tmp_path / "s.tsv", 30, "shard")
    lading.build_shard(src, url, (0, 2), cache=tmp_path / "killed", progress=False)
    abandoned = next(k.split("/")[0] for k in _keys(url) if k.startswith("build-"))
    if command == "merge":  # a whole build of other inputs, merged later than the day
        other = _tsv(tmp_path / "o.tsv", 30, "other")
        for i in range(2):
            lading.build_shard(other, url, (i, 2), cache=tmp_path / f"w{i}", progress=False)
        done = {k.split("/")[0] for k in _keys(url) if k.startswith("build-")} - {abandoned}
        args = ["merge", url, "--build-id", done.pop()]
    else:
        args = ["build", str(src), url, "--quiet"]
    time.sleep(DAY_S + 1.2)
    capsys.readouterr()
    with warnings.catch_warnings():  # shown as a user's run shows them (not pytest's record)
        warnings.simplefilter("default")
        warnings.showwarning = _shown_on_stderr
        assert main(args) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if abandoned in line]
    assert len(said) == 1 and said[0].startswith(f"lading {command}: warning: "), err
    assert "AbandonedBuildWarning" not in err, err
    if command == "build":  # the merge it names is one that runs
        merge = said[0].split("`")[1].split()
        assert merge[:2] == ["lading", "merge"] and merge[-2:] == ["--build-id", abandoned]
        assert main(merge[1:]) == 2  # its one shard of two: the merge names the other
        err = capsys.readouterr().err
        assert "has no build" not in err and "shard 1/2" in err, err
