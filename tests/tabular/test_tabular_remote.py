"""PartitionedParquet over object storage (the local S3, with its latency and faults): the
batches of the local files, at any worker count, resumed with a cold cache and elastically,
within the node cache's cap; a rewritten object refused; bad input named in one line."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import HEALTHY_S
from lading.errors import LadingError
from lading.remote.objects import RemoteReadError
from lading.tabular import PartitionedParquet
from lading.testing import LocalS3
from lading.world import World

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from sessions_files import write_sessions  # noqa: E402  # after the importorskip of pyarrow

FILES = 3
ROWS = 97  # a file: 291 sessions, 4 row groups a file
KW: dict[str, Any] = {"list_columns": {"items": 6}, "seed": 3, "buffer_rows": 16}
_caches = iter(range(1 << 30))


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sessions as local files: what the remote ones must read the same as."""
    folder = tmp_path_factory.mktemp("sessions")
    for i in range(FILES):
        path = write_sessions(folder / f"part-{i}.parquet", ROWS, 4, seed=i)
        table = pq.read_table(path)  # session ids unique across the files: i * ROWS + row
        ids = pa.array(table.column("session_id").to_numpy() + i * ROWS)
        pq.write_table(table.set_column(0, "session_id", ids), path, row_group_size=25)
    return folder


def upload(s3: LocalS3, folder: Path, bucket: str, prefix: str = "logs/sessions") -> str:
    from lading.remote.clients import open_client

    s3.make_bucket(bucket)
    client = open_client(f"s3://{bucket}")
    for path in sorted(folder.glob("*.parquet")):
        client.put(f"{prefix}/{path.name}", path)
    return f"s3://{bucket}/{prefix}/"


@pytest.fixture(scope="module")
def url(s3: LocalS3, local: Path) -> str:
    """The same files in a bucket (uploaded once for the module)."""
    return upload(s3, local, "parquet-sessions")


def cold(tmp_path: Path) -> Path:
    """A node cache nobody used: a cold node."""
    return tmp_path / f"cache-{next(_caches)}"


def same(got: list[dict[str, torch.Tensor]], want: list[dict[str, torch.Tensor]]) -> None:
    assert len(got) == len(want) > 0
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.keys() == b.keys(), i
        for name in a:
            assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), (i, name)


def ids(batches: list[dict[str, torch.Tensor]]) -> list[list[int]]:
    return [b["session_id"].tolist() for b in batches]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("form", ["prefix", "list"])
def test_remote_batches_equal_the_local_files(
    url: str, local: Path, tmp_path: Path, workers: int, form: str
) -> None:
    paths: Any = url if form == "prefix" else [f"{url}part-{i}.parquet" for i in range(FILES)]
    want = list(PartitionedParquet(local, 8, **KW))
    remote = PartitionedParquet(
        paths, 8, cache=cold(tmp_path), cache_bytes="4M", num_workers=workers,
        multiprocessing_context="fork", **KW,
    )  # fmt: skip
    assert remote.files == [f"{url}part-{i}.parquet" for i in range(FILES)]
    same(list(remote), want)
    remote.set_epoch(1)  # another epoch, another order, the same as the local one's
    local_next = PartitionedParquet(local, 8, **KW)
    local_next.set_epoch(1)
    same(list(remote), list(local_next))
    stats = remote.cache_stats()
    assert stats["bytes_cached"] <= stats["cap"] and stats["gets"] > 0
    if not workers:  # built on a thread beside the caller's step; local files: when asked
        assert remote.workers.read_ahead == 2
        assert PartitionedParquet(local, 8, **KW).workers.read_ahead == 0


def test_dataloader_workers_over_remote_files_are_warned_against(
    url: str, local: Path, tmp_path: Path
) -> None:
    """As for stores and token corpora: parquet files in a bucket under DataLoader workers
    warn, naming the files and the fix; at 0 workers, or local files with workers, nothing."""
    import warnings

    with pytest.warns(UserWarning, match=rf"{FILES} parquet files \({url}part-0.parquet, "
                      r"\.\.\.\) is read from object storage with num_workers=2"):  # fmt: skip
        PartitionedParquet(url, 8, cache=cold(tmp_path), num_workers=2, **KW)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PartitionedParquet(url, 8, cache=cold(tmp_path), **KW)
        PartitionedParquet(local, 8, num_workers=2, **KW)


def test_remote_batches_built_when_asked_are_the_same(
    url: str, local: Path, tmp_path: Path
) -> None:
    want = list(PartitionedParquet(local, 8, **KW))
    inline = PartitionedParquet(url, 8, cache=cold(tmp_path), cache_bytes="4M", read_ahead=0, **KW)
    same(list(inline), want)


def test_row_groups_are_fetched_ahead_and_each_fetched_once(
    url: str, s3: LocalS3, tmp_path: Path
) -> None:
    """The loader announces the chunks ahead: the reads find their row groups fetched (no
    unplanned read), and with the cap holding the dataset each row group is one GET."""
    loader = PartitionedParquet(url, 8, cache=cold(tmp_path), cache_bytes="4M", **KW)
    s3.reset()
    list(loader)
    stats = loader.cache_stats()
    assert stats["unplanned"] == 0, stats
    got = s3.stats()["gets_by_key"]
    assert set(got) == {f"parquet-sessions/logs/sessions/part-{i}.parquet" for i in range(3)}
    assert sum(got.values()) <= FILES * 4, got  # a row group is one range, fetched once


