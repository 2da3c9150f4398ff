"""Skip this package's doctests when PyTorch is not installed (it is an optional extra)."""

import importlib.util

_spec = importlib.util.find_spec("torch")
# A directory named "torch" on sys.path is a namespace package (origin None), not PyTorch.
collect_ignore_glob = [] if _spec is not None and _spec.origin is not None else ["*.py"]
