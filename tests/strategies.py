"""Hypothesis strategies for memtheory's tests: valid networks, windows, precisions, optimizers.

Every generated network is valid by construction: layers are drawn one at a time
while the current spatial side is tracked as a number, and only hyperparameters
whose window fits the (padded) input are drawn. The side is tracked with PyTorch's
documented output-size formula (``torch.nn.Conv2d`` / ``torch.nn.MaxPool2d`` docs),
written here independently of :mod:`memtheory.sliding_window`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import numpy as np
import sympy as sp
from hypothesis import strategies as st

from memtheory import (
    AvgPool2d,
    BatchNorm2d,
    Conv2d,
    Dense,
    Dropout,
    Flatten,
    Input,
    MaxPool2d,
    Network,
    ReLU,
    Sigmoid,
    Softmax,
    precision,
)
from memtheory.layers import Layer, Tanh
from memtheory.optimizers import OPTIMIZERS
from memtheory.precision import Precision
from memtheory.tables import Column, Table

__all__ = [
    "HOSTILE_TEXTS",
    "answer_file_texts",
    "answer_folders",
    "arithmetic_texts",
    "hostile_answers",
    "hostile_texts",
    "tables",
    "FLOAT_DTYPES",
    "ImageNetSpec",
    "MLPSpec",
    "Window",
    "batch_sizes",
    "conv_windows",
    "explicit_precisions",
    "hostile_values",
    "image_networks",
    "mlps",
    "optimizer_names",
    "pool_windows",
    "precisions",
    "respellings",
]

FLOAT_DTYPES = ("fp64", "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
"""Float element types a training run can store its tensors in."""

PRECISION_NAMES = ("fp64", "fp32", "fp16", "bf16", "mixed-fp16", "mixed-bf16", "fp8_e4m3")


def _pytorch_out(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's output size along one axis (torch.nn.MaxPool2d docs, Pool.h's ceil rule)."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


# -- single windows -----------------------------------------------------------------------
@dataclass(frozen=True)
class Window:
    """One axis of a sliding window over an input of side ``size``; it always fits."""

    size: int
    kernel: int
    stride: int
    padding: int
    dilation: int
    ceil_mode: bool

    @property
    def span(self) -> int:
        """Input positions one window covers: ``d(k-1)+1``."""
        return self.dilation * (self.kernel - 1) + 1


@st.composite
def conv_windows(draw: st.DrawFn, max_size: int = 40) -> Window:
    """A convolution window (floor mode) whose span fits the padded input."""
    size = draw(st.integers(1, max_size))
    padding = draw(st.integers(0, 4))
    kernel = draw(st.integers(1, min(7, size + 2 * padding)))
    most_dilation = 4 if kernel == 1 else min(4, (size + 2 * padding - 1) // (kernel - 1))
    dilation = draw(st.integers(1, most_dilation))
    stride = draw(st.integers(1, 5))
    return Window(size, kernel, stride, padding, dilation, False)


@st.composite
def pool_windows(
    draw: st.DrawFn, max_size: int = 40, dilation: bool = True, size: int | None = None
) -> Window:
    """A pooling window: padding at most half the window (PyTorch's rule), span fits.

    ``size`` fixes the input side; otherwise it is drawn up to ``max_size``.
    """
    size = draw(st.integers(1, max_size)) if size is None else size
    choices = []
    for kernel in range(1, 7):
        for dil in range(1, 4 if dilation else 2):
            span = dil * (kernel - 1) + 1
            least_padding = max(0, -(-(span - size) // 2))
            if least_padding <= kernel // 2:
                choices.append((kernel, dil, least_padding))
    kernel, dil, least_padding = draw(st.sampled_from(choices))
    padding = draw(st.integers(least_padding, kernel // 2))
    stride = draw(st.integers(1, 5))
    ceil_mode = draw(st.booleans())
    return Window(size, kernel, stride, padding, dil, ceil_mode)


# -- networks -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageNetSpec:
    """An image classifier drawn for a ``channels x side x side`` input.

    ``side`` is the smallest image side the layers were drawn for; every output size
    grows with the input size, so the same layers are valid for any larger side.
    """

    channels: int
    side: int
    layers: tuple[Layer, ...]

    def network(
        self, side: int | sp.Expr | None = None, batch: int | sp.Expr | None = None
    ) -> Network:
        """The network with an ``Input((channels, side, side))`` (symbolic side allowed)."""
        side = self.side if side is None else side
        if batch is None:
            first = Input((self.channels, side, side))
        else:
            first = Input((self.channels, side, side), batch=batch)
        return Network([first, *self.layers])


@dataclass(frozen=True)
class MLPSpec:
    """A multilayer perceptron over ``features`` inputs."""

    features: int
    layers: tuple[Layer, ...]

    def network(self) -> Network:
        """The network with an ``Input((features,))``."""
        return Network([Input((self.features,)), *self.layers])


def _divisors(n: int) -> list[int]:
    """Every g that divides n."""
    return [g for g in range(1, n + 1) if n % g == 0]


@st.composite
def _conv(draw: st.DrawFn, channels: int, side: int) -> tuple[Layer, int, int]:
    """A Conv2d that fits a side x side input, with its output channels and side."""
    out_channels = draw(st.integers(1, 8))
    groups = draw(st.sampled_from(_divisors(math.gcd(channels, out_channels))))
    bias = draw(st.booleans())
    if draw(st.integers(0, 5)) == 0:
        kernel = draw(st.integers(1, 4))
        dilation = draw(st.integers(1, 2))
        layer = Conv2d(
            out_channels, kernel, padding="same", dilation=dilation, groups=groups, bias=bias
        )
        return layer, out_channels, side
    padding = draw(st.integers(0, 2))
    kernel = draw(st.integers(1, min(5, side + 2 * padding)))
    most_dilation = 3 if kernel == 1 else min(3, (side + 2 * padding - 1) // (kernel - 1))
    dilation = draw(st.integers(1, most_dilation))
    stride = draw(st.integers(1, 3))
    layer = Conv2d(
        out_channels,
        kernel,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        bias=bias,
    )
    return layer, out_channels, _pytorch_out(side, kernel, stride, padding, dilation, False)


@st.composite
def _pool(draw: st.DrawFn, side: int) -> tuple[Layer, int]:
    """A MaxPool2d or AvgPool2d that fits a side x side input, with its output side."""
    is_max = draw(st.booleans())
    w = draw(pool_windows(dilation=is_max, size=side))
    default_stride = draw(st.booleans())  # PyTorch's default stride is the kernel size
    stride = w.kernel if default_stride else w.stride
    common = dict(
        stride=None if default_stride else stride, padding=w.padding, ceil_mode=w.ceil_mode
    )
    if is_max:
        layer: Layer = MaxPool2d(w.kernel, dilation=w.dilation, **common)
    else:
        layer = AvgPool2d(w.kernel, **common)
    return layer, _pytorch_out(side, w.kernel, stride, w.padding, w.dilation, w.ceil_mode)


@st.composite
def _dropout(draw: st.DrawFn) -> Layer:
    """A Dropout with any p, in place or not, and any mask dtype."""
    return Dropout(
        draw(st.sampled_from([0.0, 0.1, 0.5])),
        inplace=draw(st.booleans()),
        mask_dtype=draw(st.sampled_from(["bool", "uint8", None])),
    )


@st.composite
def _head(draw: st.DrawFn, max_dense: int = 3) -> list[Layer]:
    """1 to max_dense Dense layers with activations or Dropout between, and maybe a Softmax."""
    layers: list[Layer] = []
    count = draw(st.integers(1, max_dense))
    for position in range(count):
        layers.append(Dense(draw(st.integers(1, 16)), bias=draw(st.booleans())))
        if position < count - 1:
            extra = draw(
                st.sampled_from(["none", "relu", "relu_inplace", "dropout", "sigmoid", "tanh"])
            )
            if extra == "relu":
                layers.append(ReLU())
            elif extra == "relu_inplace":
                layers.append(ReLU(inplace=True))
            elif extra == "dropout":
                layers.append(draw(_dropout()))
            elif extra == "sigmoid":
                layers.append(Sigmoid())
            elif extra == "tanh":
                layers.append(Tanh())
    if draw(st.booleans()):
        layers.append(Softmax())
    return layers


@st.composite
def image_networks(draw: st.DrawFn, max_body: int = 5, max_side: int = 12) -> ImageNetSpec:
    """A valid CNN: image input, conv/pool/ReLU/BatchNorm/Dropout, Flatten, 1-3 Dense, Softmax."""
    channels = draw(st.integers(1, 4))
    side = draw(st.integers(1, max_side))
    current_channels, current_side = channels, side
    body: list[Layer] = []
    for _ in range(draw(st.integers(0, max_body))):
        kind = draw(st.sampled_from(["conv", "conv", "pool", "relu", "batchnorm", "dropout"]))
        if kind == "conv":
            layer, current_channels, current_side = draw(_conv(current_channels, current_side))
        elif kind == "pool":
            layer, current_side = draw(_pool(current_side))
        elif kind == "relu":
            layer = ReLU(inplace=draw(st.booleans()))
        elif kind == "batchnorm":
            layer = BatchNorm2d(affine=draw(st.booleans()), track_running_stats=draw(st.booleans()))
        else:
            layer = draw(_dropout())
        body.append(layer)
    return ImageNetSpec(channels, side, (*body, Flatten(), *draw(_head())))


@st.composite
def mlps(draw: st.DrawFn, max_dense: int = 4) -> MLPSpec:
    """A valid MLP: ``Input((features,))``, Dense layers with activations between, Softmax."""
    return MLPSpec(draw(st.integers(1, 64)), tuple(draw(_head(max_dense))))


# -- training settings --------------------------------------------------------------------
def optimizer_names() -> st.SearchStrategy[str]:
    """Canonical names of every optimizer memtheory knows."""
    return st.sampled_from(sorted(OPTIMIZERS))


@st.composite
def explicit_precisions(draw: st.DrawFn) -> Precision:
    """A Precision with every component's dtype given (none left to defaults)."""
    pick = st.sampled_from(FLOAT_DTYPES)
    return Precision(
        parameters=draw(pick),
        gradients=draw(pick),
        optimizer_state=draw(pick),
        activations=draw(pick),
        activation_gradients=draw(pick),
        input=draw(pick),
        master_weights=draw(st.none() | pick),
    )


def precisions() -> st.SearchStrategy[Precision]:
    """Named precisions (``"fp32"``, ``"mixed-bf16"``, ...) and explicit ones."""
    return st.sampled_from(PRECISION_NAMES).map(precision) | explicit_precisions()


def batch_sizes(largest: int = 512) -> st.SearchStrategy[int]:
    """Positive batch sizes."""
    return st.integers(1, largest)


_CELL_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")),
    max_size=12,
)


