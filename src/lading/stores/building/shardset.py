"""What every sharded build shares, stores and token corpora alike: the build directory every
worker derives alike from its inputs' identity, the claim of that directory (``build.json``: a
shard of other inputs is refused, naming both), and, at the merge, the checks that a build's
shards are all there (missing ones named with the command that builds them); which build a
merge takes is :mod:`lading.stores.building.pending`'s.

A shard is ``dest/build-<id>/shard-<i>-of-<n>/``, renamed there once whole (a killed worker
leaves only a temporary directory, which no merge takes); ``read(dest, rel)`` turns one into the
kind's own shard record. :mod:`lading.stores.building.parallel` (stores) and
:mod:`lading.lm.shards` (token corpora) build on it; a worker's shard number and report are
:mod:`lading.stores.building.shard_work`'s.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from lading.disk import write_file
from lading.disk.meta import META_FILE
from lading.disk.snapshot import BUILD_MARK, BUILD_PREFIX, TMP_PREFIX
from lading.errors import StoreFormatError
from lading.stores.layout import shard_name

BUILD_FILE = BUILD_MARK  # in build-<id>/: the inputs, options and n every shard was made with
SHARD_FILE = "shard.json"  # in each finished shard: what it holds (written last)
# beside a shard.json copied from a bucket for a worker's claim, its objects checked whole there
SEEDED_FILE = ".from-bucket"
# in build-<id>/: the snapshot that was the destination's when shards of this build last ran
# (a merge takes again a build it committed or passed over once its shards run after the
# snapshot now current: a user going back to an earlier source)
RUN_FILE = "ran.json"
RUN_MARK_MOST = 4096  # bytes: a run mark is ~60; a larger file is not one
T = TypeVar("T")


def shard_record(root: Path, rel: str) -> tuple[Path, Any]:
    """``root/rel``'s ``shard.json``: its path and what it holds, as JSON (its worker writes
    it last, so a shard without it is not finished).

    Raises:
        StoreFormatError: not finished (no ``shard.json``), or the file is damaged.
    """
    path = root / rel / SHARD_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StoreFormatError(
            f"{root / rel} is not a finished shard ({SHARD_FILE} missing)"
        ) from None
    except (ValueError, OSError) as e:
        raise StoreFormatError(f"{path} is damaged ({e}); build this shard again") from None
    return path, record


def check_shard_files(root: Path, rel: str, path: Path, files: dict[str, Any]) -> None:
    """Every file a shard's record (``path``) lists in ``files`` is in ``root/rel`` and of the
    size the record says.

    Raises:
        StoreFormatError: a file missing, or of another size.
    """
    for name, info in files.items():
        try:
            size = (root / rel / name).stat().st_size
        except FileNotFoundError:
            raise StoreFormatError(
                f"{root / rel / name} (in {path}) is missing: build that shard again (its "
                "worker, run again with the same command, rebuilds it)"
            ) from None
        if size != info["size"]:
            raise StoreFormatError(
                f"{root / rel / name} is {size} bytes, its shard says {info['size']}: the shard "
                "was damaged after it was built; build that shard again (its worker, run again "
                "with the same command, rebuilds it)"
            )


def finished_shard(where: Path) -> dict[str, Any] | None:
    """A worker's look at its own shard folder ``where``, under its lock: the record of a
    finished shard whose files are as it lists them; None where it is not finished, or where
    a file is missing or of another size (damaged since: the folder is removed, so the
    worker builds it anew; it said "already built", and the merge refused the shard). A
    bucket's shard (its record copied here for the claim, :data:`SEEDED_FILE` beside it,
    once its objects were found whole there:
    :func:`~lading.stores.building.remote_shards.seed_from_bucket`) and a record that lists
    no files are taken as they are (the merge judges the latter)."""
    path = where / SHARD_FILE
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    files = record.get("files") if isinstance(record, dict) else None
    if (where / SEEDED_FILE).is_file() or not isinstance(files, dict):
        return record
    if not all(isinstance(i, dict) and "size" in i for i in files.values()):
        return record
    try:
        check_shard_files(where.parent, where.name, path, files)
    except StoreFormatError:
        shutil.rmtree(where)
        return None
    return record


def input_stats(files: list[Path]) -> list[list[Any]]:
    """Each input's identity as every worker sees it alike: resolved path, size, mtime, inode
    (their stat, not their bytes: each worker reads only its part)."""
    stats = []
    for path in files:
        st = path.stat()
        stats.append([str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino])
    return stats


def derive_build_id(files: list[Path], options: dict[str, Any], n: int) -> str:
    """The build directory's name every worker computes alike: a digest of the inputs'
    identity (:func:`input_stats`), options and n."""
    return _build_id_of(input_stats(files), options, n)


def _build_id_of(stats: list[Any], options: dict[str, Any], n: int) -> str:
    blob = json.dumps({"inputs": stats, "options": options, "n": n}, sort_keys=True, default=str)
    return f"{BUILD_PREFIX}{hashlib.sha256(blob.encode('utf-8')).hexdigest()[:16]}"


def differ(a: list[Any], b: list[Any], names: tuple[str, str] = ("one", "the other")) -> str:
    """How two lists of :func:`input_stats` differ, in a few words, ``names`` saying whose
    ``a`` and ``b`` are: another input given (other files), a folder or glob that gained or
    lost files, or a file that changed (its identity) between the two."""
    mine, theirs = {str(x[0]): x for x in a}, {str(x[0]): x for x in b}  # checked lists
    gone, new = sorted(set(mine) - set(theirs)), sorted(set(theirs) - set(mine))
    if gone and new:
        said = f"{names[0]} reads {gone[0]!r}, {names[1]} {new[0]!r}"
        if len(mine) == len(theirs) == 1:
            return f"{said}: another input given"
        return (
            f"{said} (of {len(mine)} and {len(theirs)} files): another input given, or a "
            "folder or glob whose files changed between the two"
        )
    if gone or new:
        return (
            f"{len(mine)} input file(s) against {len(theirs)} ({(gone or new)[0]!r} is only in "
            "one: an input folder or glob that gained or lost a file between the two)"
        )
    changed = next(p for p in mine if mine[p] != theirs[p])
    return f"{changed!r} changed between the two (its size, mtime or inode differs)"


def what_is_built(options: Any) -> str:
    """What a build with these recorded ``options`` makes: a token corpus (their ``kind``
    is ``tokens``) or a store."""
    return (
        "token corpus" if isinstance(options, dict) and options.get("kind") == "tokens" else "store"
    )


def claim_build(where: Path, recipe: dict[str, Any], shard: int) -> None:
    """Record ``recipe`` (inputs, options, n) as ``where/build.json``, or refuse when a shard
    of this build read other inputs: two sources under one explicit ``build_id`` (a Slurm
    array whose input folder gained a file while tasks waited) never share a build directory.

    Raises:
        StoreFormatError: naming the build, both inputs and the fix (another build id).
    """
    blob = json.dumps(recipe, indent=2, sort_keys=True).encode()
    if not where.is_dir():  # made whole with its build.json: a racing worker never sees it
        tmp = where.parent / f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"  # bare
        tmp.mkdir(parents=True)
        write_file(tmp / BUILD_FILE, blob)
        try:
            os.rename(tmp, where)
        except OSError:  # another worker made it first: compare with what it recorded
            shutil.rmtree(tmp, ignore_errors=True)
    path = where / BUILD_FILE
    try:
        first = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        first = None
    if isinstance(first, dict):
        _same_plan(where, json.loads(blob), first, shard)
    theirs = first.get("stats") if isinstance(first, dict) else None
    if isinstance(theirs, list) and theirs != recipe["stats"]:
        raise StoreFormatError(
            f"shard {shard} reads other inputs than the shards already in {where}: "
            f"{differ(recipe['stats'], theirs, (f'shard {shard}', 'they'))}. Shards of one "
            "build must read the same inputs; build every shard again under a new build id "
            f"(--build-id), or delete {where} to start this build over"
        )
    if theirs is None:  # written by a lading that did not record the inputs: record them
        tmp_file = where.parent / f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}.json"
        write_file(tmp_file, blob)
        os.replace(tmp_file, path)  # whole or absent: a reader never sees half


def _same_plan(where: Path, mine: dict[str, Any], first: dict[str, Any], shard: int) -> None:
    """Refuse shard ``shard`` of ``mine`` (a recipe) in build ``where`` when its first worker
    recorded another shard count or other options (one explicit build id given to workers
    that disagree): accepted, the merge would later ask for a shard that already exists."""
    if "n" in first and first["n"] != mine["n"]:
        raise StoreFormatError(
            f"shard {shard} of {mine['n']} goes into build {where.name}, whose build.json "
            f"({where}) records {first['n']} shards: every worker of one build id must be "
            f"given the same N (--shard i/{first['n']}), or use another build id"
        )
    theirs, ours = first.get("options"), mine["options"]
    if isinstance(theirs, dict) and theirs != ours:
        keys = sorted(k for k in {*theirs, *ours} if theirs.get(k) != ours.get(k))
        said = ", ".join(f"{k}={ours.get(k)!r} here, {theirs.get(k)!r} there" for k in keys)
        raise StoreFormatError(
            f"shard {shard} is built with other options than build {where.name} records "
            f"({said}; {where / BUILD_FILE}): every worker of one build id must be given the "
            "same options, or use another build id"
        )


def check_same_inputs(dest: Path, shards: Sequence[Any]) -> None:
    """Refuse shards that read different inputs (each ``shard.json`` records the stats of the
    whole input it was planned over), naming both shards and the difference. Shards written by
    a lading that did not record them (or by a Ray ``Datasink``) are not compared."""
    recorded = [(s, s.record.get("input_stats")) for s in shards]
    known = [(s, stats) for s, stats in recorded if isinstance(stats, list)]
    for shard, stats in known[1:]:
        first, theirs = known[0]
        if stats != theirs:
            what = what_is_built(first.record.get("options"))
            how = differ(theirs, stats, ("the first", "the second"))
            raise StoreFormatError(
                f"{dest}: shards {dest / first.dir} and {dest / shard.dir} read different "
                f"inputs ({how}; the input_stats of their shard.json): merged, the {what} "
                "would mix two sources. Build every shard again under a new build id "
                "(--build-id) from one input"
            )


def complete_shards(
    dest: Path,
    bid: str,
    read: Callable[[Path, str], T],
    build: str = "lading build",
    n: int | None = None,
) -> list[T]:
    """Every shard of build ``bid``, read from disk. Time linear in the shards present, not in
    the ``n`` that ``build.json`` claims. ``n``: what :func:`all_present` answered for it,
    where the caller asked already (each shard is read here either way: one that went
    missing since is an error).

    Raises:
        StoreFormatError: naming the shards that are missing and how to build them.
    """
    n = all_present(dest, bid, build) if n is None else n
    return [read(dest, f"{bid}/{shard_name(i, n)}") for i in range(n)]


def all_present(dest: Path, bid: str, build: str = "lading build") -> int:
    """The shard count of build ``bid``, checked to have every shard's ``shard.json`` (looked
    for, not read: :func:`complete_shards` reads them).

    Raises:
        StoreFormatError: naming the shards that are missing and how to build them.
    """
    n, present = build_size(dest, bid), shards_present(dest, bid)
    have = sum(1 for name in present if shard_number(name, n) is not None)
    missing: list[int] = []
    i = 0
    while i < n and len(missing) < 9:  # at most len(present) + 9 names looked at
        if shard_name(i, n) not in present:
            missing.append(i)
        i += 1
    if missing:
        listed = ", ".join(str(i) for i in missing[:8]) + (" ..." if len(missing) > 8 else "")
        build, given = _builds_own_command(dest, bid, build)
        named = f" --build-id {bid}" if given else ""  # (its workers were given it)
        each = (
            f"Build it with `{build} SOURCE {dest} --shard {missing[0]}/{n}{named}`"
            if len(missing) == 1
            else f"Build each with `{build} SOURCE {dest} --shard I/{n}{named}` for I in {listed}"
        )
        raise StoreFormatError(
            f"{dest}: build {bid} has {have:,} of its {n:,} shards; missing {listed}. {each} "
            f"(the same source and options), then `{build.replace('build', 'merge')} {dest}`"
        )
    return n


def _builds_own_command(dest: Path, bid: str, build: str) -> tuple[str, bool]:
    """The command that builds a shard of ``dest/bid``'s kind (as its ``build.json`` says),
    whichever kind's merge met it (``build`` where the record does not say), and whether its
    workers were given the build's id (``--build-id``: not the one derived from the inputs
    its record lists, which a worker without the flag would build under)."""
    try:
        recipe = json.loads((dest / bid / BUILD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return build, False
    options = recipe.get("options") if isinstance(recipe, dict) else None
    if not isinstance(options, dict):
        return build, False
    try:
        given = _build_id_of(recipe["stats"], options, int(recipe["n"])) != bid
    except (KeyError, TypeError, ValueError):
        given = False
    kind = "lading lm build" if what_is_built(options) == "token corpus" else "lading build"
    return kind, given


def shards_present(dest: Path, bid: str) -> set[str]:
    """The names of build ``bid``'s shards that are whole (their ``shard.json`` there)."""
    return {p.name for p in (dest / bid).iterdir() if (p / SHARD_FILE).is_file()}


