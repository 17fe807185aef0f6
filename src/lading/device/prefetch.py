"""DevicePrefetcher: the next batches are copied to the GPU while the current step runs.

The naive copy, ``batch.to(device, non_blocking=True)`` inside the step, runs on the compute
stream: the step waits for its own copy. The prefetcher pulls ``depth`` batches ahead of the
caller, pins them (unless the loader already did), and issues their copies on a side CUDA
stream; handing a batch out makes the compute stream wait on that batch's copy event (not on the
whole side stream), and ``record_stream`` tells the caching allocator that the compute stream
uses memory the side stream allocated, so it is not reused while the step still reads it.

Resume stays exact. lading's loaders count the batches the caller has *received*; the
prefetcher receives batches before its caller does, so it saves the loader's state as each
batch is pulled and, while batches are in flight, reports the state saved with the last batch it
handed out: batches in flight are not consumed. Every ``iter()`` is a pass of the loader's, as
with the loader itself: after a ``break`` or a peek the batches in flight are dropped and the
next pass starts the next epoch (or, after ``load_state_dict`` or ``set_epoch``, that position).

On a device other than CUDA nothing needs copying; by default it is then a pass-through (no
pull-ahead). An explicit ``depth`` on the CPU pulls ahead the same way and clones each batch's
tensors (a loader may reuse its buffers, as the LM loader does), which is how the resume logic
is tested without a GPU.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import torch

from lading.device.check import check_cuda
from lading.errors import PassEndedError
from lading.loading.resumable import Resumable

_CLOSED = "the end of its with block"  # what moved a pass on at __exit__


class _InFlight(NamedTuple):
    """A batch pulled from the loader: its copy on the device, the loader's state after it, the
    copy's completion event (CUDA only)."""

    batch: Any
    state: Any  # a copy of the loader's cursor, or its whole state_dict
    ready: Any


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``batch`` with ``fn`` applied to every tensor in it (mappings, lists, tuples, named
    tuples; other values are kept as they are). A mapping keeps its type where it can be made
    from a dict (a ``transformers`` ``BatchEncoding``, an ``OrderedDict``), as torch's own
    ``pin_memory`` does, else becomes a dict."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        mapped = {k: map_tensors(v, fn) for k, v in batch.items()}
        kind: Any = type(batch)
        try:
            return kind(mapped)
        except TypeError:
            return mapped
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a NamedTuple
        return type(batch)(*(map_tensors(v, fn) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_tensors(v, fn) for v in batch)
    return batch


def tensors(batch: Any) -> list[torch.Tensor]:
    """Every tensor in ``batch`` (the structures :func:`map_tensors` walks)."""
    found: list[torch.Tensor] = []

    def keep(t: torch.Tensor) -> torch.Tensor:
        found.append(t)
        return t

    map_tensors(batch, keep)
    return found


def _whole_or_raise(source: Iterator[Any], ended: bool, queued: int, error: Exception) -> None:
    """A pass dropped while the caller held a batch (the loader's pass ``source``; ``ended``:
    it had said it ended; ``queued``: batches pulled ahead and dropped): return where the
    held batch was the pass's last, else raise (``error``, or the loader's own: a closed
    loader's). With nothing pulled past the held batch, the loader's pass says which: it ends,
    or raises where it was cut short, or, a loader that was not moved, gives a batch."""
    if queued:
        raise error
    if ended:
        return
    try:
        next(source)
    except StopIteration:
        return
    except PassEndedError:
        raise error from None
    raise error


def _len_or_none(loader: Any) -> int | None:
    """``len(loader)``, or None for one without a length (a DataLoader over an
    ``IterableDataset`` has ``__len__`` and raises ``TypeError`` from it)."""
    try:
        return len(loader)
    except TypeError:
        return None


def pinned(t: torch.Tensor) -> torch.Tensor:
    """``t`` in pinned host memory (a device tensor or a pinned one as it is). A strided view
    (a stream batch: rows of the loader's chunk, a chunk's width apart) is copied into a dense
    pinned tensor of its own bytes: pinning the view pins its whole span (~160x the batch for
    ``Streams``), and the device copy of a pinned tensor that is not dense goes through a
    pageable temporary, synchronously."""
    if t.device.type != "cpu" or t.is_pinned():
        return t
    return (t if t.is_contiguous() else t.contiguous()).pin_memory()


class DevicePrefetcher:
    """Iterate it like the loader it wraps; batches arrive already on ``device``.

    Args:
        loader: a lading loader (:class:`~lading.loading.Resumable`: ``set_epoch``,
            ``epoch``, ``len``, ``remaining``, ``state_dict``/``load_state_dict``) or any
            iterable of batches (then only iteration is passed through).
        device: where the batches go.
        depth: batches pulled ahead of the caller. ``None``: 2 on CUDA, 0 elsewhere (on
            the CPU a pass-through; on another device, ``mps`` or ``xpu``, each batch copied
            there as it is handed out).

    Raises:
        ValueError: ``depth`` is negative.
    """

    def __init__(
        self,
        loader: Resumable | Iterable[Any],
        device: torch.device | str,
        depth: int | None = None,
    ) -> None:
        self.loader: Any = loader  # the rest of its interface is passed through as it is
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            check_cuda(self.device)
        if depth is None:
            depth = 2 if self.cuda else 0
        if depth < 0:
            raise ValueError(f"depth must be >= 0 batches ahead, got {depth}")
        self.depth = depth
        self._stream: Any = torch.cuda.Stream(self.device) if self.cuda else None
        self._queue: deque[_InFlight] = deque()
        self._source: Iterator[Any] | None = None  # the loader's live iteration
        self._pass = 0  # counts passes and drops: an older pass stops at its next batch
        self._left_by = ""  # what dropped the last pass (said if it is read on)
        self._handed: Any = None  # the loader's position after the last batch handed out
        self._len: int | None = None  # the loader's len() of the pass being read
        # a lading loader gives a cheap position with each batch pulled ahead and its state as
        # of that position later; any other loader's state_dict() is taken whole
        self._resumable = isinstance(loader, Resumable)

    # ------------------------------------------------------------------ the loader's interface

    @property
    def epoch(self) -> int:
        return int(self.loader.epoch)

    def set_epoch(self, epoch: int) -> None:
        """Drop the batches in flight (they belong to the old position) and pass it on."""
        self._drop(f"set_epoch({epoch})")
        self.loader.set_epoch(epoch)

    def __len__(self) -> int:
        """Batches of the current epoch on this rank, as the loader's: taken as the pass
        begins, while it lasts (the loader, read ahead to its epoch's end, would answer the
        next epoch's); between passes, the loader's."""
        if self._len is not None:
            return self._len
        return len(self.loader)

    def remaining(self) -> int:
        """Batches the caller has yet to receive this epoch (in-flight ones included); for a
        loader of another kind, its ``len()`` is taken as what it has left."""
        left = getattr(self.loader, "remaining", None)
        return int(left() if callable(left) else len(self.loader)) + len(self._queue)

    def position(self) -> Any:
        """Where the caller is: the loader's position after the last batch handed out."""
        return self._handed if self._queue else self.loader.position()

    def state_dict(self, at: Any = None) -> dict[str, Any]:
        """The loader's state as of the last batch handed to the caller (or of ``at``)."""
        if at is None and not self._queue:
            return dict(self.loader.state_dict())
        at = self._handed if at is None else at
        assert at is not None, "batches in flight but no state of the last handed"
        if not self._resumable:
            return dict(at)
        return dict(self.loader.state_dict(at=at))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._drop("load_state_dict()")
        self.loader.load_state_dict(state)

    def __enter__(self) -> DevicePrefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the loader (its threads and files) where it has a ``close``."""
        self._drop(_CLOSED)
        close = getattr(self.loader, "close", None)
        if callable(close):
            close()

    def __getattr__(self, name: str) -> Any:
        """Anything else (``dataset``, ``corpus``, ``num_workers``…) is the loader's."""
        if name == "loader":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[Any]:
        """A pass of the loader's (decided at the first batch, as the loader's own): batches
        still in flight from an earlier pass, broken off, are dropped with it.

        The first batch is handed before any is pulled ahead (its copy had nothing to overlap
        anyway): a pass abandoned after it, a peek, has read one batch of the loader, as
        without the prefetcher, so the loader's rule for a peek holds (after ``set_epoch(e)``
        it does not consume epoch ``e``: :meth:`lading.loading.Loader.__iter__`)."""
        self._drop("a newer iter() of this prefetcher")
        this = self._pass
        self._source = source = iter(self.loader)
        ahead, handed = 0, 0  # batches pulled ahead of the one handed: none for the first
        try:
            while True:
                while self._source is not None and len(self._queue) <= ahead:
                    self._pull()
                    if self._len is None:  # the loader's pass is decided at its first batch
                        self._len = _len_or_none(self.loader)
                if not self._queue:
                    return
                item = self._queue.popleft()
                self._handed = item.state
                ended, queued = self._source is None, len(self._queue)
                handed += 1
                yield self._hand(item)
                ahead = self.depth
                if self._pass != this:  # dropped (set_epoch, a loaded state, another pass)
                    _whole_or_raise(source, ended, queued, self._ended_error(handed))
                    return
        finally:
            if self._pass == this:  # ended or broken off: the loader's pass ends with it (the
                self._source = None  # batches in flight stay, for state_dict, until the next)
                self._len = None

    def _state_now(self) -> Any:
        if not self.depth:
            return None  # nothing is ever in flight while the caller holds a batch
        if self._resumable:
            return self.loader.position()
        state_dict = getattr(self.loader, "state_dict", None)
        return dict(state_dict()) if callable(state_dict) else None

    def _pull(self) -> None:
        assert self._source is not None
        try:
            batch = next(self._source)
        except StopIteration:
            self._source = None
            return
        if self.cuda:
            copied, ready = self._copy(batch)
        elif self.device.type != "cpu":  # mps, xpu...: copied as it comes, no side stream
            copied, ready = map_tensors(batch, lambda t: t.to(self.device)), None
        elif self.depth:
            copied, ready = map_tensors(batch, lambda t: t.clone()), None
        else:
            copied, ready = batch, None
        self._queue.append(_InFlight(copied, self._state_now(), ready))

    def _copy(self, batch: Any) -> tuple[Any, Any]:
        """Pin (if needed) and copy ``batch`` on the side stream; the event that ends it."""
        host = map_tensors(batch, pinned)
        with torch.cuda.stream(self._stream):
            moved = map_tensors(host, lambda t: t.to(self.device, non_blocking=True))
            ready = torch.cuda.Event()
            ready.record(self._stream)
        return moved, ready

    def _hand(self, item: _InFlight) -> Any:
        if item.ready is None:
            return item.batch
        compute = torch.cuda.current_stream(self.device)
        compute.wait_event(item.ready)
        for t in tensors(item.batch):
            if t.device.type == "cuda":
                t.record_stream(compute)
        return item.batch

    def _ended_error(self, handed: int) -> PassEndedError:
        if self._left_by == _CLOSED:
            return PassEndedError(
                f"this pass of DevicePrefetcher was read on after {_CLOSED} closed it (and its "
                f"loader): it ended after its batch {handed}, batches left. Read the pass "
                "inside the block"
            )
        return PassEndedError(
            f"this pass of DevicePrefetcher was read on after {self._left_by} moved it on: it "
            f"ended after its batch {handed}, batches left. A loader reads one pass at a time; "
            "finish or leave a pass before starting another, and take a look at a batch from "
            "a second loader"
        )

    def _drop(self, why: str) -> None:
        """Drop the batches in flight and end the pass being read (``why``: what moved it
        on, said if that pass is read on)."""
        self._left_by = why
        self._pass += 1
        self._queue.clear()
        self._source = None
        self._handed = None
        self._len = None
