"""Fuzz: every field of a local manifest made hostile, one at a time (issue 39, "what must hold").

Six kinds of directory, each built once per module and copied for every example: a packed store
of one shard with a field and tokens (its ``meta.json``), a store merged from two shards (its
``meta.json``, with ``global_offsets``), the replaced snapshot of a rebuilt store (its
``snap-*/manifest.json``, opened pinned), a token corpus, an offsets index, and the shards
of a parallel build before the merge (a ``shard.json`` or the ``build.json``). Hypothesis
picks one field (any depth, containers too) and a hostile value for it: a path with ``..``,
an absolute path, a symlink inside the store that leads out (listed with the right size and
checksums), NUL, a very long name, a wrong type, a negative or huge number. Then every reader
of that kind runs (``open_store`` reading every document, ``verify_store``, ``stage`` and
reading the copy, ``TokenCorpus.open``, ``OffsetStore``, ``merge_store``) and each must

- give the right documents (the field did not matter), or raise one ``LadingError`` whose
  message is one line naming the manifest or the field (or, for a recorded input's
  fingerprint, saying the store is stale);
- open nothing under the directory beside the store that holds the attacker's files, and
  open for writing, create, rename or delete nothing outside the store and the stage
  destination (an audit hook on ``open``, ``os.remove``, ``os.rename``, ``os.mkdir``,
  ``os.rmdir``, ``shutil.rmtree``..., and a listing of the directory around before and after);
- finish within :data:`HANG_S` (a timer signal).

Seeded: ``LADING_FUZZ_SEED`` replays a run (the seed is printed); ``LADING_FUZZ_EXAMPLES`` sets
the examples per kind (default :data:`EXAMPLES`, a few seconds in all).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import lading
from conftest import word_tokenizer, write
from lading.errors import LadingError

SEED = int(os.environ.get("LADING_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
EXAMPLES = int(os.environ.get("LADING_FUZZ_EXAMPLES") or 25)
HANG_S = 20.0
WORDS = ["alpha", "beta", "gamma", "delta"]
SOURCE_FIELDS = ("source", "sources", "fingerprints", "recipe")  # name the inputs, not store files
TOKENS: dict[str, list[int]] = {}  # the packed template's token ids, by document id
KINDS = ("packed", "merged", "pinned", "corpus", "shards", "offsets")

# ----------------------------------------------------------------------------- the watch

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_CHANGES = {
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.symlink",
    "os.link", "os.truncate", "os.chmod", "os.utime", "shutil.move", "shutil.copyfile",
}  # fmt: skip


class Watch:
    """What the code under test opened and changed, while :attr:`active`."""

    active = False
    events: ClassVar[list[tuple[str, str, bool]]] = []  # (event, path, writes)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not Watch.active or (event != "open" and event not in _CHANGES):
        return
    paths = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
    fds = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 2, "os.rename": 2}  # where dir_fd is
    at = args[fds[event]] if event in fds and len(args) > fds[event] else None
    if isinstance(at, int) and at >= 0:  # rmtree removes by names relative to a directory fd
        base = os.readlink(f"/proc/self/fd/{at}")
        paths = [os.path.join(base, os.fsdecode(os.fspath(p))) for p in paths]
    writes = event != "open"
    if event == "open":
        mode, flags = args[1], args[2]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        paths = paths[:1]
    for path in paths:
        Watch.events.append((event, os.fsdecode(os.fspath(path)), writes))


sys.addaudithook(_audit)  # hooks stay for the process: inert unless Watch.active


def _listing(root: Path, skip: tuple[Path, ...]) -> dict[str, tuple[int, int, bool]]:
    """Every entry under ``root`` but those under ``skip``: (size, mtime, is a link)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if any(str(path).startswith(str(s)) for s in skip):
                continue
            st = path.lstat()
            out[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns, path.is_symlink())
    return out


# ----------------------------------------------------------------------------- templates


def _docs(n: int, first: int = 0) -> list[dict[str, str]]:
    rng = np.random.default_rng(first)
    return [
        {"id": f"d{i}", "text": " ".join(rng.choice(WORDS, 1 + i % 5)), "title": f"t{i}"}
        for i in range(first, first + n)
    ]