@st.composite
def tables(draw: st.DrawFn) -> Table:
    """A table of 1-5 columns (some right-aligned), 0-6 rows, maybe a footer, a title and notes."""
    width = draw(st.integers(1, 5))
    columns = [
        Column(draw(_CELL_TEXT.filter(lambda t: t.strip() == t)) or f"c{i}",
               align=draw(st.sampled_from(["left", "right"])))
        for i in range(width)
    ]
    row = st.lists(_CELL_TEXT.map(str.strip), min_size=width, max_size=width)
    rows = draw(st.lists(row, max_size=6))
    footer = draw(st.lists(row, max_size=2))
    title = draw(st.none() | _CELL_TEXT.map(str.strip).filter(bool))
    notes = draw(st.lists(_CELL_TEXT.map(str.strip).filter(bool), max_size=2))
    return Table(columns, rows, footer=footer, title=title, notes=notes)


# -- names as people type them ------------------------------------------------------------
@st.composite
def respellings(draw: st.DrawFn, name: str, separators: bool = True) -> str:
    """A spelling of ``name`` as a person might type it: any case, padded with spaces.

    With ``separators``, spaces, ``_``, ``-`` and ``+`` are dropped, kept or swapped for
    one another anywhere between the letters.
    """
    letters = [c.upper() if draw(st.booleans()) else c.lower() for c in name]
    if separators:
        letters = [c for c in letters if c not in " _-+"]
        gaps = st.sampled_from(["", "", " ", "_", "-", "+"])
        letters = [c + (draw(gaps) if i < len(letters) - 1 else "") for i, c in enumerate(letters)]
    pad = st.sampled_from(["", " ", "  "])
    return draw(pad) + "".join(letters) + draw(pad)


