"""Exceptions and warnings lading raises, each naming the file, the place and the fix."""

from __future__ import annotations

import errno
import os


class LadingError(Exception):
    """Base class of every error lading raises on purpose."""


def missing_package(what: str, package: str, extra: str) -> ImportError:
    """The error for ``what`` needing ``package``, which is not installed: one line naming
    the extra of lading that brings it (``pip install 'lading[extra]'``)."""
    return ImportError(f"{what} needs {package}. To install:\n  pip install 'lading[{extra}]'")


class SourceError(LadingError, ValueError):
    """A record of an input file could not be read.

    Attributes:
        path: the file that holds the bad record.
        line: 1-based line number where the record starts (None when unknown).
        reason: what was expected and what was found.
    """

    def __init__(self, path: str | os.PathLike[str], line: int | None, reason: str) -> None:
        self.path = os.fspath(path)
        self.line = line
        self.reason = reason
        where = f"line {line} of {self.path}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple[type[SourceError], tuple[str, int | None, str]]:
        """Rebuilt from its three fields (Ray and process pools pickle a task's error)."""
        return type(self), (self.path, self.line, self.reason)


class ParquetError(LadingError, ValueError):
    """A parquet file or object that cannot be read as asked: not parquet, damaged (a footer
    or row group that does not decode, chunks past its end), changed while a loader reads it,
    a null where a tensor is built, a column missing or of a type no tensor holds, files
    whose columns differ, or no rows at all. Names the file (and row group, row, column)
    and the fix."""


class LoaderStateError(LadingError, ValueError):
    """A saved loader state that this loader cannot continue from (message says why: another
    kind of loader, a newer state version, other data or settings)."""


class StoreFormatError(LadingError):
    """A store directory is missing, truncated, foreign or of an unsupported version."""


class OtherFormatError(StoreFormatError):
    """A manifest of another lading format than the one read (a token corpus opened as a
    store): nothing is damaged; ``found`` is the format it declares (``"lading.tokens"``)."""

    def __init__(self, message: str, found: str) -> None:
        super().__init__(message)
        self.found = found

    def __reduce__(self) -> tuple[type[OtherFormatError], tuple[str, str]]:
        return type(self), (str(self), self.found)


class DuplicateIdError(StoreFormatError):
    """One id in two rows of a store being merged: ``found`` names both, ``fix`` what to do
    (the merge's route decides which fixes it can take)."""

    def __init__(self, found: str, fix: str) -> None:
        super().__init__(f"{found}. {fix}")
        self.found, self.fix = found, fix

    def __reduce__(self) -> tuple[type[DuplicateIdError], tuple[str, str]]:
        return type(self), (self.found, self.fix)


class StoreNotFoundError(StoreFormatError):
    """No store at a URL (its manifest is not there): nothing to open or check, not damage."""


NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # the errnos of a full disk (or quota, size)


class OutOfSpaceError(LadingError, OSError):
    """A build ran out of disk space (or hit a file size limit); nothing was published.

    ``errno`` is that of the failed write (one of :data:`NO_SPACE`).
    """

    def __str__(self) -> str:
        return str(self.strerror)


class RemoteError(LadingError):
    """Base of every failure talking to object storage (``s3://``, ``gs://``, ...).

    Each one is one line naming the object or bucket, the endpoint and the fix; catch this
    class for any of them. The family (docs/remote-stores.md, "When a remote call fails"):

    - :class:`RemoteURLError`: the URL cannot be right (``s3://b//x``, ``S3://``) or an
      option of the client is unknown; nothing was sent.
    - :class:`RemoteReadError`: a read failed for good (after its retries, each within the
      remote deadline), and its subclasses for what retrying cannot fix:
      :class:`RemoteAccessError` (access denied, or no credentials found),
      :class:`RemoteNotFoundError` (no such bucket or object),
      :class:`RemoteChangedError` (an object deleted or overwritten since the snapshot was
      opened).
    - :class:`RemoteWriteError`: a write (a build's upload) failed.
    """


class RemoteURLError(RemoteError, ValueError):
    """An object-store URL or client option that cannot be right; the message says which
    part and, where one is plain, the URL meant (``did you mean s3://bucket/x?``)."""


class RemoteReadError(RemoteError, OSError):
    """A call to object storage failed for good (after its retries, each within the remote
    deadline): names the object (and byte range), the endpoint, the setting and why."""


class RemotePermanentError(RemoteReadError):
    """A remote failure that retrying cannot fix (never retried): one of the three below, or
    another the server says is final."""


class RemoteAccessError(RemotePermanentError, PermissionError):
    """The server refused (HTTP 401/403), or no credentials were found: names where
    credentials come from (the environment, a profile, ``storage_options``) and the bucket's
    policy."""


