"""What memtheory puts in PyTorch's SymNode for a trace is PyTorch's again after it.

Two blocks replace SymNode methods while a trace runs: ``memoised_numbers``
(``expr``, ``maybe_as_int``) and ``memoised_size_arithmetic`` (the binary
operations). Each puts back exactly what it found, even when the block ends by an
exception, and replaces nothing on a PyTorch other than the one it repeats.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.sym_node import SymNode  # noqa: E402

from memtheory.torch.tracing import numbers_memo, size_arithmetic_memo  # noqa: E402

BLOCKS = {
    "memoised_numbers": (numbers_memo, numbers_memo.memoised_numbers,
                         ("expr", "maybe_as_int")),
    "memoised_size_arithmetic": (size_arithmetic_memo,
                                 size_arithmetic_memo.memoised_size_arithmetic,
                                 tuple(f"_{name}" for name in size_arithmetic_memo._METHODS)),
}


def _methods(names):
    return tuple(SymNode.__dict__[name] for name in names)


@pytest.mark.parametrize("block", list(BLOCKS))
def test_replaced_inside_and_restored_after_an_error(block):
    """Every method it replaces is PyTorch's again when the block ends by an exception."""
    _, enter, names = BLOCKS[block]
    original = _methods(names)
    with pytest.raises(RuntimeError), enter():
        assert all(a is not b for a, b in zip(_methods(names), original, strict=True))
        raise RuntimeError("stop")
    assert _methods(names) == original


@pytest.mark.parametrize("block", list(BLOCKS))
def test_another_pytorch_is_left_alone(block, monkeypatch):
    """Where the methods are not the ones the replacement repeats, nothing is replaced."""
    module, enter, names = BLOCKS[block]
    monkeypatch.setattr(module, "_supported", lambda: False)
    original = _methods(names)
    with enter():
        assert _methods(names) == original