# -- what a careless or hostile caller passes ---------------------------------------------
_ODD_SYMPY = (
    sp.Symbol("x"),
    sp.Symbol("n", negative=True),
    sp.Symbol("B"),  # a B without memtheory's assumptions
    sp.Rational(1, 2),
    sp.Float(2.5),
    sp.oo,
    -sp.oo,
    sp.nan,
    sp.zoo,
    sp.I,
    sp.Integer(0),
    sp.Integer(-3),
    sp.Integer(7),
    sp.Eq(sp.Symbol("x"), 1),
    sp.true,
)


def hostile_values(*, containers: bool = True) -> st.SearchStrategy[object]:
    """Values a careless or hostile caller passes where a size, name or number belongs.

    None, booleans (Python's and NumPy's), text, negative, zero and huge integers,
    floats (NaN, infinities, fractions), NumPy scalars, sympy numbers and
    expressions in symbols memtheory does not use (or its own, with the wrong
    assumptions), and with ``containers`` lists, tuples, dicts and bare objects.
    """
    from memtheory.symbols import B, H

    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from([np.True_, np.False_]),
        st.text(max_size=6),
        st.sampled_from(["", "no", "3", "nan", "1e999", "B*H", "adam", "MiB", "__import__('os')"]),
        st.integers(-3, 12),
        st.integers(2**62, 2**70) | st.integers(-(2**70), -(2**62)),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([0.5, 2.5, -1.0, 3.0, 1e300]),
        st.integers(-3, 60).map(np.int64),
        st.sampled_from([np.int32(3), np.uint8(4), np.float64(2.0), np.float32(np.nan)]),
        st.sampled_from(_ODD_SYMPY),
        st.sampled_from([H - 10, B * H, -B, B / 2, H**0.5]),
    )
    if not containers:
        return scalars
    return st.one_of(
        scalars,
        st.lists(scalars, max_size=3),
        st.tuples(scalars, scalars),
        st.dictionaries(st.text(max_size=3), scalars, max_size=2),
        st.just(object()),
        st.just(np.array([1, 2])),
    )