class RemoteNotFoundError(RemotePermanentError, FileNotFoundError):
    """No such bucket or object at the endpoint: names which, the endpoint and the fix.

    Attributes:
        no_bucket: the bucket itself is missing (not only the object).
    """

    no_bucket: bool = False


class RemoteChangedError(RemotePermanentError):
    """An object was deleted or overwritten since the snapshot was opened (its ETag no longer
    answers): reopen the store, or rebuild it."""


class RemoteWriteError(RemoteError, OSError):
    """A write to object storage failed: names the bucket or object, the endpoint and why."""


class EmptyEpochError(LadingError, ValueError):
    """A loader's data and settings give every rank an epoch of no batch.

    Under DDP that is zero steps on every rank, without a word; refused when the loader is
    made, naming the numbers and what to change.
    """


class NoRowsError(ParquetError, EmptyEpochError):
    """Parquet files that hold no row at all: a :class:`ParquetError` naming them and an
    :class:`EmptyEpochError` (an empty source), whichever a caller catches."""


class LoaderClosedError(LadingError, RuntimeError):
    """A pass read on after its loader's ``close()``: nothing is read or fetched for a loader
    after it is closed. Names where the pass ended (its epoch and batch) and how to go on."""


class PassEndedError(LadingError, RuntimeError):
    """A pass read on after its loader moved to another position (a newer ``iter()`` of the
    same loader, ``set_epoch``, ``load_state_dict``): a loader reads one pass at a time, and
    the old one's next batches were never to be read. Names where it ended and what moved it
    (it ended without a word before, its epoch short)."""


class WorldChangedError(LadingError, RuntimeError):
    """A loader's first pass found a process group that the loader, made before it, did not
    see: it took this process for rank 0 of 1, and every rank would read the whole dataset
    (DDP's ``DistributedSampler`` raises there too). Names both worlds and the fix: make the
    loader after ``init_process_group``, or pass ``world=``."""


class RanksDisagreeError(LadingError, RuntimeError):
    """At a loader's first pass under a process group, another rank's loader planned other
    epochs (other files, another order of them, other settings): the shares would overlap
    and the batch counts differ, rows read twice or a DDP hang. Names the first setting or
    digest that differs, both values, and the fix (:mod:`lading.loading.agree`)."""


class DeviceUnavailableError(LadingError, RuntimeError):
    """The device asked for is not in this process (no CUDA build, no GPU, a bad index)."""


class DivergedError(LadingError, RuntimeError):
    """Training diverged: a step's loss was NaN or infinite and the model's weights are no
    longer finite (a GradScaler's skipped step, whose weights stay finite, is none). Raised
    by the shared training loop (:class:`lading.train.Trainer`) on every rank together at the
    next step that logs, checkpoints or ends the run, before any checkpoint, model or summary
    of the diverged model is written; names the first step whose loss was not finite, that
    loss, the rank that saw it, the learning rate and the fix."""


class StaleStoreWarning(UserWarning):
    """The source a store was built from has changed since the build."""


class SkippedRecordsWarning(UserWarning):
    """Records were skipped because the caller chose ``on_error="skip"``."""


class BuilderGoneError(LadingError, RuntimeError):
    """A rank this one waited for, under a process group's build
    (:mod:`lading.stores.building.group`), stopped posting its heartbeat in the middle of its
    part (killed, out of memory, crashed: it posted no error); the message names it, its host
    and pid, what it was doing, and how long ago it was last heard from."""


class SkippedFilesWarning(UserWarning):
    """A folder (or prefix) read as parquet holds files that look like parquet but are not
    named ``*.parquet``, so they are not read: the message names them and the fix (rename
    them, or pass them as a list)."""


class EmptyTextWarning(UserWarning):
    """A build stored documents whose text is empty while a field of theirs (a title) is not:
    a model reads a store's text alone, so it would see nothing of them. The message counts
    them and names ``prefix_fields=`` (``--prefix-fields``), which puts the field first."""


class LongIdWarning(UserWarning):
    """A build's longest id is far longer than the rest: every id's index key is as wide as
    it (fixed-width keys), so the index, and the build's memory, grow by that width times the
    count. The message names the id's row, its start and bytes, and the index's size."""


class UnrankedQueriesWarning(UserWarning):
    """An evaluation's judgements name queries its run does not rank: they score 0 in every
    measure (ir-measures' rule), which pulls the means down. The message counts them and
    names the first."""


class AbandonedBuildWarning(UserWarning):
    """A commit into a bucket found a parallel build that no snapshot names and in which
    nothing was written for a day (a job killed before its merge, workers whose merge was
    never run). It is left in place: a bucket has no build lock, so removing it could race a
    late merge of it. The message names its folder, objects and bytes, the merge command that
    commits it and the removal that frees it."""


class IncompleteBuildWarning(UserWarning):
    """A merge found a sharded build newer than the current snapshot with shards missing
    (workers that died): it committed nothing and kept the current snapshot. The message names
    the build, the shards missing and the command that builds them."""