def build_size(dest: Path, bid: str) -> int:
    """The ``n`` that ``dest/bid/build.json`` records, checked to be a shard count (the file
    read once: whether a Ray sink wrote it is told from the same record)."""
    path = dest / bid / BUILD_FILE
    try:
        recipe = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StoreFormatError(f"{dest} has no build {bid}") from None
    except (OSError, ValueError) as e:
        raise StoreFormatError(f"{path} is damaged ({e!r}); build the shards again") from None
    if _is_sink_recipe(recipe):
        raise StoreFormatError(
            f"{dest}: {bid} was written by a Ray Datasink, whose job commits the shards its "
            "tasks return; a merge takes the builds of --shard workers only"
        )
    try:
        n = recipe["n"]
    except (KeyError, TypeError) as e:
        raise StoreFormatError(f"{path} is damaged ({e!r}); build the shards again") from None
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise StoreFormatError(f"{path}: n = {n!r} is not a shard count; build the shards again")
    return n


def is_sink_build(path: Path) -> bool:
    """Whether the ``build.json`` at ``path`` is a Ray sink's: no shard count (its tasks write
    as many shards as the dataset has blocks), the format ``ray``."""
    try:
        recipe = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # damaged: the merge names it
    return _is_sink_recipe(recipe)


def _is_sink_recipe(recipe: Any) -> bool:
    return isinstance(recipe, dict) and "n" not in recipe and _options_format(recipe) == "ray"


