"""Which parquet files a dataset reads, local and through a bucket: one rule for both (what is
skipped, what is refused, the order), no file read twice, files compared by type alone."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from lading.tabular import PartitionedParquet, repartition
from lading.tabular.files import parquet_files
from lading.testing import LocalS3
from lading.world import World

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from sessions_files import write_sessions  # noqa: E402  # after the importorskip of pyarrow

_buckets = iter(range(1 << 30))


def ids(paths: object, **kw: object) -> list[int]:
    data = PartitionedParquet(paths, 16, columns=["session_id"], shuffle=False, world=World(), **kw)  # type: ignore[arg-type]
    return [i for batch in data for i in batch["session_id"].tolist()]


def upload_tree(s3: LocalS3, folder: Path) -> str:
    """Every file below ``folder`` under one prefix of a fresh bucket; the prefix's URL."""
    from lading.remote.clients import open_client

    bucket = f"listing-{next(_buckets)}"
    s3.make_bucket(bucket)
    client = open_client(f"s3://{bucket}")
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        client.put(f"data/{path.relative_to(folder).as_posix()}", path)
    return f"s3://{bucket}/data"


@pytest.fixture
def days(tmp_path: Path) -> Path:
    """Two day folders, ``178/`` and ``178-late/``: sorted as path parts 178/ comes first,
    sorted as strings 178-late/ does (``-`` sorts before ``/``)."""
    write_sessions(tmp_path / "days" / "178" / "train.parquet", 30, 2, seed=1)
    write_sessions(tmp_path / "days" / "178-late" / "train.parquet", 20, 1, seed=2)
    return tmp_path / "days"


@pytest.mark.parametrize(
    "paths",
    [
        ["{d}", "{d}/178/train.parquet"],  # a folder and a file inside it
        ["{d}/178", "{d}/178"],  # the same folder twice
        ["{d}", "{link}"],  # a folder and a link to one inside it
    ],
)
def test_a_file_reached_twice_is_refused_naming_it_and_both_inputs(
    days: Path, paths: list[str]
) -> None:
    link = days.parent / "link"
    link.symlink_to(days / "178")
    given = [p.format(d=days, link=link) for p in paths]
    with pytest.raises(ValueError, match="twice") as e:
        ids(given)
    message = str(e.value)
    assert "train.parquet" in message and given[0] in message and given[1] in message


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_a_folder_holding_one_file_twice_by_a_link_names_the_link(days: Path, link: str) -> None:
    """A folder holding a link to one of its own files: refused saying "the folder is given
    twice" (it was given once); a hard link was not seen at all, its rows read twice every
    epoch (a review's finds). Both name the two paths as one file."""
    again = days / "178-late" / "again.parquet"
    target = days / "178" / "train.parquet"
    if link == "symlink":
        again.symlink_to(target)
    else:
        os.link(target, again)
    with pytest.raises(ValueError, match="twice") as e:
        ids([str(days)])
    message = str(e.value)
    assert "is given twice" not in message, message
    assert "again.parquet" in message and "178/train.parquet" in message, message
    assert "one file" in message, message


def test_repartition_of_overlapping_inputs_is_refused(days: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="twice"):
        repartition([days / "178", days / "178" / "train.parquet"], tmp_path / "rep")
    assert not (tmp_path / "rep").exists()


def test_a_prefix_reads_its_files_in_the_local_order(s3: LocalS3, days: Path) -> None:
    """Path parts, not key strings: the same batches from the folder and its bucket copy."""
    url = upload_tree(s3, days)
    local = PartitionedParquet(days, 16, columns=["session_id"], shuffle=False, world=World())
    remote = PartitionedParquet(url, 16, columns=["session_id"], shuffle=False, world=World())
    assert [Path(f).parent.name for f in local.files] == ["178", "178-late"]
    assert [f.rsplit("/", 2)[1] for f in remote.files] == ["178", "178-late"]
    assert [b["session_id"].tolist() for b in local] == [b["session_id"].tolist() for b in remote]
    assert local.state_dict() == remote.state_dict()  # the digests agree: a state moves over
    remote.close()


def test_a_prefix_holding_a_nested_repartition_is_refused_as_the_folder_is(
    s3: LocalS3, days: Path
) -> None:
    repartition(days / "178", days / "rep")
    url = upload_tree(s3, days)
    for where in (days, url):
        with pytest.raises(ValueError, match="lading repartition"):
            ids(where)