def _jsonl(path: Path, docs: list[dict[str, str]]) -> Path:
    return write(path, "".join(json.dumps(d) + "\n" for d in docs))


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    """kind -> (directory, what a reader must find there)."""
    from lading.lm import TokenCorpus

    base = tmp_path_factory.mktemp("templates")
    tok = word_tokenizer(WORDS, base / "tok.json")
    docs = _docs(12)
    src = _jsonl(base / "in" / "docs.jsonl", docs)
    expected = {d["id"]: d["text"] for d in docs}
    packed = lading.build_store(src, base / "packed", tokenizer=str(tok), progress=False)
    TOKENS.update(
        {i: t.tolist() for i, t in zip(sorted(expected), packed.tokens_many(sorted(expected)))}
    )
    for i in range(2):
        lading.build_shard(src, base / "merged", shard=(i, 2), progress=False)
    lading.merge_store(base / "merged")
    for i in range(2):
        lading.build_shard(src, base / "shards", shard=(i, 2), progress=False)
    old = _docs(5, 100)
    pinned = lading.build_store(
        _jsonl(base / "in2" / "old.jsonl", old), base / "pinned", progress=False
    )
    lading.build_store(src, base / "pinned", progress=False)
    corpus = TokenCorpus.build(base / "in" / "docs.jsonl", base / "corpus", str(tok))
    lading.OffsetStore.build(src, base / "offsets")
    return {
        "packed": (base / "packed", expected),
        "merged": (base / "merged", expected),
        "shards": (base / "shards", expected),
        "pinned": (base / "pinned", ({d["id"]: d["text"] for d in old}, pinned.snapshot)),
        "corpus": (base / "corpus", corpus.tokens.copy()),
        "offsets": (base / "offsets", expected),
    }


