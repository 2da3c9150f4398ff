"""IPython configuration of the kernel that executes the book's chapters.

``make book`` points IPYTHONDIR here. Figures are drawn as SVG, so their text
stays sharp at any zoom and on a phone; tests/book/check_built_html.py fails on
a raster figure in a chapter.
"""

c = get_config()  # noqa: F821 (IPython's config loader defines get_config)
c.InlineBackend.figure_formats = {"svg"}
# Executing the book should leave nothing behind in this folder.
c.HistoryManager.enabled = False
