"""memoised_size_arithmetic: each binary SymNode operation gives the node PyTorch would build."""

from __future__ import annotations

import functools
import itertools

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.sym_node import SymNode  # noqa: E402
from torch.fx.experimental.symbolic_shapes import (  # noqa: E402
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
)

from memtheory.torch.tracing import size_arithmetic_memo  # noqa: E402
from memtheory.torch.tracing.size_arithmetic_memo import memoised_size_arithmetic  # noqa: E402

_INTEGER = ("add", "sub", "mul", "int_floordiv", "eq", "ne", "gt", "ge", "lt", "le",
            "sym_max", "sym_min")
_BOOLEAN = ("and_", "or_")


def _sizes():
    """Integer SymNodes of one ShapeEnv: a transformer's and a pooled image's sizes, and numbers.

    Sizes (B, S, 768) and (B, 3, H, H) through a max and an average pooling: plain symbols,
    products, sums (strides, element counts) and floors, with constants wrapped as PyTorch
    wraps them.
    """
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 4)
    image = mode.from_tensor(torch.empty(4, 3, 97, 97), symbolic_context=dynamic)
    tokens = mode.from_tensor(torch.empty(4, 12, 768), symbolic_context=StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.DYNAMIC, DimDynamic.STATIC]))
    with mode:
        pooled = torch.nn.functional.avg_pool2d(torch.nn.functional.max_pool2d(image, 3, 2, 1), 2)
        batch, length, width = tokens.shape
        values = [*pooled.shape, *pooled.stride(), pooled.numel(), *tokens.stride(),
                  tokens.numel(), batch * length + 1, batch, length, width]
    nodes = [v.node for v in values if isinstance(v, torch.SymInt)]
    constant = nodes[0].wrap_int(3)
    return [*nodes, constant, nodes[0].wrap_int(0), nodes[0].wrap_int(1)]


def _truths(nodes):
    """Boolean SymNodes: comparisons of the sizes, as PyTorch builds them for its checks."""
    pairs = itertools.islice(itertools.combinations(nodes, 2), 12)
    return [node for a, b in pairs for node in (a.eq(b), a.ge(b))]


def _built(node):
    """What a SymNode holds: its expression, type, hint, constant, FX node and summation flag."""
    return (node._expr, node.pytype, node._hint, node.constant, node.fx_node,
            node._optimized_summation)


@functools.cache
def _pool():
    nodes = _sizes()
    return nodes, _truths(nodes)


@settings(max_examples=200, deadline=None)
@given(method=st.sampled_from(_INTEGER + _BOOLEAN), left=st.integers(0, 10_000),
       right=st.integers(0, 10_000), earlier=st.lists(st.tuples(
           st.sampled_from(_INTEGER + _BOOLEAN), st.integers(0, 10_000), st.integers(0, 10_000)),
           max_size=6))
def test_each_node_is_the_one_pytorch_builds(method, left, right, earlier):
    """Any binary operation on sizes (or on truths, for and/or), after any others, asked twice.

    PyTorch's own method, outside the block, builds the reference; inside, other operations
    (on the same operands, perhaps) fill the table first, then the first call goes through
    PyTorch and the second comes from the table. Dividing by a size of 0 raises both ways.
    """
    def operands(method, left, right):
        nodes, truths = _pool()
        pool = truths if method in _BOOLEAN else nodes
        return pool[left % len(pool)], pool[right % len(pool)]

    def outcome(x, name, y):
        try:
            return _built(getattr(x, f"_{name}")(y))
        except ZeroDivisionError as error:  # a floor division by a size of 0, as PyTorch's
            return type(error)

    a, b = operands(method, left, right)
    expected = outcome(a, method, b)
    with memoised_size_arithmetic():
        for other, i, j in earlier:
            x, y = operands(other, i, j)
            outcome(x, other, y)
            if (other in _BOOLEAN) == (method in _BOOLEAN):
                outcome(a, other, b)
        first = outcome(a, method, b)
        second = outcome(a, method, b)
    assert first == second == expected


