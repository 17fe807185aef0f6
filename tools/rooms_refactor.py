#!/usr/bin/env python3
# ruff: noqa: E501
# (the phrase tables read best one pair a line)
"""Issue 38, items 2-4, the mechanical part: move the modules into their rooms and rename.

Run from anywhere inside the checkout (the lead runs it on the merged main)::

    python tools/rooms_refactor.py            # moves, rewrites, then ruff --fix (imports) + format
    python tools/rooms_refactor.py --check    # says what it would do, changes nothing

What it does, in order, each step idempotent (a second run prints "nothing to do"):

1. ``git mv`` every module of ``MOVES`` (old path -> new path under ``src/lading``): ``stores/``
   becomes a read room and a build room (``stores/building/``: build, writer, parallel, merge,
   group, inputs, the remote upload; not ``build/``, which .gitignore and tools take for build
   output); ``stores/remote/`` reads as its pipeline (``plan`` ->
   ``fetch`` -> ``cache/`` (the node cache with its ledger, fill and eviction) -> ``store``); the
   local S3 goes to ``lading.testing``; the workload modules are named ``workload``.
   The node cache (``remote/cache.py``) becomes its package's ``__init__.py`` and keeps its
   dotted name, so no new name starts with an old name that maps elsewhere (checked below):
   what makes a rerun a no-op.
2. Rewrites every reference in the tracked text files of src/, tests/, benchmarks/, docs/,
   tools/ (but this file), README.md, pyproject.toml, setup.py and .ci/: dotted module names
   (``lading.stores.writer`` and ``lading.stores.writer.X``, in imports, strings, ``-m``
   commands, docs roles), ``from PACKAGE import module`` of a moved module, and file paths
   (``stores/remote/upload.py``).
3. The renames of "one word, one idea" (item 4), old names not kept:
   - the workload protocol ``loading.Source`` -> ``Workload`` (``lading.sources`` is the input
     files' layer: one word, two ideas; the LM's ``WindowSource`` -> ``WindowReader``, its
     mixture's ``sources`` -> ``members``), ``MapSource``/``LMSource``/``ParquetSource`` ->
     ``MapWorkload``/``LMWorkload``/``ParquetWorkload``, and the loader's ``source`` -> ``workload``;
   - "stage" only for node copies (``lading stage``, ``stage_to=``, a remote index staged to the
     node): a build's temporary folder is its *scratch* (``disk.staging`` -> ``disk.scratch``,
     ``BuildContext.stage()`` -> ``.scratch()``, the prefetcher's ``staged`` -> ``copied``);
   - "snapshot" only for store versions: the prefetcher's saved loader state is a state;
   - the per-token ``segments`` of the LM batches hold document numbers: ``document_ids`` (the
     name ``DocumentBatch`` already gives them).
4. ``ruff check --fix --select I,RUF022`` (import blocks and ``__all__`` sorted again after the
   renames) and ``ruff format`` over src, tests, benchmarks, tools.

It fails loudly on anything it cannot place: a module of ``MOVES`` that is neither at its old
nor at its new path, or at both, stops it before anything is changed (exit 1, naming it); a
phrase of ``PHRASES`` in a file that has neither the old nor the new text (someone rewrote the
sentence) is named on stderr after everything else is done (exit 1): place it by hand.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "lading"
THIS = Path(__file__).resolve()

# old path -> new path, under src/lading
MOVES: list[tuple[str, str]] = [
    # the build room
    ("stores/build.py", "stores/building/build.py"),
    ("stores/writer.py", "stores/building/writer.py"),
    ("stores/parallel.py", "stores/building/parallel.py"),
    ("stores/merge.py", "stores/building/merge.py"),
    ("stores/group.py", "stores/building/group.py"),
    ("stores/inputs.py", "stores/building/inputs.py"),
    ("stores/remote/upload.py", "stores/building/upload.py"),
    # stores/remote as its pipeline: plan -> fetch -> cache -> store
    ("stores/remote/ranges.py", "stores/remote/plan.py"),
    ("stores/remote/obstore_client.py", "stores/remote/client_obstore.py"),
    ("stores/remote/fsspec_client.py", "stores/remote/client_fsspec.py"),
    ("stores/remote/cache.py", "stores/remote/cache/__init__.py"),
    ("stores/remote/ledger.py", "stores/remote/cache/ledger.py"),
    ("stores/remote/fill.py", "stores/remote/cache/fill.py"),
    ("stores/remote/evict.py", "stores/remote/cache/evict.py"),
    # the local S3 leaves the read path
    ("stores/remote/localserver.py", "testing/localserver.py"),
    # the workload side is named for what it is
    ("loading/source.py", "loading/workload.py"),
    ("loading/map_source.py", "loading/map_workload.py"),
    ("lm/source.py", "lm/workload.py"),
    ("tabular/source.py", "tabular/workload.py"),
]

REMOTE_DOC = '''"""Stores in object storage, read as a pipeline: plan -> fetch -> cache -> store.

