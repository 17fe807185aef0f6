"""Shards of a parallel build are input too (issue 39, items 7 and 8): shards of two sources
under one explicit build id never merge, and a shard count is bounded by the input before
anything is planned."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

import lading
from conftest import write
from lading.cli import main
from lading.errors import StoreFormatError
from lading.stores.building.parallel import BUILD_FILE
from lading.stores.building.shardset import differ


def _tsv(path: Path, word: str, n: int = 8) -> Path:
    return write(path, "".join(f"{word}{i}\t{word} text {i}\n" for i in range(n)))


def test_shards_of_two_sources_under_one_build_id_do_not_merge(tmp_path: Path) -> None:
    a, b = _tsv(tmp_path / "A.tsv", "a"), _tsv(tmp_path / "B.tsv", "b")
    dest = tmp_path / "s"
    lading.build_shard(a, dest, shard=(0, 2), build_id="build-job42", progress=False)
    # the old code built shard 1 from B.tsv and merged a store of both
    with pytest.raises(StoreFormatError, match=r"shard 1 reads other inputs.*A\.tsv|B\.tsv"):
        lading.build_shard(b, dest, shard=(1, 2), build_id="build-job42", progress=False)
    assert not (dest / "build-job42" / "shard-00001-of-00002").exists()


def test_a_folder_that_gained_a_file_between_tasks_is_refused_at_merge(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    _tsv(folder / "1.tsv", "a")
    _tsv(folder / "2.tsv", "b")
    dest = tmp_path / "s"
    lading.build_shard(folder, dest, shard=(0, 2), build_id="build-slurm7", progress=False)
    _tsv(folder / "3.tsv", "c")  # a file arrives while task 1 waits in the queue
    # two tasks that started at once both passed the early check (as if neither had seen the
    # other's build.json): the merge compares what each shard.json recorded
    mark = dest / "build-slurm7" / BUILD_FILE
    mark.write_text(
        json.dumps({k: v for k, v in json.loads(mark.read_text()).items() if k != "stats"})
    )
    lading.build_shard(folder, dest, shard=(1, 2), build_id="build-slurm7", progress=False)
    with pytest.raises(StoreFormatError) as caught:
        lading.merge_store(dest)
    message = str(caught.value)
    assert "shard-00000-of-00002" in message and "shard-00001-of-00002" in message
    assert "3.tsv" in message and "2 input file(s) against 3" in message
    assert "--build-id" in message and "\n" not in message
    assert not (dest / "meta.json").exists()


def test_partial_builds_of_a_file_touched_between_tasks_name_it(tmp_path: Path) -> None:
    """Without --build-id, shards of an input touched between tasks derive two build ids: the
    merge names the file that changed, not "other options or another N"."""
    a = _tsv(tmp_path / "A.tsv", "a", 40)
    dest = tmp_path / "s"
    lading.build_shard(a, dest, shard=(0, 2), progress=False)
    stat = a.stat()
    os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    lading.build_shard(a, dest, shard=(1, 2), progress=False)
    with pytest.raises(StoreFormatError) as caught:
        lading.merge_store(dest)
    message = str(caught.value)
    assert "A.tsv" in message and "changed" in message and "\n" not in message, message
    assert "other options or another N" not in message


def test_a_shard_of_another_file_copied_in_is_refused_at_merge(tmp_path: Path) -> None:
    """A shard of B.tsv copied into a build of A.tsv: both files named, another input given (no
    folder or glob involved), and the store would mix them."""
    a, b = _tsv(tmp_path / "A.tsv", "a"), _tsv(tmp_path / "B.tsv", "b")
    dest, other = tmp_path / "s", tmp_path / "o"
    lading.build_shard(a, dest, shard=(0, 2), build_id="build-job9", progress=False)
    lading.build_shard(b, other, shard=(1, 2), build_id="build-job9", progress=False)
    shard = "build-job9/shard-00001-of-00002"
    shutil.copytree(other / shard, dest / shard)
    with pytest.raises(StoreFormatError) as caught:
        lading.merge_store(dest)
    message = str(caught.value)
    assert "A.tsv" in message and "B.tsv" in message and "store would mix" in message
    assert "folder or glob" not in message and "another input" in message, message


def test_a_shard_of_other_options_copied_in_is_refused_naming_both(tmp_path: Path) -> None:
    """A shard built with other options under the build's id (copied in, past the claim's
    check): the merge names it, a shard built with the build's options, and what differs."""
    a = _tsv(tmp_path / "A.tsv", "a", 40)
    dest, other = tmp_path / "s", tmp_path / "o"
    lading.build_shard(a, dest, shard=(0, 2), build_id="build-job8", progress=False)
    lading.build_shard(a, other, (1, 2), on_error="skip", build_id="build-job8", progress=False)
    shard = "build-job8/shard-00001-of-00002"
    shutil.copytree(other / shard, dest / shard)
    with pytest.raises(StoreFormatError) as caught:
        lading.merge_store(dest)
    message = str(caught.value)
    assert str(dest / shard) in message and "shard-00000-of-00002" in message, message
    assert "on_error='skip' against 'raise'" in message and "\n" not in message, message


