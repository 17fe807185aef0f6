"""The one loader: iterates any :class:`~lading.loading.workload.Workload`, in this process or
in DataLoader workers, and is the only thing that counts batches and keeps the position.

Every lading loader is a :class:`Loader` (``lading.loader(...)``, ``LanguageModelLoader(...)``,
``PartitionedParquet(...)``): iterate it for this rank's batches; ``len()`` is the epoch's
batch count, as a DataLoader's. Every ``iter()`` starts an epoch, as a DataLoader's and a
``StatefulDataLoader``'s do: after a whole pass, a ``break`` or a peek (``next(iter(loader))``)
the next pass reads the next epoch (epoch + 1, the same on every rank) from its first batch.
The exceptions: the first pass after the position was just set (the loader made, ``set_epoch``,
which says which epoch explicitly, or ``load_state_dict``, which resumes, as a
``StatefulDataLoader`` does) reads from that position; and a pass after ``set_epoch(e)``
abandoned after its first batch (a peek, held or dropped, or a ``break`` there) does not consume
epoch ``e``: the next pass reads it again from its first batch, as a DataLoader over a
``DistributedSampler`` does (``set_epoch(e); next(iter(loader)); for batch in loader`` trains
epoch ``e``). A pass that reads past its first batch, or a peek without ``set_epoch``, consumes
its epoch. ``len()`` is the length of the epoch a pass in progress reads, or between passes of
the one the next pass reads. ``state_dict`` and ``load_state_dict`` save and restore the
position (:mod:`lading.loading.state`); a peek's batch counts there as any batch received.

``num_workers=0`` reads in this process (through the workload's bulk read where it has one, the
LM's chunked streams); ``num_workers > 0`` hands the workload's batch keys to torch DataLoader
workers (persistent by default), asked for afresh each time an iteration starts, from the
position on. Workers run ahead of the caller, so the position counts the batches the caller
*received*: batches in flight are not consumed, and a state taken now resumes at the next one.
"""

from __future__ import annotations

import copy
import functools
import json
import multiprocessing.process
import numbers
import os
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data._utils.pin_memory import pin_memory

from lading.deadline import remote_timeout
from lading.errors import LoaderClosedError, PassEndedError, RanksDisagreeError
from lading.loading import state as loader_state
from lading.loading.agree import check_ranks_agree
from lading.loading.announce import Announce
from lading.loading.deal import Dealt, deal, in_order
from lading.loading.read_ahead import Carried
from lading.loading.state import Cursor, base_form
from lading.loading.workers import Workers, pinnable  # Workers is imported from here too
from lading.loading.workload import Workload
from lading.remote.cancel import Cancel, reading_for


def _as_built(batch: Any) -> Any:
    """The DataLoader's collate step: a worker's batch is built whole by the workload."""
    return batch


