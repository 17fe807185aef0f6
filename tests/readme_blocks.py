"""The code blocks of README.md and of the guides in docs/, and running one as a reader would:
in a folder `lading example` made.

A block is named by its page, the heading above it and its number under that heading
(``"docs/getting-started.md: A first store #1"``, ``"README.md: lading #1"``). Blocks
run in a copy of one folder made by ``python -m lading example`` for the test session,
offline, with this checkout's ``src`` first on the path and ``lading`` and ``torchrun`` on
``PATH`` meaning this checkout's ``python -m lading`` and ``python -m torch.distributed.run``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO


@dataclass(frozen=True)
class Block:
    """One fenced code block of README.md or of a page in docs/."""

    name: str  # "<page>: <heading> #<n>"
    lang: str  # "python" or "bash"
    code: str
    line: int  # line of the opening fence in its page
    page: str = "README.md"  # the file, relative to the repository


def pages() -> list[Path]:
    """README.md, then every Markdown page of the docs site (docs/, its hooks left out)."""
    docs = sorted(p for p in (REPO / "docs").rglob("*.md") if "_hooks" not in p.parts)
    return [REPO / "README.md", *docs]


def blocks() -> dict[str, Block]:
    """Every ```python and ```bash block of README.md and docs/, by name, in page order."""
    found: dict[str, Block] = {}
    for page in pages():
        found.update(page_blocks(page))
    return found


def page_blocks(path: Path) -> dict[str, Block]:
    """Every ```python and ```bash block of one page, by name, in page order."""
    page = path.relative_to(REPO).as_posix()
    found: dict[str, Block] = {}
    heading, counts = "", dict[str, int]()
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        if match := re.match(r"#+ (.*)", lines[i]):
            heading = match.group(1).strip()
        elif match := re.match(r"\s*```(\w*)\s*$", lines[i]):
            end = next(j for j in range(i + 1, len(lines)) if re.match(r"\s*```\s*$", lines[j]))
            counts[heading] = counts.get(heading, 0) + 1
            if match.group(1) in ("python", "bash"):
                name = f"{page}: {heading} #{counts[heading]}"
                body = "\n".join(lines[i + 1 : end])
                indent = min(len(x) - len(x.lstrip()) for x in lines[i + 1 : end] if x.strip())
                code = "\n".join(x[indent:] for x in lines[i + 1 : end]) if indent else body
                found[name] = Block(name, match.group(1), code + "\n", i + 1, page)
            i = end
        i += 1
    return found


def commands(block: Block) -> list[str]:
    """A bash block's commands: continuation lines joined, comments and blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", block.code)
    return [c.strip() for c in joined.splitlines() if c.strip() and not c.strip().startswith("#")]


def make_example(folder: Path) -> Path:
    """``python -m lading example folder``, as a reader on a fresh clone would run it."""
    done = subprocess.run(
        [sys.executable, "-m", "lading", "example", str(folder)],
        env=environment(folder.parent),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"lading example failed:\n{done.stderr[-3000:]}"
    (folder / "said.stdout").write_text(done.stdout)  # what it printed, for a test to read
    (folder / "said.stderr").write_text(done.stderr)
    return folder


def environment(tmp: Path) -> dict[str, str]:
    """Offline, this checkout first, ``lading`` and ``torchrun`` on PATH as this checkout's."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, module in (("lading", "lading"), ("torchrun", "torch.distributed.run")):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {module} "$@"\n')
        shim.chmod(0o755)
    return {
        **os.environ,
        "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(tmp / "hf-datasets"),
        "TOKENIZERS_PARALLELISM": "false",
    }


def run_block(
    block: Block,
    example: Path,
    tmp: Path,
    *,
    edits: dict[str, str] | None = None,
    append: str = "",
    prefix: list[str] | None = None,
    timeout: float = 600,
) -> Path:
    """Run ``block`` in a copy of the folder ``example``; the folder it ran in.

    ``edits`` (old -> new text, each must be found) make a block cheaper without changing what
    it does (fewer steps); ``append`` adds checks after a python block; ``prefix`` runs a
    python block under another launcher (``[python, -m, torch.distributed.run, ...]``).
    """
    work = tmp / "work"
    shutil.copytree(example, work, symlinks=True)
    code = block.code
    for old, new in (edits or {}).items():
        assert old in code, f"block {block.name!r} no longer holds {old!r}"
        code = code.replace(old, new)
    if block.lang == "python":
        script = work / "readme_block.py"
        script.write_text(code + append)
        argv = [*(prefix or [sys.executable]), str(script)]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", code]
    done = subprocess.run(
        argv,
        cwd=work,
        env=environment(tmp),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (
        f"block {block.name!r} ({block.page} line {block.line}) failed:\n"
        f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )
    return work