def _options_format(recipe: dict[str, Any]) -> Any:
    options = recipe.get("options")
    return options.get("format") if isinstance(options, dict) else None


def shard_number(name: str, n: int) -> int | None:
    head, _, rest = name.removeprefix("shard-").partition("-of-")
    if rest != f"{n:05d}" or not head.isdigit() or int(head) >= n:
        return None
    return int(head)


def claim_shard(
    dest: Path,
    files: list[Path],
    options: dict[str, Any],
    shard: tuple[int, int],
    build_id: str | None,
    what: str,
    fmt: str | None = None,
) -> tuple[str, Path, list[list[Any]]]:
    """Where shard ``(i, n)`` of ``dest`` goes: ``(build id, dest/<id>/shard-<i>-of-<n>, the
    inputs' stats)``, the build directory claimed for these inputs (:func:`claim_build`).

    Raises:
        ValueError: a ``build_id`` that is not ``build-<letters, digits>``.
        FileExistsError: ``dest`` holds something that is not a lading ``what``, or a
            snapshot of another format than ``fmt`` (a store where a token corpus goes: the
            merge would replace it).
    """
    i, n = shard
    bid = build_id or derive_build_id(files, options, n)
    if not bid.startswith(BUILD_PREFIX) or "/" in bid:
        raise ValueError(
            f"build_id {bid!r}: a build id is {BUILD_PREFIX!r} and letters or digits (e.g. "
            f"{BUILD_PREFIX}{bid.replace('/', '-')}, or {BUILD_PREFIX}$SLURM_ARRAY_JOB_ID); give "
            "every shard and the merge the same one"
        )
    from lading.disk.atomic import is_ours_to_replace, lading_format
    from lading.disk.build import refuse_other_kind

    if not is_ours_to_replace(dest):
        raise FileExistsError(
            f"{dest} exists and is not a lading {what}; refusing to build into it"
        )
    refuse_other_kind(dest, lading_format(dest), fmt, what)
    where = dest / bid / shard_name(i, n)
    dest.mkdir(parents=True, exist_ok=True)
    stats = input_stats(files)
    recipe = {"build_id": bid, "n": n, "options": options, "inputs": [str(p) for p in files]}
    claim_build(where.parent, {**recipe, "stats": stats}, i)
    mark_run(where.parent, current_snapshot(dest))
    return bid, where, stats


