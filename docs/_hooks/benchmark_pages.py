"""mkdocs hook: benchmarks/*.md (and their figures) as pages of the site, linked as on GitHub.

The measured results live beside the scripts that make them (benchmarks/RESULTS.md,
benchmarks/RELIABILITY.md, rewritten by those scripts), outside mkdocs' docs/ folder. A guide
links to them as GitHub resolves a link from docs/: ``../benchmarks/RESULTS.md``. This hook
adds those files to the site under ``benchmarks/`` (read where they are, never copied into
docs/, so the site cannot drift from them) and points such links there, so ``mkdocs build
--strict`` checks them like any other link instead of refusing them as outside the docs.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]  # the repository: docs/_hooks/ is two levels down
BENCHMARKS = ROOT / "benchmarks"
SITE_FOLDER = "benchmarks"  # where their pages go in the site
# what the site takes from benchmarks/: the two write-ups the guides cite and their figures
TAKEN = ("RESULTS.md", "RELIABILITY.md", "figures/*.png", "figures/*.svg")
# a markdown link or image target: ](target) or ](target "title") / ](target#anchor)
LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?P<rest>[^)]*)\)")


def on_files(files: Files, config: Any) -> Files:
    """Add benchmarks/*.md and benchmarks/figures/* to the site, as ``benchmarks/<name>``."""
    for pattern in TAKEN:
        for path in sorted(BENCHMARKS.glob(pattern)):
            uri = f"{SITE_FOLDER}/{path.relative_to(BENCHMARKS).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point a guide's link into the repository's benchmarks/ at the page the site holds."""
    here = posixpath.dirname(page.file.src_uri)  # the page's folder inside docs/
    if page.file.src_uri.startswith(f"{SITE_FOLDER}/"):
        return markdown  # a benchmarks page: its own relative links already resolve

    def repoint(match: re.Match[str]) -> str:
        target = match.group("target")
        if "://" in target or target.startswith("/"):
            return match.group(0)
        in_repo = posixpath.normpath(posixpath.join("docs", here, target))
        if not in_repo.startswith("benchmarks/"):
            return match.group(0)
        return f"]({posixpath.relpath(in_repo, here or '.')}{match.group('rest')})"

    return LINK.sub(repoint, markdown)