- the seam: :mod:`~lading.stores.remote.objects` (ranged reads of any backend),
  :mod:`~lading.stores.remote.clients` opens one (:mod:`~lading.stores.remote.client_obstore`
  where usable, else :mod:`~lading.stores.remote.client_fsspec`);
- plan: :mod:`~lading.stores.remote.plan`, the byte ranges some batches need, sorted and
  coalesced into GETs within a waste budget;
- fetch: :mod:`~lading.stores.remote.fetch`, many GETs in flight from one thread, retries with
  backoff;
- cache: ``cache/``, the node cache with a hard byte cap: the view one store has of it
  (``cache/__init__.py``), its shared ledger (:mod:`~lading.stores.remote.cache.ledger`), the
  writer thread that fills fetched blocks (:mod:`~lading.stores.remote.cache.fill`) and the
  eviction policies (:mod:`~lading.stores.remote.cache.evict`);
- store: :mod:`~lading.stores.remote.store` (``RemoteStore``), over the
  :mod:`~lading.stores.remote.manifest` it pinned, the index staged to the node
  (:mod:`~lading.stores.remote.stage`) and its :mod:`~lading.stores.remote.columns`; how it is
  read: :mod:`~lading.stores.remote.settings`.

Building into object storage is the build room's (:mod:`lading.stores.building.upload`); a local
S3 to try all this offline is :class:`lading.testing.LocalS3`.
"""
'''

BUILDING_DOC = '''"""The build room: what writes a store, read by the read room (``stores/``).

- :mod:`~lading.stores.building.build`: ``build_store`` (one builder per destination, atomic,
  reused when nothing changed), ``build_shard`` and ``merge_store`` (a build in parallel);
- :mod:`~lading.stores.building.inputs`: the input files, dealt to shards by byte ranges;
- :mod:`~lading.stores.building.writer`: one shard's files, written in one pass;
- :mod:`~lading.stores.building.parallel`: shard ``i`` of ``n`` by any worker, then one merge;
  :mod:`~lading.stores.building.merge`: the id index over all shards and the manifest;
