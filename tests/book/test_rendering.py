"""The built book as a browser shows it, page by page, at 1280 px and at a phone's 390 px.

Runs against ``book/_build/html`` (``make book`` builds it; ``make test`` does so
first) in headless Chromium, which ``make test`` installs when it is missing.
Screenshots land in ``book/_build/screenshots`` for a person to look at.

Every page of the table of contents is checked: no JavaScript error logged,
math typeset offline without errors, every figure loaded and numbered with a
caption, no executed cell left an error, no table or printed output cut off,
no table column hidden until the table is scrolled (at 1280 px and 390 px), and,
at 390 px, nothing wider than the screen.
"""

import re
from pathlib import Path

import pytest

from tests.book.chromium import Browser, find_chromium

# These tests read book/_build/html: `make test` runs them after it builds the book.
pytestmark = pytest.mark.built_book

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
HTML = BOOK / "_build" / "html"
SCREENSHOTS = BOOK / "_build" / "screenshots"
TOC_FILE = re.compile(r"^\s*- file: (\S+)$", re.M)


def all_pages() -> list[str]:
    """Return every page of the table of contents, as paths under book/_build/html."""
    return ["intro"] + TOC_FILE.findall((BOOK / "_toc.yml").read_text())


PAGES = all_pages()
CHAPTERS = [page for page in PAGES if page.startswith("chapters/")]
NOTEBOOK_PAGES = [page for page in PAGES if page != "genindex"]  # Sphinx writes the index


def toc_titles() -> list[str]:
    """Return the first heading of every page in the table of contents, in order."""
    titles = []
    for name in PAGES:
        text = (BOOK / f"{name}.md").read_text(encoding="utf-8")
        titles.append(re.search(r"^# (.+)$", text, re.M).group(1).strip())
    return titles


def _browser(width: int, height: int, *, mobile: bool = False):
    binary = find_chromium()
    if binary is None:
        pytest.skip("Chromium not found: install Debian's 'chromium' (make test does) to run this")
    if not (HTML / "intro.html").exists():
        pytest.skip("book/_build/html is missing: run 'make book' first (make test does)")
    chromium = Browser(binary, width=width, height=height)
    chromium.set_viewport(width, height, mobile=mobile)
    return chromium


@pytest.fixture(scope="module")
def browser():
    """Return a headless Chromium at 1280 px, skipping when there is none or no built book."""
    with _browser(1280, 900) as chromium:
        yield chromium


@pytest.fixture(scope="module")
def phone():
    """Return a headless Chromium laid out as a 390 px wide phone screen."""
    with _browser(390, 844, mobile=True) as chromium:
        yield chromium


_MATH = """
(() => ({
  scripts: [...document.scripts].map(s => s.src).filter(s => /mathjax/i.test(s)),
  formulas: document.querySelectorAll('main .math').length,
  typeset: document.querySelectorAll('mjx-container').length,
  errors: document.querySelectorAll('mjx-merror').length,
}))()
"""
_CELL_ERRORS = "document.querySelectorAll('.output.error, .output.traceback').length"
_EXERCISE_NUMBERS = (
    "[...document.querySelectorAll('.exercise > .admonition-title .caption-number')]"
    ".map(n => n.textContent.trim())"
)
_SEEN: dict[tuple[int, str], dict] = {}


