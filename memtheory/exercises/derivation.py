r"""Worked solutions: the steps of the computation that grades an exercise, recorded as it runs.

A :class:`Recorder` is the correct :class:`~memtheory.exercises.reasoning.Reasoning`
that writes down each step it takes: the network's parameters layer by layer,
the activations, a pooled size with its floor, the optimizer and precision,
each memory component as elements x bytes, a substitution, a unit
conversion. :func:`derive` runs an exercise's own solver with a recorder and
ends with the answer that solver gives, so a worked solution cannot disagree
with the grade: it is the grading computation, written out. The recorder also
keeps the kinds of step taken, and a solution names the book's section that
teaches each (:data:`~memtheory.exercises.sections.STEP_SECTIONS`).

Steps the sets take outside ``how`` (a substitution with
:func:`~memtheory.exercises.numeric.at`, the techniques of
:mod:`~memtheory.exercises.technique_steps`) are recorded through
:func:`note`, which does nothing unless a recorder is running.

Examples
--------
>>> from memtheory.exercises.loader import find_variant
>>> variant = find_variant("ch02.q1")
>>> print("\n".join(derive(variant).lines))
Uses, from the book (where each step is taught):
  Chapter 2, "Dense layers" (chapters/02_counting_parameters.html#dense-layers)
  Chapter 2, "A whole network" (chapters/02_counting_parameters.html#a-whole-network)
Output shapes, layer by layer:
  input: (64, 784)
  dense_1: (64, 100)
Parameters, layer by layer (weights + biases):
  dense_1: 78,400 + 100 = 78,500
  total: 78,500
Answer: 78,500
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

import sympy as sp

from memtheory.conventions import Convention, ConventionLike, Model
from memtheory.dtypes import DType, DTypeLike, dtype
from memtheory.exercises.errors import ExerciseDefinitionError
from memtheory.exercises.numeric import decimal_text
from memtheory.exercises.reasoning import Reasoning
from memtheory.exercises.sections import Section, sections_for
from memtheory.exercises.step_log import active, note, note_lines, recording, shown
from memtheory.layers import Layer
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.optimizers import Optimizer, OptimizerLike
from memtheory.precision import Precision, PrecisionLike, precision
from memtheory.sliding_window import collapse_rounding
from memtheory.units import unit_bytes

if TYPE_CHECKING:
    from memtheory.exercises.model import Variant

__all__ = [
    "Derivation",
    "Recorder",
    "derive",
    "memory_lines",
    "note",
    "note_lines",
    "note_memory",
    "note_tensors",
    "quantity_text",
    "shown",
]


F = TypeVar("F", bound=Callable[..., Any])


def _trimmed(text: str) -> str:
    return text.rstrip("0").rstrip(".") if "." in text else text


def quantity_text(value: object) -> str:
    """Write a number or a formula for a worked solution: commas, seven digits, or the formula.

    Examples
    --------
    >>> quantity_text(4632902), quantity_text(sp.Rational(1, 3)), quantity_text("x")
    ('4,632,902', '0.3333333', 'x')
    """
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (sp.Basic, float)):
        expr = sp.sympify(value)
        if expr.is_Integer:
            return f"{int(expr):,}"
        if expr.is_Rational:
            return _trimmed(decimal_text(expr, 7))
        if expr.is_number and expr.is_real:
            return _trimmed(decimal_text(sp.Rational(str(sp.N(expr, 15))), 7))
        return sp.sstr(expr)
    return str(value)


def _dtype_of(spec: Any, default: DType) -> DType:
    found = getattr(spec, "dtype", None)
    return found if found is not None else default


def note_tensors(title: str, specs: Sequence[Any], default: DTypeLike) -> None:
    """Record tensors (:class:`~memtheory.layers.base.TensorSpec`) as shape -> elements -> bytes.

    Parameters
    ----------
    title : str
        What the tensors are (``"Buffers of BatchNorm2d"``).
    specs : sequence of TensorSpec
    default : dtype-like
        The dtype of a tensor that names none.

    Examples
    --------
    >>> note_tensors("Nothing is recording", (), "fp32")
    """
    if active() is None:
        return
    chosen = dtype(default)
    lines, total = [f"{title}, tensor by tensor (elements x bytes per element):"], sp.Integer(0)
    for spec in specs:
        kind = _dtype_of(spec, chosen)
        count = sp.Mul(*spec.shape)
        nbytes = count * kind.bytes
        total += nbytes
        shape = "(" + ", ".join(sp.sstr(d) for d in spec.shape) + ")"
        name = spec.label or spec.role
        lines.append(
            f"  {name} {shape}: {quantity_text(count)} x {kind.bytes} ({kind.name})"
            f" = {quantity_text(nbytes)} bytes"
        )
    lines.append(f"  total: {quantity_text(total)} bytes")
    note_lines(lines)


def memory_lines(memory: MemoryBreakdown, what: str) -> list[str]:
    """Write a memory breakdown component by component (elements x bytes), then its total or peak.

    With a timeline, the last line is the peak: the most bytes alive at once,
    and the moment of the step it is reached.

    Examples
    --------
    >>> from memtheory import ModelCounts, training_memory
    >>> counts = ModelCounts.per_sample(parameters=10, activations=3, input_elements=1)
    >>> memory = training_memory(counts, optimizer="sgd").evaluate(B=1)
    >>> for line in memory_lines(memory, "Step"):
    ...     print(line)
    Step (breakdown convention), component by component:
      parameters: 10 elements x 4 bytes (fp32) = 40 bytes
      gradients: 10 elements x 4 bytes (fp32) = 40 bytes
      activations: 3 elements x 4 bytes (fp32) = 12 bytes
      activation_gradients: 3 elements x 4 bytes (fp32) = 12 bytes
      input: 1 elements x 4 bytes (fp32) = 4 bytes
      total: 108 bytes
    """
    lines = [f"{what} ({memory.convention} convention), component by component:"]
    for name, nbytes in memory.components.items():
        if not nbytes:
            continue
        kind = getattr(memory.precision, name, None)
        size = getattr(kind, "bytes", None)
        if kind is not None and size:
            elements = sp.sympify(nbytes) / size
            lines.append(
                f"  {name}: {quantity_text(elements)} elements x {size} bytes ({kind.name})"
                f" = {quantity_text(nbytes)} bytes"
            )
        else:
            lines.append(f"  {name}: {quantity_text(nbytes)} bytes")
    lines.append(f"  total: {quantity_text(memory.total)} bytes")
    if memory.timeline:
        lines += _timeline_lines(memory)
    return lines


def _timeline_lines(memory: MemoryBreakdown) -> list[str]:
    peak = memory.peak
    moment = memory.peak_moment if sp.sympify(peak).is_number else None
    moments = len(memory.timeline)
    if moment is None:
        return [f"  peak: the most bytes alive at once ({moments} moments) = {quantity_text(peak)}"]
    firsts = list(memory.timeline.items())[:2]
    lines = [
        "  Not all of it is alive at once; walk the step, adding each tensor as it is made and "
        "dropping it when freed:",
        *(f"    {label}: {quantity_text(value)} bytes alive" for label, value in firsts),
        f"    ... {moments} moments in all; the most bytes alive at once are at {moment}",
        f"  peak: {quantity_text(peak)} bytes",
    ]
    return lines


def note_memory(what: str, memory: MemoryBreakdown) -> None:
    """Record a memory breakdown as :func:`memory_lines` writes it, if a recorder is running.

    Examples
    --------
    >>> from memtheory import ModelCounts, training_memory
    >>> counts = ModelCounts.per_sample(parameters=1, activations=1, input_elements=1)
    >>> note_memory("Nothing is recording", training_memory(counts, optimizer="sgd"))
    """
    if active() is not None:
        note_lines(memory_lines(memory, what))


def _step(method: F) -> F:
    """Run a reasoning step; record it (through ``_record_<name>``) when it is not nested."""
    name = method.__name__

    @wraps(method)
    def recorded(self: Recorder, *args: Any, **kwargs: Any) -> Any:
        self._depth += 1
        try:
            result = method(self, *args, **kwargs)
        finally:
            self._depth -= 1
        self.took(name)  # nested or not: the solution names the section teaching it
        if not self._depth:
            writer = getattr(self, f"_record_{name}")
            lines = tuple(writer(result, *args, **kwargs))
            if len(lines) > 2 and lines in self._written:  # the same block again: say so
                lines = (f"{lines[0]} as above", lines[-1])
            self._written.add(lines)
            self.steps.extend(lines)
        return result

    return recorded  # type: ignore[return-value]


class Recorder(Reasoning):
    """The correct reasoning, writing down the steps it takes in :attr:`steps`.

    Every step gives the correct result (it is :class:`Reasoning`'s own); a
    step that another step calls is not written twice.

    Examples
    --------
    >>> from memtheory import Dense, Input
    >>> how = Recorder()
    >>> how.in_unit(3 * 2**20, "MiB")
    3
    >>> how.steps
    ['In MiB: 3,145,728 bytes / 1,048,576 bytes per MiB = 3 MiB']
    """

    detail = "computed correctly, step by step"

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.kinds: list[str] = []
        self._depth = 0
        self._written: set[tuple[str, ...]] = set()

    def took(self, kind: str) -> None:
        """Keep the kind of a step taken (:func:`~.step_log.took`), once.

        Examples
        --------
        >>> how = Recorder()
        >>> how.took("zero_stage"); how.took("zero_stage")
        >>> how.kinds
        ['zero_stage']
        """
        if kind and kind not in self.kinds:
            self.kinds.append(kind)

    def noted(self, text: str, value: object = None) -> None:
        """Write down a step a solver took outside this reasoning (:func:`~.step_log.note`).

        A step taken inside one of this reasoning's own steps is not written, and
        the same line is not written twice in a row.

        Examples
        --------
        >>> how = Recorder()
        >>> how.noted("Batch", 64)
        >>> how.steps
        ['Batch = 64']
        """
        if self._depth:
            return
        line = text if value is None else f"{text} = {quantity_text(value)}"
        if not self.steps or self.steps[-1] != line:
            self.steps.append(line)

    def noted_lines(self, lines: Sequence[str]) -> None:
        """Write down a block of steps (:func:`~.step_log.note_lines`), unless nested.

        Examples
        --------
        >>> how = Recorder()
        >>> how.noted_lines(["Heading:", "  one line"])
        >>> how.steps
        ['Heading:', '  one line']
        """
        if not self._depth:
            self.steps.extend(lines)

    # -- the steps, run as the correct reasoning runs them ---------------------------------
    @_step
    def network(self, layers: Sequence[Layer], *, name: str = "network") -> Network:
        """Build a network from ``layers``."""
        built = super().network(layers, name=name)
        if any(hasattr(row.layer, "kernel_size") for row in built.rows):
            self.took("output_size")  # a convolution or a pooling: the output-size formula
        return built

    def precision(self, spec: PrecisionLike) -> Precision:
        """Choose the dtype of each component; keep which precision recipe it is."""
        chosen = super().precision(spec)
        self.took(_precision_kind(chosen))
        return chosen

    def convention(self, spec: ConventionLike) -> Convention:
        """Look up the accounting convention; keep which one it is."""
        chosen = super().convention(spec)
        self.took(f"convention_{chosen.name}")
        return chosen

    @_step
    def parameter_count(self, network: Network) -> sp.Expr:
        """Trainable parameters of ``network``; keep which kinds of layer hold them."""
        for row in network.rows:
            if row.weights:
                self.took(f"parameters_{type(row.layer).__name__}")
        return super().parameter_count(network)

    @_step
    def activation_count(self, network: Network) -> sp.Expr:
        """Activation elements the forward pass keeps."""
        return super().activation_count(network)

    @_step
    def input_elements(self, network: Network) -> sp.Expr:
        """Elements of the input batch."""
        return super().input_elements(network)

    @_step
    def pool_output_size(
        self,
        size: sp.Expr | int,
        kernel: int,
        stride: int | None = None,
        padding: int = 0,
        dilation: int = 1,
    ) -> sp.Expr:
        """Output size of a pooling window along one dimension (floor)."""
        return super().pool_output_size(size, kernel, stride, padding, dilation)

    @_step
    def optimizer(self, spec: OptimizerLike) -> Optimizer:
        """Look up the optimizer."""
        return super().optimizer(spec)

    @_step
    def training_memory(
        self,
        model: Model,
        *,
        optimizer: OptimizerLike | None = None,
        precision: PrecisionLike = "fp32",
        convention: ConventionLike = "breakdown",
    ) -> MemoryBreakdown:
        """Memory of a training step by component."""
        return super().training_memory(
            model, optimizer=optimizer, precision=precision, convention=convention
        )

    @_step
    def inference_memory(
        self, model: Model, *, precision: PrecisionLike = "fp32"
    ) -> MemoryBreakdown:
        """Memory of a forward pass by component; keep whether it counts activations."""
        memory = super().inference_memory(model, precision=precision)
        self.took("forward_pass" if memory["activations"] else "memory_consumers")
        return memory

    @_step
    def to_bytes(self, value: sp.Expr | int | str, unit: str) -> sp.Expr:
        """Bytes in a size given in the question."""
        return super().to_bytes(value, unit)

    @_step
    def in_unit(self, nbytes: sp.Expr | int, unit: str) -> sp.Expr:
        """Write a byte count in ``unit``."""
        return super().in_unit(nbytes, unit)

    # -- how each step is written ----------------------------------------------------------
    def _record_network(self, result: Network, layers: object, **options: Any) -> list[str]:
        lines = ["Output shapes, layer by layer:"]
        for row in result.rows:
            shape = f"  {row.layer.name}: ({', '.join(sp.sstr(d) for d in row.output_shape)})"
            window = _window_text(row.layer, row.input_shape, row.output_shape)
            lines.append(f"{shape}; height {window}" if window else shape)
        return lines

    def _record_parameter_count(self, result: sp.Expr, network: Network) -> list[str]:
        lines = ["Parameters, layer by layer (weights + biases):"]
        for row in network.rows:
            if row.weights or row.biases:
                total = sp.sympify(row.weights) + sp.sympify(row.biases)
                lines.append(
                    f"  {row.layer.name}: {quantity_text(row.weights)} + "
                    f"{quantity_text(row.biases)} = {quantity_text(total)}"
                )
        lines.append(f"  total: {quantity_text(result)}")
        return lines

    def _record_activation_count(self, result: sp.Expr, network: Network) -> list[str]:
        lines = ["Activations the forward pass keeps, layer by layer (batch included):"]
        for row in network.rows[1:]:
            if row.activations:
                lines.append(f"  {row.layer.name}: {quantity_text(row.activations)}")
        lines.append(f"  total: {quantity_text(result)}")
        return lines

    def _record_input_elements(self, result: sp.Expr, network: Network) -> list[str]:
        return [f"Input elements: {quantity_text(result)}"]

    def _record_pool_output_size(
        self,
        result: sp.Expr,
        size: sp.Expr | int,
        kernel: int,
        stride: int | None = None,
        padding: int = 0,
        dilation: int = 1,
    ) -> list[str]:
        step = kernel if stride is None else stride
        window = kernel if dilation == 1 else f"{dilation}*({kernel} - 1) + 1"
        return [
            f"Pooled size: floor(({quantity_text(size)} + 2*{padding} - {window}) / {step}) + 1 "
            f"= {quantity_text(result)}"
        ]

    def _record_optimizer(self, result: Optimizer, spec: OptimizerLike) -> list[str]:
        return [
            f"Optimizer: {result.title} keeps {result.states_per_parameter} state value(s) "
            "per parameter"
        ]

    def _record_training_memory(
        self, result: MemoryBreakdown, model: Model, **options: Any
    ) -> list[str]:
        optimizer = f" with {result.optimizer}" if result.optimizer else ""
        return memory_lines(result, f"Training memory{optimizer}")

    def _record_inference_memory(
        self, result: MemoryBreakdown, model: Model, **options: Any
    ) -> list[str]:
        return memory_lines(result, "Inference memory")

    def _record_to_bytes(self, result: sp.Expr, value: object, unit: str) -> list[str]:
        return [
            f"In bytes: {value} {unit} = {value} x {unit_bytes(unit):,} bytes "
            f"= {quantity_text(result)} bytes"
        ]

    def _record_in_unit(self, result: sp.Expr, nbytes: object, unit: str) -> list[str]:
        return [
            f"In {unit}: {quantity_text(nbytes)} bytes / {unit_bytes(unit):,} bytes per {unit} "
            f"= {quantity_text(result)} {unit}"
        ]


def _precision_kind(chosen: Precision) -> str:
    """Return the kind of precision step: ``""`` for fp32 throughout (nothing to read up on)."""
    if chosen.master_weights is not None:
        return "precision_master_copy"
    if chosen.parameters != chosen.activations:
        return "precision_autocast"
    return "" if chosen == precision("fp32") else "precision_one_type"


def _window_text(layer: Layer, before: tuple[sp.Expr, ...], after: tuple[sp.Expr, ...]) -> str:
    """How a sliding window's output height follows from the input's, with the numbers in.

    Written only for a convolution or pooling with whole-number settings, and
    only when the formula gives the height the library computed.
    """
    settings = [getattr(layer, name, None) for name in ("kernel_size", "stride", "padding")]
    dilation = getattr(layer, "dilation", (1, 1))
    if (
        len(before) != 4
        or len(after) != 4
        or not all(
            isinstance(v, tuple) and all(isinstance(x, int | sp.Integer) for x in v)
            for v in (*settings, dilation)
        )
    ):
        return ""
    (k, _), (stride, _), (pad, _) = (tuple(int(x) for x in v) for v in settings)  # type: ignore[union-attr]
    d = int(dilation[0])
    height = sp.sympify(before[2])
    span = sp.Integer(k) if d == 1 else d * (k - 1) + 1
    ceil = bool(getattr(layer, "ceil_mode", False))
    # the library writes a rounding of a rounding as one (floor(floor(H/2)/2) is floor(H/4))
    rounding, argument = collapse_rounding(
        sp.ceiling if ceil else sp.floor, (height + 2 * pad - span) / stride
    )
    value = rounding(argument) + 1
    if sp.simplify(value - sp.sympify(after[2])) != 0:
        return ""
    window = str(k) if d == 1 else f"({d}*({k} - 1) + 1)"
    name = "ceil" if ceil else "floor"
    return f"{name}(({sp.sstr(height)} + 2*{pad} - {window}) / {stride}) + 1 = {sp.sstr(after[2])}"


@dataclass(frozen=True)
class Derivation:
    """A worked solution: the recorded steps, then the answer as the grader shows it.

    Attributes
    ----------
    steps : tuple of str
        The steps, in the order the computation took them.
    answer : str
        The answer (:meth:`~memtheory.exercises.kinds.AnswerKind.display` of
        the graded value).
    chapter : str
        The book's chapter the exercise belongs to (``"Chapter 2"``).
    sections : tuple of Section
        The sections of the book that teach the steps taken, in the order
        first taken (:func:`~memtheory.exercises.sections.sections_for`).
    """

    steps: tuple[str, ...]
    answer: str
    chapter: str = ""
    sections: tuple[Section, ...] = ()

    @property
    def lines(self) -> tuple[str, ...]:
        """The sections it uses (else its chapter), the steps, then ``Answer: ...`` (last)."""
        if self.sections:
            source: tuple[str, ...] = (
                "Uses, from the book (where each step is taught):",
                *(f"  {section}" for section in self.sections),
            )
        else:
            source = (f"Uses: {self.chapter} of the book.",) if self.chapter else ()
        return (*source, *self.steps, f"Answer: {self.answer}")

    def __str__(self) -> str:
        return "\n".join(self.lines)


def derive(variant: Variant) -> Derivation:
    """Run a variant's solver with a :class:`Recorder`: its worked solution.

    The answer is the one the recorder's run gives; it is checked against the
    graded answer (:attr:`~memtheory.exercises.model.Variant.expected`), so a
    solution that would disagree with the grade is an error, never shown.

    Raises
    ------
    ExerciseDefinitionError
        If the recorded run does not give the graded answer (a solver that
        depends on something other than its parameters and ``how``).

    Examples
    --------
    >>> from memtheory.exercises.loader import find_variant
    >>> derive(find_variant("ch03.q1")).lines[-1]
    'Answer: 12'
    """
    recorder = Recorder()
    with recording(recorder):
        value = variant.solve_with(recorder)
    if not variant.kind.matches(value, variant.expected) or value != variant.expected:
        raise ExerciseDefinitionError(
            f"{variant.id}: the worked solution gives {value!r}, the grader {variant.expected!r}."
        )
    if not recorder.steps:
        raise ExerciseDefinitionError(
            f"{variant.id}: its solver records no step; note() what it computes."
        )
    return Derivation(
        tuple(recorder.steps),
        variant.kind.display(value),
        _chapter(variant.set_id),
        sections_for(recorder.kinds),
    )


def _chapter(set_id: str) -> str:
    """``"ch09"`` -> ``"Chapter 9"``: the chapter whose sections a set's solutions use."""
    digits = set_id.removeprefix("ch")
    return f"Chapter {int(digits)}" if digits.isdigit() else ""
