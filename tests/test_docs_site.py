"""The docs site as a reader sees it: built with mkdocs as .ci/run builds it (``--strict``),
then read page by page.

In the built HTML and CSS, on every machine (they need the ``docs`` extra only):

- no reStructuredText literal-block marker (a paragraph ending in ``::``) in what a reader
  sees, as the ``lading`` API page showed ("Quick start::");
- every page has a heading below its title (the table of contents is made of them; Sessions had
  none, and an empty right column);
- every code block's lines fit the column, or the site's stylesheet wraps them (a long command
  was cut at the right edge: Getting started read ``pip install`` and stopped);
- no page title leaves its invisible permalink on a line of its own (an empty gap under a title
  that fills its line, as Sessions' did): the stylesheet hides a title's permalink.

Where Chromium is installed, each page is also rendered headless and measured (no code block
scrolls sideways, no title box taller than its text); without Chromium that part skips, saying
so (CI has none), and the checks above still run.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow  # builds the whole site (~10 s); .ci/run builds it --strict too

FIT = 70  # monospace characters a code line shows at 1280 px beside the navigation and contents
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class Page(HTMLParser):
    """What a reader sees of one built page: its headings, paragraphs, code blocks and
    stylesheets (the article only; the navigation around it is the theme's)."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[tuple[int, str]] = []
        self.paragraphs: list[str] = []
        self.code: list[str] = []
        self.stylesheets: list[str] = []
        self._open: list[str] = []  # the elements open inside the article
        self._text: list[str] = []  # text of the heading, paragraph or code being read

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "link" and found.get("rel") == "stylesheet" and found.get("href"):
            self.stylesheets.append(str(found["href"]))
        if (tag == "article" or self._open) and tag not in VOID:
            self._open.append(tag)
        if tag in ("h1", "h2", "h3", "h4", "p") or (tag == "code" and self._in("pre")):
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag not in self._open:
            return
        while self._open.pop() != tag:  # an element left open inside it ends with it
            pass
        text = "".join(self._text)
        if re.fullmatch(r"h[1-4]", tag):
            self.headings.append((int(tag[1]), text.replace("¶", "").strip()))
        elif tag == "p" and not self._in("pre"):
            self.paragraphs.append(text.strip())
        elif tag == "code" and self._in("pre"):
            self.code.append(text)

    def handle_data(self, data: str) -> None:
        if self._open:
            self._text.append(data)

    def _in(self, tag: str) -> bool:
        return tag in self._open


def read_page(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text())
    return page


def css_rules(css: str) -> list[tuple[str, dict[str, str]]]:
    """(selector, declarations) of each rule of ``css``, comments left out."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    rules = []
    for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        declared = dict(
            (name.strip(), value.strip())
            for name, _, value in (d.partition(":") for d in body.split(";"))
            if value.strip()
        )
        for one in selector.split(","):
            rules.append((re.sub(r"\s*>\s*", " > ", " ".join(one.split())), declared))
    return rules


def own_css(site: Path, page: Path, stylesheets: list[str]) -> list[tuple[str, dict[str, str]]]:
    """The rules of the site's own stylesheets that ``page`` links (not the theme's)."""
    rules = []
    for href in stylesheets:
        path = (page.parent / href.split("?")[0]).resolve()
        if path.is_file() and site in path.parents and "assets" not in path.parts:
            rules += css_rules(path.read_text())
    return rules


def wraps_code(rules: list[tuple[str, dict[str, str]]]) -> bool:
    return any(
        sel.endswith("pre > code") and declared.get("white-space") in ("pre-wrap", "break-spaces")
        for sel, declared in rules
    )


def hides_title_links(rules: list[tuple[str, dict[str, str]]]) -> bool:
    return any(
        re.search(r"h1 (> )?\.headerlink$", sel) and declared.get("display") == "none"
        for sel, declared in rules
    )


def problems(site: Path, path: Path) -> list[str]:
    """What a reader would trip over on the built page ``path`` of ``site``."""
    page = read_page(path)
    rules = own_css(site, path, page.stylesheets)
    found = [f"a reST literal block: {p[-60:]!r}" for p in page.paragraphs if p.endswith("::")]
    if not [level for level, _ in page.headings if level > 1]:
        found.append(f"no heading below the title {page.headings[:1]}")
    if not wraps_code(rules):
        for block in page.code:
            wide = [line for line in block.splitlines() if len(line) > FIT]
            if wide:
                found.append(f"a code line of {len(wide[0])} characters, not wrapped: {wide[0]!r}")
    if not hides_title_links(rules):
        found.append("a title's permalink may wrap onto a line of its own")
    return found


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as .ci/run builds it (``mkdocs build --strict``)."""
    for module in ("mkdocs", "material", "mkdocstrings"):
        pytest.importorskip(module, reason="the docs extra: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


def pages_of(site: Path) -> list[Path]:
    """Every page a reader reaches (the 404 page is the theme's)."""
    return sorted(p for p in site.rglob("index.html"))


def test_every_page_reads_whole(site: Path) -> None:
    pages = pages_of(site)
    assert len(pages) >= 20, [p.relative_to(site) for p in pages]
    found = {str(p.relative_to(site).parent): problems(site, p) for p in pages}
    found = {page: trips for page, trips in found.items() if trips}
    assert not found, json.dumps(found, indent=1)


def test_the_package_page_shows_its_quick_start_as_code(site: Path) -> None:
    """The ``lading`` API page's quick start is a code block with ids of the example folder."""
    page = read_page(site / "reference" / "lading" / "index.html")
    quick = [block for block in page.code if "lading.build_store(" in block]
    assert quick, "no quick start code block on the lading page"
    assert '"42"' in quick[0] and "7067032" not in quick[0]


def test_the_checks_find_what_a_reader_would_trip_over(tmp_path: Path) -> None:
    long = "x = " + "1 + " * 30 + "1"
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "index.html").write_text(
        "<article><h1>Title<a class='headerlink'>¶</a></h1><p>Quick start::</p>"
        f"<pre><code>{long}\n</code></pre></article>"
    )
    (tmp_path / "good.css").write_text(
        "/* wrap */ .md-typeset pre>code { white-space: pre-wrap }\n"
        ".md-typeset h1 > .headerlink, .x { display: none; }"
    )
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "index.html").write_text(
        "<link rel='stylesheet' href='../good.css'><article><h1>Title</h1><p>Text:</p>"
        f"<h2>Part</h2><pre><code>{long}</code></pre><p>a <code>b::</code> c</p></article>"
    )
    bad = problems(tmp_path, tmp_path / "bad" / "index.html")
    assert [p.split(":")[0] for p in bad] == [
        "a reST literal block",
        "no heading below the title [(1, 'Title')]",
        f"a code line of {len(long)} characters, not wrapped",
        "a title's permalink may wrap onto a line of its own",
    ]
    assert problems(tmp_path, tmp_path / "good" / "index.html") == []