def test_a_prefix_skips_build_debris_as_the_folder_does(s3: LocalS3, days: Path) -> None:
    debris = days / f"rep.old-{os.getpid()}-0a1b2c"
    shutil.copytree(days / "178", debris)
    url = upload_tree(s3, days)
    assert len(ids(days)) == 50  # 30 + 20 rows, the copy left out
    assert Counter(ids(url)) == Counter(ids(days))


def test_the_same_object_twice_is_refused(s3: LocalS3, days: Path) -> None:
    url = upload_tree(s3, days)
    with pytest.raises(ValueError, match="twice"):
        ids([url, f"{url}/178/train.parquet"])


def test_a_file_rewritten_through_pandas_matches_on_type(tmp_path: Path) -> None:
    """pandas drops 'not null' from a list's items: the same types, read together."""
    items = pa.list_(pa.field("element", pa.int64(), nullable=False))
    schema = pa.schema([pa.field("items", items, nullable=False)])
    table = pa.table({"items": pa.array([[1, 2], [3]], items)}, schema=schema)
    pq.write_table(table, tmp_path / "a.parquet")
    pq.write_table(pa.Table.from_pandas(table.to_pandas()), tmp_path / "b.parquet")
    data = PartitionedParquet(tmp_path, 4, list_columns={"items": 3}, shuffle=False, world=World())
    assert sum(len(b["items"]) for b in data) == 4


def test_a_real_null_in_a_nullable_file_is_still_refused(tmp_path: Path) -> None:
    items = pa.list_(pa.field("element", pa.int64(), nullable=False))
    schema = pa.schema([pa.field("items", items, nullable=False)])
    pq.write_table(
        pa.table({"items": pa.array([[1, 2]], items)}, schema=schema), tmp_path / "a.parquet"
    )
    pq.write_table(pa.table({"items": [[3, None]]}), tmp_path / "b.parquet")
    data = PartitionedParquet(tmp_path, 4, list_columns={"items": 3}, shuffle=False, world=World())
    with pytest.raises(ValueError, match="null item"):
        list(data)


def test_another_type_is_still_refused(tmp_path: Path) -> None:
    pq.write_table(pa.table({"items": [[1, 2]]}), tmp_path / "a.parquet")
    pq.write_table(
        pa.table({"items": pa.array([[3.0]], pa.list_(pa.float64()))}), tmp_path / "b.parquet"
    )
    with pytest.raises(ValueError, match="double"):
        PartitionedParquet(tmp_path, 4, list_columns={"items": 3}, world=World())


def test_a_day_folder_that_is_a_link_is_read_with_the_others(days: Path, tmp_path: Path) -> None:
    """A day kept on another disk and linked into the data folder: its rows were left out
    without a word (the walk did not follow linked folders, though it read linked files);
    ``lading repartition`` lost them too. A link back up the tree is read once, not for ever."""
    other = tmp_path / "other-disk" / "179"
    write_sessions(other / "train.parquet", 25, 1, seed=3)
    (days / "179").symlink_to(other)
    (days / "178" / "loop").symlink_to(days)  # a cycle: the walk must end
    (days / "178" / "loop").unlink()
    want = sorted(ids(days / "178") + ids(days / "178-late") + ids(other))
    (days / "178" / "loop").symlink_to(days)
    (days / "latest").symlink_to(days / "178")  # a second name of a folder read anyway
    (days / "178-late" / "up").symlink_to(tmp_path)  # leads above: never read from
    write_sessions(tmp_path / "test-set" / "held-out.parquet", 5, 1, seed=4)
    assert sorted(ids(days)) == want  # every file once, the loop not walked round
    named = [str(p.relative_to(days)) for p in parquet_files([days])]
    assert "178/train.parquet" in named and not any(n.startswith("latest") for n in named)
    repartition(days, tmp_path / "out", row_group_size=10)
    assert sorted(ids(tmp_path / "out")) == want


def test_folders_and_files_of_underscore_or_dot_are_skipped_as_pyarrow_skips_them(
    s3: LocalS3, days: Path, tmp_path: Path
) -> None:
    """Spark leaves a job's attempts in ``_temporary/`` and copies in ``.spark-staging-*/``
    beside its output; pyarrow, Spark and dask read none of them. They were read as data:
    every row two or three times, every epoch (and copied so by repartition)."""
    for debris in ("_temporary/0/attempt_1", ".spark-staging-12"):
        shutil.copytree(days / "178", days / debris)
    shutil.copy(days / "178" / "train.parquet", days / "178" / "_part.parquet")
    assert pq.read_table(days).num_rows == 50  # pyarrow's own reading of the folder
    assert sorted(ids(days)) == sorted(list(range(30)) + list(range(20)))
    url = upload_tree(s3, days)
    assert Counter(ids(url)) == Counter(ids(days))
    assert repartition(days, tmp_path / "out", world_size=1).rows == 50


