r"""Check the built book's HTML for math and MyST markup that did not render.

A ``jupyter-book build -W`` passes when a display equation sits inside a paragraph
(MyST then reads its ``$$`` as text around inline math, so a reader sees run-on
formulas with stray dollar signs) or when a role such as ``{cite}`` lands where it
is not parsed (a cell's Markdown output, a table). This script reads what the
reader gets, ``book/_build/html/**/*.html``, and reports, page by page:

* **stray dollar signs**: a ``$`` in the text of the page outside math that
  Sphinx handed to MathJax (``<span class="math">`` and ``<div class="math">``);
* **roles left as text**: ``{cite}``, ``{ref}``, ``{numref}``, ``{doc}``,
  ``{eq}``, ``{term}``, ``{func}`` and ``{glue...}`` followed by a backquote,
  in prose, in printed output and in math (where a broken ``$$`` pairing
  swallows a sentence, its citation included);
* **error markers**: MathJax's ``mjx-merror`` and "Math input error", LaTeX's
  "Undefined control sequence", docutils' ``problematic`` and ``system-message``
  nodes, and math whose braces or ``\begin``/``\end`` do not balance;
* **an inline script included twice** in one page when it declares a
  ``const``, ``let`` or ``class`` (sphinx-thebe's ``const THEBE_JS_URL = ...``
  was: the second declaration is a JavaScript SyntaxError on every page). A
  repeated ``var`` (sphinx-togglebutton's selector) is harmless and not reported;
* **a raster figure**: an ``<img>`` of a PNG, JPEG or GIF. The chapters' figures
  are drawn as SVG (``make book`` gives the kernel ``book/_ipython``'s
  configuration), so their text stays sharp when a phone shrinks them.

Exclusions, kept narrow: ``<script>``, ``<style>`` and the ``<head>`` are not
text a reader sees; code is skipped only for the dollar check, where ``$`` is
legitimate (a shell prompt, a format string): a ``<pre>`` block (cell inputs,
printed cell outputs, code blocks) and an inline ``<code>`` literal. Roles and
error markers are looked for in code as well, except in a cell's *input*
(``div.cell_input``), whose source may show MyST syntax on purpose. HTML
outputs of cells (tables, Markdown) are checked like prose.

Usage: ``python tests/book/check_built_html.py [book/_build/html]``; exits 1 and
prints every finding when there is one, 0 otherwise (``make book-check`` runs it).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

__all__ = ["Finding", "check_page", "check_site", "main"]

ROLE = re.compile(r"\{(cite(?::[a-z]+)?|ref|numref|doc|eq|term|func|glue(?::[a-z]+)?)\}`")
ERROR_TEXT = re.compile(r"Math input error|Undefined control sequence|Missing \$ inserted")
ERROR_CLASSES = {"problematic", "system-message"}
MATH_CLASSES = {"math"}
RASTER = re.compile(r"\.(png|jpe?g|gif)(\?.*)?$", re.IGNORECASE)
DECLARATION = re.compile(r"(^|[;{}]\s*)(const|let|class)\s")  # twice is a SyntaxError
SKIPPED_TAGS = {"script", "style", "head", "template"}
VOID_TAGS = {
    "area", "base", "br", "col", "embed", "hr", "img", "input",
    "link", "meta", "param", "source", "track", "wbr",
}  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """One problem on one page: its kind and a short excerpt around it."""

    page: str
    kind: str
    excerpt: str

    def __str__(self) -> str:
        return f"{self.page}: {self.kind}: {self.excerpt}"


@dataclass
class _Element:
    tag: str
    math: bool = False
    code: bool = False  # skipped for the dollar check
    cell_input: bool = False  # skipped for every text check
    skipped: bool = False  # not shown to a reader


class _PageParser(HTMLParser):
    """Collect the shown text of a page in runs, each tagged with its context."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[_Element] = []
        self.prose: list[str] = []  # text outside math and code
        self.code: list[str] = []  # text in <pre>/<code>, outside cell inputs
        self.math: list[str] = []  # the content of each math element
        self.error_elements: list[str] = []
        self.scripts: list[str] = []
        self.raster_images: list[str] = []
        self._math_buffer: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = set((dict(attrs).get("class") or "").split())
        parent = self.stack[-1] if self.stack else _Element("document")
        element = _Element(
            tag,
            math=parent.math or (bool(classes & MATH_CLASSES) and tag in ("span", "div")),
            code=parent.code or tag in ("pre", "code"),
            cell_input=parent.cell_input or "cell_input" in classes,
            skipped=parent.skipped or tag in SKIPPED_TAGS,
        )
        source = dict(attrs).get("src") or ""
        if tag == "img" and RASTER.search(source) and not element.skipped:
            self.raster_images.append(source)
        if tag == "mjx-merror" or (classes & ERROR_CLASSES and not element.skipped):
            self.error_elements.append(tag + "." + ".".join(sorted(classes & ERROR_CLASSES)))
        if element.math and not parent.math:
            self._math_buffer = []
        if tag not in VOID_TAGS:
            self.stack.append(element)

    def handle_endtag(self, tag: str) -> None:
        # Pop to the matching element; stray end tags (rare in Sphinx output) are ignored.
        for depth in range(len(self.stack) - 1, -1, -1):
            if self.stack[depth].tag == tag:
                closed = self.stack[depth]
                del self.stack[depth:]
                parent_math = self.stack[-1].math if self.stack else False
                if closed.math and not parent_math and self._math_buffer is not None:
                    self.math.append("".join(self._math_buffer))
                    self._math_buffer = None
                return

    def handle_data(self, data: str) -> None:
        element = self.stack[-1] if self.stack else _Element("document")
        if element.tag == "script":
            self.scripts.append(data)
        if element.skipped or element.cell_input:
            return
        if element.math:
            if self._math_buffer is not None:
                self._math_buffer.append(data)
        elif element.code:
            self.code.append(data)
        else:
            self.prose.append(data)