PROBE = """<script>
window.addEventListener('load', () => {
  const found = {cut: [], title: null};
  for (const code of document.querySelectorAll('.md-typeset pre > code')) {
    if (code.scrollWidth > code.clientWidth + 1) found.cut.push(code.textContent.slice(0, 60));
  }
  const h1 = document.querySelector('.md-typeset h1');
  if (h1) {
    const text = document.createRange(), link = h1.querySelector('.headerlink');
    text.setStart(h1, 0);
    if (link) text.setEndBefore(link); else text.setEnd(h1, h1.childNodes.length);
    found.title = [h1.getBoundingClientRect().height, text.getBoundingClientRect().height,
                   parseFloat(getComputedStyle(h1).lineHeight)];
  }
  document.body.setAttribute('data-probe', JSON.stringify(found));
});
</script>"""


def chromium() -> str | None:
    return next(
        (found for name in ("chromium", "chromium-browser", "google-chrome")
         if (found := shutil.which(name))),
        None,
    )  # fmt: skip


def rendered(browser: str, page: Path, profile: Path) -> dict[str, object]:
    """What the probe measured of ``page`` in headless Chromium, 1280 px wide."""
    done = subprocess.run(
        [
            browser, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--user-data-dir={profile}", "--window-size=1280,1000",
            "--virtual-time-budget=3000", "--dump-dom", page.as_uri(),
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    match = re.search(r'data-probe="([^"]*)"', done.stdout)
    assert match, f"{page}: no probe in the rendered page:\n{done.stderr[-2000:]}"
    probe: dict[str, object] = json.loads(html.unescape(match.group(1)))
    return probe


@pytest.mark.slow  # a headless Chromium over every page: ~30 s
def test_every_page_renders_whole_in_chromium(site: Path, tmp_path: Path) -> None:
    browser = chromium()
    if browser is None:
        pytest.skip("Chromium is not installed: the rendered check needs it (the HTML and CSS "
                    "checks of test_every_page_reads_whole ran)")  # fmt: skip
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    found: dict[str, list[str]] = {}
    for page in pages_of(copy):
        text = re.sub(r"<link[^>]*https?://[^>]*>", "", page.read_text())  # offline: no web fonts
        page.write_text(text.replace("</body>", PROBE + "</body>"))
        probe = rendered(browser, page, tmp_path / "profile")
        trips = found.setdefault(str(page.relative_to(copy).parent), [])
        if probe["cut"]:
            trips.append(f"code cut at the right edge: {probe['cut']}")
        box, words, line = probe["title"]  # type: ignore[misc]
        if box > words + line / 2:
            trips.append(f"the title's box is {box:.0f} px high, its text {words:.0f} px")
    found = {page: trips for page, trips in found.items() if trips}
    assert not found, json.dumps(found, indent=1)
