"""Random small graph networks, built twice: as a memtheory Network and as a PyTorch module.

Two kinds: image graphs (:func:`graph_specs`: convolutions, residual and
concatenation blocks) and sequence graphs (:func:`sequence_specs`: pre-norm
residual blocks of ``nn.MultiheadAttention`` or an MLP, LayerNorm or
``nn.RMSNorm``, dropout, a class-token head), each ending with one of the losses.

A spec is a list of steps over named tensors. :func:`build` turns it into the
memtheory layers (with :class:`~memtheory.network.Node` wiring) and into a
``GraphModule`` whose ``forward()`` runs the same steps in order and drops
each tensor after its last use, as a hand-written forward with ``del`` would,
except a block's input: as in a block written as a function (torchvision's
``identity = x``), it stays alive until the merge that ends the block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st
from torch import nn

import memtheory as mt
from memtheory.network import Node

__all__ = ["LOSSES", "GraphModule", "GraphSpec", "build", "graph_specs", "sequence_specs"]

LOSSES = {
    "cross_entropy": (mt.CrossEntropyLoss, nn.CrossEntropyLoss),
    "mse": (mt.layers.MSELoss, nn.MSELoss),
    "l1": (mt.layers.L1Loss, nn.L1Loss),
    "bce": (mt.layers.BCEWithLogitsLoss, nn.BCEWithLogitsLoss),
}
"""The memtheory layer and the PyTorch module of each loss a spec can end with."""


@dataclass
class GraphSpec:
    """Input shape, steps ``(name, kind, options, inputs)``, and the loss."""

    batch: int
    channels: int
    side: int
    steps: list[tuple[str, str, dict[str, Any], tuple[str, ...]]] = field(default_factory=list)
    loss: str = "cross_entropy"
    classes: int = 3
    sequence: bool = False
    """The input is ``(batch, side, channels)``: ``side`` positions of ``channels`` features."""

    def input_shape(self) -> tuple[int, ...]:
        """The input batch's shape."""
        if self.sequence:
            return (self.batch, self.side, self.channels)
        return (self.batch, self.channels, self.side, self.side)


class GraphModule(nn.Module):
    """Runs the spec's steps; each tensor is dropped after its last reader."""

    def __init__(self, spec: GraphSpec, modules: dict[str, nn.Module]) -> None:
        super().__init__()
        self.spec = spec
        self.layers = nn.ModuleDict(modules)
        uses: dict[str, int] = {}
        for _, _, options, inputs in spec.steps:
            for name in _reads(options, inputs):
                uses[name] = uses.get(name, 0) + 1
        self.uses = uses

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        env = {"x": x}
        left = dict(self.uses)
        out = x
        for name, kind, options, inputs in self.spec.steps:
            args = [env[i] for i in inputs]
            if kind == "add":
                out = args[0].add_(args[1]) if options["inplace"] else args[0] + args[1]
            elif kind == "cat":
                out = torch.cat(args, dim=1)
            else:
                out = self.layers[name](args[0])
            del args
            for i in _reads(options, inputs):  # the step has run: drop what nothing reads later
                left[i] -= 1
                if left[i] == 0:
                    del env[i]
            env[name] = out
        return out


def _reads(options: dict[str, Any], inputs: tuple[str, ...]) -> tuple[str, ...]:
    """The step's inputs, and the input of the block it ends (held until then)."""
    block = options.get("block_input")
    return (*inputs, block) if block else inputs


_SAME_WIDTH: dict[str, tuple[Any, Any]] = {
    "bn": (lambda name: mt.BatchNorm2d(name=name), nn.BatchNorm2d),
    "gelu": (lambda name: mt.layers.GELU(name=name), lambda _: nn.GELU()),
    "silu": (lambda name: mt.layers.SiLU(name=name), lambda _: nn.SiLU()),
    "relu6": (lambda name: mt.layers.ReLU6(name=name), lambda _: nn.ReLU6()),
}
"""Steps without options that keep the width: (memtheory layer, PyTorch module of the width)."""