def _manifests(kind: str, store: Path, pinned: str | None) -> list[Path]:
    if kind == "pinned":
        return [store / str(pinned) / "manifest.json"]
    if kind == "shards":
        return sorted(store.glob("build-*/shard-*/shard.json")) + sorted(
            store.glob("build-*/build.json")
        )
    return [store / "meta.json"]


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value in a JSON document, containers included (not the root)."""
    if path:
        yield path
    if isinstance(value, (dict, list)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, inner in items:
            yield from _leaves(inner, (*path, key))


# ----------------------------------------------------------------------------- hostile values

_TYPES = [None, True, False, 0, -1, -(2**63), 2**63, 10**30, 1.5, float("nan")]
_SHAPES = [[], {}, [1, "a"], {"data": 1}, "garbage", "snap-x", ">u2", "<i2", "|u1", "<u4", "<f8"]
_NAMES = ["", ".", "..", "/", "a\x00b", "x" * 5000, "a/" * 300 + "b", "\\evil", "build-y/../../z"]
HOSTILE = st.one_of(
    st.sampled_from(_TYPES + _SHAPES + _NAMES),
    st.sampled_from(["<abs>", "<dotdot>", "<link>", "<deep-dotdot>"]),
    st.text(max_size=20),
    st.integers(),
)


def _value(token: Any, original: Any, sandbox: Path, store: Path, manifest: Path) -> Any:
    """Turn the attacks that need the sandbox into values (and a symlink, for ``<link>``)."""
    if not isinstance(token, str) or not token.startswith("<"):
        return token
    tail = original if isinstance(original, str) and original else "text.bin"
    tail = tail if not tail.startswith("/") else Path(tail).name
    if token == "<abs>":
        return str(sandbox / "outside" / "twin" / tail)
    if token == "<dotdot>":
        return f"../outside/twin/{tail}"
    if token == "<deep-dotdot>":
        return f"{tail}/../../../outside/twin/{tail}"
    # a link inside the directory names are relative to (the store; a shard's own directory
    # for shard.json), to the twin outside; listed with the original's sums by _list_link
    base = manifest.parent if manifest.name == "shard.json" else store
    link = base / "lnk"
    if not link.exists():
        os.symlink(sandbox / "outside" / "twin", link)
    return str((link / tail).relative_to(base))


def _list_link(document: Any, value: Any, original: Any) -> None:
    """Give a symlinked name the original's file-list entry (size, checksums): only the
    symlink is wrong."""
    files = document.get("files") if isinstance(document, dict) else None
    if isinstance(files, dict) and isinstance(value, str) and str(original) in files:
        files[value] = files[str(original)]


# ----------------------------------------------------------------------------- readers


def _read_store(path: Path, expected: dict[str, str], snapshot: str | None = None) -> None:
    store = lading.open_store(path, snapshot=snapshot, on_stale="ignore")
    ids = sorted(expected)
    assert dict(zip(ids, store.get_many(ids))) == expected
    assert sorted(store.ids()) == ids and len(store) == len(ids)
    if store.has_tokens:  # a dtype read wrong (big-endian, signed) would change the values
        assert [t.tolist() for t in store.tokens_many(ids)] == [TOKENS[i] for i in ids]


def _readers(kind: str, store: Path, expected: Any, sandbox: Path) -> list[Callable[[], Any]]:
    from lading.disk.stage import stage
    from lading.lm import TokenCorpus
    from lading.lm.corpus import verify_corpus

    if kind == "corpus":

        def open_corpus(where: Path = store) -> None:
            corpus = TokenCorpus.open(where, on_stale="ignore")
            assert np.array_equal(corpus.tokens, expected) and len(corpus.lengths()) == 12

        return [
            open_corpus,
            lambda: _problems(verify_corpus(store)),
            lambda: open_corpus(stage(store, sandbox / "staged")),
        ]
    if kind == "pinned":
        return [lambda: _read_store(store, expected[0], expected[1])]
    if kind == "shards":
        return [lambda: _read_store(lading.merge_store(store).path, expected)]
    if kind == "offsets":

        def open_offsets() -> None:
            ids = sorted(expected)
            assert lading.OffsetStore(store).get_many(ids) == [expected[i] for i in ids]

        return [open_offsets, lambda: _problems(lading.stores.verify_store(store))]

    def staged() -> None:
        _read_store(stage(store, sandbox / "staged"), expected)

    return [
        lambda: _read_store(store, expected),
        lambda: _problems(lading.stores.verify_store(store)),
        staged,
    ]


def _problems(found: list[str]) -> None:
    for problem in found:  # a problem is reported, not raised: one line each
        assert "\n" not in problem, problem


class HangError(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise HangError(f"a reader ran past {HANG_S}s")


def _run(reader: Callable[[], Any], names: tuple[str, ...]) -> str:
    """Run one reader: "ok", or the refusal's message (checked to be one line naming a name)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        reader()
        return "ok"
    except LadingError as e:
        message = str(e)
        assert "\n" not in message, message
        assert any(n in message for n in names), (names, message)
        return message
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _plant(
    manifest: Path, path: tuple[Any, ...], token: Any, sandbox: Path, store: Path
) -> tuple[Any, tuple[str, ...]]:
    """Set field ``path`` of ``manifest`` to the hostile ``token``; (the value written, the
    names a refusal may give: the manifest's, the field's keys, "stale" for a fingerprint)."""
    document = json.loads(manifest.read_text())
    holder = document
    for key in path[:-1]:
        holder = holder[key]
    original = holder[path[-1]]
    value = _value(token, original, sandbox, store, manifest)
    holder[path[-1]] = value
    if token == "<link>":
        _list_link(document, value, original)
    manifest.write_text(json.dumps(document))
    names = (manifest.name, *(str(k) for k in path if isinstance(k, str)))
    if any(k in path for k in SOURCE_FIELDS):  # a recorded input that differs: "stale"
        names = (*names, "stale")
    return value, names


