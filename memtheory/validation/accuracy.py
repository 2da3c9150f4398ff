"""Predictions beside measurements: each convention's bytes against a real PyTorch step.

:func:`compare_with_measurement` measures one model with one precision and
optimizer (:func:`~memtheory.torch.measure`) and predicts the same categories
with each accounting convention; :func:`accuracy_table` prints many comparisons.
The models are the sequential stacks of :data:`~memtheory.validation.zoo.ZOO`,
converted with :func:`~memtheory.torch.from_module`, and the reference pairs of
:data:`~memtheory.validation.reference_models.PAIRS` (ResNet-18/50-, MobileNetV2-,
ViT-, BERT-MLM- and GPT-2-style modules with their builders' networks). A
convention that refuses a network (an :class:`~memtheory.errors.UnsupportedError`,
such as the autograd convention on a layer whose autograd behaviour is not yet
checked against PyTorch) is recorded in :attr:`Comparison.refused` with its
reason, and the table says so instead of a number. The categories line up as follows:

=====================  ============================================  ===========================
category               predicted                                     measured
=====================  ============================================  ===========================
``weights``            parameters + master weights + weight copies   parameters + autocast copies
``gradients``          gradients                                     ``.grad`` storages
``optimizer state``    optimizer state + step counters               the optimizer's state
``saved activations``  ``saved_activations`` (autograd) or           storages the saved-tensor
                       ``activations`` (rule of thumb, breakdown)    hooks saw, once each
``peak``               ``peak`` (autograd) or ``total``              most live storage bytes
``inference peak``     inference ``peak`` or ``total``               the same, eval + no_grad
=====================  ============================================  ===========================

Precisions: ``"fp32"``; ``"bf16"``, the model and input converted with
``.to(torch.bfloat16)`` (everything bf16: the setting every convention can
express); ``"autocast-bf16"``, fp32 model under ``torch.autocast("cpu",
torch.bfloat16)``, which the rule of thumb and breakdown can only approximate
as ``"mixed-bf16"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import sympy as sp
import torch

from memtheory.conventions import convention as _convention
from memtheory.conventions.autograd import AutogradConvention, autocast_precision
from memtheory.errors import InvalidArgumentError, UnknownNameError, UnsupportedError
from memtheory.memory import inference_memory, training_memory
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.optimizers import OptimizerLike
from memtheory.optimizers import optimizer as optimizer_of
from memtheory.precision import PrecisionLike
from memtheory.tables import Column, Table
from memtheory.torch.convert import from_module
from memtheory.torch.measurement import Measurement, measure
from memtheory.torch.optimizers import torch_optimizer
from memtheory.units import unit_bytes
from memtheory.validation.reference_models import PAIRS, ReferencePair
from memtheory.validation.zoo import ZOO, ZooModel

__all__ = [
    "CATEGORIES",
    "CONVENTION_NAMES",
    "OPTIMIZERS",
    "PRECISIONS",
    "Comparison",
    "Setting",
    "accuracy_table",
    "compare_with_measurement",
]

CATEGORIES = (
    "weights",
    "gradients",
    "optimizer state",
    "saved activations",
    "peak",
    "inference peak",
)
"""The categories compared, in table order."""

_PARAMETER_CATEGORIES = ("weights", "gradients", "optimizer state")
_PARAMETER_SIDE = "weights, gradients, state"

CONVENTION_NAMES = ("rule_of_thumb", "breakdown", "autograd")
"""The conventions compared, in table order."""

OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd": lambda params, **options: torch.optim.SGD(params, lr=0.01, **options),
    "sgd+momentum": lambda params, **options: torch.optim.SGD(
        params, lr=0.01, momentum=0.9, **options
    ),
    "adam": lambda params, **options: torch.optim.Adam(params, lr=1e-3, **options),
}
"""torch.optim optimizers by memtheory's optimizer name; options such as ``foreach=True``."""


