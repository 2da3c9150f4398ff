"""Optimizers, described by the state they keep per parameter.

An optimizer's memory is its state: for every parameter, SGD keeps nothing,
SGD with momentum one velocity, Adam two moment estimates. Each optimizer is
a named object listing its state buffers, so a memory formula says "Adam"
rather than "x2". Derived in the book's chapter "Optimizers".

Examples
--------
>>> optimizer("adam").states_per_parameter
2
>>> optimizer("sgd+momentum").state_names
('momentum_buffer',)
>>> optimizer("adam", weight_decay=0.01, amsgrad=True).state_names  # AMSGrad keeps a third
('exp_avg', 'exp_avg_sq', 'max_exp_avg_sq')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from numbers import Real

import sympy as sp

from memtheory._shown import shown
from memtheory.errors import InvalidArgumentError, InvalidSizeError, UnknownOptimizerError
from memtheory.registry import Registry

__all__ = ["OPTIMIZERS", "OPTIMIZER_REGISTRY", "Optimizer", "OptimizerLike", "optimizer"]


_AMSGRAD_STATE = "max_exp_avg_sq"
"""The extra buffer ``amsgrad=True`` adds: the running maximum of ``exp_avg_sq``."""


@dataclass(frozen=True)
class Optimizer:
    """An optimizer, the options it runs with, and the state it keeps.

    Parameters
    ----------
    name : str
        Canonical name (``"adam"``).
    title : str
        How people write it (``"Adam"``).
    state_names : tuple of str
        One entry per parameter-shaped buffer, named as PyTorch names them.
    scalar_states : tuple of str
        Scalars it keeps per parameter *tensor*, named as PyTorch names them: the
        ``step`` count (every stateful PyTorch optimizer but SGD), and NAdam's
        ``mu_product``. Tiny; only the autograd-exact accounting counts them.
    description : str
        One line.
    torch_name : str or None
        The ``torch.optim`` class (``"Adam"``); None for an optimizer torch.optim lacks.
    factored_state_names : tuple of str
        Adafactor's factored state: a parameter of two or more dimensions keeps
        these instead of ``state_names`` (a row factor, ``shape[-1]`` reduced
        to 1, and a column factor, ``shape[-2]`` reduced to 1). Empty for the others.
    weight_decay : float
        ``weight_decay`` as ``torch.optim`` takes it (AdamW's default is 0.01, as in torch).
    amsgrad : bool
        Adam's and AdamW's AMSGrad variant (an extra ``max_exp_avg_sq`` per parameter).
    maximize : bool
        Step up the gradient instead of down.

    Examples
    --------
    >>> OPTIMIZERS["rmsprop"].states_per_parameter, OPTIMIZERS["rmsprop"].scalar_states
    (1, ('step',))
    >>> str(optimizer("adamw", amsgrad=True, maximize=True))
    'AdamW (amsgrad, maximize)'
    """

    name: str
    title: str
    state_names: tuple[str, ...]
    scalar_states: tuple[str, ...] = ()
    description: str = ""
    torch_name: str | None = None
    factored_state_names: tuple[str, ...] = ()
    weight_decay: float = 0.0
    amsgrad: bool = False
    maximize: bool = False

    @property
    def states_per_parameter(self) -> int:
        """Parameter-shaped state buffers: the factor the state multiplies the parameters by.

        For Adafactor this holds for one-dimensional parameters only; the others
        keep factored state (:meth:`state_elements`).
        """
        return len(self.state_names)

    @property
    def options(self) -> dict[str, float | bool]:
        """The options that differ from the optimizer's defaults, as ``torch.optim`` keywords.

        Examples
        --------
        >>> optimizer("sgd", weight_decay=1e-4, maximize=True).options
        {'weight_decay': 0.0001, 'maximize': True}
        >>> optimizer("adamw").options  # torch.optim.AdamW's default weight_decay=0.01
        {}
        """
        found: dict[str, float | bool] = {}
        registered = OPTIMIZERS.get(self.name)
        if self.weight_decay != (registered.weight_decay if registered else 0.0):
            found["weight_decay"] = self.weight_decay
        for key in ("amsgrad", "maximize"):
            if getattr(self, key):
                found[key] = True
        return found

    def state_elements(self, shape: Sequence[sp.Expr | int]) -> sp.Expr:
        """Elements of optimizer state kept for one parameter tensor of ``shape``.

        Examples
        --------
        >>> optimizer("adam").state_elements((256, 784))
        401408
        >>> optimizer("adafactor").state_elements((256, 784))  # row and column factors
        1040
        >>> optimizer("adafactor").state_elements((256,))  # 1-D: a full second moment
        256
        """
        count = sp.Mul(*(sp.sympify(size) for size in shape))
        if self.factored_state_names and len(shape) >= 2:
            return sp.expand(count / shape[-1] + count / shape[-2])
        return self.states_per_parameter * count if self.states_per_parameter else sp.S.Zero

    def __str__(self) -> str:
        options = [
            f"{key}={value:g}" if key == "weight_decay" else key
            for key, value in self.options.items()
        ]
        return f"{self.title} ({', '.join(options)})" if options else self.title


OPTIMIZERS: dict[str, Optimizer] = {
    o.name: o
    for o in (
        Optimizer(
            "sgd",
            "SGD",
            (),
            torch_name="SGD",
            description="plain stochastic gradient descent: no state",
        ),
        Optimizer(
            "sgd+momentum",
            "SGD with momentum",
            ("momentum_buffer",),
            torch_name="SGD",
            description="one velocity per parameter",
        ),
        Optimizer(
            "nesterov",
            "SGD with Nesterov momentum",
            ("momentum_buffer",),
            torch_name="SGD",
            description="one velocity per parameter",
        ),
        Optimizer(
            "adagrad",
            "Adagrad",
            ("sum",),
            scalar_states=("step",),
            torch_name="Adagrad",
            description="running sum of squared gradients",
        ),
        Optimizer(
            "rmsprop",
            "RMSprop",
            ("square_avg",),
            scalar_states=("step",),
            torch_name="RMSprop",
            description="running average of squared gradients",
        ),
        Optimizer(
            "rmsprop+momentum",
            "RMSprop with momentum",
            ("square_avg", "momentum_buffer"),
            scalar_states=("step",),
            torch_name="RMSprop",
            description="squared-gradient average and a velocity",
        ),
        Optimizer(
            "rmsprop-centered",
            "centered RMSprop",
            ("square_avg", "grad_avg"),
            scalar_states=("step",),
            torch_name="RMSprop",
            description="averages of the gradient and its square",
        ),
        Optimizer(
            "adadelta",
            "Adadelta",
            ("square_avg", "acc_delta"),
            scalar_states=("step",),
            torch_name="Adadelta",
            description="averages of squared gradients and squared updates",
        ),
        Optimizer(
            "adam",
            "Adam",
            ("exp_avg", "exp_avg_sq"),
            scalar_states=("step",),
            torch_name="Adam",
            description="first and second moment estimates",
        ),
        Optimizer(
            "adamw",
            "AdamW",
            ("exp_avg", "exp_avg_sq"),
            scalar_states=("step",),
            torch_name="AdamW",
            weight_decay=0.01,
            description="Adam with decoupled weight decay: same state",
        ),
        Optimizer(
            "adamax",
            "Adamax",
            ("exp_avg", "exp_inf"),
            scalar_states=("step",),
            torch_name="Adamax",
            description="first moment and infinity norm",
        ),
        Optimizer(
            "nadam",
            "NAdam",
            ("exp_avg", "exp_avg_sq"),
            scalar_states=("step", "mu_product"),
            torch_name="NAdam",
            description="Adam with Nesterov momentum",
        ),
        Optimizer(
            "adafactor",
            "Adafactor",
            ("variance",),
            scalar_states=("step",),
            torch_name="Adafactor",
            factored_state_names=("row_var", "col_var"),
            description="factored second moment: a row and a column factor per matrix",
        ),
        Optimizer(
            "lion", "Lion", ("exp_avg",), description="one momentum buffer (not in torch.optim)"
        ),
    )
}
"""Every optimizer memtheory knows, by canonical name."""

OPTIMIZER_REGISTRY: Registry[Optimizer] = Registry(
    "optimizer",
    OPTIMIZERS,
    aliases={
        "momentum": "sgd+momentum",
        "sgdm": "sgd+momentum",
        "sgd+nesterov": "nesterov",
        "rms": "rmsprop",
        # Hugging Face Trainer's ``optim=`` names for torch.optim.AdamW: same state.
        "adamw_torch": "adamw",
        "adamw_torch_fused": "adamw",
    },
    error=UnknownOptimizerError,
    hint="(or describe a new one with memtheory.optimizers.Optimizer)",
    prefixes=("torch.optim.",),
)
"""The optimizers by any accepted spelling: case, spaces, ``_``, ``-`` and ``+`` do not matter."""

# torch.optim's switches (momentum > 0, nesterov, centered) and the optimizer each
# combination is: torch.optim.SGD(momentum=0.9) keeps the state of "sgd+momentum".
_SWITCHES: dict[str, tuple[str, bool, bool, bool]] = {
    "sgd": ("SGD", False, False, False),
    "sgd+momentum": ("SGD", True, False, False),
    "nesterov": ("SGD", True, True, False),
    "rmsprop": ("RMSprop", False, False, False),
    "rmsprop+momentum": ("RMSprop", True, False, False),
    "rmsprop-centered": ("RMSprop", False, False, True),
}
_BY_SWITCHES = {switches: name for name, switches in _SWITCHES.items()}

OptimizerLike = str | Optimizer


_AMSGRAD = ("adam", "adamw")
"""The optimizers with an ``amsgrad`` switch in torch.optim."""


def optimizer(
    spec: OptimizerLike,
    *,
    momentum: float | None = None,
    nesterov: bool | None = None,
    centered: bool | None = None,
    weight_decay: float | None = None,
    amsgrad: bool | None = None,
    maximize: bool | None = None,
) -> Optimizer:
    """Look up an optimizer by name; case, spaces, ``_``, ``-`` and ``+`` do not matter.

    Parameters
    ----------
    spec : str or Optimizer
        A name (``"adam"``, ``"SGD momentum"``, ``"torch.optim.AdamW"``, Hugging
        Face's ``"adamw_torch"``), or an :class:`Optimizer`, returned unchanged
        when no option is given.
    momentum, nesterov, centered : optional
        torch.optim's switches for SGD and RMSprop, overriding what the name
        says: ``optimizer("sgd", momentum=0.9)`` is ``"sgd+momentum"`` (only
        whether momentum is non-zero changes the state).
    weight_decay : float, optional
        ``weight_decay`` (>= 0) of any torch.optim optimizer.
    amsgrad : bool, optional
        Adam's and AdamW's AMSGrad: one more state buffer, ``max_exp_avg_sq``.
    maximize : bool, optional
        Ascend instead of descend (any torch.optim optimizer).

    Raises
    ------
    UnknownOptimizerError
        For a name memtheory does not know (the message lists the known names
        and the closest), or switches no known optimizer has.
    InvalidArgumentError
        For an option the optimizer does not have (``amsgrad`` on SGD, any
        option on Lion, which torch.optim lacks).

    Examples
    --------
    >>> optimizer("AdamW").title
    'AdamW'
    >>> optimizer("sgd", momentum=0.9) is optimizer("sgd+momentum")
    True
    >>> optimizer("adam", amsgrad=False) is optimizer("adam")
    True
    >>> optimizer("sgd", momentum=0.9, weight_decay=5e-4).state_names
    ('momentum_buffer',)
    >>> optimizer("adamm")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownOptimizerError: unknown optimizer 'adamm'. Did you mean 'adam'? ...
    """
    found = _switched(spec, momentum, nesterov, centered)
    given = {"weight_decay": weight_decay, "amsgrad": amsgrad, "maximize": maximize}
    if all(value is None for value in given.values()):
        return found
    if found.torch_name is None:
        raise InvalidArgumentError(
            f"{found.title} is not in torch.optim, so memtheory knows no options for it "
            f"(got {', '.join(k for k, v in given.items() if v is not None)}). "
            "Describe the state it keeps with memtheory.optimizers.Optimizer."
        )
    if weight_decay is not None and not _rate(weight_decay):
        raise InvalidSizeError(
            f"weight_decay must be a finite number >= 0, got {shown(weight_decay)}."
        )
    for key in ("amsgrad", "maximize"):
        if given[key] is not None and not isinstance(given[key], bool):
            raise InvalidArgumentError(f"{key} must be True or False, got {shown(given[key])}.")
    if amsgrad and found.name not in _AMSGRAD:
        raise InvalidArgumentError(
            f"amsgrad is an option of torch.optim.Adam and AdamW only, not of {found.title}. "
            "Use optimizer('adam', amsgrad=True) or optimizer('adamw', amsgrad=True)."
        )
    changes: dict[str, object] = {
        key: float(value) if key == "weight_decay" else value
        for key, value in given.items()
        if value is not None
    }
    if "amsgrad" in changes:
        names = tuple(name for name in found.state_names if name != _AMSGRAD_STATE)
        changes["state_names"] = (*names, _AMSGRAD_STATE) if amsgrad else names
    result = replace(found, **changes)  # type: ignore[arg-type]
    registered = OPTIMIZERS.get(result.name)
    return registered if registered == result else result


def _rate(value: object) -> bool:
    """Whether ``value`` is a finite real number >= 0 (not a bool, not 10**5000, not inf)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return False
    try:
        number = float(value)
    except OverflowError:
        return False
    return math.isfinite(number) and number >= 0


def _switched(
    spec: OptimizerLike,
    momentum: float | None,
    nesterov: bool | None,
    centered: bool | None,
) -> Optimizer:
    """Return the optimizer ``spec`` names, switched by torch.optim's SGD/RMSprop switches."""
    found = spec if isinstance(spec, Optimizer) else OPTIMIZER_REGISTRY[spec]
    if momentum is None and nesterov is None and centered is None:
        return found
    if momentum is not None and not _rate(momentum):
        raise InvalidSizeError(f"momentum must be a finite number >= 0, got {shown(momentum)}.")
    for switch, value in (("nesterov", nesterov), ("centered", centered)):
        if value is not None and value is not True and value is not False:
            raise InvalidArgumentError(f"{switch} must be True or False, got {shown(value)}.")
    given = {"momentum": momentum, "nesterov": nesterov, "centered": centered}
    family, *defaults = _SWITCHES.get(found.name, (found.title, False, False, False))
    switches = [
        bool(default if value is None else value)
        for default, value in zip(defaults, given.values(), strict=True)
    ]
    name = _BY_SWITCHES.get((family, switches[0], switches[1], switches[2]))
    if name is None:
        options = ", ".join(f"{k}={shown(v)}" for k, v in given.items() if v is not None)
        raise UnknownOptimizerError(
            f"no optimizer memtheory knows is {found.title} with {options}. "
            "The switches describe torch.optim.SGD "
            "(momentum > 0: 'sgd+momentum'; and nesterov=True: 'nesterov') and "
            "torch.optim.RMSprop (momentum > 0: 'rmsprop+momentum'; centered=True: "
            "'rmsprop-centered'); describe another with memtheory.optimizers.Optimizer.",
            name=spec,
            known=tuple(OPTIMIZERS),
        )
    switched = OPTIMIZERS[name]
    if found.options:  # keep the options the given optimizer already had
        return optimizer(switched, **found.options)  # type: ignore[arg-type]
    return switched
