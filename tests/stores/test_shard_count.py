"""The shard count a refusal advises: ``--shard i/N`` over files that cannot all be cut at
lines (compressed, not TSV/JSONL) is refused where a shard would read nothing, and the refusal
names the most shards below N the input allows, a count that is itself accepted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lading.stores.building.inputs import check_shard_count


def jsonl_only(path: Path) -> bool:
    """Which files a token corpus cuts at lines (plain text and WikiExtractor go whole)."""
    return path.name.endswith(".jsonl")


def accepted(files: list[Path], n: int) -> bool:
    try:
        check_shard_count(files, n, None, jsonl_only)
    except ValueError:
        return False
    return True


def refused(files: list[Path], n: int) -> str:
    """The refusal of ``n`` shards."""
    with pytest.raises(ValueError, match=r"at most [\d,]+ shards") as refusal:
        check_shard_count(files, n, None, jsonl_only)
    return str(refusal.value)


def advised(files: list[Path], n: int) -> int:
    """The K of "Use at most K shards" in the refusal of ``n``."""
    said = re.search(r"at most ([\d,]+) shards", refused(files, n))
    assert said is not None
    return int(said.group(1).replace(",", ""))


def layout(folder: Path, sizes: list[tuple[str, int]]) -> list[Path]:
    """Files of these suffixes and sizes, in order (only the bytes count, not what they say)."""
    folder.mkdir()
    files = []
    for k, (suffix, size) in enumerate(sizes):
        path = folder / f"{k:03d}{suffix}"
        path.write_bytes(b"x" * size)
        files.append(path)
    return files


def test_the_reviewed_folder_is_advised_a_count_it_accepts(tmp_path: Path) -> None:
    """Two small JSONL files around a .jsonl.gz and a large WikiExtractor slice: 50 shards were
    refused with "at most 6", and 6 with "at most 2" (the search stepped down from the shards
    the 50-shard plan reads, a few times only)."""
    files = layout(
        tmp_path / "c",
        [(".jsonl", 2_608), (".jsonl.gz", 104_816), (".txt", 232_992), (".jsonl", 72_321)],
    )
    for n in (3, 6, 50, 1_000, 10**9):
        k = advised(files, n)
        assert accepted(files, k), (n, k)
        assert not any(accepted(files, m) for m in range(k + 1, min(n, 2_000))), (n, k)
    assert [n for n in range(1, 60) if accepted(files, n)] == [1, 2]


@pytest.mark.parametrize("seed", range(24))
def test_the_advised_count_is_the_most_below_n_that_is_accepted(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    kinds = (".jsonl", ".jsonl.gz", ".txt")
    sizes = [
        (kinds[int(rng.integers(3))], int(rng.choice([0, 1, 2, 7, 40, 300, 900])))
        for _ in range(int(rng.integers(1, 7)))
    ]
    files = layout(tmp_path / "c", sizes)
    total = sum(size for _, size in sizes)
    ok = [n for n in range(1, total + 2) if accepted(files, n)]
    for n in sorted({2, 3, 5, 17, 50, 400, total, total + 1, 10 * total + 3}):
        if n in ok:
            continue
        k = advised(files, n)
        assert k == max(m for m in ok if m < n), (sizes, n, k)
        sure = re.search(r"any count up to (\d+) works", refused(files, n))
        if sure:  # said only where a count below k is refused, and up to it all are accepted
            assert set(range(1, int(sure.group(1)) + 1)) <= set(ok), (sizes, n, sure)
            assert not set(range(1, k + 1)) <= set(ok), (sizes, n, k)


def test_a_last_shard_given_only_an_empty_file_is_refused(tmp_path: Path) -> None:
    """An empty file after a compressed one went to the last shard, which counted as reading
    something: 2 shards were accepted, the second reading no record."""
    files = layout(tmp_path / "c", [(".jsonl.gz", 40), (".jsonl", 0)])
    assert "shard 1 would read nothing" in refused(files, 2)
    assert advised(files, 2) == 1


def _twelve_shards(tmp_path: Path) -> Path:
    import lading

    src = tmp_path / "c.tsv"
    src.write_text("".join(f"d{i}\ttext number {i}\n" for i in range(600)))
    for i in range(12):
        lading.build_shard(src, tmp_path / "s", (i, 12), progress=False)
    lading.merge_store(tmp_path / "s")
    return tmp_path / "s"


# a child whose limit of open files leaves room for 6 more than it holds: 12 shards' maps, ~2
# a column a shard, need more where each map keeps a descriptor
_LOW_LIMIT = """
import os, resource, sys
import lading
{setup}
used = len(os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (used + 6, resource.getrlimit(
    resource.RLIMIT_NOFILE)[1]))
try:
    store = lading.open_store({path!r})
except OSError as e:
    print(e)
    sys.exit(3)
print(len(os.listdir("/proc/self/fd")) - used, store.get_many(["d0", "d599"]))
"""


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="lowers RLIMIT_NOFILE in a child (Linux)"
)
def test_a_store_of_more_shards_than_open_files_allow_opens_and_holds_no_descriptor(
    tmp_path: Path,
) -> None:
    """Python's ``mmap`` keeps a descriptor a map (~2 a column a shard): a store merged from a
    few hundred shards needed more than the 1,024 open files many systems allow, and its open
    failed with ``[Errno 24] Too many open files`` (as here on the old code: 12 shards in a
    child with room for 6 more files). Maps now keep none (:mod:`lading.disk.maps`): it opens,
    reads, and holds no more descriptors than before the open."""
    store = _twelve_shards(tmp_path)
    child = _LOW_LIMIT.format(setup="", path=str(store))
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    assert done.stdout.strip() == "0 ['text number 0', 'text number 599']", done.stdout


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="lowers RLIMIT_NOFILE in a child (Linux)"
)
def test_where_maps_keep_descriptors_too_many_shards_say_what_to_do(tmp_path: Path) -> None:
    """Where the platform has no C library to map with, Python's ``mmap`` keeps a descriptor
    a map, and a store of more shards than the limit allows is refused naming the shards, the
    limit and the fix (it failed with a bare ``[Errno 24]`` before that message)."""
    store = _twelve_shards(tmp_path)
    fallback = "import lading.disk.files as f\nf.map_file = f.c_library = lambda *a: None"
    child = _LOW_LIMIT.format(setup=fallback, path=str(store))
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    said = done.stdout.strip()
    assert done.returncode == 3, (done.returncode, said, done.stderr[-2000:])
    assert "12 shards" in said and "ulimit -n" in said and "fewer shards" in said, said


def test_empty_input_is_named_empty_not_given_a_shard_count(tmp_path: Path) -> None:
    """Files of 0 bytes in shards: the refusal said "each shard needs at least one byte ...
    Use at most 1 shards", as if one shard would build; it now says the input is empty."""
    empty = tmp_path / "a.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(ValueError) as refusal:
        check_shard_count([empty], 2, None, jsonl_only)
    said = str(refusal.value)
    assert "Use at most" not in said, said
    assert "hold no bytes" in said and str(empty) in said, said


def test_a_refusal_says_what_the_count_is_under_shard_auto(tmp_path: Path) -> None:
    """Under ``shard="auto"`` the count of shards is the world size: a review found the
    refusal advising only "--shard I/N with a smaller N", which a torchrun user cannot pass."""
    tiny = layout(tmp_path / "tiny", [(".jsonl", 3)])
    packed = layout(tmp_path / "packed", [(".jsonl.gz", 500), (".jsonl.gz", 500)])
    for files, n in ((tiny, 5), (packed, 3)):
        assert "under shard='auto', as many ranks at most" in refused(files, n)
