"""README.md is a front door and the guides in docs/ hang together: every link between them
lands on a file and a heading that exist, as GitHub shows them (``mkdocs build --strict`` in
.ci/run checks the site itself; this checks README.md too, which the site does not hold)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from readme_blocks import pages

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def slug(heading: str) -> str:
    """A heading's anchor, as Python-Markdown's toc (mkdocs) and GitHub both make it."""
    text = re.sub(r"`|\*\*", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def prose(path: Path) -> list[str]:
    """The lines of a Markdown page outside its fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for line in prose(path) if (m := re.match(r"#+ (.*)", line))}


def links(path: Path) -> list[str]:
    return [m.group("target") for line in prose(path) for m in LINK.finditer(line)]


def test_readme_is_a_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; the guides go in docs/"
    venv = next(i for i, line in enumerate(lines) if "python -m venv" in line)
    tests = next(i for i, line in enumerate(lines) if "&& python -m pytest" in line)
    bench = next(i for i, line in enumerate(lines) if line.rstrip().endswith("&& lading bench"))
    assert venv < bench < tests, "the virtual environment comes before the two commands"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_link_lands(page: Path) -> None:
    broken = []
    for target in links(page):
        if "://" in target or target.startswith("mailto:"):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {dest.name}")
    assert not broken, f"{page.relative_to(REPO)}:\n" + "\n".join(broken)


def test_the_checker_finds_a_broken_link_and_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n## Two `words`: here\n\n```\n[x](nowhere.md)\n```\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#two-words-here) [gone](c.md) [bad](a.md#three)\n")
    assert anchors(tmp_path / "a.md") == {"a", "two-words-here"}
    assert links(tmp_path / "a.md") == []  # inside a fence: code, not a link
    assert links(page) == ["a.md#two-words-here", "c.md", "a.md#three"]


def test_every_guide_is_in_the_site_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    guides = [p for p in pages() if p != README and p.parent.name == "docs"]
    assert guides, "no guides found in docs/"
    missing = [p.name for p in guides if f": {p.name}" not in nav]
    assert not missing, f"docs pages not in mkdocs.yml's nav: {missing}"


def test_getting_started_gives_readme_commands_as_they_are() -> None:
    """The guide repeats README's two commands; they must not drift apart."""
    from readme_blocks import blocks

    def installs(name: str) -> list[str]:
        return [line for line in blocks()[name].code.splitlines() if "pip install -e" in line]

    readme = installs("README.md: lading #1")
    assert len(readme) == 2, readme
    assert installs("docs/getting-started.md: Install, in a virtual environment #2") == readme
    venv = blocks()["docs/getting-started.md: Install, in a virtual environment #1"].code
    assert venv.strip() in blocks()["README.md: lading #1"].code