- :mod:`~lading.stores.building.group`: building under an initialised process group;
- :mod:`~lading.stores.building.upload`: a store built here, uploaded into object storage.
"""
'''

# (file under the repository root, old text, new text): exact phrases, applied once
PHRASES: list[tuple[str, str, str]] = [
    (
        "src/lading/stores/__init__.py",
        '"""Document stores: one protocol (:class:`DocStore`), four ways of keeping a corpus.\n',
        '"""The read room: document stores, one protocol (:class:`DocStore`), four ways of keeping\n'
        "a corpus; building them is the build room's (:mod:`lading.stores.building`).\n",
    ),
    (
        "tests/test_layers.py",
        '    "testing": 4,  # re-exports stores/remote/localserver until tools/rooms_refactor.py moves it\n',
        '    "testing": 0,  # the local S3: the standard library, moto and aiohttp only\n',
    ),
    # docstring lines the longer module names pushed over 100 characters
    (
        "src/lading/integrations/ray.py",
        "naming both: :func:`lading.stores.building.parallel.commit_shards`). A\nfailed",
        "naming both:\n:func:`lading.stores.building.parallel.commit_shards`). A\nfailed",
    ),
    (
        "src/lading/stores/building/parallel.py",
        "(:mod:`lading.stores.building.merge`). Under torchrun\nevery rank",
        "(:mod:`lading.stores.building.merge`).\nUnder torchrun every rank",
    ),
    # the workload side: a workload, not a source
    ("src/lading/loading/map_workload.py", "as a position source:", "as a workload:"),
    (
        "src/lading/loading/map_workload.py",
        "    source = MapWorkload(",
        "    workload = MapWorkload(",
    ),
    (
        "src/lading/loading/map_workload.py",
        "made = Loader(source, workers, seed=seed, announce=announcer(dataset, source.items))",
        "made = Loader(workload, workers, seed=seed, announce=announcer(dataset, workload.items))",
    ),
    ("src/lading/lm/loader.py", "        source = LMWorkload(", "        workload = LMWorkload("),
    (
        "src/lading/lm/loader.py",
        "        super().__init__(source, workers, seed=seed)\n"
        "        self._lm, self.corpus, self.sequence, self.world = source, corpus",
        "        super().__init__(workload, workers, seed=seed)\n"
        "        self._lm, self.corpus, self.sequence, self.world = workload, corpus",
    ),
    (
        "src/lading/lm/workload.py",
        "workload as a source of the one loader",
        "workload of the one loader",
    ),
    ("src/lading/lm/workload.py", "tokens this source", "tokens this workload"),
    (
        "src/lading/tabular/workload.py",
        "parquet as a source of the one loader",
        "parquet as a workload of the one loader",
    ),
    (
        "src/lading/tabular/dataset.py",
        "        source = ParquetWorkload(",
        "        workload = ParquetWorkload(",
    ),
    (
        "src/lading/tabular/dataset.py",
        "        super().__init__(source, workers, seed=seed)",
        "        super().__init__(workload, workers, seed=seed)",
    ),
    (
        "src/lading/tabular/dataset.py",
        "self.total_rows, self.buffer_rows = source.total_rows, source.buffer_rows",
        "self.total_rows, self.buffer_rows = workload.total_rows, workload.buffer_rows",
    ),
    ("src/lading/loading/__init__.py", "iterates every source", "iterates every workload"),
    (
        "src/lading/loading/segment.py",
        "Every\nposition source (map-style samples, parquet rows, LM windows) asks it instead of redoing the\narithmetic; a source only says",
        "Every\nworkload (map-style samples, parquet rows, LM windows) asks it instead of redoing the\narithmetic; a workload only says",
    ),
    ("src/lading/loading/segment.py", "What a position source keeps", "What a workload keeps"),
    (
        "src/lading/loading/segment.py",
        "``evening`` (the source) says",
        "``evening`` (the workload) says",
    ),
    (
        "src/lading/loading/resumable.py",
        "never a loader's source or cursor",
        "never a loader's workload or cursor",
    ),
    (
        "src/lading/loading/plan.py",
        "refuse alike: an empty source,",
        "refuse alike: an empty dataset,",
    ),
    (
        "src/lading/device/prefetch.py",
        "(``dataset``, ``source``, ``num_workers``…)",
        "(``dataset``, ``corpus``, ``num_workers``…)",
    ),
    ("src/lading/loading/segment.py", "(every source has both:", "(every workload has both:"),
    (
        "src/lading/lm/windows.py",
        "per token, its segment of the row:",
        "per token, its document in the row:",
    ),
    (
        "src/lading/lm/windows.py",
        "a source only says what a position holds",
        "a workload only says what a position holds",
    ),
    (
        "src/lading/loading/loader.py",
        '"""The one loader: iterates any workload\'s :class:`~lading.loading.workload.Workload`, in this process\nor in',
        '"""The one loader: iterates any :class:`~lading.loading.workload.Workload`, in this process or\nin',
    ),
    # "stage" only for node copies: a build's temporary folder is its scratch folder
    (
        "src/lading/disk/build.py",
        "    def stage(self) -> Iterator[Path]:",
        "    def scratch(self) -> Iterator[Path]:",
    ),
    ("src/lading/disk/__init__.py", '    "staging",\n', '    "scratch",\n'),
    ("src/lading/disk/__init__.py", ":func:`staging`", ":func:`scratch`"),
    (
        "src/lading/train/checkpoint.py",
        ":func:`lading.disk.staging`",
        ":func:`lading.disk.scratch`",
    ),
    (
        "src/lading/tabular/files.py",
        "a build's staging and replaced",
        "a build's scratch and replaced",
    ),
    (
        "src/lading/tabular/files.py",
        "A build's staging or replaced",
        "A build's scratch or replaced",
    ),
    (
        "src/lading/tabular/repartition.py",
        "with the staging folders of",
        "with the scratch folders of",
    ),
    (
        "src/lading/cli/data.py",
        '"staging folders of killed runs',
        '"scratch folders of killed runs',
    ),
    ("src/lading/cli/stores.py", "the staging folder is gone", "the scratch folder is gone"),
    ("tests/disk/test_disk_full.py", "the one staging step", "the one scratch step"),
    (
        "src/lading/stores/building/merge.py",
        "or a staged one not committed yet",
        "or a scratch one not committed yet",
    ),
    ("src/lading/disk/atomic.py", "# staged inside, dest itself", "# scratch inside, dest itself"),
    (
        "src/lading/disk/build.py",
        "publish`: staged beside it, swapped in",
        "publish`: written beside it, swapped in",
    ),
    (
        "src/lading/tabular/repartition.py",
        "read whole: staged beside it, swapped in",
        "read whole: written beside it, swapped in",
    ),
    (
        "src/lading/cli/bench.py",
        "or the snapshot of a model\n    id already in",
        "or the copy of a model\n    id already in",
    ),
    ("src/lading/device/prefetch.py", "its staged copy", "its copy on the device"),
    # "snapshot" only for store versions
    (
        "src/lading/device/prefetch.py",
        "so it snapshots the loader's state",
        "so it saves the loader's state",
    ),
    (
        "src/lading/device/prefetch.py",
        "reports the snapshot of the last batch",
        "reports the state saved with the last batch",
    ),
    (
        "src/lading/loading/resumable.py",
        "per-item snapshots the same way",
        "per-item states the same way",
    ),
    # the per-token document numbers of an LM batch
    ("src/lading/lm/boundaries.py", "which *segment* of its row", "which *document* of its row"),
    (
        "src/lading/lm/boundaries.py",
        "for rows ``[B, L]`` of segment ids",
        "for rows ``[B, L]`` of document ids",
    ),
    (
        "src/lading/lm/boundaries.py",
        "whose segment ids are ``segments``",
        "whose document ids are ``document_ids``",
    ),
    (
        "src/lading/lm/windows.py",
        "their segment ids (-1: padding)",
        "their document ids (-1: padding)",
    ),
]

