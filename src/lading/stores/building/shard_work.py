"""Which shard a worker builds and what it reports, stores and token corpora alike: the shard
number checked (:func:`check_shard`), and the worker's report (:class:`ShardDone`: read from its
``shard.json``, printed as one line naming the command that merges the shards, and a second for
what it skipped). Each kind's report subclasses it (``ShardReport``, ``CorpusShardReport``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar


@dataclass(frozen=True)
class ShardWork:
    """Which shard a worker built: ``shard`` of ``shards`` of build ``build_id`` at ``dest``. Each
    kind's report (stores, token corpora) adds what it wrote and whether it was reused."""

    dest: Path | str  # a folder, or an object-store URL as given (a Path: "s3:/bucket")
    build_id: str
    shard: int
    shards: int

    def line(
        self,
        documents: int,
        reused: bool,
        merge: str,
        skipped: int = 0,
        skip_examples: Sequence[str] = (),
    ) -> str:
        """The worker's line: ``documents`` written (or ``reused``: there already) and the
        command (``merge``) that commits the shards once all are built; then, when the shard
        ``skipped`` malformed records, a second line saying how many and the first (a
        one-process build's :func:`skipped_line`)."""
        did = "already built" if reused else f"{documents:,} documents"
        line = (
            f"{self.dest}: shard {self.shard}/{self.shards} of {self.build_id}: {did}; once all "
            f"{self.shards} are built: {merge} {self.dest} --build-id {self.build_id}"
        )  # (its own build named: a merge never commits another left unmerged in dest)
        return f"{line}\n{skipped_line(skipped, skip_examples)}" if skipped else line


R = TypeVar("R", bound="ShardDone")


class ShardDone(ShardWork):
    """What a shard worker did, as every kind reports it: a dataclass adding, after
    :class:`ShardWork`'s fields, its count (the field and ``shard.json`` key :attr:`COUNTED`),
    ``reused``, ``skipped`` and ``skip_examples``; :attr:`MERGE` commits the shards."""

    COUNTED: ClassVar[str]  # what the shard holds: "rows" (a store), "documents" (a corpus)
    MERGE: ClassVar[str]  # the command that commits the shards once all are built
    reused: bool
    skipped: int
    skip_examples: tuple[str, ...]

    def __str__(self) -> str:
        counted = getattr(self, self.COUNTED)
        return self.line(counted, self.reused, self.MERGE, self.skipped, self.skip_examples)

    @classmethod
    def of_record(
        cls: type[R], where: tuple[Path, str, int, int], record: dict[str, Any], reused: bool
    ) -> R:
        """The report of the shard ``where`` (dest, build id, i, n) whose ``shard.json`` is
        ``record``: what it holds and what it skipped."""
        examples = tuple(record.get("skip_examples") or ())
        done = (int(record[cls.COUNTED]), reused, int(record.get("skipped", 0)), examples)
        # a subclass's fields: ShardWork's four, then these (mypy sees ShardWork's only)
        return cls(*where, *done)  # type: ignore[call-arg]


def skipped_line(skipped: int, skip_examples: Sequence[str]) -> str:
    """``skipped N malformed record(s); first: line L of FILE: why``: what a build, a shard
    or a merge that skipped records prints (``skip_examples``: the first few, as recorded)."""
    first = f"; first: {skip_examples[0]}" if skip_examples else ""
    return f"skipped {skipped:,} malformed record(s){first}"


def check_shard(shard: tuple[int, int]) -> tuple[int, int]:
    """``(i, n)`` checked: two whole numbers (an int or a numpy integer; not a float, a bool
    or a string, which ``int()`` would quietly turn into another shard), ``0 <= i < n``."""
    try:
        i, n = (_whole(x) for x in shard)
    except (TypeError, ValueError):
        raise ValueError(
            f"shard={shard!r}: expected (i, n), two whole numbers, e.g. (0, 4) for the first "
            "of 4 shards"
        ) from None
    if not 0 <= i < n:
        raise ValueError(f"shard {i}/{n}: i must be in [0, {n}) (shards are numbered from 0)")
    return i, n


def _whole(x: object) -> int:
    if isinstance(x, bool):
        raise TypeError("a bool is not a shard number")
    return operator.index(x)  # type: ignore[arg-type]  # TypeError for what is not an integer
