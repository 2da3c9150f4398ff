"""The autograd timeline keeps its live total incrementally, and each moment is sympy's own sum.

The reference is what the timeline did before: ``sp.Add(*live.values())`` at
every moment (plus the optimizer step's temporaries). The incremental total
must give the same expression, argument for argument, not just an equal value:
peaks, tables and the book print these expressions.
"""

from __future__ import annotations

import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

import memtheory as mt
from memtheory.conventions.autograd import live_bytes
from memtheory.conventions.autograd import timeline as timeline_module
from memtheory.conventions.autograd.live_bytes import Timeline
from memtheory.models import resnet18
from memtheory.symbols import B, H, S

_FLOOR = sp.floor(sp.floor(H / 2) / 2)
_VALUES = [
    sp.Integer(0),
    sp.Integer(7),
    sp.Rational(3, 2),
    4 * B * H**2,
    12 * B * H**2,
    B * _FLOOR**2,
    3 * B * _FLOOR**2 + 40,
    2 * B * sp.floor(H / 2) ** 2,
    B * S + S,
    sp.Max(B, S),
    5 * sp.Max(B, S),
    B * (H + 1),
    -4 * B * H**2,
]


def _same(got: sp.Expr, expected: sp.Expr) -> bool:
    return type(got) is type(expected) and got == expected and got.args == expected.args


@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, len(_VALUES) - 1), st.integers(0, 5)),
        max_size=40,
    )
)
def test_total_is_sympys_sum_argument_for_argument(steps):
    """After any allocations and frees, total(), mark() and each component's part are sympy's Adds.

    Every third storage counts towards a component ("a" or "b"), as the autograd convention
    counts saved activations and gradients.
    """
    timeline = Timeline(categories={f"t{i}": "ab"[i % 2] for i in range(0, 40, 3)})
    count = 0
    for number, (allocate, which, extra) in enumerate(steps):
        if allocate or not timeline.live:
            timeline.alloc(f"t{count}", _VALUES[which])
            count += 1
        else:
            keys = list(timeline.live)
            timeline.free(keys[which % len(keys)])
        expected = sp.Add(*timeline.live.values())
        assert _same(timeline.total(), expected)
        added = _VALUES[extra]
        timeline.mark(f"m{number}", added)
        assert _same(timeline.moments[f"m{number}"], expected + added)
        for category, part in timeline.parts[f"m{number}"].items():
            live = [v for k, v in timeline.live.items() if timeline.categories.get(k) == category]
            assert _same(part, sp.Add(*live))


def test_float_bytes_fall_back_to_sympy():
    """A float coefficient is added by sympy itself (no rational bookkeeping), from then on."""
    timeline = Timeline()
    timeline.alloc("a", 4 * B)
    timeline.alloc("b", sp.Float(0.5) * B)
    timeline.alloc("c", 3 * H)
    timeline.mark("m")
    assert _same(timeline.moments["m"], sp.Add(4 * B, sp.Float(0.5) * B, 3 * H))


def _pooled_cnn(convolutions: int) -> mt.Network:
    layers: list[object] = [mt.Input((3, H, H))]
    for i in range(convolutions):
        layers.append(mt.Conv2d(4, 3, padding=1))
        if (i + 1) % 5 == 0:
            layers.append(mt.MaxPool2d(2))
    return mt.Network([*layers, mt.Flatten(), mt.Dense(10)])


@pytest.mark.parametrize(
    "net",
    [
        _pooled_cnn(23),
        resnet18(image_size=H),
    ],
    ids=["pooled CNN", "ResNet-18"],
)
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_every_moment_of_real_timelines_is_sympys_sum(monkeypatch, net, optimizer):
    """On a deep pooled CNN and a residual network, training and inference moments are unchanged."""
    mark = Timeline.mark
    checked: list[bool] = []

    def checking(self, label, extra=0):
        mark(self, label, extra)
        checked.append(_same(self.moments[label], sp.Add(*self.live.values()) + extra))
        for category, part in self.parts.get(label, {}).items():
            live = [v for k, v in self.live.items() if self.categories.get(k) == category]
            checked.append(_same(part, sp.Add(*live)))

    monkeypatch.setattr(live_bytes.Timeline, "mark", checking)
    mt.training_memory(net, optimizer=optimizer, convention="autograd")
    mt.inference_memory(net, convention="autograd")
    assert len(checked) > 2 * len(net.rows)
    assert all(checked)


def _fork_by_definition(reads, inputs, index):
    """The nearest common ancestor by its definition: intersect every read's ancestors."""
    common = None
    for name in reads:
        seen, stack = {name}, [name]
        while stack:
            for source in inputs.get(stack.pop(), ()):
                if source not in seen:
                    seen.add(source)
                    stack.append(source)
        common = seen if common is None else common & seen
    known = [name for name in common or () if name in index]
    return max(known, key=index.__getitem__) if known else None


@st.composite
def _graphs(draw):
    """A layer graph in running order: layer i reads one to three earlier layers (0 the input)."""
    size = draw(st.integers(2, 30))
    inputs = {
        f"l{i}": tuple(
            f"l{j}" for j in draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=3))
        )
        for i in range(1, size)
    }
    reads = tuple(
        f"l{j}" for j in draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=4))
    )
    return reads, inputs, {f"l{i}": i for i in range(1, size)}


@given(_graphs())
def test_fork_is_the_nearest_common_ancestor(graph):
    """The fork the timeline finds walking back latest first is the definition's."""
    reads, inputs, index = graph
    assert timeline_module._fork(reads, inputs, index) == _fork_by_definition(
        reads, inputs, index
    )