class _Built(Dataset[Any]):
    """What DataLoader workers index: a batch key gives the batch the workload builds from it
    (a dealt key, its place with it: :mod:`lading.loading.deal`)."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, Dealt):
            return key.place, None if key.key is None else self.workload.build(key.key)
        return self.workload.build(key)


class _Keys(Sampler[Any]):
    """The loader's batch keys from its position on, read afresh when an iteration starts.

    It holds the loader weakly: the loader holds the DataLoader that holds this sampler, and a
    cycle would leave a dropped loader's worker processes to the cyclic garbage collector,
    which may run at any moment (in another loader's fork, say) instead of at once.
    """

    def __init__(self, loader: Loader) -> None:
        self.loader = weakref.ref(loader)

    def __iter__(self) -> Iterator[Any]:
        loader = self.loader()
        if loader is None:
            return iter(())
        keys, group = loader._keys(), loader._group()
        return keys if group is None else deal(keys, group, loader.workers.num_workers)


def _keys(workload: Workload, announce: Announce | None, cursor: Cursor) -> Iterator[Any]:
    """The keys of ``cursor``'s epoch from its position (announced ahead where the data asked
    to hear of them)."""
    keys = workload.keys(cursor)
    if announce is None:
        return keys
    following = workload.keys(Cursor(cursor.epoch + 1))  # the plan reaches into it
    return announce(keys, cursor.epoch, cursor.batches, following)


def _epoch_batches(
    workload: Workload,
    announce: Announce | None,
    pin: bool,
    cursor: Cursor,
    cancel: Cancel | None = None,
) -> Iterator[Any]:
    """The batches of ``cursor``'s epoch from its position, built in this process (in bulk
    where the workload can); a function of its arguments only (read_ahead's thread runs it,
    holding no reference to the loader). ``cancel``: each build's GETs are made under it
    (the iterating thread's builds, which ``close`` from another thread ends; the
    announcer's prefetches, which ``close`` waits for through ``settle``, are not)."""
    bulk = workload.bulk(copy.copy(cursor))
    build = workload.build
    if cancel is not None:
        build = functools.partial(_build_under, cancel, build)
    batches = map(build, _keys(workload, announce, cursor)) if bulk is None else bulk
    return map(pin_memory, batches) if pin else batches


def _build_under(cancel: Cancel, build: Callable[[Any], Any], key: Any) -> Any:
    """``build(key)`` with its GETs made under ``cancel``."""
    return reading_for(cancel, functools.partial(build, key))


_LEAVE_S = 0.5  # a read-ahead thread a pass left may end by itself before its GETs are cancelled
_KILL_S = 2.0  # past the deadline: the most a terminated worker, or torch's shutdown, may take


def _shut_down(
    iterator: Any, shutdown: Callable[[], None], ends: float, meanwhile: Callable[[], None]
) -> None:
    """Run torch's ``_shutdown_workers`` on a thread of close's own, until ``ends``, and
    ``meanwhile()`` on this one as it runs; workers still alive then are terminated (killed if
    that is not enough), and the thread ends.

    torch joins each worker in turn for 5 s (``MP_STATUS_CHECK_INTERVAL``) before it kills
    it: a worker stuck on a stalled GET cost close 5 s a worker. Here every worker shares the
    one deadline; ending them unlocks torch's joins, which then return at once. ``meanwhile``
    (the workload's ``settle``: this process's GETs) shares it too, rather than getting what
    stuck workers left of it (nothing).
    """
    thread = threading.Thread(target=shutdown, name="lading-close", daemon=True)
    thread.start()
    try:
        meanwhile()
    finally:  # a hook that raises (or Ctrl-C) still ends the workers; its error then goes up
        _end_workers(iterator, thread, ends)


def _end_workers(iterator: Any, thread: threading.Thread, ends: float) -> None:
    """Wait for torch's shutdown ``thread`` until ``ends``; then terminate (kill) the workers
    it has not ended, which lets its joins return."""
    thread.join(max(0.0, ends - time.monotonic()))
    if not thread.is_alive():
        return
    workers = [w for w in getattr(iterator, "_workers", []) if w.is_alive()]
    for worker in workers:
        worker.terminate()
    until = time.monotonic() + _KILL_S
    for worker in workers:
        worker.join(max(0.0, until - time.monotonic()))
        if worker.is_alive():  # SIGTERM ignored or handled: SIGKILL
            worker.kill()
            worker.join(_KILL_S)
    thread.join(_KILL_S)  # torch's joins now return at once (its pin thread ends by itself)


def _disown_parent_workers() -> None:
    """In a forked child, the processes its parent started (the DataLoader workers of its
    loaders, persistent or not, and any other) are not its children: multiprocessing still
    lists them (``process._children``), and its exit hook would end them (SIGTERM) when the
    child exits by ``sys.exit``, crashing the parent's pass. A freshly forked child has no
    children: it forgets every one listed; its loaders make their own
    (:meth:`Loader._forget_torch`)."""
    children = getattr(multiprocessing.process, "_children", None)
    if not isinstance(children, set):
        return
    pid = os.getpid()
    for process in list(children):
        if getattr(process, "_parent_pid", None) != pid:
            children.discard(process)


os.register_at_fork(after_in_child=_disown_parent_workers)


def _leave_alone(iterator: Any) -> None:
    """Mark a parent process's DataLoader iterator shut down in a forked child, so its
    finalizer does nothing here (run here, it would end the parent's workers: their done
    event and index queues are shared)."""
    if iterator is not None and hasattr(iterator, "_shutdown"):
        iterator._shutdown = True


class Loader:
    """This rank's batches of one workload, resumable; see the module docstring.

    Args:
        workload: the workload's positions and batches, and the loader's settings
            (``workload.reading``; its seed also seeds the DataLoader workers' torch RNG, not
            the global one).
        workers: in this process or in DataLoader workers, and how.
        announce: tells the data which batches come next as their keys are handed out, in
            this process (:mod:`lading.loading.announce`: a remote store fetches ahead).

    Attributes:
        workers: as given.
        dataset: the map-style dataset read (``lading.loader``), else None.
        reading: the settings the loader was made with
            (:class:`~lading.loading.reading.Reading`, checked then).
        batch_size, seed, shuffle, equalize, drop_partial_batch, world: those settings, by
            the same names on every loader.
    """

    dataset: Any = None

    def __init__(
        self,
        workload: Workload,
        workers: Workers | None = None,
        *,
        announce: Announce | None = None,
    ) -> None:
        self._workload = workload
        self.workers = (workers or Workers()).with_read_ahead(None, default=0)
        # the settings, by the same names on every loader (a frozen record: never stale)
        self.reading = reading = workload.reading
        self.batch_size, self.seed, self.shuffle = reading.batch_size, reading.seed, reading.shuffle
        self.equalize, self.drop_partial_batch = reading.equalize, reading.drop_partial_batch
        self.world = reading.world
        self._announce = announce
        # this loader's plan compared with the other ranks' (agree.py): True, or the refusal
        self._agreed: bool | RanksDisagreeError = False
        self._agree_key: str | None = None  # its key there, for the checks at loads
        self._loads = 0  # load_state_dict calls: the k-th load's start is compared
        self._resumed = False  # a state was loaded and no pass has started from it
        self._cursor = Cursor()
        # the position was just set (made, set_epoch, load_state_dict) and no pass has read
        # from it: the next pass starts there (else at the next epoch, as a DataLoader's)
        self._fresh = True
        # the epoch was chosen by set_epoch and no pass has read past a peek of it
        self._chosen = False
        # the pass that started at a chosen epoch's first batch: while it has handed out one
        # batch only (a peek), the epoch is not consumed
        self._peek: Cursor | None = None
        self._restored = False  # a state was loaded and nothing read since
        # set_epoch of a just-loaded state's own epoch: the next pass reads what is left of
        # that epoch, nothing where the state was saved at its last batch
        self._kept = False
        self._reading: Cursor | None = None  # the position of the pass in progress, if any
        self._ended: Cursor | None = None  # the pass close() ended (its iterator stops)
        self._torch: DataLoader[Any] | None = None  # made when workers first read
        self._torch_pid = 0  # the process that made it (a forked child makes its own)
        # the DataLoader iterator of the latest pass (weakly: the pass holds it); torch keeps
        # none for workers that are not persistent, and close() ends this one's workers
        self._pass: weakref.ref[Any] | None = None
        self._ahead: Carried | None = None  # read_ahead's thread, carried between passes
        # the GETs of the batches a pass builds on the iterating thread (read_ahead=0): a
        # close from another thread ends them, as it ends the read-ahead thread's
        self._cancel: Cancel | None = None

    # ------------------------------------------------------------------ where it is

    @property
    def epoch(self) -> int:
        """The epoch being read (or just read to its end)."""
        return self._cursor.epoch

    @property
    def num_workers(self) -> int:
        return self.workers.num_workers

    @property
    def pin_memory(self) -> bool:
        return self.workers.pin_memory

    @property
    def loader(self) -> Any:
        """Gone, with an AttributeError that names the new spelling: there is no DataLoader
        inside to reach, nor a ``.loader(...)`` to make one; this object is what iterates."""
        name = "lading.loader" if type(self) is Loader else type(self).__name__
        raise AttributeError(
            f"{name}(...).loader is gone: the loader itself iterates, in DataLoader workers too. "
            f"A trainer's get_train_dataloader().loader is get_train_dataloader() (the lading "
            f"loader: .workers, .num_workers, .state_dict()); {name}(...).loader(num_workers=2) "
            f"is now {name}(..., num_workers=2)"
        )

    def set_epoch(self, epoch: int) -> None:
        """Go to the first batch of ``epoch`` (its order comes from (seed, epoch)), for the
        passes that follow until one reads past its first batch (a peek does not consume it).

        One exception, for frameworks that call ``set_epoch(e)`` when they start epoch ``e``,
        also right after restoring a mid-epoch checkpoint (the HF Trainer, Lightning): when a
        state was just loaded and nothing was read since, ``set_epoch`` of the state's own
        epoch keeps its position instead of reading the epoch's first batches again. A state
        saved at its epoch's last batch leaves that epoch nothing: the next pass is empty
        (a loop that checkpoints in its body and resumes with ``set_epoch`` of the saved epoch
        must not read the next epoch under it, then again).
        """
        says = f"set_epoch({epoch!r}): an epoch is an int >= 0 (the first is 0)"
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral):
            raise TypeError(says)  # (a float was truncated, a bool read as epoch 0 or 1)
        if epoch < 0:
            raise ValueError(says)
        epoch = int(epoch)
        if self._restored and epoch == self._cursor.epoch:
            self._kept = True
            return
        self._leave(f"set_epoch({epoch})")
        self._cursor, self._restored, self._fresh = Cursor(epoch), False, True
        self._kept = False
        self._chosen = True

    def _coming(self) -> Cursor:
        """The position a pass reads: the pass's in progress; between passes, the one the next
        ``iter()`` starts from (a just-set position, else the next epoch's first batch)."""
        return self._cursor if self._cursor is self._reading else self._next_pass()

    def _next_pass(self) -> Cursor:
        """Where a new pass starts: a just-set position (unless read to its end, as a state
        saved at the end of an epoch is, and not kept by ``set_epoch`` of its own epoch), else
        the next epoch's first batch."""
        cursor = self._cursor
        if self._fresh and (self._kept or cursor.batches < self._workload.batches(cursor)):
            return cursor
        if self._peeked():
            return Cursor(cursor.epoch)
        return Cursor(cursor.epoch + 1)

    def _peeked(self) -> bool:
        """Whether the latest pass began at the first batch of an epoch ``set_epoch`` chose
        and has handed out one batch only (a peek, held or dropped): that epoch is not
        consumed, and the next pass reads it again from its first batch. An epoch of one batch
        is consumed only by a pass read to its end (the loop asked for a next batch); one
        broken off after that batch is a peek, as a DataLoader's epoch would be read again."""
        return self._peek is not None and self._peek is self._cursor and self._peek.batches == 1

    def __len__(self) -> int:
        """Batches on this rank (the same on every rank) of the epoch a pass in progress reads,
        read and left; between passes, of the epoch the next pass reads (with a jittered LM
        epoch, that epoch's own count); after an elastic resume, of the epoch's segment."""
        return self._workload.batches(self._coming())

    def batches_in(self, epoch: int) -> int:
        """Batches on this rank of the whole of ``epoch``, where the loader is left as it is:
        each epoch its own count where a jittered LM epoch draws its lengths from (seed,
        epoch), so ``epochs`` epochs are the sum of theirs, not ``len() * epochs``."""
        return self._workload.batches(Cursor(int(epoch)))

    def remaining(self) -> int:
        """Batches left in the current epoch (0 when it was read to its end)."""
        return max(0, self._workload.batches(self._cursor) - self._cursor.batches)

    def position(self) -> Cursor:
        """A copy of where the loader is, cheap: give it back to :meth:`state_dict`'s ``at``
        (a prefetcher takes one with each batch it pulls ahead)."""
        return copy.copy(self._cursor)

    # ------------------------------------------------------------------ iteration

    def _agree(self) -> None:
        """:func:`~lading.loading.agree.check_ranks_agree` of this loader's plan, once: its
        data's identity left out where it names a copy, not content (a map dataset's: a
        store's snapshot, an HF dataset's fingerprint, random after an unhashable transform),
        and a map dataset's ``ranks_fingerprint()`` compared in its place where it has one
        (TrainingGroups: its settings and groups)."""
        if isinstance(self._agreed, RanksDisagreeError):
            raise self._agreed
        workload, world = self._workload, self.world
        fingerprint = dict(workload.fingerprint())
        if workload.kind == "map":
            fingerprint.pop("data", None)
            ranks = getattr(getattr(workload, "hooks", None), "ranks", None)
            found = ranks() if ranks is not None and world.world_size > 1 else None
            if found is not None:
                fingerprint["data"] = str(found)
        plan = {"kind": workload.kind, "fingerprint": fingerprint, "layout": workload.layout()}
        try:
            self._agree_key = check_ranks_agree(plan, world.rank, world.world_size)
        except RanksDisagreeError as refused:
            self._agreed = refused
            raise
        self._agreed = True

    def _agree_resumed(self, start: Cursor) -> None:
        """Where the first pass after the ``k``-th ``load_state_dict`` starts, compared with
        the other ranks' first pass after theirs (under this loader's key): ranks that loaded
        other steps' states got batch counts of 5 and 2, and gloo aborted the job at the
        shorter rank's epoch end. Compared at loads, not at every first pass: a rank that
        peeked at a batch before the load (a sample logged on rank 0) starts elsewhere then,
        and reads as the others after it."""
        self._resumed = False
        if self._agree_key is None:  # (no group, or none compared: nothing to compare with)
            return
        base = json.dumps(base_form(start.base), sort_keys=True).encode()
        state = {
            "epoch": start.epoch,
            "segment": start.segment,
            "batches": start.batches,
            "base": None if start.base is None else zlib.crc32(base),
        }
        world = self.world
        key = f"{self._agree_key}/load{self._loads}"
        check_ranks_agree({"start": state}, world.rank, world.world_size, key=key)

    def __iter__(self) -> Iterator[Any]:
        """This rank's batches of a new epoch (epoch + 1), as a DataLoader reads a new epoch
        each time; from a just-set position instead (made, ``set_epoch``, a loaded state) to
        the end of its epoch, or from the first batch of an epoch ``set_epoch`` chose that the
        last pass only peeked at. What is read is decided at the first batch: a ``set_epoch``
        between ``iter()`` and it (as Lightning calls them) is heeded, and a ``set_epoch``, a
        loaded state or another pass after it ends this pass (its batches belong to the old
        position)."""
        self.reading.check_world()  # (a group started after the loader was made)
        if self._agreed is not True:  # every rank's loader plans the same epochs: checked
            self._agree()  # at its first pass (a refusal raised again at every later one)
        if self._resumed:  # and resumes from the same state: at the first pass after a load
            self._agree_resumed(self._next_pass())
        chosen = (self._fresh and self._chosen) or self._peeked()
        self._leave("a newer iter() of this loader")
        self._cursor = cursor = self._next_pass()
        self._fresh = self._restored = self._kept = False
        self._peek = cursor if chosen and cursor.batches == 0 else None
        self._reading = cursor
        read_to_end = False
        try:
            # the one place a position advances: ~0.1 us a batch, against ~7 us an LM batch
            for batch in self._batches(cursor):
                cursor.batches += 1
                yield batch
                if self._cursor is not cursor:
                    # moved while the caller held the batch (set_epoch, a loaded state,
                    # another pass): this pass is over, before it takes a batch of the new
                    # position from the persistent workers' iterator the two share; said
                    # where batches were left, not a silent short epoch (a look at one batch
                    # by iter() lost the rest); moved at its last batch, it was whole
                    if cursor.batches < self._workload.batches(cursor):
                        raise self._ended_error(cursor)
                    return
                if self._ended is cursor:  # closed: nothing is read for it after
                    break
            if self._ended is cursor:  # closed here, or from another thread while it waited
                self._refuse_after_close(cursor)  # (loudly, but after the epoch's last batch)
            read_to_end = True
            if self._peek is cursor:  # its epoch's one batch, read to the end: consumed
                self._peek = None
        except Exception as e:
            # (no ``except LoaderClosedError`` clause: at interpreter exit a pass left open is
            # closed after this module's globals are None, and a clause naming one raises)
            if self._ended is cursor and type(e) is not LoaderClosedError:
                # (a worker or thread close() ended, mid-wait; or a GET of this pass's build
                # close() cancelled: its error names the loader, not where the pass ended)
                self._refuse_after_close(cursor)
            raise
        finally:  # ended, broken off (a for loop's break closes it) or dropped
            if self._reading is cursor:  # no later pass began (one may read the thread)
                self._reading = None
                if not read_to_end:  # read_ahead's thread was building this epoch: stop it
                    self._drop_ahead(anywhere=True)  # (a dropped pass: the GC may end it)

    def _refuse_after_close(self, cursor: Cursor) -> None:
        """Raise :class:`LoaderClosedError` for a pass that ``close`` ended before its
        epoch's last batch (after it, the pass is whole: nothing to raise)."""
        if cursor.batches < self._workload.batches(cursor):
            raise self._closed_error(cursor) from None

    def _leave(self, why: str) -> None:
        """The pass being read, if one is, is left by ``why`` (the first that moved it on):
        said if it is read on."""
        if self._reading is not None and not self._reading.left_by:
            self._reading.left_by = why

    def _ended_error(self, cursor: Cursor) -> PassEndedError:
        return PassEndedError(
            f"this pass of {type(self).__name__} was read on after {cursor.left_by} moved the "
            f"loader on: it ended after batch {cursor.batches} of epoch {cursor.epoch} (of "
            f"{self._workload.batches(cursor)}). A loader reads one pass at a time and its "
            "state_dict() follows the newest; finish or leave a pass before starting another, "
            "and take a look at a batch from a second loader"
        )

    def _closed_error(self, cursor: Cursor) -> LoaderClosedError:
        return LoaderClosedError(
            f"{type(self).__name__} was closed while this pass was read: it ended after "
            f"batch {cursor.batches} of epoch {cursor.epoch} (of {len(self)}), and nothing is "
            "read after close(). A new iter() starts the next epoch; to read the rest of this "
            "one, load_state_dict(state_dict()) and iter() again"
        )

    def _batches(self, cursor: Cursor) -> Iterator[Any]:
        """The batches of ``cursor``'s epoch from its position on: from DataLoader workers, or
        read in this process (in bulk where the workload can)."""
        workload = self._workload
        if self.workers.num_workers:  # the DataLoader pins, in its own thread
            return self._from_workers()
        pin = self.workers.pin_memory and pinnable()
        epoch = functools.partial(_epoch_batches, workload, self._announce, pin)
        depth = self.workers.read_ahead
        if not depth:
            self._cancel = Cancel()
            return epoch(copy.copy(cursor), self._cancel)
        if self._ahead is None or not self._ahead.starts(cursor):
            self._drop_ahead()
            self._ahead = Carried(self, cursor, epoch, depth)
        return self._ahead.epoch()

    def _from_workers(self) -> Iterator[Any]:
        """The batches from DataLoader workers, from the position on (their sampler's keys).
        In a forked child the parent's workers and queues are not this process's: its
        DataLoader is forgotten (never shut down: that would end the parent's workers) and
        the pass goes on from the position with workers of the child's own."""
        getpid = os.getpid  # (a pass dropped at exit ends after the os module's teardown)
        while True:
            if self._torch is not None and self._torch_pid != getpid():
                self._forget_torch()
            if self._torch is None:
                self._torch, self._torch_pid = self._dataloader(), getpid()
            pid, batches = self._torch_pid, iter(self._torch)
            self._pass = weakref.ref(batches)
            try:
                for batch in batches if self._group() is None else in_order(batches):
                    yield batch
                    if getpid() != pid:  # forked while the caller held this batch
                        break
                else:
                    return
            finally:  # broken off or dropped in a forked child: the parent's, left alone
                if getpid() != pid:
                    _leave_alone(batches)

    def _forget_torch(self) -> None:
        """Drop a DataLoader a parent process made, leaving its workers and queues alone
        (its iterators, persistent or the pass's, are marked shut down, so their finalizers
        do nothing here: one run here would end the parent's workers)."""
        torch_loader, self._torch = self._torch, None
        _leave_alone(getattr(torch_loader, "_iterator", None))
        _leave_alone(self._iterator())
        self._pass = None

    def _iterator(self) -> Any:
        """The DataLoader iterator of the latest pass, while one holds it (else None)."""
        return None if self._pass is None else self._pass()

    def close(self) -> None:
        """End what this loader runs: its read-ahead thread and the GETs it made (none is
        sent, queued or retried after: :mod:`lading.remote.cancel`; a build waiting on a GET,
        its own or one made by another (its announcer, another loader: that GET goes on for
        its maker), or on another process's fill of a block, ends at once) and its
        DataLoader workers (those still alive at the remote deadline are terminated);
        nothing is fetched for it after. The GETs a workload asked for
        ahead elsewhere (the prefetches of a remote token corpus, of a remote store behind a
        map-style dataset's ``settle`` hook, of parquet row groups: queued in their cache's
        fetcher) are waited for, within the remote deadline, through
        the workload's ``settle``. The data it reads (a corpus, a store) stays open, theirs
        to close. A pass the caller still holds ends: its next batch raises
        :class:`~lading.errors.LoaderClosedError` naming where it ended (never a silent end
        that a training loop would take for the epoch's); a later ``iter()`` starts afresh
        from the position (``close`` keeps it: ``state_dict()`` saves it). The thread's end
        and the GETs' share one deadline: a stalled server costs ``close`` one remote
        deadline, not one a wait."""
        ends = time.monotonic() + remote_timeout()
        self._ended = self._reading  # its next batch raises, naming where it ended
        self._drop_ahead(grace=0.0)  # its GETs end too: none is sent or retried after
        cancel, self._cancel = self._cancel, None
        if cancel is not None:  # the batches built on the iterating thread: theirs too
            cancel.cancel()
        if self._torch is not None and self._torch_pid != os.getpid():
            self._forget_torch()  # a forked child's close: the parent's workers are theirs
        torch_loader, self._torch = self._torch, None
        # persistent workers' iterator is the DataLoader's; others', only the pass's
        iterator = getattr(torch_loader, "_iterator", None)
        if iterator is None:  # (no truth test: torch's iterator has a __len__)
            iterator = self._iterator()
        self._pass = None
        shutdown = getattr(iterator, "_shutdown_workers", None)
        # GETs it asked for ahead (prefetches handed to a remote corpus's cache) are sent and
        # answered before close returns, within the remote deadline: none goes out after
        settle = getattr(self._workload, "settle", None)

        def settled() -> None:
            if callable(settle):
                settle(max(0.0, ends - time.monotonic()))

        if not callable(shutdown):
            settled()
        else:  # the workers' end and this process's GETs, side by side, one deadline
            try:
                _shut_down(iterator, shutdown, ends, settled)
            finally:
                # a thread waiting in the DataLoader for a batch waits for ever on workers
                # marked shut down (torch then takes an empty queue for a slow worker): marked
                # alive again, its next look (within 5 s) finds them gone and raises, which
                # its pass turns into LoaderClosedError
                status = getattr(iterator, "_workers_status", None)
                if isinstance(status, list):
                    setattr(iterator, "_workers_status", [True] * len(status))  # noqa: B010

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drop_ahead(self, anywhere: bool = False, grace: float = _LEAVE_S) -> None:
        """Stop read_ahead's thread and drop what it built (the next pass starts anew); a
        thread not ended within ``grace`` seconds (a build waiting on a stalled server) has
        its GETs cancelled: that build ends now, and none is retried for it after (the data
        it reads stays open, and so does its fetcher: only the thread's own calls end).
        Without the cancel, a pass left on a stalled server (``load_state_dict``, a
        ``break``) waited the remote deadline for the thread, then left it retrying; with it
        at once, a healthy server's GETs, wanted by the next pass, were thrown away.
        ``anywhere``: called where the GC may run it (a pass's end), on any thread and inside
        any lock: the GETs are cancelled from a thread of their own."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.close(cancel=True, finalizing=anywhere, grace=grace)

    def _group(self) -> Callable[[Any], Hashable] | None:
        """The workload's grouping of batch keys, where batches of one group share reads and
        there are workers to deal them to (:mod:`lading.loading.deal`); else None."""
        group = getattr(self._workload, "group", None)
        return group if callable(group) and self.workers.num_workers > 1 else None

    def _keys(self) -> Iterator[Any]:
        """The keys an iteration reads (announced ahead where the data asked to hear of them)."""
        return _keys(self._workload, self._announce, copy.copy(self._cursor))

    def _dataloader(self) -> DataLoader[Any]:
        workers = self.workers
        generator = torch.Generator()
        generator.manual_seed(self.seed)  # worker seeds from here, not the global RNG
        kwargs: dict[str, Any] = {
            "prefetch_factor": 2 if workers.prefetch_factor is None else workers.prefetch_factor,
            "persistent_workers": workers.persistent_workers is not False,
        }
        if workers.multiprocessing_context:
            kwargs["multiprocessing_context"] = workers.multiprocessing_context
        return DataLoader(
            _Built(self._workload),
            batch_size=None,
            sampler=_Keys(self),
            collate_fn=_as_built,
            num_workers=workers.num_workers,
            pin_memory=workers.pin_memory,
            generator=generator,
            **kwargs,
        )

    # ------------------------------------------------------------------ state

    def state_dict(self, at: Cursor | None = None) -> dict[str, Any]:
        """The one loader state (:mod:`lading.loading.state`), now or as of ``at`` (a
        :meth:`position` taken earlier: what a prefetcher reports for what its caller has)."""
        cursor = self._cursor if at is None else at
        workload = self._workload
        return loader_state.state_dict(
            workload.kind,
            cursor,
            workload.layout(),
            workload.fingerprint(),
            workload.consumed(cursor),
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: bitwise with the saved layout, elastically with another
        (what the saved layout left unread is planned over this one's readers).

        Raises:
            LoaderStateError: the state belongs to other data (an LM corpus rebuilt from other
                text: naming the corpus and both content ids), another seed or order; or it
                is damaged (a position no loader saves: one past its epoch's end).
        """
        workload = self._workload
        saved = workload.saved_state(state)  # older keys and layouts in today's terms
        self._cursor = loader_state.restore(
            saved,
            workload.kind,
            workload.layout(),
            workload.fingerprint(),
            workload.unread,
            workload.ended,
            workload.batches,
        )
        self._leave("load_state_dict()")
        self._restored = self._fresh = self._resumed = True
        self._loads += 1
        self._chosen, self._peek, self._kept = False, None, False
        self._drop_ahead()  # built for the old position and layout