def test_pytorch_builds_each_distinct_operation_once(monkeypatch):
    """Asked a thousand times over, PyTorch's method runs once per operation and operands."""
    calls = []

    def counted(original):
        @functools.wraps(original)  # keeps the name the support check reads
        def method(self, other=None):
            calls.append((self.expr, other.expr))
            return original(self, other)
        return method

    originals = {name: counted(f) for name, f in size_arithmetic_memo._ORIGINALS.items()}
    monkeypatch.setattr(size_arithmetic_memo, "_ORIGINALS", originals)
    for name, method in originals.items():
        monkeypatch.setattr(SymNode, f"_{name}", method)
    nodes, _ = _pool()
    a, b = nodes[0], nodes[-4]  # a floor and the batch size
    with memoised_size_arithmetic():
        products = [a.mul(b) for _ in range(1000)]
        sums = [a.add(b) for _ in range(1000)]
    assert len(calls) == 2
    assert len({_built(p) for p in products}) == len({_built(s) for s in sums}) == 1


def test_mod_and_other_methods_stay_pytorchs():
    """``mod`` reads the value ranges as well as the expressions: it is never memoised."""
    before = {name: f for name, f in SymNode.__dict__.items() if name.startswith("_")}
    with memoised_size_arithmetic():
        inside = {name: f for name, f in SymNode.__dict__.items() if name.startswith("_")}
    changed = {name for name in before if inside[name] is not before[name]}
    assert changed == {f"_{name}" for name in _INTEGER + _BOOLEAN}
    assert "_mod" not in changed


def test_make_fx_still_records_its_graph():
    """Under a proxy mode (``make_fx``), PyTorch's own method runs: the graph is the same."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        return x.reshape(x.shape[0] * x.shape[1], -1).sum(0) * (x.shape[0] + 1)

    def graph():
        return make_fx(f, tracing_mode="symbolic")(torch.ones(3, 4, 5)).code

    expected = graph()
    with memoised_size_arithmetic():
        first, again = graph(), graph()
    assert "sym_size" in expected and first == again == expected


def test_a_traced_step_is_the_same_with_and_without(monkeypatch):
    """A transformer block and a pooled CNN traced both ways: the same formulas, moment by moment.

    The memo off: PyTorch's own methods build every node.
    """
    from memtheory.torch import trace

    torch.manual_seed(0)
    attention = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, 2, 1), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.LazyLinear(5))
    cnn(torch.randn(2, 3, 32, 32))  # the lazy layer's width: 8 * 8 * 8

    def traced():
        return [trace(attention, torch.randn(3, 7, 64), {"B": 3, "S": 7},
                      loss=lambda output: output.square().mean(), optimizer="adam"),
                trace(cnn, torch.randn(2, 3, 32, 32), {"B": 2}, loss=torch.nn.CrossEntropyLoss(),
                      target=torch.randint(0, 5, (2,)), optimizer="sgd")]

    def formulas(memory):
        return (str(memory.peak), str(memory.inference_peak), dict(memory.components),
                dict(memory.timeline), memory.constraints, memory.conditions)

    memoised = [formulas(m) for m in traced()]
    monkeypatch.setattr(size_arithmetic_memo, "_supported", lambda: False)
    assert [formulas(m) for m in traced()] == memoised


def test_a_floor_division_by_a_size_of_0_raises_as_pytorchs():
    """PyTorch works the hint out first and raises; so does every call in the block, twice."""
    nodes, _ = _pool()
    size, zero = nodes[0], next(n for n in nodes if n.constant == 0)
    with pytest.raises(ZeroDivisionError):
        size._int_floordiv(zero)
    with memoised_size_arithmetic():
        for _ in range(2):
            with pytest.raises(ZeroDivisionError):
                size._int_floordiv(zero)