# identifier renames by Python token (names only: strings and comments are left to PHRASES)
NAMES_EVERYWHERE = {
    "MapSource": "MapWorkload",
    "LMSource": "LMWorkload",
    "ParquetSource": "ParquetWorkload",
    "staging": "scratch",
}
NAMES_IN = {  # file -> {old: new}
    # the one-shard writer: ``build_shard`` is the public function of building/build.py
    "src/lading/stores/building/parallel.py": {"build_shard": "write_one_shard"},
    "src/lading/stores/building/group.py": {"build_shard": "write_one_shard"},
    "src/lading/loading/loader.py": {"source": "workload", "_source": "_workload"},
    "src/lading/lm/windows.py": {"segments": "document_ids", "sources": "members"},
    "src/lading/lm/batches.py": {"segments": "document_ids"},
    "src/lading/lm/boundaries.py": {"segments": "document_ids", "seg_x": "doc_x", "seg_y": "doc_y"},
    "src/lading/device/prefetch.py": {"_snapshot": "_state_now", "staged": "copied"},
}
# words (any text) renamed in the whole file: files whose every use of the word is the workload
WORDS_IN = {
    "src/lading/loading/loader.py": {"source": "workload"},
    "src/lading/loading/workload.py": {"source": "workload", "Source": "Workload"},
}
WORDS_EVERYWHERE = {
    "MapSource": "MapWorkload",
    "LMSource": "LMWorkload",
    "ParquetSource": "ParquetWorkload",
    "WindowSource": "WindowReader",  # the windows of one epoch: read, not a source of files
}
# where the protocol ``Source`` is imported, the name ``Source`` is the protocol
SOURCE_IMPORT = re.compile(r"from lading\.loading(?:\.workload)? import \(?[^)]*?\bSource\b", re.S)
TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".toml",
    ".c",
    ".h",
    ".cfg",
    ".txt",
    ".yml",
    ".yaml",
    ".sh",
    ".rst",
    ".ini",
}


def module_of(rel: str) -> str:
    parts = rel[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["lading", *parts])


def tables() -> tuple[dict[str, str], dict[str, str]]:
    """old module -> new module (renamed ones only) and old path -> new path (under lading/)."""
    modules = {module_of(o): module_of(n) for o, n in MOVES if module_of(o) != module_of(n)}
    paths = {o: n for o, n in MOVES}
    for new in modules.values():  # idempotence: no new name may start with an old one
        parts = new.split(".")
        for k in range(1, len(parts) + 1):
            if ".".join(parts[:k]) in modules:
                sys.exit(f"rooms_refactor: new module {new} starts with old {'.'.join(parts[:k])}")
    return modules, paths


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def move(dry: bool) -> list[str]:
    done = []
    for old, new in MOVES:  # every one checked before the first is moved
        src, dst = PKG / old, PKG / new
        if src.exists() and dst.exists():
            sys.exit(f"rooms_refactor: both {src} and {dst} exist; resolve by hand")
        if not src.exists() and not dst.exists():
            sys.exit(f"rooms_refactor: cannot place {old}: neither it nor {new} exists")
    for old, new in MOVES:
        src, dst = PKG / old, PKG / new
        if dst.exists():
            continue
        done.append(f"git mv src/lading/{old} src/lading/{new}")
        if not dry:
            dst.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(src.relative_to(ROOT)), str(dst.relative_to(ROOT)))
    return done