def _excerpt(text: str, start: int, end: int, width: int = 50) -> str:
    snippet = text[max(0, start - width) : end + width]
    return " ".join(snippet.split())


def _balanced(latex: str) -> str | None:
    """Return why a formula cannot typeset (unbalanced braces or environments), or None."""
    stripped = re.sub(r"\\[{}]", "", latex)
    depth = 0
    for char in stripped:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth < 0:
            return "a '}' closes no '{'"
    if depth:
        return f"{depth} '{{' left open"
    if len(re.findall(r"\\begin\{", latex)) != len(re.findall(r"\\end\{", latex)):
        return "\\begin and \\end do not pair"
    if len(re.findall(r"\\left\b", latex)) != len(re.findall(r"\\right\b", latex)):
        return "\\left and \\right do not pair"
    return None


def check_page(html: str, page: str = "<page>") -> list[Finding]:
    r"""Return every problem found in one page's HTML.

    Examples
    --------
    >>> check_page('<p>is <span class="math">\\(x\\)</span> and</p>')
    []
    >>> [f.kind for f in check_page('<p>a sum, $$ y = 1, $$ so</p>')]
    ['stray $', 'stray $']
    >>> [f.kind for f in check_page('<p>Adam {cite}`kingma` keeps</p><pre>$ make</pre>')]
    ['role left as text']
    >>> [f.kind for f in check_page('<img src="../_images/a.png"><img src="../_images/b.svg">')]
    ['raster figure']
    """
    parser = _PageParser()
    parser.feed(html)
    parser.close()
    findings: list[Finding] = []
    prose = "".join(parser.prose)
    for match in re.finditer(r"\$+", prose):  # "$$" is one finding
        findings.append(Finding(page, "stray $", _excerpt(prose, match.start(), match.end())))
    for text in (prose, "".join(parser.code), "\n".join(parser.math)):
        for match in ROLE.finditer(text):
            excerpt = _excerpt(text, match.start(), match.end())
            findings.append(Finding(page, "role left as text", excerpt))
        for match in ERROR_TEXT.finditer(text):
            excerpt = _excerpt(text, match.start(), match.end())
            findings.append(Finding(page, "error marker", excerpt))
    for latex in parser.math:
        if "$" in latex.replace(r"\$", ""):
            findings.append(Finding(page, "stray $ in math", " ".join(latex.split())[:100]))
        reason = _balanced(latex)
        if reason:
            findings.append(Finding(page, f"math: {reason}", " ".join(latex.split())[:100]))
    for element in parser.error_elements:
        findings.append(Finding(page, "error element", element))
    for source in parser.raster_images:
        findings.append(Finding(page, "raster figure", source))
    seen: set[str] = set()
    for script in parser.scripts:
        body = " ".join(script.split())
        if body in seen and DECLARATION.search(body):
            findings.append(Finding(page, "inline script included twice", body[:100]))
        seen.add(body)
    return findings


def _pages(html_dir: Path) -> Iterator[Path]:
    for path in sorted(html_dir.rglob("*.html")):
        relative = path.relative_to(html_dir)
        if relative.parts[0] in ("_static", "_sources", "_images") or relative.name in (
            "search.html",
        ):
            continue
        yield path


def check_site(html_dir: Path) -> list[Finding]:
    """Return every problem found in every page of a built book."""
    findings: list[Finding] = []
    for path in _pages(html_dir):
        page = path.relative_to(html_dir).as_posix()
        findings += check_page(path.read_text(encoding="utf-8"), page)
    return findings


def main(argv: list[str] | None = None) -> int:
    """Check the built HTML named on the command line; print findings and counts per page."""
    args = sys.argv[1:] if argv is None else argv
    html_dir = Path(args[0] if args else "book/_build/html")
    if not (html_dir / "intro.html").exists():
        print(f"{html_dir}/intro.html is missing: build the book first (make book)")
        return 2
    findings = check_site(html_dir)
    counts: dict[str, int] = {}
    for finding in findings:
        print(finding)
        counts[finding.page] = counts.get(finding.page, 0) + 1
    for page, count in sorted(counts.items()):
        print(f"{count:5d}  {page}")
    print(f"{len(findings)} problems in {len(list(_pages(html_dir)))} pages")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
