"""Without the optional 'torch' extra, the tests here skip (importorskip, with the reason).

The strategies module is a helper, not a test module: it is kept out of doctest
collection when PyTorch is absent, since it imports torch at the top.
"""

import importlib.util

_spec = importlib.util.find_spec("torch")
# A directory named "torch" on sys.path would be a namespace package (origin None), not PyTorch.
collect_ignore = ["torch_strategies.py"] if _spec is None or _spec.origin is None else []