def _check_watch(sandbox: Path, store: Path, path: tuple[Any, ...], value: Any) -> None:
    """Nothing beside the store was opened, nothing outside it (and the stage) was changed.
    The stale check may read the head and tail of the regular file a manifest names as its
    source (that is its job: say whether the input changed); nothing else outside."""
    outside = str(sandbox / "outside")
    fingerprint = any(k in path for k in SOURCE_FIELDS)
    read_out = [e for e in Watch.events if e[1].startswith(outside) and (e[2] or not fingerprint)]
    assert not read_out, f"{path} = {value!r}: opened outside the store: {read_out[:3]}"
    kept = (str(store), str(sandbox / "staged"))
    wrote = [
        e
        for e in Watch.events
        if e[2]
        and not e[1].startswith(kept)
        and "__pycache__" not in e[1]
        # a makedirs of the sandbox, which exists, changes nothing
        and not (e[0] == "os.mkdir" and f"{store}/".startswith(f"{e[1]}/"))
    ]
    assert not wrote, f"{path} = {value!r}: changed outside the store: {wrote[:3]}"


# ----------------------------------------------------------------------------- the fuzz


@pytest.mark.filterwarnings("ignore::lading.errors.StaleStoreWarning")  # a fingerprint changed
@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_manifest_field_opens_the_right_store_or_is_refused(
    kind: str, templates: dict[str, tuple[Path, Any]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    print(f"hostile manifests: LADING_FUZZ_SEED={SEED} LADING_FUZZ_EXAMPLES={EXAMPLES}")
    template, expected = templates[kind]
    pinned = expected[1] if kind == "pinned" else None
    manifests = _manifests(kind, template, pinned)
    choices = [
        (i, path) for i, m in enumerate(manifests) for path in _leaves(json.loads(m.read_text()))
    ]

    sandbox = tmp_path_factory.mktemp(kind)  # the attacker's files beside the store
    shutil.copytree(template, sandbox / "outside" / "twin", symlinks=True)
    write(sandbox / "outside" / "victim.txt", "keep me")
    store = sandbox / "store"

    @seed(SEED)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(choice=st.sampled_from(choices), token=HOSTILE)
    def attack(choice: tuple[int, tuple[Any, ...]], token: Any) -> None:
        for made in (store, sandbox / "staged"):  # a fresh copy for every example
            shutil.rmtree(made, ignore_errors=True)
        shutil.copytree(template, store, symlinks=True)
        index, path = choice
        manifest = store / manifests[index].relative_to(template)
        value, names = _plant(manifest, path, token, sandbox, store)
        skip = (store, sandbox / "staged")
        before = _listing(sandbox, skip)
        Watch.events, Watch.active = [], True
        try:
            outcomes = [_run(r, names) for r in _readers(kind, store, expected, sandbox)]
        finally:
            Watch.active = False
        _check_watch(sandbox, store, path, value)
        assert _listing(sandbox, skip) == before, f"{path} = {value!r}: the folder around changed"
        tally["examples"] += 1
        for outcome in outcomes:
            tally["right documents" if outcome == "ok" else "refused in one line"] += 1

    tally: Counter[str] = Counter()
    attack()
    report = os.environ.get("LADING_FUZZ_REPORT")  # benchmarks/RELIABILITY.md's table
    if report:
        with open(report, "a", encoding="utf-8") as out:
            out.write(json.dumps({"kind": kind, "seed": SEED, **tally}) + "\n")


def test_a_missing_key_is_named_in_the_manifest_that_was_read(tmp_path: Path) -> None:
    """A snapshot's own manifest (``snap-<id>/manifest.json``, read when a store is opened
    pinned to it) that lists a field with no dtype is refused naming that manifest. The
    message named ``meta.json``, which was not the file read (found by the fuzz above:
    ``fields`` set to ``{"data": 1}`` in the pinned kind)."""
    from lading.errors import StoreFormatError

    src = write(tmp_path / "d.jsonl", '{"id": "a", "text": "alpha"}\n')
    old = lading.build_store(src, tmp_path / "s", progress=False)
    write(src, '{"id": "b", "text": "beta"}\n')
    lading.build_store(src, tmp_path / "s", progress=False)
    manifest = tmp_path / "s" / old.snapshot / "manifest.json"
    document = json.loads(manifest.read_text())
    document["fields"] = {"data": 1}
    manifest.write_text(json.dumps(document))
    with pytest.raises(StoreFormatError, match=rf"{old.snapshot}/manifest\.json") as refused:
        lading.open_store(tmp_path / "s", snapshot=old.snapshot)
    assert "\n" not in str(refused.value) and "meta.json" not in str(refused.value)
