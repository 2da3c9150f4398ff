"""memoised_numbers: PyTorch's symbolic size reads answer as before, only sympy's walk is saved."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.sym_node import SymNode  # noqa: E402
from torch.fx.experimental.symbolic_shapes import (  # noqa: E402
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
)

from memtheory.torch.tracing import numbers_memo  # noqa: E402
from memtheory.torch.tracing.numbers_memo import memoised_numbers  # noqa: E402


def _reads(nodes):
    return [(node.expr, node.maybe_as_int()) for node in nodes]


def _pooled_sizes(replaced=False):
    """SymNodes of a fake image's sizes through a pooling chain: floors, products, constants.

    ``replaced``: the batch size is then fixed at 4 (a replacement in the ShapeEnv), so the
    reads go through PyTorch's replacement and its per-node cache.
    """
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 4)
    x = mode.from_tensor(torch.empty(4, 3, 97, 97), symbolic_context=context)
    with mode:
        y = torch.nn.functional.avg_pool2d(torch.nn.functional.max_pool2d(x, 3, 2, 1), 2)
        z = torch.cat([y, y[:, :1]], 1)
    sizes = [*z.shape, *z.stride(), z.numel(), z.shape[1] * 2]
    if replaced:
        torch._check(x.shape[0] == 4)
        assert env._replacements_version_counter > 0
    return [s.node for s in sizes if isinstance(s, torch.SymInt)]


def test_reads_equal_pytorchs_own():
    """Every SymNode read (expression and integer value) is what PyTorch's own methods return."""
    nodes = _pooled_sizes()
    assert any(node.maybe_as_int() is None for node in nodes)  # some stay symbolic
    before = _reads(nodes)
    with memoised_numbers():
        inside = _reads(nodes)
        again = _reads(nodes)  # from the table this time
    assert inside == before == again


def test_reads_after_a_replacement_equal_pytorchs_own():
    """Replaced (the batch fixed), then from each node's cache: what PyTorch's methods read.

    Two copies of the same sizes: one read only by PyTorch, one first inside the block, so
    that the block's own path fills the cache. A number with no ShapeEnv reads as itself.
    """
    import sympy

    ours, pytorchs = _pooled_sizes(replaced=True), _pooled_sizes(replaced=True)
    constant = SymNode(sympy.Integer(3), None, int, 3)
    with memoised_numbers():
        first = _reads([*ours, constant])  # through ShapeEnv.replace
        cached = _reads([*ours, constant])  # from the nodes' caches
    expected = _reads([*pytorchs, constant])
    assert first == cached == expected
    assert expected[0] == (4, 4)  # the batch is a number once replaced
    assert any(value is None for _, value in expected)


def test_re_entrant():
    """A block inside a block keeps the outer replacement; the outermost block restores."""
    original = SymNode.__dict__["expr"]
    with memoised_numbers():
        outer = SymNode.__dict__["expr"]
        with memoised_numbers():
            assert SymNode.__dict__["expr"] is outer
        assert SymNode.__dict__["expr"] is outer
    assert SymNode.__dict__["expr"] is original


def test_this_pytorch_is_supported():
    """The installed PyTorch (the checked 2.13) has the SymNode the replacement copies."""
    assert numbers_memo._supported()


def test_another_release_is_left_alone_even_with_the_same_names(monkeypatch):
    """The method bodies copied are 2.13's: a 2.14 keeps PyTorch's own, whatever it reads."""
    monkeypatch.setattr(numbers_memo.torch, "__version__", "2.14.0")
    assert not numbers_memo._supported()
    with numbers_memo.memoised_numbers():
        assert SymNode.__dict__["expr"] is numbers_memo._ORIGINAL_EXPR
