"""pytest configuration for the whole repository; not part of the memtheory package.

memtheory.torch needs PyTorch, an optional extra: without it, that package's
modules (and so their doctests) are not collected; likewise the modules whose
Examples need the book extra (matplotlib, IPython), which ``make test BOOK=0``
does not install. Kept here, outside
``memtheory/``, so that no conftest.py ships in the wheel.
"""

import importlib.util

_spec = importlib.util.find_spec("torch")
# A directory named "torch" on sys.path is a namespace package (origin None), not PyTorch.
_HAS_TORCH = _spec is not None and _spec.origin is not None
collect_ignore_glob = (
    [] if _HAS_TORCH else ["memtheory/torch/*.py", "memtheory/validation/*.py"]
)

# memtheory.plotting's Examples draw with matplotlib; glue_exercises' show IPython's Markdown.
_BOOK_EXTRA = all(importlib.util.find_spec(name) is not None for name in ("matplotlib", "IPython"))
if not _BOOK_EXTRA:
    collect_ignore_glob += ["memtheory/plotting.py", "memtheory/exercises/book.py"]