def current_snapshot(dest: Path) -> str | None:
    """The id of the snapshot ``dest`` holds now (None: none yet, or unreadable)."""
    try:
        meta = json.loads((dest / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    snapshot = meta.get("snapshot") if isinstance(meta, dict) else None
    return snapshot if isinstance(snapshot, str) else None


def mark_run(build_dir: Path, snapshot: str | None) -> None:
    """Record in ``build_dir`` that shards of its build ran while ``snapshot`` was the
    destination's (:data:`RUN_FILE`; a hint a merge reads, replaced whole, never fsynced: a
    crash loses at most the taking back of an old build)."""
    tmp = build_dir / f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}.{RUN_FILE}"
    tmp.write_text(json.dumps({"after": snapshot}), encoding="utf-8")
    os.replace(tmp, build_dir / RUN_FILE)


def ran_after(build_dir: Path, snapshot: str | None) -> bool:
    """Whether shards of ``build_dir``'s build ran while ``snapshot`` was the destination's
    (so after it was committed)."""
    try:  # a hint in a folder others write: a regular file, not followed, a mark's size
        fd = os.open(build_dir / RUN_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            raw = os.read(fd, RUN_MARK_MOST + 1) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
        mark = json.loads(raw) if 0 < len(raw) <= RUN_MARK_MOST else None
    except (OSError, ValueError):
        return False
    return snapshot is not None and isinstance(mark, dict) and mark.get("after") == snapshot


def check_same_options(dest: Path, bid: str, shards: Sequence[Any]) -> dict[str, Any]:
    """The recipe ``dest/bid/build.json`` records, every shard checked to be built with its
    options: a shard built otherwise is named with a shard built with them (or, none being,
    the ``build.json``) and the options that differ (a token corpus's ``tokenizer``, its
    SHA-256, among them: shards tokenized otherwise).

    Raises:
        StoreFormatError: a shard built with other options.
    """
    recipe: dict[str, Any] = json.loads((dest / bid / BUILD_FILE).read_text())
    ours = recipe["options"]
    odd = next((s for s in shards if s.record.get("options") != ours), None)
    if odd is None:
        return recipe
    theirs = odd.record.get("options")
    if isinstance(theirs, dict) and isinstance(ours, dict):
        keys = sorted(k for k in {*theirs, *ours} if theirs.get(k) != ours.get(k))
        said = ", ".join(f"{k}={theirs.get(k)!r} against {ours.get(k)!r}" for k in keys)
    else:
        keys, said = [], f"{theirs!r} against {ours!r}"
    like = next((s for s in shards if s.record.get("options") == ours), None)
    mark = dest / bid / BUILD_FILE
    both = (
        f"shard {dest / odd.dir} was built with other options than shard {dest / like.dir}, "
        f"whose are those {mark} records"
        if like is not None
        else f"shard {dest / odd.dir} was built with other options than {mark} records"
    )
    tokens = "tokenized otherwise: merged, their token ids would mean different things; "
    raise StoreFormatError(
        f"{dest}: {both} ({said}): {tokens if 'tokenizer' in keys else ''}remove "
        f"{dest / odd.dir} and build it again with the options of the others"
    )
