"""Which build a merge commits, and which builds it has seen (:mod:`.shardset` has the rest).

A merge takes the one complete build (every shard's ``shard.json`` there) that no merge of the
destination committed or passed over: the manifest it commits records them (``builds``: the
build it commits, those recorded before and the complete builds it left, as long as their
folders are there), so a merge run again (a pipeline's retry) commits nothing new, never an
older build, in a folder or a bucket (whose mirror holds the same folders), unless its
shards ran again after the current snapshot was committed (a user going back to an earlier
source or options: :data:`.shardset.RUN_FILE`). The current snapshot's build counts so too:
a pipeline whose shards ran again (found whole) beside another's complete build left
unmerged is refused, naming both, rather than committing the other's. A build named
(``--build-id``, as each shard's report line says) is merged whatever it is. A Ray sink's
build is its job's to commit.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from lading.disk import BuildContext
from lading.disk.snapshot import BUILD_PREFIX
from lading.errors import IncompleteBuildWarning, StoreFormatError
from lading.stores.building.shardset import (
    BUILD_FILE,
    all_present,
    build_size,
    check_same_inputs,
    check_same_options,
    complete_shards,
    differ,
    is_sink_build,
    ran_after,
    shard_number,
    shards_present,
    what_is_built,
)

T = TypeVar("T")


def pending_build(
    dest: Path,
    previous: dict[str, Any] | None,
    build: str = "lading build",
    found: dict[str, int | StoreFormatError] | None = None,
) -> str:
    """The build to merge: the one whose shards are all there (their ``shard.json`` found;
    the merge reads and checks them) that no merge of ``dest`` committed or passed over
    (:func:`seen_builds`), or whose shards ran after the current snapshot was committed (its
    workers run again, each writing its shard or finding it whole: :func:`.shardset.ran_after`),
    the current snapshot's own build included: where that one is the only such build, the
    merge commits nothing new; where another is one too (another pipeline's shards, their
    merge never run), both are named and neither is taken. None such, and a snapshot
    committed by a build: that build (the merge commits nothing new: a retried merge never
    goes back to an older build, nor fails on a build left half made, but one whose shards
    ran after that snapshot was committed is an :class:`~lading.errors.IncompleteBuildWarning`
    naming the shards it lacks); else the builds half made are named with what they lack.

    ``found``: :func:`survey_builds` of ``dest``, where the caller made it already.

    Raises:
        StoreFormatError: no build to merge (naming the shards missing), or several.
    """
    found = survey_builds(dest, build) if found is None else found
    done = previous.get("build_id") if previous else None
    seen = seen_builds(previous)
    complete, partial = [], []
    for bid, n in found.items():
        if isinstance(n, int):
            complete.append(bid)
        elif bid not in seen:
            partial.append((bid, n))
    current = previous.get("snapshot") if previous else None
    # a build seen before counts again once its shards ran after the current commit (every
    # build_shard call, writing its shard or finding it whole, records the snapshot current
    # then: RUN_FILE), the current build's own among them: a pipeline run again beside
    # another's leftover build is two candidates, named, never the other's taken silently
    fresh = [b for b in complete if b not in seen or ran_after(dest / b, current)]
    if len(fresh) == 1:
        return fresh[0]
    if fresh:
        again = f"; {done} is the current snapshot's, its shards ran again" if done in fresh else ""
        raise StoreFormatError(
            f"{dest} has {len(fresh)} complete builds a merge may take ({', '.join(fresh)}"
            f"{again}); name one: "
            f"`{build.replace('build', 'merge')} {dest} --build-id ...`"
        )
    if isinstance(done, str) and done:
        # nothing new (a retried merge; a build abandoned half way is no error), but a build
        # that ran since the current commit and lacks shards is said: workers died
        for bid, missing in partial:
            if ran_after(dest / bid, current):
                of = f" (of build {done})" if done != current else ""
                warnings.warn(
                    f"{missing}. This merge committed nothing: {dest} kept its current "
                    f"snapshot {current}{of}, older than these shards",
                    IncompleteBuildWarning,
                    stacklevel=2,
                )
        return done
    if partial:
        if len(partial) == 1:
            raise partial[0][1]
        raise _partial_builds(dest, [bid for bid, _ in partial], build)
    raise StoreFormatError(
        f"{dest} has no shards to merge; build them first with "
        f"`{build} SOURCE {dest} --shard i/N` for i = 0 .. N-1"
    )


@dataclass(frozen=True)
class BuildToCommit(Generic[T]):
    """A merge's build, its shards read and checked to fit: what the kind's commit writes.

    Attributes:
        bid: the build merged.
        shards: its shards, in order, as the kind's ``read`` made them.
        recipe: the build's ``build.json`` (its ``options`` and ``inputs``).
        passed: the complete builds the merge saw (recorded: never merged later by default).
    """

    bid: str
    shards: list[T]
    recipe: dict[str, Any]
    passed: list[str]


def build_to_commit(
    dest: Path,
    previous: dict[str, Any] | None,
    build_id: str | None,
    read: Callable[[Path, str], T],
    build: str = "lading build",
) -> BuildToCommit[T] | str:
    """What a merge of ``dest`` (a folder, or a bucket's mirror) commits over its current
    manifest ``previous``: build ``build_id`` (default :func:`pending_build`) with its shards
    read by ``read`` and checked to read the same inputs with the same options; or, where that
    build is the current snapshot's, that snapshot's id (a retried merge commits nothing new).
    ``build``: the command that builds a shard, in the messages. Every kind's merge, local or
    in a bucket, starts here.

    Raises:
        StoreFormatError: no build to merge, shards missing, or shards that do not fit
            (naming them).
    """
    found = survey_builds(dest, build)  # one look at every build: which are whole, and n
    bid = build_id or pending_build(dest, previous, build, found)
    if previous is not None and previous.get("build_id") == bid:
        return str(previous["snapshot"])
    refuse_other_kind(dest, bid, build)
    passed = [b for b, n in found.items() if isinstance(n, int)]
    n = found.get(bid)
    shards = complete_shards(dest, bid, read, build, n if isinstance(n, int) else None)
    check_same_inputs(dest, shards)
    recipe = check_same_options(dest, bid, shards)
    return BuildToCommit(bid, shards, recipe, passed)


_MERGES = {"store": "lading merge", "token corpus": "lading lm merge"}  # what merges a kind


def refuse_other_kind(dest: Path, bid: str, build: str) -> None:
    """Refuse to merge build ``bid`` of ``dest`` when its ``build.json`` says it builds the
    other kind than the merge's (``build``: the command building this merge's shards), naming
    what it is and the merge that takes it (read as this kind's, its shards looked damaged).

    Raises:
        StoreFormatError: the build is of the other kind.
    """
    try:
        recipe = json.loads((dest / bid / BUILD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # (a build.json unreadable: the shards' own checks name it)
    built = what_is_built(recipe.get("options") if isinstance(recipe, dict) else None)
    mine = "token corpus" if build.startswith("lading lm") else "store"
    if built != mine:
        raise StoreFormatError(
            f"{dest / bid}: its shards build a {built} ({dest / bid / BUILD_FILE}), not a "
            f"{mine}: merge them with {_MERGES[built]} (or "
            f"{'TokenCorpus.merge' if built == 'token corpus' else 'lading.merge_store'})"
        )


def merge_in_folder(
    dest: Path,
    kind: tuple[str, str],
    build_id: str | None,
    read: Callable[[Path, str], T],
    build: str,
    commit: Callable[[BuildContext, BuildToCommit[T]], str],
) -> dict[str, Any] | str:
    """Every kind's merge in a folder: under ``dest``'s lock, refuse a snapshot of another
    kind there, take the build to commit (:func:`build_to_commit`, its shards read by
    ``read``) and hand it to the kind's ``commit``; the manifest it committed (its files
    checked as they were listed: a caller may open it without reading it back), or the
    current snapshot's id where that build is committed already. ``kind``: the format name
    and what it is called in the messages; ``build``: the command that builds a shard, in
    the messages.

    ``build_id``: which build (default: the one whose shards are all there that no merge
    committed or passed over, else the current snapshot's: a retried merge commits nothing
    new; see the module doc). The current snapshot's build is left as it is.

    Raises:
        StoreFormatError: no build to merge, shards missing (naming them and ``build``),
            or shards that do not fit (naming them; the kind's ``read`` and ``commit`` say
            what else each refuses).
    """
    fmt, what = kind
    with BuildContext(dest, fmt, what, collect=False) as context:
        context.check_kind()  # a store there is not replaced by a token corpus, nor back
        merge = build_to_commit(dest, context.previous, build_id, read, build)
        if isinstance(merge, str):
            return merge
        commit(context, merge)
        assert context.previous is not None  # (the commit made it the current manifest)
        return context.previous


def merge_candidates(dest: Path) -> list[str]:
    """The builds in ``dest`` a merge may take: every ``build-<id>/`` with its ``build.json``,
    but a Ray sink's (no shard count: its job commits the shards its tasks return)."""
    return [
        p.name
        for p in sorted(dest.glob(f"{BUILD_PREFIX}*"))
        if (p / BUILD_FILE).is_file() and not is_sink_build(p / BUILD_FILE)
    ]