@dataclass(frozen=True)
class Setting:
    """How a precision is run in PyTorch and written for each convention.

    Attributes
    ----------
    dtype : torch.dtype
        What the module and the input are converted to.
    autocast : torch.dtype or None
        The autocast dtype for the forward and the loss.
    autograd : PrecisionLike
        The precision the autograd convention is given.
    others : PrecisionLike
        The precision the rule of thumb and the breakdown are given.
    """

    dtype: torch.dtype
    autocast: torch.dtype | None
    autograd: PrecisionLike
    others: PrecisionLike


PRECISIONS: dict[str, Setting] = {
    "fp32": Setting(torch.float32, None, "fp32", "fp32"),
    "bf16": Setting(torch.bfloat16, None, "bf16", "bf16"),
    "autocast-bf16": Setting(
        torch.float32, torch.bfloat16, autocast_precision("bf16"), "mixed-bf16"
    ),
}
"""The precisions compared, by name."""


@dataclass(frozen=True)
class Comparison:
    """One measured step and each convention's prediction of it.

    Attributes
    ----------
    model, precision, optimizer : str
    measurement : Measurement
    predictions : dict of str to (MemoryBreakdown, MemoryBreakdown)
        Training and inference breakdowns, by convention name, evaluated.
    refused : dict of str to str
        The conventions that refused the network, each with its reason (the
        :class:`~memtheory.errors.UnsupportedError` message).

    Examples
    --------
    >>> c = compare_with_measurement("MLP", precision="fp32", optimizer="sgd")
    >>> c.conventions, c.refused
    (('rule_of_thumb', 'breakdown', 'autograd'), {})
    >>> c.predicted("autograd", "peak") == c.measured("peak")  # to the byte
    True
    """

    model: str
    precision: str
    optimizer: str
    measurement: Measurement
    predictions: dict[str, tuple[MemoryBreakdown, MemoryBreakdown]]
    refused: dict[str, str] = field(default_factory=dict)

    @property
    def conventions(self) -> tuple[str, ...]:
        """Every convention asked, predicted or refused, in the order asked."""
        return tuple(self.predictions) + tuple(n for n in self.refused if n not in self.predictions)

    def measured(self, category: str) -> int:
        """Measured bytes of a category (or of ``"weights, gradients, state"`` together)."""
        if category == _PARAMETER_SIDE:
            return sum(self.measured(c) for c in _PARAMETER_CATEGORIES)
        m = self.measurement
        return {
            "weights": m.parameters + m.weight_copies,
            "gradients": m.gradients,
            "optimizer state": m.optimizer_state + m.optimizer_step_counters,
            "saved activations": m.saved_activations,
            "peak": m.peak,
            "inference peak": m.inference_peak,
        }[category]

    def predicted(self, convention: str, category: str) -> int:
        """Predicted bytes of a category by a convention.

        Raises
        ------
        UnsupportedError
            If the convention refused the network (the reason is in :attr:`refused`).
        """
        if convention in self.refused:
            raise UnsupportedError(f"{convention} refused {self.model}: {self.refused[convention]}")
        if category == _PARAMETER_SIDE:
            return sum(self.predicted(convention, c) for c in _PARAMETER_CATEGORIES)
        training, inference = self.predictions[convention]
        c = training.components

        def part(*names: str) -> sp.Expr:
            return sp.Add(*(c.get(name, 0) for name in names))

        value = {
            "weights": lambda: part("parameters", "master_weights", "weight_copies"),
            "gradients": lambda: part("gradients"),
            "optimizer state": lambda: part("optimizer_state", "optimizer_step_counters"),
            "saved activations": lambda: (
                c["saved_activations"] if "saved_activations" in c else c["activations"]
            ),
            "peak": lambda: training.peak if training.timeline else training.total,
            "inference peak": lambda: inference.peak if inference.timeline else inference.total,
        }[category]()
        return int(value)

    def error(self, convention: str, category: str) -> float:
        """Relative error of a prediction: (predicted - measured) / measured (0 when both are 0).

        Examples
        --------
        >>> c = compare_with_measurement("MLP", precision="fp32", optimizer="sgd")
        >>> c.error("autograd", "saved activations"), c.error("autograd", "peak")
        (0.0, 0.0)
        >>> round(c.error("rule_of_thumb", "saved activations"), 3)  # every output, no mask
        0.152
        """
        measured = self.measured(category)
        predicted = self.predicted(convention, category)
        if measured == 0:
            return 0.0 if predicted == 0 else float("inf")
        return (predicted - measured) / measured