def test_the_row_groups_asked_for_ahead_are_fetched_before_close_returns(
    url: str, s3: LocalS3, tmp_path: Path
) -> None:
    """A loader that closes waits (within the remote deadline) for the GETs its announcements
    queued: one call at a time and slow GETs keep several queued at ``close``. Before, they
    went out after ``close`` returned."""
    loader = PartitionedParquet(url, 8, cache=cold(tmp_path), cache_bytes="4M", **KW)
    assert loader.remote is not None
    fetcher = loader.remote.cache(loader.remote.files[0].root).fetcher
    fetcher.in_flight, fetcher._slots = 10, None  # one call at a time
    s3.reset()
    s3.fault("parquet-sessions/", 1000, "slow", delay=0.15)
    try:
        with loader:
            next(iter(loader))
        gets = s3.stats()["gets"]
        time.sleep(1.0)  # queued calls would go out one a 0.15 s
        after = s3.stats()["gets"]
    finally:
        s3.reset()
    assert after == gets, f"{after - gets} GETs went out after the loader's close returned"


def test_a_closed_loader_lets_its_node_cache_go_and_reads_again_when_asked(
    url: str, local: Path, tmp_path: Path
) -> None:
    """``PartitionedParquet`` opens its files itself, so it owns them: after ``with loader:``
    no fill thread runs and the node cache is closed (both stayed, with the node's files,
    until exit), a later pass reads again from the kept position, and its close lets the
    node go again (a cache made over a closed fetcher never gave its node back)."""
    from lading.remote.cache import node

    folder = cold(tmp_path)
    with PartitionedParquet(url, 8, cache=folder, cache_bytes="4M", **KW) as loader:
        first = list(loader)
        assert loader.remote is not None
        held = loader.remote.cache(loader.remote.files[0].root).node
        fill = held.filler._thread
        assert fill is not None and fill.is_alive()
    same(first, list(PartitionedParquet(local, 8, **KW)))
    assert folder.absolute() not in node._NODES.by_folder
    assert not fill.is_alive()
    loader.set_epoch(1)
    local_next = PartitionedParquet(local, 8, **KW)
    local_next.set_epoch(1)
    same(list(loader), list(local_next))
    assert loader.cache_stats()["bytes_used"] > 0  # the second pass's, through a new view
    loader.close()
    assert folder.absolute() not in node._NODES.by_folder


def test_footers_are_staged_once_per_node(url: str, s3: LocalS3, tmp_path: Path) -> None:
    cache = cold(tmp_path)
    s3.reset()
    PartitionedParquet(url, 8, cache=cache, cache_bytes="4M", **KW)
    assert s3.stats()["gets"] == FILES  # one GET of each object's end
    s3.reset()
    again = PartitionedParquet(url, 8, cache=cache, cache_bytes="4M", **KW)  # another rank
    assert s3.stats()["gets"] == 0 and s3.stats()["lists"] == 1
    assert len(list((cache / "parquet").glob("*.footer"))) == FILES
    assert again.total_rows == FILES * ROWS