_ATOMS = [B, H, S, sp.floor(H / 2), sp.floor(H / 4 - sp.Rational(3, 4)), sp.ceiling(S / 3),
          sp.Max(B, S), sp.Symbol("n"), sp.Dummy("d", integer=True)]
_expressions = st.recursive(
    st.one_of(
        st.sampled_from(_ATOMS),
        st.integers(-300, 300).map(sp.Integer),
        st.tuples(st.integers(-9, 9), st.integers(1, 9)).map(lambda pq: sp.Rational(*pq)),
    ),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda ab: ab[0] + ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] * ab[1]),
        st.tuples(inner, st.integers(2, 3)).map(lambda ae: ae[0] ** ae[1]),
        inner.map(lambda a: sp.floor(a / 2)),
    ),
    max_leaves=8,
)


@given(st.lists(_expressions, min_size=2, max_size=8))
def test_sort_keys_order_expressions_as_basic_compare(values):
    """Comparing two sort keys is sympy's Basic.compare of the two expressions, pair by pair."""
    memo: dict = {}
    for a in values:
        for b in values:
            ka, kb = live_bytes._sort_key(a, memo), live_bytes._sort_key(b, memo)
            assert (ka > kb) - (ka < kb) == a.compare(b)


def test_moments_are_the_same_with_sort_keys_or_basic_compare(monkeypatch):
    """A GPT-2 stack's and a pooled CNN's moments are the same expressions either way."""
    def moments():
        nets = [mt.models.gpt2(mt.models.GPT2Config(layers=3, hidden=32, heads=4, vocabulary=50)),
                _pooled_cnn(12)]
        return [sp.srepr(v) for net in nets
                for v in mt.training_memory(net, optimizer="adamw",
                                            convention="autograd").timeline.values()]

    keyed = moments()
    start = live_bytes._Sum.__init__

    def without_keys(self):
        start(self)
        self._sort_keys = None

    monkeypatch.setattr(live_bytes._Sum, "__init__", without_keys)
    assert moments() == keyed


def test_moments_read_in_any_order_are_the_same():
    """Moments and parts read backwards (the log replayed again) equal those read forwards."""
    memory = mt.training_memory(_pooled_cnn(11), optimizer="adamw", convention="autograd")
    again = mt.training_memory(_pooled_cnn(11), optimizer="adamw", convention="autograd")
    labels = list(memory.timeline)
    forwards = [memory.timeline[label] for label in labels]
    backwards = [again.timeline[label] for label in reversed(labels)][::-1]
    assert [sp.srepr(v) for v in forwards] == [sp.srepr(v) for v in backwards]
    moments = list(memory.timeline_parts)
    parts = [memory.timeline_parts[label] for label in moments]
    assert parts == [again.timeline_parts[label] for label in reversed(moments)][::-1]
    assert len(parts) > 10 and any(len(part) >= 2 for part in parts)
    assert len(memory.timeline) == len(labels) and labels[0] in memory.timeline


def test_a_pickled_timeline_is_the_built_one():
    """Pickled and copied, the lazy moments and parts stay lazy and read what they stood for.

    They are pickled as their logs and places (no moment built to be kept); loaded, each
    moment is built again from the log: the same expression, argument for argument.
    """
    import copy
    import pickle

    from memtheory.conventions.autograd.live_bytes import Moments, Parts

    memory = mt.training_memory(_pooled_cnn(6), optimizer="sgd", convention="autograd")
    loaded = pickle.loads(pickle.dumps(memory))
    assert type(loaded.timeline) is Moments and type(loaded.timeline_parts) is Parts
    assert list(loaded.timeline) == list(memory.timeline)
    assert all(sp.srepr(loaded.timeline[k]) == sp.srepr(v) for k, v in memory.timeline.items())
    assert {k: dict(v) for k, v in loaded.timeline_parts.items()} == {
        k: dict(v) for k, v in memory.timeline_parts.items()}
    copied = copy.deepcopy(memory.timeline)
    assert type(copied) is Moments and dict(copied) == dict(loaded.timeline)
    assert loaded.peak == memory.peak


_factors = st.one_of(
    st.just(sp.S.One), st.just(-sp.S.One), st.just(sp.S.Zero),
    st.tuples(st.integers(-9, 9), st.integers(1, 9)).map(lambda pq: sp.Rational(*pq)),
)


@given(st.lists(st.tuples(_factors, _expressions), min_size=1, max_size=6),
       st.booleans())
def test_sum_builder_adds_as_sympy_adds(scaled, expand):
    """SumBuilder's sum is sp.Add's of the same values (sp.expand's with expand).

    Argument for argument (srepr), with one builder reused across sums as a timeline reuses it.
    """
    builder = live_bytes.SumBuilder()
    for start in range(len(scaled)):  # several sums through one builder: its memos shared
        values = scaled[start:]
        built = builder.add_scaled(values, expand=expand)
        added = sp.Add(*(factor * value for factor, value in values))
        assert sp.srepr(built) == sp.srepr(sp.expand(added) if expand else added)


@given(st.lists(_expressions, min_size=1, max_size=6))
def test_sum_builder_add_is_add_scaled_by_one(values):
    """``add(*values)`` is ``sp.Add(*values)``, as sympy writes it."""
    assert sp.srepr(live_bytes.SumBuilder().add(*values)) == sp.srepr(sp.Add(*values))
