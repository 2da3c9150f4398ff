"""Which element type each part of training is stored in.

Parameters, gradients, optimizer state, activations and their gradients may
each have their own dtype: mixed-precision training keeps fp16 or bf16
weights, gradients and activations, with fp32 optimizer state and an fp32
master copy of the weights. Derived in the book's chapter "Precision".

Examples
--------
>>> precision("fp32").optimizer_state.bytes
4
>>> p = precision("mixed-bf16")
>>> p.parameters.name, p.optimizer_state.name, p.master_weights.name
('bf16', 'fp32', 'fp32')
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from memtheory.dtypes import DTYPE_REGISTRY, DTYPES, DType, DTypeLike, dtype
from memtheory.errors import UnknownPrecisionError
from memtheory.registry import Registry

__all__ = ["PRECISIONS", "PRECISION_REGISTRY", "Precision", "PrecisionLike", "precision"]


@dataclass(frozen=True, init=False)
class Precision:
    """Element types of each memory component.

    Parameters
    ----------
    parameters : dtype, default fp32
        The weights the forward pass uses.
    gradients, optimizer_state : dtype, optional
        Default to ``parameters``.
    activations : dtype, optional
        Defaults to ``parameters``.
    activation_gradients : dtype, optional
        Defaults to ``activations``.
    input : dtype, optional
        The input batch; defaults to ``activations``.
    master_weights : dtype or None, default None
        An extra full-precision copy of the weights (mixed precision), or none.

    Examples
    --------
    >>> p = Precision(parameters="fp16", optimizer_state="fp32")
    >>> p.gradients.name, p.activations.name, p.optimizer_state.name
    ('fp16', 'fp16', 'fp32')
    """

    # The fields hold DTypes; __init__ also takes names and fills in the defaults.
    parameters: DType
    gradients: DType
    optimizer_state: DType
    activations: DType
    activation_gradients: DType
    input: DType
    master_weights: DType | None

    def __init__(
        self,
        parameters: DTypeLike = "fp32",
        gradients: DTypeLike | None = None,
        optimizer_state: DTypeLike | None = None,
        activations: DTypeLike | None = None,
        activation_gradients: DTypeLike | None = None,
        input: DTypeLike | None = None,
        master_weights: DTypeLike | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "parameters", dtype(parameters))
        set_(self, "gradients", dtype(gradients or self.parameters))
        set_(self, "optimizer_state", dtype(optimizer_state or self.parameters))
        set_(self, "activations", dtype(activations or self.parameters))
        set_(self, "activation_gradients", dtype(activation_gradients or self.activations))
        set_(self, "input", dtype(input or self.activations))
        set_(self, "master_weights", None if master_weights is None else dtype(master_weights))

    @classmethod
    def uniform(cls, spec: DTypeLike) -> Precision:
        """Everything in one dtype.

        Examples
        --------
        >>> Precision.uniform("bf16").gradients.name
        'bf16'
        """
        return cls(parameters=spec)

    @classmethod
    def mixed(cls, low: DTypeLike = "fp16") -> Precision:
        """Build mixed precision: ``low`` weights, gradients, activations; fp32 master and state.

        The input batch stays fp32 (autocast casts it inside the first layer).

        Examples
        --------
        >>> m = Precision.mixed("fp16")
        >>> sum(getattr(m, f).bytes for f in ("parameters", "gradients", "master_weights"))
        8
        """
        return cls(parameters=low, optimizer_state="fp32", input="fp32", master_weights="fp32")

    @classmethod
    def autocast(cls, low: DTypeLike = "fp16") -> Precision:
        """Build ``torch.autocast`` training: fp32 weights, gradients, state; ``low`` activations.

        What PyTorch Lightning calls ``"16-mixed"`` and ``"bf16-mixed"``. No master
        copy: the fp32 weights are it.

        Examples
        --------
        >>> a = Precision.autocast("bf16")
        >>> a.parameters.name, a.gradients.name, a.activations.name, a.master_weights
        ('fp32', 'fp32', 'bf16', None)
        """
        return cls(parameters="fp32", activations=low, input="fp32")

    def describe(self) -> str:
        """One line listing each component's dtype.

        Examples
        --------
        >>> Precision().describe()
        'parameters fp32, gradients fp32, optimizer_state fp32, activations fp32, ...'
        """
        return ", ".join(
            f"{f.name} {getattr(self, f.name)}"
            for f in fields(self)
            if getattr(self, f.name) is not None
        )


PrecisionLike = str | DType | Precision

PRECISIONS: dict[str, Precision] = {
    **{name: Precision.uniform(d) for name, d in DTYPES.items()},
    "mixed-fp16": Precision.mixed("fp16"),
    "mixed-bf16": Precision.mixed("bf16"),
    "autocast-fp16": Precision.autocast("fp16"),
    "autocast-bf16": Precision.autocast("bf16"),
}
"""Every named precision: each dtype name (everything in that type), mixed and autocast."""

PRECISION_REGISTRY: Registry[Precision] = Registry(
    "precision",
    PRECISIONS,
    aliases={
        **DTYPE_REGISTRY.aliases,
        # PyTorch Lightning's Trainer(precision=...): "-mixed" is torch.autocast.
        "16-mixed": "autocast-fp16",
        "bf16-mixed": "autocast-bf16",
        "16-true": "fp16",
        "bf16-true": "bf16",
        "32-true": "fp32",
        "32": "fp32",
        "64-true": "fp64",
        "64": "fp64",
    },
    error=UnknownPrecisionError,
    hint="(any dtype name means everything in that type; or pass a Precision)",
    prefixes=DTYPE_REGISTRY.prefixes,
)
"""The precisions by any accepted spelling, PyTorch Lightning's included."""

_FAMILIES = {"mixed": Precision.mixed, "autocast": Precision.autocast}


def precision(spec: PrecisionLike) -> Precision:
    """Build a :class:`Precision` from a name.

    ``"fp32"``, ``"bf16"``, ... (any dtype name) mean everything in that type;
    ``"mixed-fp16"`` and ``"mixed-bf16"`` mean :meth:`Precision.mixed` (16-bit
    weights and an fp32 master copy), ``"autocast-fp16"`` and ``"autocast-bf16"``
    :meth:`Precision.autocast` (fp32 weights, 16-bit activations). PyTorch
    Lightning's names work too: ``"16-mixed"`` and ``"bf16-mixed"`` are autocast
    (not memtheory's ``"mixed-..."``: same total per parameter, other components),
    ``"32-true"`` is fp32 and ``"bf16-true"`` everything in bf16.

    Raises
    ------
    UnknownPrecisionError
        For an unknown name: the message lists the named precisions and the closest.

    Examples
    --------
    >>> precision("mixed-fp16").master_weights.name
    'fp32'
    >>> precision("bf16-mixed") == Precision.autocast("bf16")
    True
    >>> precision("fp13")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownPrecisionError: unknown precision 'fp13'. Did you mean 'fp16'? ...
    """
    if isinstance(spec, Precision):
        return spec
    if isinstance(spec, DType):
        return Precision.uniform(spec)
    try:
        return PRECISION_REGISTRY[spec]
    except UnknownPrecisionError:
        key = PRECISION_REGISTRY.normalize(spec) if isinstance(spec, str) else ""
        for family, build in _FAMILIES.items():
            if key.startswith(family):  # "mixed", "mixed-float16", "autocast half"
                low = key.removeprefix(family)
                return build(low) if low else build()
        raise