def test_each_chunk_is_read_at_the_step_it_was_announced_for(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step a read names (from its batch key, in whichever process builds the batch) is
    the one the loader announced its row groups at: the plan's next uses are right."""
    from lading.tabular.remote import RemoteParquet

    announced: dict[Any, set[int]] = {}
    reads: list[tuple[Any, int | None]] = []
    prefetch, read = RemoteParquet.prefetch, RemoteParquet.read

    def told(self: Any, batches: Any, first_step: int, now: int | None = None) -> None:
        for j, pieces in enumerate(batches):
            for piece in pieces:
                announced.setdefault(piece, set()).add(first_step + j)
        prefetch(self, batches, first_step, now)

    def reading(self: Any, pieces: Any, step: int | None, columns: Any = None) -> Any:
        reads.extend((piece, step) for piece in pieces)
        return read(self, pieces, step, columns)

    monkeypatch.setattr(RemoteParquet, "prefetch", told)
    monkeypatch.setattr(RemoteParquet, "read", reading)
    loader = PartitionedParquet(url, 8, cache=cold(tmp_path), cache_bytes="4M", **KW)
    loader.set_epoch(2)
    list(loader)
    ours = [(piece, step) for piece, step in reads if step is not None and step >> 32 == 2]
    assert len(ours) >= 12  # every row group, some twice (split between two chunks)
    for piece, step in reads:  # (the read-ahead thread may be into epoch 3's first batches)
        assert step is not None and step >> 32 in (2, 3) and step in announced[piece], (piece, step)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_resumes_with_a_cold_cache(
    url: str, local: Path, tmp_path: Path, workers: int
) -> None:
    full = list(PartitionedParquet(local, 8, **KW))
    first = PartitionedParquet(
        url, 8, cache=cold(tmp_path), cache_bytes="4M", num_workers=workers,
        multiprocessing_context="fork", **KW,
    )  # fmt: skip
    head = []
    for batch in first:
        head.append(batch)
        if len(head) == 13:  # mid-chunk (16-row chunks, 8-row batches: every other batch)
            break
    state = first.state_dict()
    resumed = PartitionedParquet(
        url, 8, cache=cold(tmp_path), cache_bytes="4M", num_workers=workers,
        multiprocessing_context="fork", **KW,
    )  # fmt: skip
    resumed.load_state_dict(state)
    same(head + list(resumed), full)
    if workers == 0:  # the chunk the resume starts in was announced too
        assert resumed.cache_stats()["unplanned"] == 0


def test_a_state_of_the_local_files_resumes_on_their_upload(
    url: str, local: Path, tmp_path: Path
) -> None:
    """The data's fingerprint is the files' names, sizes and footers: the same files in a
    bucket are the same data (a run moved from a node's disk to object storage resumes)."""
    full = list(PartitionedParquet(local, 8, **KW))
    first = PartitionedParquet(local, 8, **KW)
    head = [b for _, b in zip(range(5), first)]
    resumed = PartitionedParquet(url, 8, cache=cold(tmp_path), cache_bytes="4M", **KW)
    resumed.load_state_dict(first.state_dict())
    same(head + list(resumed), full)


def _elastic_rank(rank: int, world: int, url: str, cache: str, state: Any, stop: int) -> Any:
    """One gloo rank: read ``stop`` batches (or the rest after ``state``), save the state."""
    loader = PartitionedParquet(url, 5, cache=cache, cache_bytes="4M", equalize="pad", **KW)
    assert loader.world.world_size == world and loader.world.rank == rank
    loader.set_epoch(1)
    if state is not None:
        loader.load_state_dict(state)
    seen = []
    for batch in loader:
        seen.append(batch["session_id"].tolist())
        if len(seen) == stop:
            break
    return seen, loader.state_dict()


@pytest.mark.slow  # six spawned processes (torch imports): ~20 s on two cores
def test_elastic_resume_four_ranks_to_two_over_a_remote_dataset(
    url: str, local: Path, tmp_path: Path
) -> None:
    from distributed import run_processes

    cache = str(cold(tmp_path))  # one node: the six processes share its cache
    before = run_processes(_elastic_rank, 4, url, cache, None, 6)
    states = [state for _, state in before]
    assert all(s == states[0] for s in states)
    after = run_processes(_elastic_rank, 2, url, cache, states[0], 1 << 30)
    # the same run over the local files, in this process, reads the same batches
    for world, runs in ((4, before), (2, after)):
        for rank, (seen, _) in enumerate(runs):
            loader = PartitionedParquet(local, 5, world=World(rank, world), equalize="pad", **KW)
            loader.set_epoch(1)
            if world == 2:
                loader.load_state_dict(states[0])
            assert ids([b for _, b in zip(range(len(seen)), loader)]) == seen
    counts = Counter(
        s for _, runs in ((4, before), (2, after)) for seen, _ in runs for b in seen for s in b
    )
    assert set(counts) == set(range(FILES * ROWS))
    assert sum(counts.values()) - FILES * ROWS < 4  # padding only


def _on_disk(cache: Path) -> tuple[int, int]:
    """Bytes the node cache folder holds on disk: the payload file, everything else."""
    from lading.remote.cache.regions import folder_bytes

    return folder_bytes(cache)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_cap_is_never_exceeded_on_disk(s3: LocalS3, tmp_path: Path, workers: int) -> None:
    """A dataset ~3x the cap: the blocks stay within it and the rest of the folder within its
    second budget after every batch (the process announcing and its DataLoader workers
    reading share it), and the batches are the local files'."""
    folder = tmp_path / "big"
    for i in range(6):  # row groups of ~500 rows, ~23 KB: under a region (a sixteenth of the cap)
        write_sessions(folder / f"part-{i}.parquet", 6000, 12, seed=10 + i)
    total = sum(p.stat().st_size for p in folder.iterdir())
    url = upload(s3, folder, f"parquet-cap-{workers}")
    cap = 600_000
    assert total > 2.5 * cap, total
    cache = cold(tmp_path)
    kw = {**KW, "buffer_rows": 2048}
    want = PartitionedParquet(folder, 256, **kw)
    remote = PartitionedParquet(
        url, 256, cache=cache, cache_bytes=cap, num_workers=workers,
        multiprocessing_context="fork", **kw,
    )  # fmt: skip
    worst, budget = 0, remote.cache_stats()["index_bytes"]
    for a, b in zip(remote, want):
        same([a], [b])
        payload, rest = _on_disk(cache)
        worst = max(worst, payload)
        assert payload <= cap, f"{payload:,} bytes of blocks on disk, cap {cap:,}"
        assert rest <= budget, f"{rest:,} bytes besides the blocks, index_bytes {budget:,}"
    stats = remote.cache_stats()
    assert worst > cap // 8, (worst, stats)  # the cache was put to use (blocks kept)


def test_a_cap_below_one_row_group_reads_around_the_cache(
    url: str, local: Path, tmp_path: Path
) -> None:
    with pytest.warns(UserWarning, match=r"cache_bytes=1,000 caches no row group past .*raise"):
        remote = PartitionedParquet(url, 8, cache=cold(tmp_path), cache_bytes=1000, **KW)
    same(list(remote), list(PartitionedParquet(local, 8, **KW)))
    assert remote.cache_stats()["bytes_cached"] <= 1000


@pytest.mark.parametrize("workers", [0, 2])
def test_an_object_rewritten_mid_run_is_refused_never_mixed(
    s3: LocalS3, local: Path, tmp_path: Path, workers: int
) -> None:
    """A file replaced by other rows while a run reads: each batch is the old data's until a
    read meets the new version, which fails naming the object and the fix (DataLoader workers,
    forked, read through fsspec: pinned too). Was: the new bytes decoded at the old offsets."""
    url = upload(s3, local, f"parquet-rewritten-{workers}")
    want = list(PartitionedParquet(local, 8, **KW))
    cache = cold(tmp_path)
    list(PartitionedParquet(url, 8, cache=cache, cache_bytes="4M", **KW))  # the old version cached
    with pytest.warns(UserWarning, match="caches no row group past"):  # every GET is a read's
        remote = PartitionedParquet(
            url, 8, cache=cold(tmp_path), cache_bytes=1000, num_workers=workers,
            multiprocessing_context="fork", **KW,
        )  # fmt: skip
    others = tmp_path / "others"
    for n in range(FILES):  # same layout, other values
        write_sessions(others / f"part-{n}.parquet", ROWS, 4, seed=99 + n)
    from lading.remote.clients import open_client

    got = []
    with pytest.raises(RemoteReadError, match=r"(?s)rewritten while this dataset read it.*again"):
        for i, batch in enumerate(remote):
            got.append(batch)
            if i == 2:
                for n in range(FILES):
                    open_client(url).put(f"part-{n}.parquet", others / f"part-{n}.parquet")
    same(got, want[: len(got)])  # what came before the error was the old data, never mixed
    assert 3 <= len(got) < len(want)
    # opened again on the node that staged and cached the old version: the new one, whole
    again = PartitionedParquet(url, 8, cache=cache, cache_bytes="4M", **KW)
    same(list(again), list(PartitionedParquet(others, 8, **KW)))


@pytest.mark.parametrize(
    "kind",
    ["reset", pytest.param("slow", marks=pytest.mark.slow), "error"],  # slow: ~5 s
)
def test_faults_on_row_group_gets_still_give_the_right_batches(
    url: str, local: Path, s3: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # an attempt has HEALTHY_S: the healthy GETs must come in time whatever the load
    # (tests/conftest.py); a slow answer costs a whole attempt, so it comes once
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", str(HEALTHY_S))
    remote = PartitionedParquet(url, 8, cache=cold(tmp_path), cache_bytes="4M", **KW)
    hits = 1 if kind == "slow" else 2
    s3.fault("part-1.parquet", hits, kind, delay=2 * HEALTHY_S, status=503)
    try:
        same(list(remote), list(PartitionedParquet(local, 8, **KW)))
        assert s3.stats()["faults"] == hits
    finally:
        s3.reset()


# -- bad input: one line each, naming the fix ---------------------------------------------------


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and isinstance(error, (LadingError, ValueError, OSError)), text
    return text


@pytest.mark.parametrize("scheme", ["nosuch", "ftpx"])
def test_a_scheme_lading_cannot_reach(tmp_path: Path, scheme: str) -> None:
    with pytest.raises(LadingError) as caught:
        PartitionedParquet(f"{scheme}://logs/sessions/", 8, cache=cold(tmp_path))
    text = _one_line(caught.value)
    assert f"cannot reach {scheme}://" in text and "s3://" in text and "local folder" in text


def test_a_prefix_holding_no_parquet(s3: LocalS3, tmp_path: Path) -> None:
    from lading.remote.clients import open_client

    s3.make_bucket("parquet-empty")
    open_client("s3://parquet-empty").put("logs/readme.txt", b"no parquet here")
    with pytest.raises(ValueError) as caught:
        PartitionedParquet("s3://parquet-empty/logs/", 8, cache=cold(tmp_path))
    text = _one_line(caught.value)
    assert "no *.parquet objects below s3://parquet-empty/logs/" in text and "point at" in text


def test_a_missing_object_and_one_that_is_not_parquet(
    url: str, local: Path, tmp_path: Path
) -> None:
    """A missing object is a RemoteNotFoundError (docs/remote-stores.md: every failure talking
    to object storage is a lading.RemoteError; still a FileNotFoundError); a junk or empty
    object, or one whose footer does not decode (was: pyarrow's "Couldn't deserialize thrift",
    naming no object), is named as not parquet, with no GET retried against the endpoint."""
    from lading.errors import RemoteNotFoundError

    with pytest.raises(RemoteNotFoundError) as missing:
        PartitionedParquet([f"{url}part-9.parquet"], 8, cache=cold(tmp_path))
    assert isinstance(missing.value, FileNotFoundError)
    assert "no parquet object at s3://parquet-sessions/logs/sessions/part-9.parquet" in _one_line(
        missing.value
    )
    from lading.remote.clients import open_client

    good = bytearray((local / "part-0.parquet").read_bytes())
    footer = len(good) - 8 - int.from_bytes(good[-8:-4], "little")
    good[footer + 10 : footer + 60] = b"\xff" * 50  # its length and PAR1 kept
    for body in (b"not parquet at all", b"", bytes(good)):
        open_client(url).put("broken.parquet", body)
        try:
            with pytest.raises(ValueError) as broken:
                PartitionedParquet([f"{url}broken.parquet"], 8, cache=cold(tmp_path))
            text = _one_line(broken.value)
            assert "broken.parquet is not a parquet file" in text and "failed" not in text
        finally:
            open_client(url).delete("broken.parquet")


def test_a_null_counted_in_a_footer_is_named_with_its_url_and_row(
    s3: LocalS3, tmp_path: Path
) -> None:
    folder = tmp_path / "nulls"
    folder.mkdir()
    scores = pa.array([0.5, 1.5, None, 2.5] * 5, pa.float32())
    table = pa.table({"session_id": pa.array(range(20), pa.int64()), "score": scores})
    pq.write_table(table, folder / "part-0.parquet", row_group_size=8)
    url = upload(s3, folder, "parquet-nulls")
    with pytest.raises(ValueError) as caught:
        PartitionedParquet(url, 4, cache=cold(tmp_path))
    text = _one_line(caught.value)
    assert "s3://parquet-nulls/logs/sessions/part-0.parquet, row group 0, row 2" in text
    assert "fill_null" in text


def test_a_damaged_row_group_is_named(local: Path, s3: LocalS3, tmp_path: Path) -> None:
    from lading.remote.clients import open_client

    data = bytearray((local / "part-0.parquet").read_bytes())
    data[8:400] = bytes(392)  # the first column chunks' pages, zeroed (the footer intact)
    s3.make_bucket("parquet-damaged")
    open_client("s3://parquet-damaged").put("part-0.parquet", bytes(data))
    loader = PartitionedParquet("s3://parquet-damaged/", 8, cache=cold(tmp_path), **KW)
    with pytest.raises(ValueError) as caught:
        list(loader)
    text = _one_line(caught.value)
    assert "s3://parquet-damaged/part-0.parquet, row group" in text and "write it again" in text


def test_row_groups_past_the_objects_end_are_named_damaged_not_a_short_reply(
    local: Path, s3: LocalS3, tmp_path: Path
) -> None:
    """Bytes cut from an object's middle (a botched concatenation), its footer intact: its
    column chunks lie past its end. Each GET of them came back short and was retried as a
    network fault ("check that the endpoint is up"); the local route says the file is
    damaged."""
    from lading.remote.clients import open_client

    data = (local / "part-1.parquet").read_bytes()
    s3.make_bucket("parquet-cut")
    open_client("s3://parquet-cut").put("part-1.parquet", data[:4] + data[4 + 3000 :])
    started = time.monotonic()
    with pytest.raises(ValueError) as caught:
        list(PartitionedParquet("s3://parquet-cut/", 8, cache=cold(tmp_path), **KW))
    text = _one_line(caught.value)
    assert "s3://parquet-cut/part-1.parquet, row group" in text and "write it again" in text
    assert "endpoint" not in text and time.monotonic() - started < HEALTHY_S


def test_repartition_refuses_a_url(tmp_path: Path) -> None:
    from lading.tabular import repartition

    with pytest.raises(LadingError) as caught:
        repartition(["s3://logs/sessions/part-0.parquet"], tmp_path / "out")
    text = _one_line(caught.value)
    assert "lading repartition takes a local folder, not the URL s3://logs/" in text
    assert not (tmp_path / "out").exists()


def test_urls_and_local_paths_mixed(url: str, local: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError) as caught:
        PartitionedParquet([f"{url}part-0.parquet", local / "part-1.parquet"], 8)
    assert "mix URLs" in _one_line(caught.value)


def test_a_pickled_dataset_reopens_nothing(url: str, s3: LocalS3, tmp_path: Path) -> None:
    """What DataLoader workers get (spawn): files, footers and settings; no client, no cache."""
    import pickle

    remote = PartitionedParquet(url, 8, cache=cold(tmp_path), cache_bytes="4M", **KW)
    next(iter(remote))
    assert remote.remote is not None
    raw = pickle.dumps(remote.remote)
    assert not any(footer in raw for footer in remote.remote.footers if footer)  # staged, not sent
    copy = pickle.loads(raw)
    assert copy.urls == remote.remote.urls and copy._caches == {} and copy._fetchers == {}
    for cache in remote.remote._caches.values():
        cache.drain()  # the row groups fetched ahead are in
    s3.reset()
    for url_ in copy.urls:  # the footers from the node's staged copies: no GET
        assert copy.metadata(url_).to_dict() == remote.remote.metadata(url_).to_dict()
    assert s3.stats()["gets"] == 0


def test_columns_whose_names_hold_a_dot_read_from_a_bucket(s3: LocalS3, tmp_path: Path) -> None:
    """A leaf of list column ``item.seq`` is ``item.seq.list.element``: its ranges are those of
    the top-level field, never of the dot-split ``item`` (whose bytes were never fetched)."""
    import numpy as np

    folder = tmp_path / "dots"
    folder.mkdir()
    n = 300
    table = pa.table(
        {
            "sid": pa.array(np.arange(n), pa.int64()),
            "item": pa.array(np.arange(n) * 2, pa.int64()),  # beside "item.seq"
            "item.seq": pa.array([list(range(i % 7)) for i in range(n)], pa.list_(pa.int64())),
            "price.usd": pa.array(np.arange(n, dtype=np.float64)),
        }
    )
    pq.write_table(table, folder / "a.parquet", row_group_size=100)
    for i, columns in enumerate([None, ["sid", "item.seq"], ["item.seq", "price.usd"]]):
        kw: dict[str, Any] = {"list_columns": {"item.seq": 5}, "seed": 1, "columns": columns}
        want = list(PartitionedParquet(folder, 32, **kw))
        url = upload(s3, folder, f"parquet-dots-{i}", "p")
        same(list(PartitionedParquet(url, 32, cache=cold(tmp_path), **kw)), want)


def test_a_column_named_like_a_struct_fields_path_reads_from_a_bucket(
    s3: LocalS3, tmp_path: Path
) -> None:
    """Top-level ``meta.x`` beside struct ``meta{x}``: pyarrow reads a name by its dotted path,
    so ``columns=["meta.x"]`` decodes the struct's leaf as well; its bytes are fetched too,
    and the bucket gives what the local files give (not "not fetched: the object is damaged")."""
    import numpy as np

    folder = tmp_path / "shadow"
    folder.mkdir()
    n = 120
    table = pa.table(
        {
            "sid": pa.array(np.arange(n), pa.int64()),
            "meta.x": pa.array(np.arange(n) * 3, pa.int64()),
            "meta": pa.array([{"x": i * 5} for i in range(n)]),
        }
    )
    pq.write_table(table, folder / "a.parquet", row_group_size=40)
    kw: dict[str, Any] = {"seed": 3, "columns": ["sid", "meta.x"]}
    want = list(PartitionedParquet(folder, 16, **kw))
    assert [int(v) for v in want[0]["meta.x"]] == [3 * int(s) for s in want[0]["sid"]]
    url = upload(s3, folder, "parquet-shadow", "p")
    same(list(PartitionedParquet(url, 16, cache=cold(tmp_path), **kw)), want)


def test_a_folder_named_like_a_parquet_object_is_read_as_a_folder(
    s3: LocalS3, tmp_path: Path
) -> None:
    """Spark writes ``out/sessions.parquet/part-*.parquet``: without a trailing slash that URL
    is the folder when no object has that key (as the local folder of that name is)."""
    import numpy as np

    from lading.remote.clients import open_client

    folder = tmp_path / "sessions.parquet"
    folder.mkdir()
    for i in range(2):
        ids = pa.array(np.arange(i * 10, i * 10 + 10), pa.int64())
        pq.write_table(pa.table({"sid": ids}), folder / f"part-0000{i}.snappy.parquet")
    (folder / "_SUCCESS").write_bytes(b"")
    want = list(PartitionedParquet(folder, 4, seed=2))
    s3.make_bucket("parquet-spark")
    client = open_client("s3://parquet-spark")
    for path in sorted(folder.iterdir()):
        client.put(f"out/sessions.parquet/{path.name}", path)
    for url in (
        "s3://parquet-spark/out/sessions.parquet",
        "s3://parquet-spark/out/sessions.parquet/",
    ):
        loader = PartitionedParquet(url, 4, seed=2, cache=cold(tmp_path))
        assert len(loader.files) == 2, url
        same(list(loader), want)
    with pytest.raises(FileNotFoundError) as caught:  # no object and no folder: still refused
        PartitionedParquet("s3://parquet-spark/out/other.parquet", 4, cache=cold(tmp_path))
    assert "no parquet object at s3://parquet-spark/out/other.parquet" in _one_line(caught.value)


def test_folder_markers_are_folders_not_empty_objects(s3: LocalS3, tmp_path: Path) -> None:
    """The S3 console and Hadoop's S3A keep a 0-byte ``name/`` key for each folder; obstore
    lists it as ``name``. A Spark output's marker ``out/a.parquet/`` was taken for an empty
    parquet object ("not a parquet file (0 bytes ...); remove it"), reading the prefix above
    or two outputs named side by side (one LIST of their folder)."""
    import urllib.request

    import numpy as np

    from lading.remote.clients import open_client

    folder = tmp_path / "spark"
    want_files = []
    for name in ("a.parquet", "b.parquet"):
        (folder / name).mkdir(parents=True)
        for i in range(2):
            ids = pa.array(np.arange(i * 10, i * 10 + 10) + (100 if name == "b.parquet" else 0))
            want_files.append(folder / name / f"part-0000{i}.parquet")
            pq.write_table(pa.table({"sid": ids}), want_files[-1])
    want = list(PartitionedParquet(want_files, 4, seed=2))
    s3.make_bucket("parquet-markers")
    client = open_client("s3://parquet-markers")
    for key in ("out/", "out/a.parquet/", "out/b.parquet/"):  # raw PUTs: the slash kept
        put = urllib.request.Request(f"{s3.endpoint}/parquet-markers/{key}", b"", method="PUT")
        urllib.request.urlopen(put, timeout=HEALTHY_S).close()
    for path in want_files:
        client.put(f"out/{path.parent.name}/{path.name}", path)
    root = "s3://parquet-markers/out"
    for urls in ([f"{root}/"], [f"{root}/a.parquet", f"{root}/b.parquet"]):
        loader = PartitionedParquet(urls, 4, seed=2, cache=cold(tmp_path))
        assert [f.rsplit("/", 2)[-2] for f in map(str, loader.files)] == ["a.parquet"] * 2 + [
            "b.parquet"
        ] * 2, urls
        same(list(loader), want)


def test_an_object_deleted_mid_run_names_the_parquet_fix(
    s3: LocalS3, local: Path, tmp_path: Path
) -> None:
    """A deleted object is named with a parquet dataset's fix (open PartitionedParquet again,
    or write the files again), not the document store's "reopen the store, or rebuild it"."""
    from lading.remote.clients import open_client

    url = upload(s3, local, "parquet-deleted")
    with pytest.warns(UserWarning, match="caches no row group past"):  # every read a GET
        remote = PartitionedParquet(url, 8, cache=cold(tmp_path), cache_bytes=1000, **KW)
    list(remote)
    client = open_client(url)
    # every object goes, and two passes are read: the plan may have fetched the next pass's
    # first row groups before the delete (one CI run under load read a whole pass without a
    # failed GET when only part-1 went); two passes of all files cannot all be fetched ahead
    names = [f"part-{i}.parquet" for i in range(FILES)]
    for name in names:
        client.delete(name)
    with pytest.raises(RemoteReadError) as caught:
        for _ in range(2):
            list(remote)
    text = _one_line(caught.value)
    assert any(f"s3://parquet-deleted/logs/sessions/{name}" in text for name in names), text
    assert "PartitionedParquet again" in text and "store" not in text, text


# -- real data ----------------------------------------------------------------------------------


@pytest.mark.e2e
def test_yoochoose_sessions_read_the_same_from_a_bucket(
    s3: LocalS3, data_dir: Path, tmp_path: Path
) -> None:
    """The Transformers4Rec YOOCHOOSE days (../shared/data, SOURCES.md 3a) uploaded to the
    local S3 and read by prefix: the batches of the local files, at 2 ranks."""
    days = data_dir / "recsys" / "yoochoose_t4r_preproc_sessions_by_day"
    files = sorted(days.glob("*/train.parquet"))
    if not files:
        pytest.skip(f"no YOOCHOOSE sessions at {days}/*/train.parquet (SOURCES.md 3a)")
    from lading.remote.clients import open_client

    s3.make_bucket("yoochoose")
    client = open_client("s3://yoochoose")
    for path in files:
        client.put(f"sessions/{path.parent.name}/train.parquet", path)
    kw: dict[str, Any] = {
        "columns": ["session_id", "item_id-count", "item_id-list_seq"],
        "list_columns": {"item_id-list_seq": 20},
        "seed": 1,
    }
    cache = cold(tmp_path)
    for rank in range(2):
        world = World(rank, 2)
        remote = PartitionedParquet(
            "s3://yoochoose/sessions/", 512, world=world, cache=cache, cache_bytes="64M", **kw
        )
        assert len(remote.files) == len(files)
        same(list(remote), list(PartitionedParquet(files, 512, world=world, **kw)))


@pytest.mark.parametrize("cap", [1000, 3 << 20, 4 << 30])
@pytest.mark.parametrize("largest", [5000, 600_000, 20 << 20])
def test_the_too_small_warning_names_a_fix_that_fixes(cap: int, largest: int) -> None:
    """The warning's cap must hold the row group; above the largest region (16 MiB) no cap
    does, and the warning says so (was: 'raise cache_bytes to 2,663,681,280' at a 4 GiB cap,
    and '1/16 of the cap' for a region that was 1/256 of it)."""
    import re
    import warnings
    from types import SimpleNamespace

    from lading.remote.cache.regions import MAX_REGION, Layout
    from lading.tabular.remote import warn_if_too_small

    source = SimpleNamespace(
        largest_group=lambda: largest,
        settings=SimpleNamespace(cache_bytes=cap, region_bytes=None),
    )
    region = Layout.of(cap).region_bytes
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warn_if_too_small(source)  # type: ignore[arg-type]
    if largest <= region:
        assert not seen
        return
    (message,) = (str(w.message) for w in seen)
    assert f"caches no row group past {region:,} bytes" in message, message
    assert f"the largest reads {largest:,} bytes" in message, message  # (was: the cap "cannot
    # hold one row group" of 62,928 bytes at a cap of 614,400: the region could not)
    if largest > MAX_REGION:
        assert "raise cache_bytes" not in message and "lading repartition" in message, message
        return
    asked = int(re.search(r"raise cache_bytes to ([\d,]+)", message)[1].replace(",", ""))  # type: ignore[index]
    assert asked > cap and Layout.of(asked).region_bytes >= largest, message
    assert f"1/{cap // region}" in message or f"1/{Layout.of(cap).regions}" in message, message


# -- figures, errors and the node after the edges of a dataset's life -----------------------


def test_the_figures_after_close_are_the_runs_and_open_nothing(url: str, tmp_path: Path) -> None:
    """``cache_stats()`` after ``with loader:`` gives the run's figures, as they were at
    close, and opens no node cache (it made a new one, which nothing closed, and read its
    figures: every count 0, ``by_epoch`` empty)."""
    from lading.remote.cache import node

    folder = cold(tmp_path)
    with PartitionedParquet(url, 8, cache=folder, cache_bytes="4M", **KW) as loader:
        list(loader)
        inside = loader.cache_stats()
    after = loader.cache_stats()
    assert folder.absolute() not in node._NODES.by_folder
    for name in ("gets", "bytes_fetched", "bytes_used", "misses"):  # (the next pass's first
        assert after[name] >= inside[name] > 0, name  # batches may be read ahead meanwhile)
    assert after["by_epoch"][0] == inside["by_epoch"][0]
    assert after["process"]["gets"] == after["gets"]
    unread = cold(tmp_path)
    never = PartitionedParquet(url, 8, cache=unread, cache_bytes="4M", **KW)
    never.close()  # closed before any read: nothing to count, nothing to open (was: opened
    assert never.cache_stats()["gets"] == 0  # the node cache, its ledger and data file, and
    assert unread.absolute() not in node._NODES.by_folder  # left them open)


def test_figures_of_several_buckets_are_summed_all_through(
    s3: LocalS3, local: Path, tmp_path: Path
) -> None:
    """Over two buckets, ``"process"`` and ``"by_epoch"`` sum both buckets' reads as the top
    level does (each was the last bucket's alone)."""
    one = upload(s3, local, "parquet-sum-one")
    two = upload(s3, local, "parquet-sum-two", "other/logs")
    loader = PartitionedParquet(
        [one, two], 8, cache=cold(tmp_path), cache_bytes="4M", read_ahead=0, **KW
    )  # (read_ahead=0: no thread reads the next pass between the figures compared)
    list(loader)
    assert loader.remote is not None
    loader.remote.settle(HEALTHY_S)  # (the GETs announced ahead answered)
    stats = loader.cache_stats()
    roots = sorted({f.root for f in loader.remote.files})
    assert len(roots) == 2
    each = [loader.remote.cache(root).stats() for root in roots]
    for name in ("gets", "bytes_fetched", "bytes_used", "misses", "hits"):
        assert stats["process"][name] == stats[name] == sum(e[name] for e in each), name
    epochs = {e for s in each for e in s["by_epoch"]}
    want = {e: tuple(map(sum, zip(*(s["by_epoch"].get(e, (0, 0)) for s in each)))) for e in epochs}
    assert stats["by_epoch"] == want and stats["process"]["by_epoch"] == want
    assert all(s["by_epoch"] for s in each)  # both buckets were read in an epoch
    loader.close()


def test_an_object_rewritten_while_opening_names_the_parquet_fix(
    s3: LocalS3, local: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object replaced between the LIST and its footer's GET is refused with a parquet
    dataset's fix, as one replaced before a row group's read is (it said "reopen the store,
    or rebuild it")."""
    import lading.tabular.remote as remote
    from lading.remote.clients import open_client

    url = upload(s3, local, "parquet-rewritten-open")
    listed = remote.list_files

    def racing(urls: Any, fetchers: Any) -> Any:
        found = listed(urls, fetchers)
        open_client(url).put("part-0.parquet", (local / "part-1.parquet").read_bytes())
        return found

    monkeypatch.setattr(remote, "list_files", racing)
    with pytest.raises(RemoteReadError) as caught:
        PartitionedParquet(url, 8, cache=cold(tmp_path), **KW)
    text = _one_line(caught.value)
    assert "part-0.parquet" in text
    assert "PartitionedParquet again" in text and "store" not in text, text


def test_a_dataset_that_fails_to_open_lets_its_node_cache_go(s3: LocalS3, tmp_path: Path) -> None:
    """A constructor that raises after reading a row group (a null counted in a footer,
    checked by reading it) closes the node cache it opened (it stayed, with its files and
    threads, one more a failed attempt)."""
    from lading.remote.cache import node

    folder = tmp_path / "nulls"
    folder.mkdir()
    scores = pa.array([0.5, None, 1.5, 2.5] * 5, pa.float32())
    table = pa.table({"session_id": pa.array(range(20), pa.int64()), "score": scores})
    pq.write_table(table, folder / "part-0.parquet", row_group_size=8)
    url = upload(s3, folder, "parquet-nulls-closed")
    cache = cold(tmp_path)
    with pytest.raises(ValueError, match="fill_null"):
        PartitionedParquet(url, 4, cache=cache)
    assert cache.absolute() not in node._NODES.by_folder


def test_an_object_with_no_etag_rewritten_at_its_size_is_read_anew(tmp_path: Path) -> None:
    """A store that lists no ETag (fsspec's ``memory://``; ``file://`` too) gives the
    object's modification time instead: a file rewritten at the same size, opened again on the
    same node cache, reads its new rows (it read the old ones, from the staged footer and the
    cached blocks of the old version, without an error)."""
    import io

    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")

    def written(first: int) -> bytes:
        out = io.BytesIO()
        table = pa.table({"session_id": pa.array(range(first, first + 40), pa.int64())})
        pq.write_table(
            table, out, row_group_size=10, compression="none", use_dictionary=False,
            write_statistics=False,
        )  # fmt: skip
        return out.getvalue()

    old, new = written(0), written(1000)
    assert len(old) == len(new) and old != new
    url = f"memory://no-etag-{next(_caches)}/d/"
    fs.pipe_file(f"{url}a.parquet", old)
    cache = cold(tmp_path)
    with PartitionedParquet(url, 40, cache=cache, shuffle=False, read_ahead=0) as loader:
        assert sorted(next(iter(loader))["session_id"].tolist()) == list(range(40))
    time.sleep(0.01)  # (a later modification time, on any clock)
    fs.pipe_file(f"{url}a.parquet", new)
    with PartitionedParquet(url, 40, cache=cache, shuffle=False, read_ahead=0) as again:
        assert sorted(next(iter(again))["session_id"].tolist()) == list(range(1000, 1040))


def test_an_object_named_that_is_not_a_parquet_file(s3: LocalS3, tmp_path: Path) -> None:
    """A URL naming an existing object without the .parquet suffix (a user's meta.json, a
    .csv) was taken for a prefix: "no *.parquet objects below s3://.../meta.json/", a folder
    that does not exist. Now the object is named as not a parquet file."""
    from lading.remote.clients import open_client

    s3.make_bucket("parquet-named")
    client = open_client("s3://parquet-named")
    client.put("logs/meta.json", b"{}")
    client.put("logs/day.parquet", b"PAR1")
    with pytest.raises(ValueError) as caught:
        PartitionedParquet("s3://parquet-named/logs/meta.json", 8, cache=cold(tmp_path))
    text = _one_line(caught.value)
    assert "s3://parquet-named/logs/meta.json is an object, not parquet files" in text, text
    assert "below s3://parquet-named/logs/meta.json/" not in text, text


def test_a_cache_folder_made_with_another_cap_is_refused_at_construction(
    url: str, tmp_path: Path
) -> None:
    """A review: the refusal came at the first batch (inside a DataLoader worker, wrapped in
    its traceback), where a document store refuses it as it opens."""
    from lading.remote.cache.ledger import CacheSettingsError

    folder = cold(tmp_path)
    with PartitionedParquet(url, 8, cache=folder, cache_bytes="4M", **KW) as loader:
        next(iter(loader))
    with pytest.raises(CacheSettingsError) as caught:
        PartitionedParquet(url, 8, cache=folder, cache_bytes="8M", **KW)
    assert "cache_bytes=4,194,304" in _one_line(caught.value)


def test_a_row_group_cached_for_one_file_set_serves_another(
    url: str, s3: LocalS3, tmp_path: Path
) -> None:
    """The node cache named a dataset's blocks by its whole list of files: another list (a
    validation day beside the training days, one file of the same folder) fetched and kept
    every row group again. ``lading train sessions`` opens four lists in one run: 111 GETs
    where 59 did (a review's measure). Blocks are named by their object's version now."""
    cache = cold(tmp_path)
    both = [f"{url}part-0.parquet", f"{url}part-1.parquet"]
    with PartitionedParquet(both, 8, cache=cache, cache_bytes="4M", **KW) as loader:
        list(loader)
    s3.reset()
    with PartitionedParquet(both[1:], 8, cache=cache, cache_bytes="4M", **KW) as one:
        rows = sum(len(b["session_id"]) for b in one)
        stats = one.cache_stats()
    assert rows == ROWS
    assert s3.stats()["gets"] == 0 and stats["misses"] == 0, (s3.stats(), stats)
