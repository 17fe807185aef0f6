"""``train_sessions`` on days in object storage (the local S3, 30 ms a request): a prefix laid
out as ``<prefix>/<day>/<split>.parquet`` trains to the local folder's losses and metrics; a
missing day is one error naming every missing object and the layout; a URL made into a
``Path`` is refused naming the string to pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import node_cache_from_env
from lading.errors import LadingError
from lading.testing import LocalS3

pytest.importorskip("pyarrow")
torch = pytest.importorskip("torch")

from sessions_files import write_sessions  # noqa: E402  # after the importorskip of pyarrow

BUCKET = "sessions-train"
SPLITS = {"train": 60, "valid": 10, "test": 10}  # rows a split of a day
TINY: dict[str, Any] = {
    "train_days": [1], "eval_day": 2, "column": "items", "max_len": 6, "batch_size": 8,
    "steps": 3, "dim": 8, "heads": 2, "parallel": "none", "log_every": 1, "progress": False,
}  # fmt: skip


@pytest.fixture(scope="module")
def days(s3: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Days 1 and 2 as local folders and the same objects below a prefix."""
    from lading.remote.clients import open_client

    root = tmp_path_factory.mktemp("days")
    s3.make_bucket(BUCKET)
    client = open_client(f"s3://{BUCKET}")
    for day in (1, 2):
        for split, rows in SPLITS.items():
            path = write_sessions(root / str(day) / f"{split}.parquet", rows, 2, seed=day)
            client.put(f"logs/yoochoose/{day}/{split}.parquet", path)
    return root, f"s3://{BUCKET}/logs/yoochoose"


@pytest.fixture
def node_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return node_cache_from_env(tmp_path, monkeypatch, "4M")


def losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "log.jsonl").read_text().splitlines()]


def test_day_files_of_a_prefix_are_the_objects_of_each_day(
    days: tuple[Path, str], node_cache: Path
) -> None:
    from lading.tabular.train import day_files

    _, url = days
    want = [f"{url}/{d}/{s}.parquet" for d in (1, 2) for s in ("train", "test")]
    assert day_files(url + "/", [1, 2], ("train", "test")) == want


@pytest.mark.usefixtures("one_thread")
def test_a_prefix_trains_to_the_local_folder_losses_and_metrics(
    days: tuple[Path, str], node_cache: Path, s3: LocalS3, tmp_path: Path
) -> None:
    """The same sessions in the same order (equal losses at every step), the same item count
    and evaluation; the row groups came by GETs into the node cache ``$LADING_CACHE`` names."""
    from lading.tabular.train import SessionsConfig, train_sessions

    local, url = days
    want = train_sessions(SessionsConfig(data=local, out=tmp_path / "local", **TINY))
    s3.reset()
    got = train_sessions(SessionsConfig(data=url, out=tmp_path / "remote", **TINY))
    assert s3.stats()["gets"] > 0 and any(node_cache.iterdir())
    assert len(losses(tmp_path / "remote")) == TINY["steps"]
    assert losses(tmp_path / "remote") == losses(tmp_path / "local")
    for key in ("num_items", "model", "most_popular"):
        assert got[key] == want[key], key
    assert got["model"]["sessions"] > 0 and got["config"]["data"] == url


def test_a_missing_day_names_every_missing_object_and_the_layout(
    days: tuple[Path, str], node_cache: Path
) -> None:
    from lading.tabular.train import day_files

    _, url = days
    with pytest.raises(LadingError) as caught:
        day_files(url, [1, 3, 4], ("train", "valid"))
    message = str(caught.value)
    assert f"{url}/3/train.parquet" in message and f"{url}/4/valid.parquet" in message
    assert f"{url}/1/train.parquet" not in message
    assert "one folder per day" in message and "train.parquet, valid.parquet" in message
    assert isinstance(caught.value, FileNotFoundError)  # as the local folder's error is


def test_a_missing_day_of_a_local_folder_is_the_same_error(days: tuple[Path, str]) -> None:
    from lading.tabular.train import day_files

    local, _ = days
    with pytest.raises(LadingError, match=r"3/train.parquet.*one folder per day"):
        day_files(local, [1, 3], ("train",))


def test_a_url_made_into_a_path_is_refused_naming_the_string(tmp_path: Path) -> None:
    """``Path("s3://b/x")`` is ``s3:/b/x``: it was looked for on disk and reported missing as
    ``s3:/b/x/178/train.parquet``."""
    from lading.tabular.train import SessionsConfig

    with pytest.raises(LadingError, match=r"data='s3://bucket/yoochoose'"):
        SessionsConfig(data=Path("s3://bucket/yoochoose"), out=tmp_path)


@pytest.mark.slow  # two whole runs with the evaluation of a real day: ~30 s on 2 cores
def test_yoochoose_days_train_the_same_from_a_bucket(
    s3: LocalS3, data_dir: Path, node_cache: Path, tmp_path: Path, one_thread: None
) -> None:
    """The Transformers4Rec YOOCHOOSE days (../shared/data, SOURCES.md 3a) uploaded to the
    local S3: two steps on day 178 and the evaluation on day 179 equal the local folder's."""
    from lading.remote.clients import open_client
    from lading.tabular.train import SessionsConfig, train_sessions

    days = data_dir / "recsys" / "yoochoose_t4r_preproc_sessions_by_day"
    files = [days / str(d) / f"{s}.parquet" for d in (178, 179) for s in ("train", "valid", "test")]
    if not all(f.is_file() for f in files):
        pytest.skip(f"no YOOCHOOSE days 178-179 at {days} (SOURCES.md 3a)")
    s3.make_bucket("yoochoose-days")
    client = open_client("s3://yoochoose-days")
    for path in files:
        client.put(f"t4r/{path.parent.name}/{path.name}", path)
    kw: dict[str, Any] = {
        "train_days": [178], "eval_day": 179, "steps": 2, "dim": 16, "batch_size": 64,
        "parallel": "none", "log_every": 1, "progress": False,
    }  # fmt: skip
    want = train_sessions(SessionsConfig(data=days, out=tmp_path / "local", **kw))
    got = train_sessions(SessionsConfig(data="s3://yoochoose-days/t4r", out=tmp_path / "s3", **kw))
    assert losses(tmp_path / "s3") == losses(tmp_path / "local")
    for key in ("num_items", "model", "most_popular"):
        assert got[key] == want[key], key