# -- hostile input for the grader and the byte parser ------------------------------------
HOSTILE_TEXTS = (
    "((((9**64)**64)**64)**64)",
    "(((((9**64)**64)**64)**64)**64)",
    "1014080*B + ((B+1)**64)**64 - ((B**2+2*B+1)**32)**64",
    "1e99999999 GB",
    "9" * 5000 + " B",
    "9**9**9**9",
    "2^2^2^2^2^2",
    "(" * 200 + "1" + ")" * 200,
    "-" * 400 + "1",
    "floor(" * 60 + "H" + ")" * 60,
    "Min(" + ",".join(["B"] * 150) + ")",
    "(B+H+1)**32 * (B+H+1)**32",
    "__import__('os').system('true')",
    "1/0",
    "0**-1",
    "524k",
    "3 x 10^6",
    "~14741 MiB",
    "99.68 percent",
    "\x1b[2J",
    "=HYPERLINK(\"http://example.invalid\")",
    "1,5 MB",
    "nan",
    "-inf MB",
    "1e-999999 B",
    "0x1F",
    "4096*128+128",
)
"""Texts from issue 12 and their neighbours: towers, deep nesting, huge literals, code."""

_SYMBOL_NAMES = ("B", "H", "M", "C", "x", "e", "__class__", "lambda")
_LITERALS = st.one_of(
    st.integers(0, 10**6).map(str),
    st.integers(0, 10**200).map(str),
    st.builds(lambda m, e: f"{m}e{e}", st.integers(1, 99), st.integers(-10**9, 10**9)),
    st.sampled_from(["1,048,576", "1 048 576", "1_000", ".5", "1.", "224,69", "0", "00"]),
)
_OPERATORS = st.sampled_from(["+", "-", "*", "/", "**", "^", " x ", "×", "", " ", "//", ","])
_FUNCTIONS = st.sampled_from(["floor", "ceil", "ceiling", "Min", "Max", "max", "exec", "abs"])


