"""The built book as a browser shows it: math typeset, figures loaded, every chapter listed.

Runs against ``book/_build/html`` (``make book`` builds it; ``make test`` does so
first) in headless Chromium, which ``make test`` installs when it is missing.
Screenshots land in ``book/_build/screenshots`` for a person to look at.
"""

import re
from pathlib import Path

import pytest

from tests.book.chromium import Browser, find_chromium

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
HTML = BOOK / "_build" / "html"
SCREENSHOTS = BOOK / "_build" / "screenshots"
PAGES = ("intro", "chapters/03_shapes_and_activations", "chapters/08_worked_examples")


def toc_titles() -> list[str]:
    """Return the first heading of every page in the book's table of contents."""
    files = ["intro"] + re.findall(r"^- file: (\S+)$", (BOOK / "_toc.yml").read_text(), re.M)
    titles = []
    for name in files:
        text = (BOOK / f"{name}.md").read_text(encoding="utf-8")
        titles.append(re.search(r"^# (.+)$", text, re.M).group(1).strip())
    return titles


@pytest.fixture(scope="module")
def browser():
    """Return a headless Chromium, skipping when there is none or the book is not built."""
    binary = find_chromium()
    if binary is None:
        pytest.skip("Chromium not found: install Debian's 'chromium' (make test does) to run this")
    if not (HTML / "intro.html").exists():
        pytest.skip("book/_build/html is missing: run 'make book' first (make test does)")
    with Browser(binary) as chromium:
        yield chromium


@pytest.mark.parametrize("page", PAGES)
def test_math_is_typeset_offline(browser, page):
    """MathJax, served from the book itself, typesets every formula without an error."""
    browser.open(HTML / f"{page}.html")
    browser.evaluate("window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
    scripts = browser.evaluate(
        "[...document.scripts].map(s => s.src).filter(s => /mathjax/i.test(s))"
    )
    assert scripts and all(src.startswith("file://") for src in scripts), scripts
    assert browser.evaluate("document.querySelectorAll('mjx-container').length") > 0
    assert browser.evaluate("document.querySelectorAll('mjx-merror').length") == 0
    browser.screenshot(SCREENSHOTS / f"{page.replace('/', '_')}.png")


@pytest.mark.parametrize("page", PAGES[1:])
def test_figures_load(browser, page):
    """Every image on a chapter page loads and has a width (matplotlib plots were executed)."""
    browser.open(HTML / f"{page}.html")
    images = browser.evaluate(
        "[...document.querySelectorAll('main img')].map(i => [i.src, i.complete, i.naturalWidth])"
    )
    assert images, f"{page} shows no figure"
    for source, complete, width in images:
        assert complete and width > 0, source


def test_sidebar_lists_every_chapter(browser):
    """The navigation sidebar links every page of the table of contents, in order."""
    browser.open(HTML / "intro.html")
    links = browser.evaluate(
        "[...document.querySelectorAll('nav.bd-links a, .bd-sidenav a')]"
        ".map(a => a.textContent.trim())"
    )
    titles = toc_titles()
    listed = [title for title in titles if title in links]
    assert listed == titles, sorted(set(titles) - set(links))


def test_no_cell_failed_or_printed_a_traceback(browser):
    """No executed cell left an error output on a page (the build also fails on these)."""
    for page in PAGES:
        browser.open(HTML / f"{page}.html")
        errors = "document.querySelectorAll('.output.error, .output.traceback').length"
        assert browser.evaluate(errors) == 0


# A table wider than the text column must sit in something that scrolls sideways (the theme's
# scrollable container or memtheory's table wrapper). A printed text table cannot: its <pre>
# scrolls, but a reader sees it cut at the column's edge, so no cell output may be wider than
# the column: wide tables are shown as HTML tables, not printed.
_OVERFLOW = """
(() => {
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
  for (const el of article.querySelectorAll('.cell_output pre, .output pre')) {
    if (shown(el) && el.scrollWidth > el.clientWidth + 1) {
      bad.push(`printed output cut at the column's edge: ${el.textContent.trim().slice(0, 60)}`);
    }
  }
  return bad;
})()
"""


def all_pages() -> list[str]:
    """Return every page of the table of contents, as paths under book/_build/html."""
    return ["intro"] + re.findall(r"^- file: (\S+)$", (BOOK / "_toc.yml").read_text(), re.M)


@pytest.mark.parametrize("page", all_pages())
def test_no_table_is_cut_off(browser, page):
    """At 1280 px no table or printed output is wider than the page without a sideways scroll."""
    browser.open(HTML / f"{page}.html")
    assert browser.evaluate(_OVERFLOW) == []
