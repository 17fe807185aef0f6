"""What lading's Ray Data sinks share: every write task one shard, the driver one commit.

Ray's two-phase write is the shape of a sharded build. ``write`` runs in each task and writes
that task's rows as one shard of ``DEST/build-<id>/`` (the id drawn once, on the driver, for
this write job, in ``on_write_start``); ``on_write_complete`` runs once on the driver with the
return of every task that finished and commits exactly the shards those returns name, in task
order, as one snapshot. Exactly once, whatever fails:

- each attempt of a task writes its own folder, ``task-<n>-<random>``, renamed into place once
  whole (a local ``dest``) or uploaded with its ``shard.json`` last (an ``s3://`` one), so a
  task killed mid-write and retried by Ray (``max_retries``) leaves a partial folder, or even a
  whole one, that no return names and the commit never takes (removed after the commit);
- a task that raises fails the job: ``on_write_complete`` never runs, nothing is committed, the
  previous snapshot stays current (the job's build folder, or its objects in a bucket, are
  removed in ``on_write_failed``);
- a job rerun draws a new build id, so nothing of an earlier attempt is taken either, and a
  job that fails before its ``on_write_start`` (Ray 2.60 calls it at the first block to
  write) removes nothing: the last job's build may be the current snapshot's.

A local ``dest`` must be on a filesystem every Ray node sees; an ``s3://`` one is written by
each task through its node's cache folder (one shard at a time on local disk) and committed by
the driver in the bucket, ``meta.json`` last and only over the manifest the commit read
(:func:`lading.stores.building.remote_shards.swap_meta`): a merge that committed there
meanwhile (another job's, a ``lading merge``) fails this job's commit, which removes its
snapshot's objects, and the job fails as above, never overwriting the other's commit.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from lading.errors import missing_package

try:
    from ray.data import Datasink
except ImportError:  # pragma: no cover - depends on the environment
    raise missing_package("lading's Ray Data sinks", "Ray Data", "ray") from None

from lading.disk import BuildContext, is_ours_to_replace, write_file
from lading.disk.atomic import lading_format
from lading.disk.build import refuse_other_kind
from lading.disk.snapshot import BUILD_PREFIX
from lading.remote.objects import is_remote
from lading.remote.settings import RemoteSettings
from lading.stores.building.shardset import BUILD_FILE


class ShardSink(Datasink):
    """The part of a lading ``Datasink`` every kind shares (see the module doc).

    A kind says what it is (``fmt``, ``what``), which files a bucket merge reads of a shard
    (``need``), and defines :meth:`write_shard` (a task's rows into a folder), :meth:`read`
    (a shard's record), :meth:`commit_local` and :meth:`commit_remote`.
    """

    fmt: str = ""
    what: str = ""
    need: Callable[[dict[str, Any]], list[str]] | None = None

    def __init__(
        self,
        dest: str | os.PathLike[str],
        options: dict[str, Any],
        cache: str | os.PathLike[str] | None,
        storage_options: Any,
    ) -> None:
        self.url = os.fspath(dest) if is_remote(dest) else None
        self.dest = Path(dest).resolve() if self.url is None else Path(os.fspath(dest))
        self.options = options
        self.cache = os.fspath(cache) if cache is not None else None
        self.storage_options = dict(storage_options) if storage_options else None
        self.build_id = _new_build_id()  # each job draws its own: on_write_start
        self._started = False  # this job's on_write_start ran (its build is its own)
        self._made_dest = False  # ... and made the destination folder
        self.snapshot: str | None = None

    def settings(self) -> RemoteSettings:
        return RemoteSettings.of(self.cache, None, self.storage_options)

    def recipe(self) -> bytes:
        recipe = {"build_id": self.build_id, "options": self.options, "inputs": []}
        return json.dumps(recipe, indent=2, sort_keys=True).encode()

    def on_write_start(self, schema: Any = None) -> None:
        """On the driver, before any task runs: refuse a foreign folder or a bucket that
        refuses writes; draw this job's build (a sink written twice must not share one: the
        second job's cleanup would remove the first's committed shards) and record it."""
        self.build_id = _new_build_id()  # before Ray ships the sink to the write tasks
        if self.url is not None:
            from lading.remote.clients import check_reachable
            from lading.stores.building.bucket_kind import check_bucket_kind
            from lading.stores.building.upload import check_writable

            check_reachable(self.url, type(self).__name__)
            check_writable(self.url, self.settings(), self.what)
            check_bucket_kind(self.url, self.settings(), self.fmt)
            self._started = True  # (a bucket refused: on_write_failed has nothing to remove)
            return
        self._started = True
        self._made_dest = not self.dest.exists()  # (a failed job removes it again)
        if not is_ours_to_replace(self.dest):
            raise FileExistsError(
                f"{self.dest} exists and is not a lading {self.what}; refusing to write into it"
            )
        refuse_other_kind(self.dest, lading_format(self.dest), self.fmt, self.what)
        where = self.dest / self.build_id
        where.mkdir(parents=True, exist_ok=True)
        write_file(where / BUILD_FILE, self.recipe())

    def write(self, blocks: Iterable[Any], ctx: Any) -> dict[str, Any]:
        """In a task: this attempt's rows as one shard of its own; returns where it is."""
        from ray.data import DataContext

        task = int(ctx.task_idx)
        rel = f"{self.build_id}/task-{task:05d}-{secrets.token_hex(4)}"  # this attempt's
        # the dataset's own setting, as this task runs under it (see _refuse_dropped_tasks)
        dropping = {"max_errored_blocks": DataContext.get_current().max_errored_blocks}
        if self.url is None:
            wrote = self._write_local(self.dest, rel, blocks, task)
            return {"task": task, "dir": rel, **dropping, **wrote}
        from lading.stores.building.remote_shards import scratch_folder, upload_shard_folder

        settings = self.settings()
        with scratch_folder(settings, "ray-shard-") as scratch:
            local = scratch / "out"
            (local / self.build_id).mkdir(parents=True)
            write_file(local / self.build_id / BUILD_FILE, self.recipe())
            wrote = self._write_local(local, rel, blocks, task)
            upload_shard_folder(local, rel, self.url, settings)
        return {"task": task, "dir": rel, **dropping, **wrote}

    def _write_local(
        self, root: Path, rel: str, blocks: Iterable[Any], task: int
    ) -> dict[str, Any]:
        with BuildContext(root / rel, None, "shard") as build, build.scratch() as tmp:
            wrote = self.write_shard(blocks, tmp, task)
            build.publish_new(tmp)  # a fresh name: never taken
        return wrote

    def write_shard(self, blocks: Iterable[Any], tmp: Path, task: int) -> dict[str, Any]:
        """Write task ``task``'s rows as a whole shard in ``tmp``; what to return."""
        raise NotImplementedError

    def read(self, root: Path, rel: str) -> Any:
        raise NotImplementedError

    def commit_local(self, build: BuildContext, shards: list[Any]) -> str:
        raise NotImplementedError

    def commit_remote(
        self, settings: RemoteSettings, root: Path, previous: Any, shards: list[Any]
    ) -> str:
        """Commit ``shards`` (read from the bucket's mirror ``root``) over the bucket's manifest
        ``previous``, ``meta.json`` swapped only where ``previous`` is still current; the
        snapshot's id."""
        raise NotImplementedError

    def on_write_complete(self, write_result: Any) -> None:
        """On the driver: the shards the tasks' returns name, in task order, committed as one
        snapshot (``self.snapshot``); folders of failed attempts are removed. In a bucket the
        commit is a compare-and-swap of ``meta.json`` over the manifest mirrored here: where
        another commit landed since, :class:`~lading.errors.StoreFormatError` names it and
        this job committed nothing (Ray then calls :meth:`on_write_failed`)."""
        returns = sorted(write_result.write_returns, key=lambda r: r["task"])
        if not returns:
            from lading.errors import SourceError

            raise SourceError(
                self.url or self.dest, None, "the Ray dataset had no rows; nothing committed"
            )
        _refuse_dropped_tasks([r.get("max_errored_blocks", 0) for r in returns])
        tasks = [r["task"] for r in returns]
        if len(set(tasks)) != len(tasks):
            raise RuntimeError(f"Ray returned two results for one write task: tasks {tasks}")
        rels = [r["dir"] for r in returns]
        if any(rel.split("/")[0] != self.build_id for rel in rels):
            raise RuntimeError(
                f"Ray's write tasks wrote into {sorted({r.split('/')[0] for r in rels})}, not "
                f"this job's build {self.build_id}: this Ray version ships the sink to its "
                "tasks before on_write_start; nothing committed (report it to lading)"
            )
        if self.url is None:
            with BuildContext(self.dest, self.fmt, self.what, collect=False) as build:
                build.check_kind()  # another kind committed meanwhile: not replaced
                shards = [self.read(self.dest, rel) for rel in rels]
                self.snapshot = self.commit_local(build, shards)
            self._started = False  # committed: its build is a snapshot's, never removed
            _remove_unnamed(self.dest / self.build_id, {rel.split("/")[1] for rel in rels})
            return
        from lading.errors import SourceError, StoreFormatError
        from lading.stores.building.bucket_kind import refuse_kind_at
        from lading.stores.building.remote_shards import (
            CommitLostError,
            mirror,
            named_as,
            scratch_folder,
        )

        settings = self.settings()
        with scratch_folder(settings, "ray-merge-") as root:
            previous = mirror(self.url, settings, root, self.need)
            refuse_kind_at(self.url, previous, self.fmt)
            try:
                shards = [self.read(root, rel) for rel in rels]
                self.snapshot = self.commit_remote(settings, root, previous, shards)
                self._started = False  # committed: its build is a snapshot's
            except CommitLostError as e:  # (this job's build goes in on_write_failed)
                raise StoreFormatError(
                    f"{self.url}: {e.other} while this Ray job committed, so it committed "
                    "nothing (its shards are removed as it fails): run the job again to write "
                    "over that snapshot"
                ) from None
            except (StoreFormatError, SourceError) as e:  # named as the bucket, not the mirror
                raise named_as(e, root, self.url) from None
        self._remove_unnamed_objects(settings, {rel.split("/")[1] for rel in rels})

    def _remove_unnamed_objects(
        self, settings: RemoteSettings, named: set[str], keep: str | None = BUILD_FILE
    ) -> None:
        """Delete what this build holds in the bucket but the folders ``named`` and ``keep``:
        after the commit, what attempts that returned nothing uploaded; after a failed job
        (nothing named, nothing kept), every shard and the recipe. A failure to is only warned
        about: it must not hide the commit, nor the job's own error."""
        import warnings

        from lading.remote.clients import open_client

        assert self.url is not None
        prefix = f"{self.build_id}/"
        try:
            client = open_client(self.url, settings.backend, settings.options, settings.timeout)
            for key in client.list(prefix):
                folder = key[len(prefix) :].split("/", 1)[0]
                if folder != keep and folder not in named:
                    client.delete(key)
        except Exception as e:  # cleanup after the commit or the failure: never undo it
            warnings.warn(
                f"{self.url}/{prefix}: the leftovers of failed task attempts were not all "
                f"removed ({e!r}); they are not part of any snapshot",
                stacklevel=2,
            )

    def on_write_failed(self, error: Exception) -> None:
        """On the driver: nothing is committed; this job's build goes, its local folder or
        its objects in the bucket (the shards its finished tasks uploaded, named by no
        snapshot: they stayed there for good). A job that failed before its
        ``on_write_start`` (Ray 2.60 calls it at the first block to write: an error upstream
        comes first) started no build: nothing is removed (the build id is the last job's,
        whose snapshot may be current)."""
        started, self._started = self._started, False
        if not started:
            return
        if self.url is None:
            shutil.rmtree(self.dest / self.build_id, ignore_errors=True)
            if self._made_dest:  # the folder this job made, left empty
                with contextlib.suppress(OSError):  # (not empty: another writer's is there)
                    self.dest.rmdir()
        elif not self._named_by_bucket_meta():
            self._remove_unnamed_objects(self.settings(), set(), keep=None)

    def _named_by_bucket_meta(self) -> bool:
        """Whether the bucket's ``meta.json`` names this job's build, or may (it could not be
        read): a commit whose last PUT failed on this side (its deadline passed) may still
        have landed, and then its shards are the current snapshot's, never to be removed."""
        import warnings

        from lading.disk.meta import META_FILE
        from lading.remote.objects import PermanentError

        assert self.url is not None
        try:
            fetcher = self.settings().fetcher(self.url)
            try:
                raw: bytes | None = fetcher.get_object(META_FILE)
            except PermanentError:  # no meta.json: no snapshot at all
                raw = None
            finally:
                fetcher.close()
        except Exception as e:
            warnings.warn(
                f"{self.url}/{META_FILE} could not be read ({e!r}); the failed job's build "
                f"{self.build_id} is left in the bucket, part of no snapshot unless it names it",
                stacklevel=3,
            )
            return True
        return raw is not None and self.build_id.encode() in raw  # 16 random hex digits


def _refuse_dropped_tasks(settings: list[int]) -> None:
    """Commit nothing of a write job that Ray may have finished without some of its tasks:
    under ``DataContext.max_errored_blocks`` > 0 (or < 0: any number), a task that raised is
    dropped and the others' shards committed, its rows missing from the snapshot and said
    nowhere (a review: 200 of 300 rows committed, one bad row costing 99 good ones).
    ``settings``: the value each finished task ran under (the dataset's own copy of the
    context, which the driver's ``DataContext.get_current()`` is not)."""
    allowed = next((s for s in settings if s != 0), 0)
    if allowed != 0:
        raise ValueError(
            f"ray.data.DataContext.max_errored_blocks = {allowed} lets Ray drop a write task "
            "that raised and finish the job: its rows would be missing from the committed "
            "snapshot, said nowhere. A lading sink commits every row once or nothing: set it "
            "to 0 (Ray's default) for this write; to skip malformed rows with a count, pass "
            "on_error='skip' to the sink"
        )


def _new_build_id() -> str:
    return f"{BUILD_PREFIX}{secrets.token_hex(8)}"


def _remove_unnamed(build: Path, named: set[str]) -> None:
    """Remove what attempts that returned nothing left in ``build`` (killed mid-write, or
    after their rename): the commit took only the named shards."""
    for entry in build.iterdir() if build.is_dir() else []:
        if (
            entry.name != BUILD_FILE
            and entry.name not in named
            and not entry.name.endswith(".lock")
        ):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def arrow(block: Any) -> Any:
    """A block as an Arrow table (Ray hands Arrow or pandas)."""
    if hasattr(block, "column_names"):
        return block
    import pyarrow as pa

    return pa.Table.from_pandas(block, preserve_index=False)