def compare_with_measurement(
    model: str | ZooModel | ReferencePair,
    *,
    precision: str = "fp32",
    optimizer: OptimizerLike = "adam",
    conventions: Sequence[str] = CONVENTION_NAMES,
    implementation: str | None = None,
    record: bool = False,
    device: str | torch.device = "cpu",
) -> Comparison:
    """Measure a zoo model's training step and predict it with each convention.

    Parameters
    ----------
    model : str, ZooModel or ReferencePair
        A name in :data:`~memtheory.validation.zoo.ZOO` or in
        :data:`~memtheory.validation.reference_models.PAIRS`, or such an entry. A
        zoo model's network is converted from its module
        (:func:`~memtheory.torch.from_module`); a reference pair's is its builder's.
    precision : {"fp32", "bf16", "autocast-bf16"}
    optimizer : str or Optimizer
        Any torch.optim optimizer memtheory knows, with its options
        (``memtheory.optimizer("adamw", amsgrad=True)``), built by
        :func:`~memtheory.torch.torch_optimizer`.
    conventions : sequence of str
    implementation : {"for-loop", "foreach", "fused"}, optional
        Force the optimizer's implementation; by default PyTorch picks
        (for-loop on CPU), and the autograd convention is told which ran.
    record : bool, default False
        Keep the measured timeline (live bytes after every operation).
    device : str or torch.device, default "cpu"
        Where to measure: ``"cuda"`` measures on a GPU, with the caching
        allocator's counters (``comparison.measurement.allocator``). The
        predictions are the same; the CUDA kernels may keep other tensors than
        the CPU ones the conventions follow.

    Raises
    ------
    UnknownNameError
        If ``model`` names no zoo model or reference pair.

    Examples
    --------
    >>> c = compare_with_measurement("forum FC net / 100", precision="fp32", optimizer="adam")
    >>> c.measured("peak") == c.predicted("autograd", "peak")
    True

    A residual network, measured against its builder's network:

    >>> c = compare_with_measurement("ResNet-50-style", optimizer="adamw")
    >>> c.predicted("autograd", "peak") - c.measured("peak")
    0
    """
    entry = _entry(model) if isinstance(model, str) else model
    setting = PRECISIONS[precision]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    if isinstance(entry, ReferencePair):
        module = entry.build_module(setting.dtype)
        x, y = entry.batch(setting.dtype)
        loss = entry.loss
    else:
        module = entry.module(setting.dtype)
        x, y = entry.batch(setting.dtype)
        loss = torch.nn.CrossEntropyLoss()
    chosen = optimizer_of(optimizer)
    place = _device(device)
    module, x, y = module.to(place), x.to(place), y.to(place)
    optim = torch_optimizer(chosen, module.parameters(), implementation=implementation)
    measured = measure(module, x, loss, optim, target=y, autocast=setting.autocast, record=record)
    if isinstance(entry, ReferencePair):
        network = entry.build_network()
    else:
        converted = from_module(
            module, entry.input_shape, loss=torch.nn.CrossEntropyLoss(), name=entry.name
        )
        if not isinstance(converted, Network):  # a zoo model is a stack of layers
            raise UnsupportedError(f"{entry.name} is not a stack of layers: trace it instead.")
        network = converted
    predictions = {}
    refused = {}
    for name in conventions:
        convention = (
            AutogradConvention(measured.implementation) if name == "autograd" else _convention(name)
        )
        given: PrecisionLike = setting.autograd if name == "autograd" else setting.others
        try:
            train = training_memory(
                network, optimizer=chosen, precision=given, convention=convention
            )
            infer = inference_memory(network, precision=given, convention=convention)
        except UnsupportedError as error:
            refused[name] = str(error)
            continue
        predictions[name] = (train, infer)
    label = optimizer if isinstance(optimizer, str) else str(chosen)
    return Comparison(entry.name, precision, label, measured, predictions, refused)