def test_the_same_inputs_under_one_build_id_still_merge(tmp_path: Path) -> None:
    a = _tsv(tmp_path / "A.tsv", "a", 40)
    dest = tmp_path / "s"
    for i in range(3):
        lading.build_shard(a, dest, shard=(i, 3), build_id="build-same", progress=False)
    assert lading.merge_store(dest).ids() == [f"a{i}" for i in range(40)]


def test_a_huge_shard_count_is_refused_at_once(tmp_path: Path) -> None:
    a = _tsv(tmp_path / "A.tsv", "a")
    for n in (10**7, 10**11):  # the old code: 60 s and 800 MB at 10^7; no answer at 10^11
        started = time.process_time()
        with pytest.raises(ValueError, match=rf"{n:,} shards but .* hold \d+ bytes.*at most"):
            lading.build_shard(a, tmp_path / "s", shard=(0, n), progress=False)
        assert time.process_time() - started < 1.0
    assert not (tmp_path / "s").exists()


def test_the_cli_answers_a_huge_shard_count_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _tsv(tmp_path / "A.tsv", "a")
    argv = ["build", str(a), str(tmp_path / "s"), "--shard", "0/100000000000"]
    code = main(argv)
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "100,000,000,000 shards" in err and "at most" in err


def test_a_merge_of_a_build_claiming_huge_n_answers_at_once(tmp_path: Path) -> None:
    a = _tsv(tmp_path / "A.tsv", "a")
    dest = tmp_path / "s"
    lading.build_shard(a, dest, shard=(0, 2), build_id="build-x", progress=False)
    recipe = json.loads((dest / "build-x" / BUILD_FILE).read_text())
    (dest / "build-x" / BUILD_FILE).write_text(json.dumps({**recipe, "n": 10**12}))
    started = time.process_time()
    with pytest.raises(StoreFormatError, match=r"has 0 of its 1,000,000,000,000 shards"):
        lading.merge_store(dest, build_id="build-x")
    assert time.process_time() - started < 1.0


@pytest.mark.parametrize(
    "shard", [(0.5, 2), (True, 2), (0, 2.0), (0, True), ("0", 2), (0, 2, 1), (-1, 2), (0, 0)]
)
def test_a_shard_that_is_not_two_whole_numbers_is_refused(tmp_path: Path, shard: object) -> None:
    """Before, (0.5, 2) was shard 0 and (True, 2) shard 1: int() made them so, silently."""
    a = _tsv(tmp_path / "A.tsv", "a")
    with pytest.raises(ValueError, match=r"shard"):
        lading.build_shard(a, tmp_path / "s", shard=shard, progress=False)  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()


def test_how_two_inputs_differ_is_said_for_what_happened() -> None:
    """Another single file, a folder of other files, a folder that gained one, a file touched."""
    a, b, c = ["/d/a.tsv", 10, 1, 7], ["/d/b.tsv", 10, 1, 8], ["/d/c.tsv", 4, 2, 9]
    said = differ([a], [b], ("shard 1", "they"))
    assert said == "shard 1 reads '/d/a.tsv', they '/d/b.tsv': another input given"
    assert "folder or glob whose files changed" in differ([a, c], [b, c])
    assert "2 input file(s) against 3" in differ([a, c], [a, b, c])
    assert "folder or glob that gained or lost" in differ([a, c], [a, b, c])
    touched = differ([a], [[*a[:2], 2, 7]])
    assert touched == "'/d/a.tsv' changed between the two (its size, mtime or inode differs)"