def survey_builds(dest: Path, build: str = "lading build") -> dict[str, int | StoreFormatError]:
    """Every build in ``dest`` a merge may take (:func:`merge_candidates`), in order: its
    shard count where its shards are all there (those a merge passes over when it commits
    another are recorded in :func:`seen_builds`, never merged later by default), else the
    error naming the shards it lacks. One look a build: which build to merge, which were
    passed over and how many shards to read all come from it."""
    found: dict[str, int | StoreFormatError] = {}
    for bid in merge_candidates(dest):
        try:
            found[bid] = all_present(dest, bid, build)
        except StoreFormatError as e:
            found[bid] = e
    return found


def seen_builds(previous: dict[str, Any] | None) -> set[str]:
    """The builds the merges of a destination committed or passed over, as its current
    manifest ``previous`` records them (``builds``; a manifest that has none: its own build
    and those of the snapshots in its history)."""
    if not previous:
        return set()
    recorded = previous.get("builds")
    seen = {b for b in recorded if isinstance(b, str)} if isinstance(recorded, list) else set()
    if isinstance(previous.get("build_id"), str):
        seen.add(previous["build_id"])
    history = previous.get("history")
    for entry in history if isinstance(history, list) else []:
        units = entry.get("units") if isinstance(entry, dict) else None
        if isinstance(units, list):
            seen.update(u for u in units if isinstance(u, str) and u.startswith(BUILD_PREFIX))
    return seen