def _device(device: str | torch.device) -> torch.device:
    """Return ``device`` as a torch.device where a step can run, or say why not."""
    try:
        place = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise InvalidArgumentError(
            f"device {device!r} is not a device PyTorch knows; use 'cpu' or 'cuda'."
        ) from error
    if place.type == "cuda" and not torch.cuda.is_available():
        raise InvalidArgumentError(
            "device='cuda' needs a CUDA GPU and a CUDA build of PyTorch; this one has none "
            f"(torch {torch.__version__}). Measure on 'cpu', or run on a machine with a GPU."
        )
    return place


def _entry(name: str) -> ZooModel | ReferencePair:
    if name in ZOO:
        return ZOO[name]
    if name in PAIRS:
        return PAIRS[name]
    known = [*ZOO, *PAIRS]
    raise UnknownNameError(
        f"unknown model {name!r}; known models: {', '.join(known)}", name=name, known=known
    )


def _short_reason(reason: str) -> str:
    """Return the first clause of a refusal, without the convention's name."""
    first = reason.split(": ", 1)[0]
    return first.removeprefix("the autograd convention ")


def accuracy_table(
    comparisons: Iterable[Comparison],
    categories: Sequence[str] = ("saved activations", "peak"),
    unit: str = "MiB",
) -> Table:
    """Tabulate predicted vs measured bytes and the relative error, one row per convention.

    Each category gets three columns: predicted and measured (in ``unit``, here
    MiB = 2^20 bytes) and the relative error. The last column is the relative
    error on the weights, gradients and optimizer state together. A convention
    that refused the network shows ``refused`` in its cells, and a ``note``
    column (present only then) gives ``refused: <reason>``.

    Examples
    --------
    >>> mlp = compare_with_measurement("MLP", precision="fp32", optimizer="sgd")
    >>> print(accuracy_table([mlp]))  # doctest: +ELLIPSIS
    model  precision  optimizer  convention     saved pred  saved meas  saved err ...
    -----  ...
    MLP    fp32       sgd        rule_of_thumb        0.51        0.44    +15.23% ...
    MLP    fp32       sgd        breakdown            0.51        0.44    +15.23% ...
    MLP    fp32       sgd        autograd             0.44        0.44     +0.00% ...
    """
    short = {"saved activations": "saved", "inference peak": "inference", "peak": "peak"}
    header = ["model", "precision", "optimizer", "convention"]
    for category in categories:
        label = short.get(category, category)
        header += [f"{label} pred", f"{label} meas", f"{label} err"]
    header.append("weights+grads+state err")
    body = []
    scale = unit_bytes(unit)
    listed = list(comparisons)
    notes = any(c.refused for c in listed)
    for comparison in listed:
        for name in comparison.conventions:
            line = [comparison.model, comparison.precision, comparison.optimizer, name]
            refused = name in comparison.refused
            for category in categories:
                measured = f"{comparison.measured(category) / scale:.2f}"
                if refused:
                    line += ["refused", measured, "refused"]
                    continue
                line += [
                    f"{comparison.predicted(name, category) / scale:.2f}",
                    measured,
                    f"{comparison.error(name, category):+.2%}",
                ]
            line.append(
                "refused"
                if refused
                else f"{comparison.error(name, 'weights, gradients, state'):+.2%}"
            )
            if notes:
                line.append(
                    f"refused: {_short_reason(comparison.refused[name])}" if refused else ""
                )
            body.append(line)
    if notes:
        header.append("note")
    columns = [
        Column(title, align="left" if i < 4 or title == "note" else "right")
        for i, title in enumerate(header)
    ]
    return Table(columns, body)
