"""Named misconceptions, each a way of recomputing an answer with one mistake in it.

Every misconception is a :class:`Misconception` with one or more *ways* the
mistake can show: each way is a :class:`~memtheory.exercises.reasoning.Reasoning`
that does one step wrong (builds convolutions without a bias, divides by
:math:`10^6` where the question said MiB, forgets the optimizer state...).
An exercise lists the misconceptions that apply to it; the grader reruns the
exercise's solver with each way, and when the learner's answer matches one of
those answers (and not the correct one) the feedback names the misconception.

Examples
--------
>>> from memtheory import Dense, Input
>>> layers = [Input((784,)), Dense(100)]
>>> way = MISCONCEPTIONS["forgot_bias"].ways[0]
>>> way.parameter_count(way.network(layers))
78400
>>> {"activations_per_image", "forgot_bias", "forgot_gradients"} <= set(MISCONCEPTIONS)
True
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, cast

import sympy as sp

from memtheory.conventions import Convention, ConventionLike, Model, RuleOfThumbConvention
from memtheory.counts import ModelCounts
from memtheory.errors import UnknownNameError
from memtheory.exercises.errors import ExerciseDefinitionError
from memtheory.exercises.reasoning import Reasoning
from memtheory.layers import AvgPool2d, Conv2d, Dense, Layer, MaxPool2d
from memtheory.layers.base import Shape
from memtheory.layers.conv import check_window_fits
from memtheory.layers.pooling import Pool2d
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.optimizers import OPTIMIZERS, Optimizer, OptimizerLike
from memtheory.precision import Precision, PrecisionLike
from memtheory.sliding_window import window_steps
from memtheory.units import unit_bytes

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "MISCONCEPTIONS",
    "SLIPS",
    "Misconception",
    "combine_ways",
    "misconception",
    "register",
    "rounded_window_count",
]


@dataclass(frozen=True)
class Misconception:
    """A named mistake and the ways to recompute an answer with it.

    Parameters
    ----------
    name : str
        Identifier used by exercises and in results (``"forgot_bias"``).
    title : str
        What the learner likely did, in words ("forgot the bias").
    hint : str
        What to do instead, for the feedback.
    ways : tuple of Reasoning
        The computations that show the mistake; several when it can show in
        more than one way (dividing by :math:`10^6` when reading a size or
        when writing the answer).
    source : str
        Where the mistake is seen in the source documents, if it is.

    Examples
    --------
    >>> MISCONCEPTIONS["forgot_x2"].title
    'forgot the x2 for activation gradients'
    """

    name: str
    title: str
    hint: str
    ways: tuple[Reasoning, ...]
    source: str = ""


def _rebuilt(layer: Layer, cls: type[Layer], **changes: object) -> Layer:
    concrete = cast("DataclassInstance", layer)  # every concrete layer is a dataclass
    values = {f.name: getattr(layer, f.name) for f in fields(concrete)}
    values.update(changes)
    return cls(**values)


# -- layers built with a mistake ---------------------------------------------------------
class _DepthlessConv2d(Conv2d):
    """A convolution whose filters are counted as k x k, ignoring the input channels."""

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """``out_channels * kh * kw``: the mistake."""
        self.check_input(input_shape)
        kh, kw = self._kernel_size()
        return self.out_channels * kh * kw


def rounded_window_count(
    size: sp.Expr | int,
    kernel: sp.Expr | int,
    stride: sp.Expr | int,
    padding: sp.Expr | int = 0,
    dilation: sp.Expr | int = 1,
) -> sp.Expr:
    """How many windows fit, rounded half up instead of floored: the mistake.

    Examples
    --------
    >>> rounded_window_count(25, 2, 2)
    13
    """
    return sp.floor(window_steps(size, kernel, stride, padding, dilation) + sp.Rational(3, 2))


class _RoundingPool(Pool2d):
    """Mixin: pooling output sizes rounded half up."""

    def output_shape(self, input_shape: Shape) -> Shape:
        """``(batch, channels, h_out, w_out)`` with rounded sizes."""
        self.check_input(input_shape)
        batch, channels, height, width = input_shape
        sizes = []
        for axis, size, k, s, p, d in zip(
            ("height", "width"),
            (height, width),
            self._kernel_size(),
            self._stride(),
            self._padding(),
            self._dilation(),
            strict=True,
        ):
            check_window_fits(self.label, axis, size, k, p, d, input_shape)
            sizes.append(rounded_window_count(size, k, s, p, d))
        return (batch, channels, *sizes)


class _RoundingMaxPool2d(_RoundingPool, MaxPool2d):
    """Max pooling with rounded output sizes."""


class _RoundingAvgPool2d(_RoundingPool, AvgPool2d):
    """Average pooling with rounded output sizes."""


# -- the ways ------------------------------------------------------------------------------
class _ForgotBias(Reasoning):
    detail = "every convolution and dense layer built with bias=False"

    def layer(self, layer: Layer) -> Layer:
        layer = super().layer(layer)
        if isinstance(layer, Conv2d | Dense) and layer.bias:
            return replace(layer, bias=False)
        return layer


class _ForgotInputDepth(Reasoning):
    def __init__(self, *, also_bias: bool = False) -> None:
        self.also_bias = also_bias
        self.detail = "each filter counted as k x k weights" + (
            ", and no bias" if also_bias else ", plus its bias"
        )

    def layer(self, layer: Layer) -> Layer:
        layer = super().layer(layer)
        if type(layer) is Conv2d:
            return _rebuilt(layer, _DepthlessConv2d, bias=layer.bias and not self.also_bias)
        return layer


class _IgnoredGroups(Reasoning):
    detail = "every convolution counted as if groups were 1"

    def layer(self, layer: Layer) -> Layer:
        layer = super().layer(layer)
        if isinstance(layer, Conv2d) and layer.groups != 1:
            return replace(layer, groups=1)
        return layer


class _RoundedPooling(Reasoning):
    detail = "pooled sizes rounded (12.5 -> 13) instead of floored (12.5 -> 12)"

    def layer(self, layer: Layer) -> Layer:
        layer = super().layer(layer)
        if type(layer) is MaxPool2d:
            return _rebuilt(layer, _RoundingMaxPool2d)
        if type(layer) is AvgPool2d:
            return _rebuilt(layer, _RoundingAvgPool2d)
        return layer

    def pool_output_size(
        self,
        size: sp.Expr | int,
        kernel: int,
        stride: int | None = None,
        padding: int = 0,
        dilation: int = 1,
    ) -> sp.Expr:
        return rounded_window_count(
            size, kernel, kernel if stride is None else stride, padding, dilation
        )


_TWINS = {"kB": "KiB", "MB": "MiB", "GB": "GiB", "TB": "TiB"}
_TWINS.update({binary: decimal for decimal, binary in list(_TWINS.items())})


class _UnitMixup(Reasoning):
    def __init__(self, *, reading: bool, writing: bool) -> None:
        self.reading, self.writing = reading, writing
        where = [
            w for w, on in (("read the given sizes", reading), ("wrote the answer", writing)) if on
        ]
        self.detail = f"swapped 10^3 and 2^10 steps when it {' and '.join(where)}"

    def unit_bytes(self, unit: str, *, reading: bool) -> int:
        if (reading and self.reading) or (not reading and self.writing):
            return unit_bytes(_TWINS.get(unit, unit))
        return super().unit_bytes(unit, reading=reading)


class _ParametersTimesBatch(Reasoning):
    def __init__(self, *, weights_only: bool = False) -> None:
        self.weights_only = weights_only
        self.detail = (
            "the weights multiplied by the batch size"
            if weights_only
            else "every parameter (and its gradient and optimizer state) counted once per sample"
        )

    def parameter_count(self, network: Network) -> sp.Expr:
        return super().parameter_count(network) * network.batch

    def counts(self, model: Model) -> ModelCounts:
        counts = super().counts(model)
        if self.weights_only:
            return counts
        return replace(counts, parameters=counts.parameters * counts.batch)

    def adjust(self, memory: MemoryBreakdown, counts: ModelCounts) -> MemoryBreakdown:
        memory = super().adjust(memory, counts)
        if not self.weights_only:
            return memory
        return _with(memory, parameters=memory["parameters"] * counts.batch)


def _with(memory: MemoryBreakdown, **components: sp.Expr) -> MemoryBreakdown:
    values = dict(memory.components)
    for name, value in components.items():
        if name in values:
            values[name] = value
    return replace(memory, components=values)


class _PerImageGradients(Reasoning):
    detail = "a parameter gradient kept for every sample of the batch"

    def adjust(self, memory: MemoryBreakdown, counts: ModelCounts) -> MemoryBreakdown:
        return _with(super().adjust(memory, counts), gradients=memory["gradients"] * counts.batch)


class _ForgotX2(Reasoning):
    detail = "activations counted once (no activation gradients)"

    def adjust(self, memory: MemoryBreakdown, counts: ModelCounts) -> MemoryBreakdown:
        return _with(super().adjust(memory, counts), activation_gradients=sp.Integer(0))


class _ActivationsPerImage(Reasoning):
    detail = "the activations of one sample, not multiplied by the batch"

    def activation_count(self, network: Network) -> sp.Expr:
        return super().activation_count(network) / network.batch

    def counts(self, model: Model) -> ModelCounts:
        counts = super().counts(model)
        return replace(counts, activations=counts.activations / counts.batch)


class _ForgotOptimizerState(Reasoning):
    detail = "no optimizer state counted"

    def optimizer(self, spec: OptimizerLike) -> Optimizer:
        return OPTIMIZERS["sgd"]

    def adjust(self, memory: MemoryBreakdown, counts: ModelCounts) -> MemoryBreakdown:
        return _with(super().adjust(memory, counts), optimizer_state=sp.Integer(0))


class _WrongOptimizerFactor(Reasoning):
    def __init__(self, states: int) -> None:
        self.states = states
        self.detail = (
            f"{states} optimizer state value(s) per parameter "
            f"(parameters counted x{states + 2} with the weights and gradients)"
        )

    def optimizer(self, spec: OptimizerLike) -> Optimizer:
        true = super().optimizer(spec)
        names = tuple(f"state_{i}" for i in range(self.states))
        return Optimizer(f"{true.name} (as {self.states} states)", true.title, names)

    def convention(self, spec: ConventionLike) -> Convention:
        chosen = super().convention(spec)
        if isinstance(chosen, RuleOfThumbConvention):
            return RuleOfThumbConvention(parameter_copies=self.states + 2)
        return chosen


class _ForgotGradients(Reasoning):
    detail = "no parameter gradients counted"

    def adjust(self, memory: MemoryBreakdown, counts: ModelCounts) -> MemoryBreakdown:
        return _with(super().adjust(memory, counts), gradients=sp.Integer(0))


class _ForgotMasterWeights(Reasoning):
    detail = "mixed precision without the fp32 master copy of the weights"

    def precision(self, spec: PrecisionLike) -> Precision:
        return replace(super().precision(spec), master_weights=None)


class _InputAsActivations(Reasoning):
    detail = "the input counted among the activations (so it also gets a gradient)"

    def activation_count(self, network: Network) -> sp.Expr:
        return super().activation_count(network) + network.input_elements

    def counts(self, model: Model) -> ModelCounts:
        counts = super().counts(model)
        return replace(counts, activations=counts.activations + counts.input_elements)


class _InputLeftOut(Reasoning):
    detail = "the input batch left out"

    def input_elements(self, network: Network) -> sp.Expr:
        return sp.Integer(0)

    def adjust(self, memory: MemoryBreakdown, counts: ModelCounts) -> MemoryBreakdown:
        return _with(super().adjust(memory, counts), input=sp.Integer(0))


MISCONCEPTIONS: dict[str, Misconception] = {
    m.name: m
    for m in (
        Misconception(
            "forgot_bias",
            "forgot the bias",
            "Each filter of a convolution and each unit of a dense layer has one bias: add "
            "out_channels (or units) parameters per layer.",
            (_ForgotBias(),),
        ),
        Misconception(
            "forgot_input_depth",
            "forgot that a filter spans every input channel",
            "A k x k filter covers all C_in input channels: it has k*k*C_in weights "
            "(k*k*C_in/groups "
            "when grouped), plus one bias.",
            (_ForgotInputDepth(), _ForgotInputDepth(also_bias=True)),
            source="the small-CNN StackExchange question (a 3x3 kernel on RGB is really 3x3x3)",
        ),
        Misconception(
            "ignored_groups",
            "ignored the groups of a grouped convolution",
            "With groups=g each filter sees only C_in/g input channels: divide the weights by g.",
            (_IgnoredGroups(),),
        ),
        Misconception(
            "round_in_pooling",
            "rounded a pooled size instead of flooring it",
            "A window that does not fit is dropped: the size is floor((n + 2p - k)/s) + 1, so a "
            "2x2/2 pool takes 25 to 12, not 13.",
            (_RoundedPooling(),),
            source="the small-CNN StackExchange answer (25 -> 12, not 12.5 or 13)",
        ),
        Misconception(
            "mib_vs_mb",
            "mixed up MiB (2^20 bytes) and MB (10^6 bytes)",
            "kB, MB, GB step by 1000 and KiB, MiB, GiB by 1024: divide by 2^20 for MiB and by "
            "10^6 for MB, and read a size in the unit it is given in.",
            (
                _UnitMixup(reading=False, writing=True),
                _UnitMixup(reading=True, writing=False),
                _UnitMixup(reading=True, writing=True),
            ),
            source="the training-memory StackExchange answer (divides by 1024^2 and writes MB)",
        ),
        Misconception(
            "parameters_times_batch",
            "multiplied the parameters by the batch size",
            "The weights, their gradients and the optimizer state exist once, whatever the batch; "
            "only the activations (and their gradients) and the input grow with it.",
            (_ParametersTimesBatch(), _ParametersTimesBatch(weights_only=True)),
        ),
        Misconception(
            "per_image_gradients",
            "kept a parameter gradient for every image",
            "Parameter gradients are summed over the batch into one gradient per parameter; the "
            "per-image gradients are those of the activations, already counted by the x2.",
            (_PerImageGradients(),),
            source="the training-memory StackExchange question",
        ),
        Misconception(
            "forgot_x2",
            "forgot the x2 for activation gradients",
            "The backward pass keeps every forward activation and produces a gradient of the same "
            "size for it: count activations twice when training.",
            (_ForgotX2(),),
        ),
        Misconception(
            "activations_per_image",
            "counted the activations of one image, not of the batch",
            "Every sample of the batch has its own activations: multiply the per-image count by "
            "the batch size.",
            (_ActivationsPerImage(),),
            source="the training-memory StackExchange question (2.03 MB for a batch of 128)",
        ),
        Misconception(
            "forgot_optimizer_state",
            "forgot the optimizer state",
            "SGD with momentum keeps one value per parameter, RMSprop one, Adam two: count them "
            "as parameter-sized buffers.",
            (_ForgotOptimizerState(),),
        ),
        Misconception(
            "wrong_optimizer_factor",
            "used the wrong number of optimizer states",
            "Count the optimizer's own state: SGD none, momentum 1, RMSprop 1, Adam 2 values per "
            "parameter. The x3 rule fits momentum only; Adam makes it x4.",
            (_WrongOptimizerFactor(1), _WrongOptimizerFactor(2), _WrongOptimizerFactor(3)),
        ),
        Misconception(
            "forgot_gradients",
            "forgot the parameter gradients",
            "Training keeps one gradient per parameter besides the weights and the optimizer "
            "state.",
            (_ForgotGradients(),),
            source="the forum thread on a fully connected net with Adam ('Adam triples the "
            "weights')",
        ),
        Misconception(
            "forgot_master_weights",
            "forgot the fp32 master weights of mixed precision",
            "Mixed precision keeps an fp32 copy of the weights for the update besides the fp16 or "
            "bf16 ones: 4 more bytes per parameter.",
            (_ForgotMasterWeights(),),
        ),
        Misconception(
            "input_as_activations",
            "counted the input as an activation",
            "Activations are the outputs the layers compute; the input batch is counted once, on "
            "its own, and needs no gradient.",
            (_InputAsActivations(),),
        ),
        Misconception(
            "input_left_out",
            "left the input batch out",
            "The input batch sits in memory during the step: count its elements once.",
            (_InputLeftOut(),),
        ),
    )
}
"""Every misconception the grader can recognise, by name."""


SLIPS: dict[str, Misconception] = {
    m.name: m
    for m in (
        Misconception(
            "unit_label_swapped",
            "wrote the right figure under the wrong unit's label",
            "MB is 10^6 bytes and MiB is 2^20: a figure divided by 2^20 is in MiB, one divided "
            "by 10^6 is in MB. Label the number with the unit you divided by.",
            (),
            source="the training-memory StackExchange answer (divides by 1024^2 and writes MB)",
        ),
        Misconception(
            "bare_bytes",
            "gave bytes without a unit",
            "A number alone is read in the question's unit: divide the bytes by the unit "
            "(2^20 for MiB, 10^6 for MB), or write B after them.",
            (),
        ),
        Misconception(
            "size_for_count",
            "gave a size in bytes where a count was asked",
            "This question counts things (parameters, values, activations), not the bytes they "
            "take: give the count alone or with what it counts (78500 parameters).",
            (),
        ),
        Misconception(
            "count_for_size",
            "gave a count of things where bytes were asked",
            "This question asks for bytes: multiply the count by the bytes each value takes "
            "(4 in fp32, 2 in fp16 or bf16, 1 in int8), and write the bytes alone or with a "
            "byte unit.",
            (),
        ),
        Misconception(
            "fraction_for_percent",
            "gave a fraction where a percentage was asked",
            "A percentage is the fraction times 100: 0.9968 is 99.68%.",
            (),
        ),
        Misconception(
            "percent_for_fraction",
            "gave a percentage where a plain number was asked",
            "This question asks for the number itself: 99.68% is 0.9968 (or write the % sign).",
            (),
        ),
    )
}
"""Slips in how an answer is written rather than computed, recognised on every exercise of the
kind they concern (sizes, percentages, counts) without being listed: each is a second reading of
what the learner wrote (see :meth:`memtheory.exercises.kinds.AnswerKind.readings`), or, for a
count written with a unit of the wrong kind, the slip a
:class:`~memtheory.exercises.errors.UnitMixupError` names."""


def combine_ways(first: Reasoning, second: Reasoning) -> Reasoning | None:
    """One reasoning that makes both mistakes, or ``None`` where they cannot be combined.

    Every way overrides its steps cooperatively (it calls ``super()`` and then
    changes the result), so a class deriving from both applies both changes.

    Examples
    --------
    >>> from memtheory import Dense, Input
    >>> bias, batch = MISCONCEPTIONS["forgot_bias"].ways[0], MISCONCEPTIONS[
    ...     "parameters_times_batch"].ways[0]
    >>> both = combine_ways(bias, batch)
    >>> both.parameter_count(both.network([Input((784,)), Dense(100)]))
    78400*B
    >>> both.detail
    'every convolution and dense layer built with bias=False; and every parameter (and its ...'
    """
    classes = (type(first), type(second))
    if (
        classes[0] is classes[1]
        or issubclass(classes[0], classes[1])
        or issubclass(classes[1], classes[0])
    ):
        return None
    try:
        cls: type[Reasoning] = type(f"{classes[0].__name__}With{classes[1].__name__}", classes, {})
    except TypeError:  # pragma: no cover - no two ways have conflicting layouts
        return None
    combined = object.__new__(cls)
    combined.__dict__.update(second.__dict__)
    combined.__dict__.update(first.__dict__)
    combined.detail = f"{first.detail}; and {second.detail}"
    return combined


def register(entries: tuple[Misconception, ...]) -> None:
    """Add ``entries`` to :data:`MISCONCEPTIONS`, refusing a name already defined differently.

    The later chapters' step modules call it on import.

    Examples
    --------
    >>> register((MISCONCEPTIONS["forgot_bias"],))  # the same entry again: accepted
    """
    for entry in entries:
        known = MISCONCEPTIONS.get(entry.name)
        if known is not None and known.title != entry.title:
            raise ExerciseDefinitionError(
                f"misconception {entry.name!r} is already defined differently; rename one."
            )
        MISCONCEPTIONS[entry.name] = entry


def misconception(name: str) -> Misconception:
    """Look up a misconception (or a slip of :data:`SLIPS`) by name.

    Examples
    --------
    >>> misconception("per_image_gradients").title
    'kept a parameter gradient for every image'
    >>> misconception("bare_bytes").title
    'gave bytes without a unit'
    >>> misconception("typo")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownNameError: no misconception 'typo'; known: activations_per_image, ...
    """
    found = MISCONCEPTIONS.get(name) or SLIPS.get(name)
    if found is None:
        known = sorted({*MISCONCEPTIONS, *SLIPS})
        raise UnknownNameError(f"no misconception {name!r}; known: {', '.join(known)}")
    return found