def _settled(chromium, page: str) -> None:
    """Open ``page`` and wait for MathJax and for late, asynchronous scripts."""
    chromium.open(HTML / f"{page}.html")
    chromium.evaluate("window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
    chromium.evaluate("new Promise(done => setTimeout(done, 200))")


def seen(chromium, page: str, *, phone: bool = False) -> dict:
    """What a browser shows of ``page``, read once per browser and page and kept.

    Each page is loaded once at each width and every check reads these facts (a
    browser load is the slow part: nine loads a page became two). The facts are read
    after MathJax has typeset the page, as a reader sees it; the screenshot too.
    ``phone``: the 390 px browser, where printed output may scroll in its own box.
    """
    key = (id(chromium), page)
    if key not in _SEEN:
        _settled(chromium, page)
        facts = {
            "console errors": list(chromium.console_errors),
            "hidden columns": chromium.evaluate(_HIDDEN_COLUMNS),
            "overflow": chromium.evaluate(_OVERFLOW + f"({'false' if phone else 'true'})"),
        }
        if not phone:
            facts |= {
                "math": chromium.evaluate(_MATH),
                "figures": chromium.evaluate(_FIGURES),
                "cell errors": chromium.evaluate(_CELL_ERRORS),
                "exercise numbers": chromium.evaluate(_EXERCISE_NUMBERS),
            }
        folder = SCREENSHOTS / "390px" if phone else SCREENSHOTS
        chromium.screenshot(folder / f"{page.replace('/', '_')}.png")
        _SEEN[key] = facts
    return _SEEN[key]


def test_every_page_was_built():
    """Each page of the table of contents has its HTML (a missing page fails, not skips)."""
    if not (HTML / "intro.html").exists():
        pytest.skip("book/_build/html is missing: run 'make book' first (make test does)")
    missing = [page for page in PAGES if not (HTML / f"{page}.html").exists()]
    assert missing == []


@pytest.mark.parametrize("page", NOTEBOOK_PAGES)
def test_math_is_typeset_offline(browser, page):
    """MathJax, served from the book itself, typesets every formula without an error."""
    math = seen(browser, page)["math"]
    assert all(src.startswith("file://") for src in math["scripts"]), math["scripts"]
    if math["formulas"]:
        assert math["scripts"], "a page with math loads no MathJax"
        assert math["typeset"] > 0
    assert math["errors"] == 0


_FIGURES = """
(() => [...document.querySelectorAll('main img')].map(i => {
  const figure = i.closest('figure');
  const caption = figure && figure.querySelector('figcaption');
  const number = caption && caption.querySelector('.caption-number');
  return {src: i.src.split('/').pop(), complete: i.complete, width: i.naturalWidth,
          caption: caption ? caption.textContent.trim() : '',
          number: number ? number.textContent.trim() : ''};
}))()
"""


@pytest.mark.parametrize("page", CHAPTERS)
def test_figures_load_and_are_numbered_with_a_caption(browser, page):
    """Every image loads, sits in a figure numbered per chapter ("Fig. 5.1") with a caption."""
    chapter = int(re.search(r"chapters/(\d+)_", page).group(1))
    for image in seen(browser, page)["figures"]:
        assert image["complete"] and image["width"] > 0, image["src"]
        assert image["number"].startswith(f"Fig. {chapter}."), image
        assert len(image["caption"]) > len(image["number"]) + 20, f"no caption: {image}"


def test_the_book_has_figures(browser):
    """The chapters that plot something do show their figures (the plots were executed)."""
    counts = {}
    for page in ("chapters/01_why_memory_runs_out", "chapters/08_worked_examples"):
        browser.open(HTML / f"{page}.html")
        counts[page] = browser.evaluate("document.querySelectorAll('main img').length")
    assert all(counts.values()), counts


def test_sidebar_lists_every_page(browser):
    """The navigation sidebar links every page of the table of contents, in order."""
    browser.open(HTML / "intro.html")
    links = browser.evaluate(
        "[...document.querySelectorAll('nav.bd-links a, .bd-sidenav a')]"
        ".map(a => a.textContent.trim().replace(/^\\d+\\.\\s*/, ''))"
    )
    titles = toc_titles()
    listed = [title for title in titles if title in links]
    assert listed == titles, sorted(set(titles) - set(links))


@pytest.mark.parametrize("page", PAGES)
def test_no_cell_failed_or_printed_a_traceback(browser, page):
    """No executed cell left an error output on a page (the build also fails on these)."""
    assert seen(browser, page)["cell errors"] == 0


@pytest.mark.parametrize("page", PAGES)
def test_no_javascript_error(browser, page):
    """Loading the page logs no JavaScript error.

    No uncaught exception (such as a script included twice, whose second ``const`` does not
    parse), no ``console.error``, no file that failed to load.
    """
    assert seen(browser, page)["console errors"] == []


@pytest.mark.parametrize("page", CHAPTERS)
def test_exercises_are_numbered_per_chapter(browser, page):
    """Exercises read "Exercise 5.1", "Exercise 5.2", ...: numbered within their chapter."""
    chapter = int(re.search(r"chapters/(\d+)_", page).group(1))
    numbers = seen(browser, page)["exercise numbers"]
    assert numbers == [f"Exercise {chapter}.{i}" for i in range(1, len(numbers) + 1)]


def test_bibliography_glossary_and_index_are_filled(browser):
    """The references list real entries, the glossary defines terms, and the index is not empty."""
    browser.open(HTML / "references.html")
    assert browser.evaluate("document.querySelectorAll('main .citation, main dt').length") >= 20
    browser.open(HTML / "glossary.html")
    assert browser.evaluate("document.querySelectorAll('main dl.glossary dt').length") >= 15
    browser.open(HTML / "genindex.html")
    assert browser.evaluate("document.querySelectorAll('main table.indextable a').length") >= 20


def test_citations_link_to_the_bibliography(browser):
    """A chapter's citations are links to entries on the references page."""
    browser.open(HTML / "chapters/07_precision.html")
    targets = browser.evaluate(
        "[...document.querySelectorAll('main a')].map(a => a.getAttribute('href') || '')"
        ".filter(h => h.includes('references.html#'))"
    )
    assert targets


# A table wider than the text column must sit in something that scrolls sideways (the theme's
# scrollable container or memtheory's table wrapper), and even then no column may be hidden
# until the reader scrolls: a table has to fit its column, at 1280 px and at 390 px
# (transpose, split or narrow it). A printed text table cannot: its <pre>
# scrolls, but a reader sees it cut at the column's edge, so no cell output may be wider than
# the column: wide tables are shown as HTML tables, not printed.
_OVERFLOW = """
((printed) => {
  const article = document.querySelector('article') || document.querySelector('main');
  const limit = article.getBoundingClientRect().right + 1;
  const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const shown = el => el.getClientRects().length > 0;  // not folded away
  const bad = [];
  for (const el of article.querySelectorAll('table')) {
    if (!shown(el)) continue;
    let scroller = null;
    for (let a = el.parentElement; !scroller && a && a !== article; a = a.parentElement) {
      if (scrolls(a)) scroller = a;
    }
    const text = el.textContent.trim().replace(/\\s+/g, ' ').slice(0, 60);
    if ((scroller || el).getBoundingClientRect().right > limit) {
      bad.push(`table sticks out of the page: ${text}`);
    }
    if (!scroller && el.scrollWidth > el.parentElement.clientWidth + 1) {
      bad.push(`table wider than its column without a scroll wrapper: ${text}`);
    }
  }
  for (const el of article.querySelectorAll('img')) {
    if (shown(el) && el.getBoundingClientRect().right > limit) {
      bad.push(`figure wider than the page: ${el.src.split('/').pop()}`);
    }
  }
  if (printed) {
    for (const el of article.querySelectorAll('.cell_output pre, .output pre')) {
      if (shown(el) && el.scrollWidth > el.clientWidth + 1) {
        bad.push(`printed output cut at the column's edge: ${el.textContent.trim().slice(0, 60)}`);
      }
    }
  }
  const page = document.scrollingElement;
  if (page.scrollWidth > window.innerWidth + 1) {
    bad.push(`the page scrolls sideways: ${page.scrollWidth} px, window ${window.innerWidth} px`);
  }
  return bad;
})
"""


# A table that scrolls sideways hides its last columns until the reader scrolls: every table
# has to fit its column (transpose, split or narrow it).
_HIDDEN_COLUMNS = """
(() => {
  const article = document.querySelector('article') || document.querySelector('main');
  const bad = [];
  for (const table of article.querySelectorAll('table')) {
    if (table.getClientRects().length === 0) continue;  // folded away
    let box = table.parentElement;
    const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
    while (box && box !== article && !scrolls(box)) box = box.parentElement;
    const frame = box && box !== article ? box : table.parentElement;
    const right = frame.getBoundingClientRect().right;
    const hidden = [...table.querySelectorAll('tr:first-child > *')]
      .filter(cell => cell.getBoundingClientRect().right > right + 1)
      .map(cell => cell.textContent.trim().slice(0, 30) || '(unnamed)');
    if (hidden.length) {
      const text = table.textContent.trim().replace(/\\s+/g, ' ').slice(0, 50);
      bad.push(`columns hidden (${hidden.join(' | ')}) in: ${text}`);
    }
  }
  return bad;
})()
"""

# Pages whose tables still hide a column, with the first such table; strict, so a fixed page
# fails here until it leaves the list (issue 23). The book's CSS (book/_static/memtheory.css)
# lets headers and text wrap and tightens cells, memtheory.Table's HTML lets long code names
# break after their separators (<wbr>), and the tables left were transposed, split or narrowed
# at their source. None is left.
HIDDEN_AT_1280: dict[str, str] = {}
HIDDEN_AT_390: dict[str, str] = {}


def _expect_hidden(known: dict[str, str]) -> list:
    return [pytest.param(page, marks=pytest.mark.xfail(strict=True, reason=known[page]))
            if page in known else page for page in PAGES]


@pytest.mark.parametrize("page", _expect_hidden(HIDDEN_AT_1280))
def test_no_column_is_hidden_at_1280_px(browser, page):
    """At 1280 px every column of every table is in view without scrolling the table."""
    assert seen(browser, page)["hidden columns"] == []


@pytest.mark.parametrize("page", _expect_hidden(HIDDEN_AT_390))
def test_no_column_is_hidden_at_390_px(phone, page):
    """On a 390 px phone screen every column of every table is in view without scrolling it."""
    assert seen(phone, page, phone=True)["hidden columns"] == []


@pytest.mark.parametrize("page", PAGES)
def test_no_table_is_cut_off(browser, page):
    """At 1280 px no table, figure or printed output is wider than the page without a scroll."""
    assert seen(browser, page)["overflow"] == []


@pytest.mark.parametrize("page", PAGES)
def test_phone_width(phone, page):
    """At 390 px the page never scrolls sideways and every table fits, no column hidden.

    Code and printed output scroll inside their own boxes on a phone, as in any book; tables
    and figures must fit.
    """
    assert seen(phone, page, phone=True)["overflow"] == []