def _layer(kind: str, options: dict[str, Any], name: str, channels: int):
    """The memtheory layer and the PyTorch module of one step."""
    if kind == "conv":
        groups = channels if options["depthwise"] else 1
        out = channels if options["depthwise"] else options["out"]
        return (
            mt.Conv2d(out, options["k"], stride=options["stride"], padding=options["k"] // 2,
                      groups=groups, bias=options["bias"], name=name),
            nn.Conv2d(channels, out, options["k"], stride=options["stride"],
                      padding=options["k"] // 2, groups=groups, bias=options["bias"]),
            out,
        )
    if kind in _SAME_WIDTH:
        ours, theirs = _SAME_WIDTH[kind]
        return ours(name=name), theirs(channels), channels
    if kind == "relu":
        return mt.ReLU(inplace=options["inplace"], name=name), nn.ReLU(options["inplace"]), channels
    if kind == "dropout":
        return mt.Dropout(options["p"], device="cpu", name=name), nn.Dropout(options["p"]), channels
    if kind == "linear":
        return (mt.Dense(options["out"], name=name), nn.Linear(channels, options["out"]),
                options["out"])
    if kind == "ln":
        return mt.LayerNorm(name=name), nn.LayerNorm(channels), channels
    if kind == "rms":
        return mt.layers.RMSNorm(implementation="torch", name=name), nn.RMSNorm(channels), channels
    if kind == "attn":
        return (
            mt.MultiHeadAttention(options["heads"], dropout=options["p"], implementation="torch",
                                  device="cpu", name=name),
            _SelfAttention(channels, options["heads"], options["p"]),
            channels,
        )
    if kind == "maxpool":
        return mt.MaxPool2d(2, name=name), nn.MaxPool2d(2), channels
    if kind == "gap":
        return mt.layers.AdaptiveAvgPool2d(options["size"], name=name), nn.AdaptiveAvgPool2d(
            options["size"]), channels
    raise AssertionError(kind)


class _SelfAttention(nn.MultiheadAttention):
    """``nn.MultiheadAttention`` (batch first) as self-attention, returning its output."""

    def __init__(self, width: int, heads: int, p: float) -> None:
        super().__init__(width, heads, dropout=p, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]  # noqa: D102
        return super().forward(x, x, x, need_weights=False)[0]


class _ClassTokenHead(nn.Module):
    """``linear(x[:, 0])``: the first position's features to the classes."""

    def __init__(self, width: int, classes: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.linear(x[:, 0])


def build(spec: GraphSpec) -> tuple[mt.Network, GraphModule]:
    """Return the memtheory Network and the PyTorch module of ``spec``."""
    layers: list[Any] = [mt.Input(spec.input_shape()[1:], batch=spec.batch, name="x")]
    modules: dict[str, nn.Module] = {}
    channels = {"x": spec.channels}
    side = {"x": spec.side}
    for name, kind, options, inputs in spec.steps:
        if kind == "add":
            layers.append(Node(mt.Add(inplace=options["inplace"], name=name), inputs=inputs))
            channels[name], side[name] = channels[inputs[0]], side[inputs[0]]
            continue
        if kind == "cat":
            layers.append(Node(mt.Concat(name=name), inputs=inputs))
            channels[name] = sum(channels[i] for i in inputs)
            side[name] = side[inputs[0]]
            continue
        if kind == "head" and spec.sequence:
            layers.append(Node(mt.layers.SelectToken(0, name=f"{name}.select"), inputs=inputs))
            layers.append(mt.Dense(spec.classes, name=name))
            modules[name] = _ClassTokenHead(channels[inputs[0]], spec.classes)
            channels[name], side[name] = spec.classes, 1
            continue
        if kind == "head":
            flat = channels[inputs[0]] * side[inputs[0]] ** 2
            layers.append(Node(mt.Flatten(name=f"{name}.flatten"), inputs=inputs))
            layers.append(mt.Dense(spec.classes, name=name))
            modules[name] = nn.Sequential(nn.Flatten(), nn.Linear(flat, spec.classes))
            channels[name], side[name] = spec.classes, 1
            continue
        ours, theirs, out = _layer(kind, options, name, channels[inputs[0]])
        layers.append(Node(ours, inputs=inputs))
        modules[name] = theirs
        channels[name] = out
        s = side[inputs[0]]
        if kind == "conv":
            s = (s + 2 * (options["k"] // 2) - options["k"]) // options["stride"] + 1
        elif kind == "maxpool":
            s = s // 2
        elif kind == "gap":
            s = options["size"]
        side[name] = s
    layers.append(LOSSES[spec.loss][0](name="loss"))
    return mt.Network(layers, name="graph"), GraphModule(spec, modules)


@st.composite
def graph_specs(draw: st.DrawFn, max_blocks: int = 3) -> GraphSpec:
    """Draw a small graph: a stem, residual / concat / two-consumer blocks, then a head."""
    spec = GraphSpec(draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(4, 7)))
    steps = spec.steps
    count = iter(range(1000))
    current = "x"
    width = {"x": spec.channels}

    def add(kind: str, options: dict[str, Any], inputs: tuple[str, ...], ch: int) -> str:
        name = f"{kind}{next(count)}"
        steps.append((name, kind, options, inputs))
        width[name] = ch
        return name

    def conv(source: str, out: int, k: int = 3, stride: int = 1, depthwise: bool = False) -> str:
        ch = width[source] if depthwise else out
        return add("conv", {"out": out, "k": k, "stride": stride, "depthwise": depthwise,
                            "bias": draw(st.booleans())}, (source,), ch)

    current = conv(current, draw(st.integers(1, 4)))
    for _ in range(draw(st.integers(1, max_blocks))):
        block = draw(st.sampled_from(("residual", "concat", "dense", "shared", "plain")))
        ch = width[current]
        if block == "residual":
            out = draw(st.sampled_from((ch, ch + 1)))
            h = conv(current, out)
            h = add("bn", {}, (h,), out)
            h = add("relu", {"inplace": draw(st.booleans())}, (h,), out)
            h = conv(h, out, depthwise=draw(st.booleans()))
            h = add("bn", {}, (h,), out)
            shortcut = current
            if out != ch or draw(st.booleans()):
                shortcut = conv(current, out, k=1)
                shortcut = add("bn", {}, (shortcut,), out)
            h = add("add", {"inplace": draw(st.booleans()), "block_input": current},
                    (h, shortcut), out)
            current = add("relu", {"inplace": True}, (h,), out)
        elif block == "concat":
            a = conv(current, draw(st.integers(1, 3)), k=1)
            b = conv(current, draw(st.integers(1, 3)))
            b = add(draw(st.sampled_from(("gelu", "silu", "relu6"))), {}, (b,), width[b])
            current = add("cat", {"block_input": current}, (a, b), width[a] + width[b])
        elif block == "dense":  # DenseNet-style: the input itself is concatenated
            b = conv(current, draw(st.integers(1, 3)))
            inputs = (current, b) if draw(st.booleans()) else (b, current)
            current = add("cat", {}, inputs, ch + width[b])
        elif block == "shared":
            a = conv(current, ch)
            b = conv(current, ch, k=1)
            current = add("add", {"inplace": False, "block_input": current}, (a, b), ch)
        else:
            kind = draw(st.sampled_from(("dropout", "maxpool", "bn", "relu")))
            options = {"p": 0.5, "inplace": False}
            if kind == "maxpool" and spec.side < 6:
                kind = "dropout"
            current = add(kind, options, (current,), ch)
    if draw(st.booleans()):
        current = add("gap", {"size": draw(st.integers(1, 2))}, (current,), width[current])
    if draw(st.booleans()):
        current = add("dropout", {"p": 0.3}, (current,), width[current])
    steps.append(("head", "head", {}, (current,)))
    spec.loss = draw(st.sampled_from(sorted(LOSSES)))
    return spec


@st.composite
def sequence_specs(draw: st.DrawFn, max_blocks: int = 2) -> GraphSpec:
    """Draw a small sequence graph: a projection, pre-norm residual blocks, a token head.

    Blocks: ``x + drop(attn(norm(x)))`` (``nn.MultiheadAttention`` without
    attention dropout: the CPU flash path, whose backward the convention follows
    node by node; its math path, with attention dropout, runs as one node whose
    transients are a known gap, ``test_graphs.py``), ``x + fc2(gelu(fc1(norm(x))))``,
    or a lone dropout or norm; the norms are LayerNorm or ``nn.RMSNorm``. At
    least two sequences of at least two positions (the attention formulas'
    stated range).
    """
    heads = draw(st.sampled_from((1, 2)))
    width = heads * draw(st.sampled_from((2, 4)))
    spec = GraphSpec(draw(st.integers(2, 3)), width, draw(st.integers(2, 5)), sequence=True)
    steps = spec.steps
    count = iter(range(1000))

    def add(kind: str, options: dict[str, Any], inputs: tuple[str, ...]) -> str:
        name = f"{kind}{next(count)}"
        steps.append((name, kind, options, inputs))
        return name

    def norm(source: str) -> str:
        return add(draw(st.sampled_from(("ln", "rms"))), {}, (source,))

    current = add("linear", {"out": width}, ("x",))  # the norms then read a tensor with a grad
    for _ in range(draw(st.integers(1, max_blocks))):
        block = draw(st.sampled_from(("attention", "mlp", "plain")))
        if block == "attention":
            h = add("attn", {"heads": heads, "p": 0.0}, (norm(current),))
            if draw(st.booleans()):
                h = add("dropout", {"p": 0.25}, (h,))
            current = add("add", {"inplace": False, "block_input": current}, (h, current))
        elif block == "mlp":
            h = add("linear", {"out": 2 * width}, (norm(current),))
            h = add("gelu", {}, (h,))
            h = add("linear", {"out": width}, (h,))
            current = add("add", {"inplace": False, "block_input": current}, (current, h))
        else:
            kind = draw(st.sampled_from(("dropout", "ln", "rms")))
            current = add(kind, {"p": 0.25}, (current,))
    steps.append(("head", "head", {}, (current,)))
    spec.loss = draw(st.sampled_from(sorted(LOSSES)))
    return spec