def _compose(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(lambda a, op, b: f"{a}{op}{b}", children, _OPERATORS, children),
        st.builds(lambda a: f"({a})", children),
        st.builds(lambda f, a: f"{f}({a})", _FUNCTIONS, children),
        st.builds(lambda a, n: f"({a})**{n}", children, st.integers(-100, 5000)),
        st.builds(lambda a: f"-{a}", children),
    )


arithmetic_texts = st.recursive(
    st.one_of(_LITERALS, st.sampled_from(_SYMBOL_NAMES)), _compose, max_leaves=24
)
"""Formulas and arithmetic, well-formed or not, with towers of powers and deep nesting."""

hostile_texts = st.one_of(
    st.sampled_from(HOSTILE_TEXTS),
    arithmetic_texts,
    st.builds(
        lambda n, u: f"{n} {u}",
        arithmetic_texts,
        st.sampled_from(["B", "MiB", "MB", "GiB", "k", "parsecs", "", "%", "percent", "MB."]),
    ),
    st.text(max_size=80),
    st.text(alphabet="0123456789.,e+-*/^() xBHM%~", max_size=120),
)
"""Text a careless or adversarial learner could write as an answer or a size."""

hostile_answers = st.one_of(
    hostile_texts,
    st.integers(-(10**700), 10**700),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.builds(lambda n: np.int64(n), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda x: np.float64(x), st.floats()),
    st.builds(lambda n: (sp.Symbol("B") + 1) ** n, st.integers(0, 5000)),
    st.builds(sp.Integer, st.integers(-(10**6000), 10**6000)),
    st.builds(Fraction, st.integers(-(10**6000), 10**6000), st.integers(1, 10**6000)),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.sampled_from([Decimal("sNaN"), Decimal("1e999999"), Decimal("9" * 6000), 3 + 4j]),
    st.builds(lambda x: np.float32(x), st.floats(width=32)),
    st.builds(np.bool_, st.booleans()),
)
"""Anything a notebook or an answer file could pass as an answer."""


def _toml_value(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are TOML basic-string escapes
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    return str(value)


@st.composite
def answer_file_texts(draw: st.DrawFn) -> bytes:
    """The bytes of an answer file: valid TOML with hostile values, broken TOML, or noise."""
    kind = draw(st.sampled_from(["toml", "toml", "toml", "broken", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "broken":
        return draw(st.text(max_size=200)).encode("utf-8", "surrogatepass")
    lines = []
    if draw(st.booleans()):
        learner = draw(
            st.sampled_from(["ada", "ADA ", '=HYPERLINK("x")', "+1", "-cmd", "@sum"])
            | st.sampled_from(["eve\x1b[2J\n", "bob\u202e"])
            | st.text(max_size=20)
        )
        lines.append(f"learner = {_toml_value(learner)}")
    if draw(st.booleans()):
        seed = draw(st.integers(-(10**30), 10**30) | st.text(max_size=8))
        lines.append(f"seed = {_toml_value(seed)}")
    if draw(st.booleans()):
        sets = draw(st.lists(st.sampled_from(["ch02", "ch03", "ch99", "CH2", ""]), max_size=3))
        lines.append(f"sets = [{', '.join(json.dumps(s) for s in sets)}]")
    lines.append("[answers]")
    ids = st.sampled_from(["ch02.q1", "ch02.q2", "ch02.q9", "ch03.q1", "ch03.q6", "ch99.q1", "x"])
    for exercise_id in draw(st.lists(ids, max_size=4, unique=True)):
        value = draw(hostile_texts | st.integers(-(10**30), 10**30) | st.floats())
        lines.append(f"{json.dumps(exercise_id)} = {_toml_value(value)}")
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


answer_folders = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "=d", "e\x1b", "f\n", "g.h"]).map(lambda n: n + ".toml")
        | st.sampled_from(["notes.txt", "grades.csv", "A.TOML"]),
        st.one_of(
            answer_file_texts(),
            st.sampled_from(["<fifo>", "<dev-zero>", "<link-out>", "<folder>", "<huge>"]),
        ),
    ),
    max_size=5,
    unique_by=lambda entry: entry[0],
)
"""A folder of submissions as (file name, bytes or a special entry) pairs."""