def builds_record(
    dest: Path, previous: dict[str, Any] | None, bid: str, passed: Sequence[str] = ()
) -> list[str]:
    """The manifest's ``builds`` for a commit of build ``bid`` over ``previous``: those seen
    before, ``bid`` and the complete builds the merge ``passed`` over, of those still in
    ``dest`` (a build removed and made again is new)."""
    seen = seen_builds(previous) | set(passed)
    return sorted({b for b in seen if (dest / b).is_dir()} | {bid})


def _partial_builds(dest: Path, builds: list[str], build: str) -> StoreFormatError:
    """The error for several builds in ``dest``, none whole: each named with its shards, and
    what each records otherwise than the first (:func:`_how_apart`: an input that changed
    between the tasks, other options, another N: workers derive their build ids from these)."""
    said, recipes = [], {}
    for bid in builds:
        n = build_size(dest, bid)
        have = sum(1 for x in shards_present(dest, bid) if shard_number(x, n) is not None)
        recipes[bid] = json.loads((dest / bid / BUILD_FILE).read_text(encoding="utf-8"))
        said.append(f"{bid} has {have:,} of its {n:,} shards")
    first = builds[0]
    apart = [_how_apart(first, recipes[first], bid, recipes[bid]) for bid in builds[1:]]
    why = "; ".join(a for a in apart if a) or (
        "they record the same inputs, options and N (workers given other build ids)"
    )
    return StoreFormatError(
        f"{dest} has {len(builds)} builds and none is whole: {'; '.join(said)}. {why}. "
        f"Run `{build} SOURCE {dest} --shard i/N` with the same source, options and N for "
        "every i (the shards of inputs as they are now go into one build), then merge "
        "(remove the builds you do not want)"
    )


def _how_apart(a: str, first: dict[str, Any], b: str, other: dict[str, Any]) -> str:
    """What builds ``a`` and ``b`` record otherwise (their ``build.json``: inputs' identity,
    N, options), in a few words; empty when nothing recorded differs."""
    parts = []
    mine, theirs = first.get("stats"), other.get("stats")
    if isinstance(mine, list) and isinstance(theirs, list) and mine != theirs:
        parts.append(f"their inputs: {differ(mine, theirs, (a, b))}")
    if first.get("n") != other.get("n"):
        parts.append(f"N: {first.get('n')} against {other.get('n')}")
    ours, yours = first.get("options"), other.get("options")
    if isinstance(ours, dict) and isinstance(yours, dict) and ours != yours:
        keys = sorted(k for k in {*ours, *yours} if ours.get(k) != yours.get(k))
        said = ", ".join(f"{k}={ours.get(k)!r} against {yours.get(k)!r}" for k in keys)
        parts.append(f"options: {said}")
    return f"{a} and {b} differ in {'; '.join(parts)}" if parts else ""
