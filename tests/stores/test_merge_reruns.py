"""A merge run again (a pipeline's retry) commits nothing new: never an older build than the
current snapshot's, in a folder or a bucket. A build committed before, or one a merge passed
over for another (``--build-id``), is not pending; a build that is newer is.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import lading
from conftest import write
from lading.cli import main
from lading.errors import IncompleteBuildWarning
from lading.testing import LocalS3


def docs(path: Path, n: int) -> Path:
    lines = [json.dumps({"id": f"d{i}", "text": f"doc {i}"}) for i in range(n)]
    return write(path, "\n".join(lines) + "\n")


def build(src: Path, dest: Path | str, n: int, **kw: object) -> str:
    reports = [lading.build_shard(src, dest, (i, n), **kw) for i in range(n)]
    return reports[0].build_id


def test_a_retried_merge_keeps_the_newest_build(tmp_path: Path) -> None:
    dest = tmp_path / "store"
    x = build(docs(tmp_path / "x.jsonl", 100), dest, 2)
    assert len(lading.merge_store(dest)) == 100
    y = build(docs(tmp_path / "y.jsonl", 150), dest, 2)
    merged = lading.merge_store(dest)
    assert len(merged) == 150 and merged.meta["build_id"] == y != x
    again = lading.merge_store(dest)
    assert again.snapshot == merged.snapshot and len(again) == 150
    assert main(["merge", str(dest)]) == 0
    assert lading.open_store(dest).snapshot == merged.snapshot
    # naming the old build commits it: asked for
    assert len(lading.merge_store(dest, build_id=x)) == 100
    assert lading.merge_store(dest).meta["build_id"] == x


def test_a_build_passed_over_is_not_merged_later(tmp_path: Path) -> None:
    dest = tmp_path / "store"
    build(docs(tmp_path / "x.jsonl", 100), dest, 2)
    y = build(docs(tmp_path / "y.jsonl", 150), dest, 3)
    assert len(lading.merge_store(dest, build_id=y)) == 150
    assert lading.merge_store(dest).meta["build_id"] == y
    z = build(docs(tmp_path / "z.jsonl", 70), dest, 2)  # newer: pending
    assert lading.merge_store(dest).meta["build_id"] == z


@pytest.mark.slow  # buckets on the local S3 (30 ms a request): ~5-11 s
def test_a_retried_merge_in_a_bucket_keeps_the_newest_build(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    url = f"s3://{bucket}/store"
    for k, n in enumerate((100, 150, 120)):  # three builds: more than the history's one
        build(docs(tmp_path / f"{k}.jsonl", n), url, 2, cache=tmp_path / "w")
        merged = lading.merge_store(url, cache=tmp_path / f"m{k}")
        assert len(merged) == n
    again = lading.merge_store(url, cache=tmp_path / "again")
    assert again.snapshot == merged.snapshot and len(again) == 120


def test_shards_run_again_take_their_build_back(tmp_path: Path) -> None:
    """Back to an earlier source: its shard workers run again (each finds its shard whole:
    "already built") and the merge commits that build, though a merge committed it before
    (it kept the newer build, without a word); a merge retried after that commits nothing."""
    dest, x_src = tmp_path / "store", docs(tmp_path / "x.jsonl", 100)
    x = build(x_src, dest, 2)
    assert len(lading.merge_store(dest)) == 100
    build(docs(tmp_path / "y.jsonl", 150), dest, 2)
    assert len(lading.merge_store(dest)) == 150
    assert len(lading.merge_store(dest)) == 150  # a retry: nothing new
    assert build(x_src, dest, 2) == x  # x's workers again: whole already
    back = lading.merge_store(dest)
    assert len(back) == 100 and back.meta["build_id"] == x
    assert lading.merge_store(dest).snapshot == back.snapshot


@pytest.mark.slow  # buckets on the local S3 (30 ms a request): ~5-11 s
def test_shards_run_again_take_their_build_back_in_a_bucket(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    url, x_src = f"s3://{bucket}/store", docs(tmp_path / "x.jsonl", 100)
    x = build(x_src, url, 2, cache=tmp_path / "w")
    assert len(lading.merge_store(url, cache=tmp_path / "m1")) == 100
    build(docs(tmp_path / "y.jsonl", 150), url, 2, cache=tmp_path / "w")
    assert len(lading.merge_store(url, cache=tmp_path / "m2")) == 150
    assert len(lading.merge_store(url, cache=tmp_path / "m3")) == 150
    assert build(x_src, url, 2, cache=tmp_path / "w") == x
    back = lading.merge_store(url, cache=tmp_path / "m4")
    assert len(back) == 100 and back.meta["build_id"] == x
    assert lading.merge_store(url, cache=tmp_path / "m5").snapshot == back.snapshot


def test_a_merge_keeps_the_store_build_it_merges_however_old(tmp_path: Path) -> None:
    """Shards built a day before the merge, into a folder that holds a store: committed (the
    merge collected them as an abandoned build before it read them)."""
    import os
    import time

    dest = tmp_path / "store"
    lading.build_store(docs(tmp_path / "old.jsonl", 10), dest)
    bid = build(docs(tmp_path / "new.jsonl", 50), dest, 2)
    then = time.time() - 25 * 3600
    for p in [dest / bid, *(dest / bid).rglob("*")]:
        os.utime(p, (then, then))
    merged = lading.merge_store(dest, build_id=bid)
    assert len(merged) == 50 and merged.meta["build_id"] == bid
    assert lading.open_store(dest).get("d49") == "doc 49"


def test_a_merge_over_an_incomplete_newer_build_keeps_the_snapshot_and_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Workers of a newer build died (shard 0 of 3 written): a retried merge still commits
    nothing new, but no longer silently: a Slurm ``afterany`` merge reported success with
    last week's store. An abandoned build older than the snapshot is no news: no warning."""
    dest = tmp_path / "store"
    old = lading.build_store(docs(tmp_path / "old.jsonl", 100), dest, progress=False)
    new = docs(tmp_path / "new.jsonl", 300)
    bid = lading.build_shard(new, dest, (0, 3)).build_id
    with pytest.warns(IncompleteBuildWarning) as caught:
        kept = lading.merge_store(dest)
    assert kept.snapshot == old.snapshot and len(kept) == 100
    said = str(caught[0].message)
    assert f"build {bid} has 1 of its 3 shards; missing 1, 2" in said, said
    assert f"lading build SOURCE {dest} --shard I/3` for I in 1, 2" in said, said
    assert f"kept its current snapshot {old.snapshot}" in said, said
    assert main(["merge", str(dest)]) == 0  # the command says it on stderr
    err = capsys.readouterr().err
    assert err.startswith("lading merge: warning: ") and "missing 1, 2" in err, err

    other = tmp_path / "other"
    lading.build_shard(new, other, (0, 3))  # abandoned, then a whole build committed
    lading.build_store(new, other, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(lading.merge_store(other)) == 300


@pytest.mark.parametrize("hostile", ["not json", "list", "number", "folder", "link", "huge"])
def test_a_damaged_or_hostile_run_mark_never_takes_a_build_back(
    tmp_path: Path, hostile: str
) -> None:
    """`ran.json` is a hint a merge reads from a folder others write: whatever it holds (not
    JSON, another shape, a folder, a link, a file too large to be a mark), the merge neither
    fails nor takes an old build back on its word. Before, a link was followed: one pointing
    at a mark that names the current snapshot (here: the newer build's own) took the old
    build back, and a link to a device or a huge file was read whole."""
    dest, x_src = tmp_path / "store", docs(tmp_path / "x.jsonl", 100)
    x = build(x_src, dest, 2)
    assert len(lading.merge_store(dest)) == 100
    y = build(docs(tmp_path / "y.jsonl", 150), dest, 2)
    assert len(lading.merge_store(dest)) == 150
    mark = dest / x / "ran.json"
    current = lading.open_store(dest).snapshot
    good = json.dumps({"after": current})  # what a rerun of x's workers would write
    mark.unlink()
    if hostile == "not json":
        mark.write_text("{after:")
    elif hostile == "list":
        mark.write_text(json.dumps([current]))
    elif hostile == "number":
        mark.write_text(json.dumps({"after": 7}))
    elif hostile == "folder":
        mark.mkdir()
    elif hostile == "link":
        (tmp_path / "elsewhere.json").write_text(good)
        mark.symlink_to(tmp_path / "elsewhere.json")
    else:
        mark.write_text(good + " " * (1 << 20))  # a valid mark padded past any mark's size
    kept = lading.merge_store(dest)
    assert kept.meta["build_id"] == y and kept.snapshot == current, hostile


@pytest.mark.parametrize("given", [True, False], ids=["--build-id", "derived"])
def test_the_missing_shards_command_keeps_the_build_id_the_workers_were_given(
    tmp_path: Path, given: bool
) -> None:
    """Workers given ``--build-id`` with a shard missing: the merge's advice named the command
    without it, and following it built the shard under the derived build (then "2 builds and
    none is whole"). A build under its derived id is told the plain command."""
    src, dest = docs(tmp_path / "c.jsonl", 100), tmp_path / "store"
    kw = {"build_id": "build-0000000000000001"} if given else {}
    bid = lading.build_shard(src, dest, (0, 2), **kw).build_id  # type: ignore[arg-type]
    with pytest.raises(lading.errors.StoreFormatError) as refused:
        lading.merge_store(dest)
    said = str(refused.value)
    flag = f" --build-id {bid}"
    assert (f"--shard 1/2{flag}`" in said) == given and "--shard 1/2" in said, said
    if given:  # the advice, followed, completes the build
        lading.build_shard(src, dest, (1, 2), build_id=bid)
        assert len(lading.merge_store(dest)) == 100


def test_a_merge_of_a_stale_store_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A merge run again after the source changed: the store it hands back is stale, and
    the command printed Python's two-line warning (``/.../lading:6: StaleStoreWarning: ...``
    and the source line); now one line, as `lading get` says it."""
    import os
    import time

    src, dest = docs(tmp_path / "c.jsonl", 50), tmp_path / "store"
    build(src, dest, 2)
    assert main(["merge", str(dest)]) == 0
    capsys.readouterr()
    later = time.time() + 5
    os.utime(src, (later, later))  # the source edited since the build
    assert main(["merge", str(dest)]) == 0
    err = capsys.readouterr().err
    assert "lading merge: warning: " in err and "StaleStoreWarning" not in err, err


def test_a_build_id_without_its_prefix_is_refused_naming_one_that_works(tmp_path: Path) -> None:
    """``--build-id mine`` said only "expected build-<letters, digits>" (a review,
    2026-12-07), which ``--help`` did not explain: the message now names the id that works."""
    src = tmp_path / "c.tsv"
    src.write_text("".join(f"d{i}\tpassage {i}\n" for i in range(10)))
    with pytest.raises(ValueError, match=r"e\.g\. build-mine") as said:
        lading.build_shard(src, tmp_path / "s", (0, 2), build_id="mine", progress=False)
    assert "the same one" in str(said.value)