def text_files() -> list[Path]:
    tracked = git("ls-files", "-co", "--exclude-standard").splitlines()
    roots = ("src/", "tests/", "benchmarks/", "docs/", "tools/", ".ci/")
    tops = {"README.md", "pyproject.toml", "setup.py", "mkdocs.yml"}
    out = []
    for rel in tracked:
        path = ROOT / rel
        if path.resolve() == THIS or not path.is_file():
            continue
        if rel in tops or (
            rel.startswith(roots) and (path.suffix in TEXT_SUFFIXES or rel.startswith(".ci/"))
        ):
            out.append(path)
    return out


DOTTED = re.compile(r"\blading(?:\.[A-Za-z_]\w*)+")
FROM_IMPORT = re.compile(r"^(\s*)from (lading(?:\.\w+)*) import (\w+)\s*$", re.M)


def rewrite_dotted(text: str, modules: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        parts = m.group(0).split(".")
        for k in range(len(parts), 1, -1):  # the longest prefix that is an old module
            head = ".".join(parts[:k])
            if head in modules:
                return ".".join([modules[head], *parts[k:]])
        return m.group(0)

    return DOTTED.sub(one, text)


def rewrite_from_imports(text: str, modules: dict[str, str]) -> tuple[str, dict[str, str]]:
    """``from PACKAGE import module`` of a moved module; the leaves renamed (to rename in the
    file's code too)."""
    leaves: dict[str, str] = {}

    def one(m: re.Match[str]) -> str:
        old = f"{m.group(2)}.{m.group(3)}"
        if old not in modules:
            return m.group(0)
        parent, leaf = modules[old].rsplit(".", 1)
        if leaf != m.group(3):
            leaves[m.group(3)] = leaf
        return f"{m.group(1)}from {parent} import {leaf}"

    return FROM_IMPORT.sub(one, text), leaves


def rewrite_paths(text: str, paths: dict[str, str]) -> str:
    for old, new in paths.items():
        text = re.sub(
            r"(?<![\w/])((?:src/)?(?:lading/)?)" + re.escape(old) + r"(?![\w/])",
            r"\g<1>" + new,
            text,
        )
    return text


def rename_names(text: str, names: dict[str, str]) -> str:
    """``names`` renamed where they are Python NAME tokens (not in strings or comments)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return text
    lines = text.splitlines(keepends=True)
    hits = [t for t in tokens if t.type == tokenize.NAME and t.string in names]
    for t in sorted(hits, key=lambda t: t.start, reverse=True):
        row, col = t.start
        line = lines[row - 1]
        lines[row - 1] = line[:col] + names[t.string] + line[col + len(t.string) :]
    return "".join(lines)


def rename_words(text: str, words: dict[str, str]) -> str:
    for old, new in words.items():
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    return text


def rewrite_file(path: Path, modules: dict[str, str], paths: dict[str, str]) -> str:
    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text(encoding="utf-8")
    new = rewrite_dotted(text, modules)
    new, leaves = rewrite_from_imports(new, modules)
    new = rewrite_paths(new, paths)
    new = rename_words(new, WORDS_EVERYWHERE)
    new = rename_words(new, WORDS_IN.get(rel, {}))
    new = re.sub(r"\b(lading\.loading(?:\.workload)?)\.Source\b", r"\1.Workload", new)
    new = re.sub(r"\bbuild\.stage\(\)", "build.scratch()", new)
    if rel not in ("src/lading/testing/__init__.py", "src/lading/testing/__main__.py"):
        new = new.replace(
            "from lading.testing.localserver import LocalS3", "from lading.testing import LocalS3"
        )
    new = shard_calls(new)
    new = re.sub(
        r"\bbuild_shard as write_one_shard(  # the public one is below)?", "write_one_shard", new
    )
    # code inside strings (a child process's script) too: calls and imports of disk.staging
    new = re.sub(r"\bstaging\(", "scratch(", new)
    new = re.sub(
        r"^(\s*from lading\.disk(?:\.atomic)? import [^\n]*)\bstaging\b",
        r"\1scratch",
        new,
        flags=re.M,
    )
    if path.suffix == ".py":
        names = {**NAMES_EVERYWHERE, **leaves, **NAMES_IN.get(rel, {})}
        if SOURCE_IMPORT.search(new) or rel == "src/lading/loading/__init__.py":
            names["Source"] = "Workload"
            new = new.replace('"Source",', '"Workload",').replace(
                ":class:`Source`", ":class:`Workload`"
            )
        new = rename_names(new, names)
    return new


def shard_calls(text: str) -> str:
    """``build_store(..., shard=(i, n), ...)`` -> ``build_shard(..., shard=(i, n), ...)``: one
    shard of a parallel build is ``build_shard``'s (item 2; ``build_store`` refuses a tuple,
    naming it). The call's arguments are found by matching brackets, over several lines too."""
    out, at = [], 0
    for m in re.finditer(r"\bbuild_store\(", text):
        depth, end = 1, m.end()
        while end < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        if re.search(r"\bshard=\(", text[m.end() : end]):
            out += [text[at : m.start()], "build_shard("]
            at = m.end()
    return "".join([*out, text[at:]])


