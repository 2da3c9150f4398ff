"""Let Sphinx read (and so execute) the book's pages in parallel.

Jupyter Book 1's command line has no ``-j``; its ``jupyter_book.sphinx.build_sphinx`` takes
``jobs``. A parallel build::

    python -c 'import functools, jupyter_book.sphinx as s; \
      s.build_sphinx = functools.partial(s.build_sphinx, jobs=2); \
      import jupyter_book.cli.main as cli; cli.main()' build book --all -W --keep-going

Sphinx reads pages in parallel only when every loaded extension declares itself safe for it;
one that says nothing makes Sphinx log a warning (an error under ``-W``) and read serially.
Three extensions that Jupyter Book 1 loads say nothing, and each is safe to read in parallel:

- ``sphinx-mathjax-offline`` only copies MathJax into ``_static/`` when the build has finished;
- ``sphinx_jupyterbook_latex`` adds nodes and transforms that act for the LaTeX builder only;
- ``sphinx_multitoc_numbering`` replaces how section numbers are assigned, which Sphinx does
  once, in the main process, after the parallel readers' environments are merged.

This extension declares them safe when the builder starts (``builder-inited``), after every
extension has loaded and before any page is read. ``_config.yml`` names it in its extension list
and puts this folder on the path (``local_extensions``).
An extension that declares anything itself is left as it declared.
"""

from __future__ import annotations

from typing import Any

SAFE_TO_READ_IN_PARALLEL = (
    "sphinx-mathjax-offline",
    "sphinx_jupyterbook_latex",
    "sphinx_multitoc_numbering",
)


def _declare(app: Any) -> None:
    """Mark the extensions above parallel-read safe where they have not said either way."""
    for name in SAFE_TO_READ_IN_PARALLEL:
        extension = app.extensions.get(name)
        if extension is not None and extension.parallel_read_safe is None:
            extension.parallel_read_safe = True


def setup(app: Any) -> dict[str, Any]:
    """Connect the declaration to ``builder-inited``; this extension is itself parallel safe."""
    app.connect("builder-inited", _declare)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
