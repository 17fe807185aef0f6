"""A Ray token sink into s3:// whose merge is refused names the URL, not its scratch mirror
(a folder already deleted when the error is read). The sink's phases are driven in this process,
as test_ray_tokens.py's first test does (no Ray cluster)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import word_tokenizer
from lading.errors import SourceError
from lading.testing import LocalS3

pytest.importorskip("ray")
pytest.importorskip("tokenizers")
pa = pytest.importorskip("pyarrow")


def test_a_job_of_no_documents_is_refused_naming_the_url(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    from lading.integrations.ray_tokens import LadingTokenDatasink

    tok = word_tokenizer(["alpha", "beta"], tmp_path / "t.json")
    url = f"s3://{bucket}/a"
    sink = LadingTokenDatasink(url, tok, on_error="skip", cache=tmp_path / "c")
    sink.on_write_start()
    nulls = pa.table({"text": pa.array([None, None], pa.string())})
    ret = sink.write([nulls], SimpleNamespace(task_idx=0))
    with pytest.raises(SourceError, match="no documents in any shard") as e:
        sink.on_write_complete(SimpleNamespace(write_returns=[ret]))
    assert e.value.path == url and str(tmp_path) not in str(e.value)


def test_a_failed_store_job_leaves_nothing_of_its_build_in_the_bucket(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """A task that raises fails the job: the shard another task had uploaded stayed in the
    bucket under the job's build, named by no snapshot and never removed (a folder ``dest``
    loses its build folder in ``on_write_failed``); the current snapshot is kept."""
    import lading
    from lading.integrations.ray import LadingDatasink
    from lading.remote.settings import RemoteSettings

    url = f"s3://{bucket}/s"
    sink = LadingDatasink(url, cache=tmp_path / "c")
    sink.on_write_start()
    first = sink.write([pa.table({"id": ["a"], "text": ["x"]})], SimpleNamespace(task_idx=0))
    sink.on_write_complete(SimpleNamespace(write_returns=[first]))
    committed = sink.snapshot
    sink.on_write_start()  # a rerun whose task 1 meets a null id
    sink.write([pa.table({"id": ["b"], "text": ["y"]})], SimpleNamespace(task_idx=0))
    with pytest.raises(SourceError, match="null id") as e:
        sink.write([pa.table({"id": [None], "text": ["z"]})], SimpleNamespace(task_idx=1))
    sink.on_write_failed(e.value)
    fetcher = RemoteSettings.of(tmp_path / "l", None, None).fetcher(url)
    try:
        left = fetcher.list(f"{sink.build_id}/")
    finally:
        fetcher.close()
    assert list(left) == []  # the keys under the build
    store = lading.open_store(url, cache=tmp_path / "r")
    assert store.snapshot == committed and store.ids() == ["a"]


def test_a_job_whose_commit_landed_keeps_its_build_when_ray_reports_a_failure(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """A commit whose ``meta.json`` PUT passed its deadline here but landed in the bucket
    fails ``on_write_complete``, and Ray then calls ``on_write_failed``: the build the bucket's
    ``meta.json`` names is the current snapshot's, and stays."""
    import lading
    from lading.integrations.ray import LadingDatasink

    url = f"s3://{bucket}/s"
    sink = LadingDatasink(url, cache=tmp_path / "c")
    sink.on_write_start()
    ret = sink.write(
        [pa.table({"id": ["a", "b"], "text": ["x", "y"]})], SimpleNamespace(task_idx=0)
    )
    sink.on_write_complete(SimpleNamespace(write_returns=[ret]))
    sink._started = True  # as if the commit had raised after its meta.json landed
    sink.on_write_failed(RuntimeError("meta.json PUT passed its deadline"))
    store = lading.open_store(url, cache=tmp_path / "r")
    assert store.snapshot == sink.snapshot and store.get_many(["a", "b"]) == ["x", "y"]


def test_a_job_stopped_by_a_refused_bucket_removes_nothing_and_warns_nothing(
    s3: LocalS3, tmp_path: Path
) -> None:
    """``on_write_start`` refused the bucket: the job has no build there to remove."""
    import warnings

    from lading.integrations.ray import LadingDatasink

    sink = LadingDatasink("s3://no-such-bucket/s", cache=tmp_path / "c")
    with pytest.raises(Exception, match="no-such-bucket") as e:
        sink.on_write_start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sink.on_write_failed(e.value)  # type: ignore[arg-type]
    assert [str(w.message) for w in caught] == []