def apply_phrases(dry: bool) -> tuple[list[str], list[str]]:
    """The phrases replaced, and those it could not place (the file gone, or neither the old
    nor the new text in it: someone rewrote the sentence; the rest is still done)."""
    done, missed = [], []
    for rel, old, new in PHRASES:
        path = ROOT / rel
        if not path.is_file():
            missed.append(f"{rel} is gone (phrase {old.strip()[:60]!r})")
            continue
        text = path.read_text(encoding="utf-8")
        if old in text:
            done.append(f"{rel}: {old.strip()[:60]!r} -> {new.strip()[:60]!r}")
            if not dry:
                path.write_text(text.replace(old, new), encoding="utf-8")
        elif new not in text:
            missed.append(f"{rel} has neither {old.strip()[:60]!r} nor {new.strip()[:60]!r}")
    return done, missed


def ensure(rel: str, content: str, dry: bool) -> list[str]:
    path = ROOT / rel
    if path.is_file() and path.read_text(encoding="utf-8") == content:
        return []
    if not dry:
        path.write_text(content, encoding="utf-8")
    return [f"wrote {rel}"]


def run(dry: bool) -> int:
    modules, paths = tables()
    said: list[str] = move(dry)
    if dry and said:  # the rewrites below would read the moved files
        print("\n".join([*said, "(then the references, renames and ruff)"]))
        return 0
    said += ensure("src/lading/stores/remote/__init__.py", REMOTE_DOC, dry)
    said += ensure("src/lading/stores/building/__init__.py", BUILDING_DOC, dry)
    for path in text_files():
        old = path.read_text(encoding="utf-8")
        new = rewrite_file(path, modules, paths)
        if new != old:
            said.append(f"rewrote {path.relative_to(ROOT)}")
            if not dry:
                path.write_text(new, encoding="utf-8")
    phrased, missed = apply_phrases(dry)
    said += phrased
    if not dry and said:
        dirs = [d for d in ("src", "tests", "benchmarks", "tools") if (ROOT / d).is_dir()]
        ruff: list[Callable[[], object]] = [
            lambda: subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "ruff",
                    "check",
                    "--fix",
                    "-q",
                    "--select",
                    "I,RUF022",
                    *dirs,
                ],
                cwd=ROOT,
            ),
            lambda: subprocess.run([sys.executable, "-m", "ruff", "format", "-q", *dirs], cwd=ROOT),
        ]
        for step in ruff:
            step()
        said.append("ruff check --fix --select I,RUF022 and ruff format")
    print("\n".join(said) if said else "rooms_refactor: nothing to do (already applied)")
    for miss in missed:  # loud, and last: everything else is done; place these by hand
        print(f"rooms_refactor: CANNOT PLACE: {miss}", file=sys.stderr)
    for path in text_files():  # what the longer names pushed over the line length: by hand
        if path.suffix == ".py":
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                pragma = "# type: ignore" in line or "# noqa" in line  # ruff lets these be
                if len(line) > 100 and not pragma and any(m in line for m in modules.values()):
                    print(f"rooms_refactor: over 100 characters: {path.relative_to(ROOT)}:{number}")
    return 1 if missed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="say what would change; change nothing"
    )
    return run(parser.parse_args().check)


if __name__ == "__main__":
    raise SystemExit(main())
