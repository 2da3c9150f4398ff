"""The built book shows no raw markup: no stray ``$``, no role left as text, no math error.

The check of ``book/_build/html`` skips when the book has not been built (``make book``
builds it); the checks of the checker itself always run.
"""

from pathlib import Path

import pytest

from tests.book.check_built_html import check_page, check_site

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
HTML = BOOK / "_build" / "html"

MATH = '<span class="math notranslate nohighlight">\\(x_i\\)</span>'


@pytest.mark.built_book
def test_the_built_book_renders_all_its_markup():
    """Every page of the built book passes the HTML checker (one line per problem if not)."""
    if not (HTML / "intro.html").exists():
        pytest.skip("book/_build/html is missing: run 'make book' first (make test does)")
    findings = check_site(HTML)
    assert [str(f) for f in findings] == []


def test_display_math_inside_a_paragraph_is_found():
    """A ``$$ ... $$`` left in a paragraph shows as text with stray dollars: two findings."""
    findings = check_page(f"<p>with {MATH} as $$ y = \\sum_i x_i, $$ so</p>")
    assert [f.kind for f in findings] == ["stray $", "stray $"]


def test_math_handed_to_mathjax_passes():
    """Inline and display math that Sphinx marked up for MathJax is not a finding."""
    display = '<div class="math notranslate nohighlight">\\[\\frac{a}{b}\\]</div>'
    assert check_page(f"<p>inline {MATH}</p>{display}") == []


@pytest.mark.parametrize(
    "role", ["{cite}`kingma2015adam`", "{ref}`ch-x`", "{numref}`fig-1`", "{doc}`intro`",
             "{glue:text}`vgg_once`", "{glue}`x`"],
)  # fmt: skip
def test_a_role_left_as_text_is_found(role):
    """Each role printed verbatim, in prose or in a printed output, is a finding."""
    assert [f.kind for f in check_page(f"<p>see {role}</p>")] == ["role left as text"]
    printed = f'<div class="cell_output"><pre>see {role}</pre></div>'
    assert [f.kind for f in check_page(printed)] == ["role left as text"]


def test_code_may_hold_dollars_and_cell_inputs_may_show_roles():
    """A shell prompt in a code block and MyST syntax in a cell's source are not findings."""
    html = (
        "<pre>$ make book</pre><p>run <code>$HOME/bin</code></p>"
        '<div class="cell_input"><pre>text = "{cite}`kingma2015adam`"</pre></div>'
    )
    assert check_page(html) == []


@pytest.mark.parametrize(
    ("html", "kind"),
    [
        ("<mjx-merror>x</mjx-merror>", "error element"),
        ('<p>a <span class="problematic">`x</span></p>', "error element"),
        ("<p>Math input error</p>", "error marker"),
        ('<span class="math">\\(\\frac{a}{b\\)</span>', "math: 1 '{' left open"),
        ('<div class="math">\\[\\begin{cases} a \\]</div>', "math: \\begin and \\end do not pair"),
        ('<span class="math">\\(a $ b\\)</span>', "stray $ in math"),
        ('<span class="math">\\( so {cite}`kingma2015adam` \\)</span>', "role left as text"),
    ],
)
def test_error_markers_are_found(html, kind):
    """MathJax and docutils error markers, and formulas that cannot typeset, are findings."""
    assert [f.kind for f in check_page(html)] == [kind]


def test_an_inline_script_twice_is_found():
    """Two copies of one inline script (sphinx-thebe's ``const``: a JavaScript error) are found."""
    script = '<script>const THEBE_JS_URL = "x"</script>'
    other = "<script>var selector = '.toggle'</script>"  # a second var is harmless
    assert check_page(f"<html><head>{script}{other}{other}</head></html>") == []
    twice = check_page(f"<html><head>{script}{other}{script}</head></html>")
    assert [f.kind for f in twice] == ["inline script included twice"]


@pytest.mark.parametrize("source", ["../_images/plot.png", "figure.JPG", "a.gif?v=2"])
def test_a_raster_figure_is_found(source):
    """A PNG, JPEG or GIF figure blurs when a phone shrinks it: the chapters draw SVG."""
    page = f'<p>see</p><img alt="plot" src="{source}"><img src="../_images/sharp.svg">'
    assert [(f.kind, f.excerpt) for f in check_page(page)] == [("raster figure", source)]


def test_the_book_kernel_draws_svg():
    """``make book`` points IPYTHONDIR at book/_ipython, whose kernel config asks for SVG."""
    config = (BOOK / "_ipython" / "profile_default" / "ipython_kernel_config.py").read_text()
    assert 'c.InlineBackend.figure_formats = {"svg"}' in config
    makefile = (ROOT / "Makefile").read_text()
    assert 'IPYTHONDIR="$(CURDIR)/book/_ipython"' in makefile
