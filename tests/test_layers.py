"""The package's folders are its layers, and data flows one way: no module imports from a layer
above its own (DESIGN.md's picture; a lazy import inside a function counts too), and the three
workloads do not import each other."""

from __future__ import annotations

import re

from conftest import REPO

# bottom to top; the workloads share one level and may not import one another
LAYERS: dict[str, int] = {
    "errors": 0,
    "world": 0,
    "_version": 0,
    "_lazy": 0,
    "testing": 0,  # the local S3: the standard library, moto and aiohttp only
    "deadline": 0,  # one rule for every remote call: attempts, backoff, one message
    "step": 0,  # the step a read belongs to, carried by the read
    "threads": 0,  # every thread: its rule at fork and its place at exit
    "disk": 1,
    "remote": 2,  # the remote data plane: bytes of objects, plan -> fetch -> cache
    "sources": 2,
    "stores": 3,
    "loading": 4,
    "device": 5,
    "train": 6,
    "ir": 7,
    "lm": 7,
    "tabular": 7,
    "integrations": 8,
    "bench": 9,
    "cli": 10,
}
IMPORT = re.compile(r"^\s*(?:from|import) lading\.(\w+)")


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    root = REPO / "src" / "lading"
    found = {
        p.stem if p.parent == root else p.relative_to(root).parts[0] for p in root.rglob("*.py")
    }
    assert found - {"__init__", "__main__"} == set(LAYERS), "a new top-level name needs a layer"
    wrong = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        layer = rel.parts[0] if len(rel.parts) > 1 else path.stem
        if layer not in LAYERS:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            m = IMPORT.match(line)
            if m is None or m.group(1) not in LAYERS or m.group(1) == layer:
                continue
            if LAYERS[m.group(1)] >= LAYERS[layer]:
                wrong.append(f"{rel}:{number}: {line.strip()}")
    assert not wrong, "imports from a layer above (or a sibling workload):\n" + "\n".join(wrong)