def test_an_empty_file_pandas_typed_null_is_read_with_the_others(tmp_path: Path) -> None:
    """An empty split written by pandas has its list column typed ``null`` (no value to infer
    one from): pyarrow reads the folder, lading refused it as another type (and blamed the
    good file where the empty one sorted first). A file of no rows is read for none."""
    table = pa.table({"session_id": [1, 2], "items": [[1, 2], [3]]})
    pq.write_table(table, tmp_path / "a.parquet")
    table.to_pandas().iloc[:0].to_parquet(tmp_path / "0_empty.parquet", index=False)
    assert pq.read_schema(tmp_path / "0_empty.parquet").field("items").type == pa.null()
    data = PartitionedParquet(tmp_path, 4, list_columns={"items": 3}, shuffle=False, world=World())
    assert [b["session_id"].tolist() for b in data] == [[1, 2]]
    assert repartition(tmp_path, tmp_path / "out", world_size=1).rows == 2


def test_one_object_named_is_found_by_one_head_not_a_listing_of_its_bucket(
    s3: LocalS3, days: Path
) -> None:
    """An object at a bucket's top (or in a folder holding much else) is found by a HEAD of its
    key: a LIST of what is above it would walk the whole bucket. Several objects of one folder
    are found by one LIST of it (one request, not a HEAD each); a Spark folder named
    ``x.parquet`` is found by a LIST of that folder alone."""
    from lading.remote.clients import open_client

    url = upload_tree(s3, days)
    bucket = url.split("/")[2]
    client = open_client(f"s3://{bucket}")
    client.put("top.parquet", days / "178" / "train.parquet")
    client.put("spark.parquet/part-0.parquet", days / "178-late" / "train.parquet")
    s3.reset()
    assert sorted(ids(f"s3://{bucket}/top.parquet")) == list(range(30))
    assert (s3.stats()["lists"], s3.stats()["heads"]) == (0, 1)
    s3.reset()
    assert sorted(ids(f"s3://{bucket}/spark.parquet")) == list(range(20))
    assert s3.stats()["lists"] == 1  # the folder's own, after the HEAD found no object
    client.put("pair/a.parquet", days / "178" / "train.parquet")
    client.put("pair/b.parquet", days / "178-late" / "train.parquet")
    s3.reset()
    pair = [f"s3://{bucket}/pair/a.parquet", f"s3://{bucket}/pair/b.parquet"]
    assert sorted(ids(pair)) == sorted(list(range(30)) + list(range(20)))
    assert (s3.stats()["lists"], s3.stats()["heads"]) == (1, 0)
    with pytest.raises(FileNotFoundError, match="no parquet object at"):
        ids(f"s3://{bucket}/missing.parquet")


def test_parquet_not_named_dot_parquet_is_said_not_read_local_bucket_and_cli(
    s3: LocalS3, days: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Hive table's files (``000000_0``, ``part-00001``: no suffix) and ``*.parq`` beside
    ``*.parquet`` were passed over without a word: a loader read 24 % of the rows, and
    `lading repartition` wrote a copy without the rest. They are named, with the fix; a
    README or a CSV beside the data is not."""
    from lading.cli import main
    from lading.errors import SkippedFilesWarning

    shutil.copy(days / "178" / "train.parquet", days / "178" / "part-00001")
    shutil.copy(days / "178" / "train.parquet", days / "178-late" / "b.parq")
    (days / "README.txt").write_text("about the days\n")
    (days / "LICENSE").write_text("CC BY 4.0\n")  # no suffix, as a Hive file has none
    (days / "178" / "empty").write_bytes(b"")  # (an object store's folder marker: 0 bytes)
    (days / "178" / "extra.csv").write_text("a,b\n1,2\n")
    for source in (days, upload_tree(s3, days)):
        with pytest.warns(SkippedFilesWarning) as said:
            assert len(ids(source)) == 50  # (what is read is unchanged: the *.parquet files)
        assert len(said) == 1, [str(w.message) for w in said]
        line = str(said[0].message)
        assert "2 " in line and "178/part-00001" in line and "178-late/b.parq" in line, line
        assert "README" not in line and "extra.csv" not in line, line
        assert "LICENSE" not in line and "empty" not in line, line
        assert "rename them *.parquet, or pass them as a list" in line, line
    assert main(["repartition", str(days), str(tmp_path / "out"), "--world-size", "1"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"lading repartition: warning: {days}: 2 file(s) hold parquet"), err
