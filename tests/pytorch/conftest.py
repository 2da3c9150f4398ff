"""Without the optional 'torch' extra, the tests here skip (importorskip, with the reason).

The strategies and layer-harness modules are helpers, not test modules: they
are kept out of doctest collection when PyTorch is absent, since they import torch at the top.
"""

import importlib.util

_spec = importlib.util.find_spec("torch")
# A directory named "torch" on sys.path would be a namespace package (origin None), not PyTorch.
_HELPERS = ["torch_strategies.py", "layer_harness.py", "hf_decoders.py"]
collect_ignore = _HELPERS if _spec is None or _spec.origin is None else []
