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
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real

from memtheory.errors import InvalidSizeError, UnknownOptimizerError
from memtheory.registry import Registry

__all__ = ["OPTIMIZERS", "OPTIMIZER_REGISTRY", "Optimizer", "OptimizerLike", "optimizer"]


@dataclass(frozen=True)
class Optimizer:
    """An optimizer and the state it keeps.

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

    Examples
    --------
    >>> OPTIMIZERS["rmsprop"].states_per_parameter, OPTIMIZERS["rmsprop"].scalar_states
    (1, ('step',))
    """

    name: str
    title: str
    state_names: tuple[str, ...]
    scalar_states: tuple[str, ...] = ()
    description: str = ""

    @property
    def states_per_parameter(self) -> int:
        """Parameter-shaped state buffers: the factor the state multiplies the parameters by."""
        return len(self.state_names)

    def __str__(self) -> str:
        return self.title


OPTIMIZERS: dict[str, Optimizer] = {
    o.name: o
    for o in (
        Optimizer("sgd", "SGD", (), description="plain stochastic gradient descent: no state"),
        Optimizer(
            "sgd+momentum",
            "SGD with momentum",
            ("momentum_buffer",),
            description="one velocity per parameter",
        ),
        Optimizer(
            "nesterov",
            "SGD with Nesterov momentum",
            ("momentum_buffer",),
            description="one velocity per parameter",
        ),
        Optimizer(
            "adagrad",
            "Adagrad",
            ("sum",),
            scalar_states=("step",),
            description="running sum of squared gradients",
        ),
        Optimizer(
            "rmsprop",
            "RMSprop",
            ("square_avg",),
            scalar_states=("step",),
            description="running average of squared gradients",
        ),
        Optimizer(
            "rmsprop+momentum",
            "RMSprop with momentum",
            ("square_avg", "momentum_buffer"),
            scalar_states=("step",),
            description="squared-gradient average and a velocity",
        ),
        Optimizer(
            "rmsprop-centered",
            "centered RMSprop",
            ("square_avg", "grad_avg"),
            scalar_states=("step",),
            description="averages of the gradient and its square",
        ),
        Optimizer(
            "adadelta",
            "Adadelta",
            ("square_avg", "acc_delta"),
            scalar_states=("step",),
            description="averages of squared gradients and squared updates",
        ),
        Optimizer(
            "adam",
            "Adam",
            ("exp_avg", "exp_avg_sq"),
            scalar_states=("step",),
            description="first and second moment estimates",
        ),
        Optimizer(
            "adamw",
            "AdamW",
            ("exp_avg", "exp_avg_sq"),
            scalar_states=("step",),
            description="Adam with decoupled weight decay: same state",
        ),
        Optimizer(
            "adamax",
            "Adamax",
            ("exp_avg", "exp_inf"),
            scalar_states=("step",),
            description="first moment and infinity norm",
        ),
        Optimizer(
            "nadam",
            "NAdam",
            ("exp_avg", "exp_avg_sq"),
            scalar_states=("step", "mu_product"),
            description="Adam with Nesterov momentum",
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
    hint="(or describe a new one with memtheory.Optimizer)",
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


def optimizer(
    spec: OptimizerLike,
    *,
    momentum: float | None = None,
    nesterov: bool | None = None,
    centered: bool | None = None,
) -> Optimizer:
    """Look up an optimizer by name; case, spaces, ``_``, ``-`` and ``+`` do not matter.

    Parameters
    ----------
    spec : str or Optimizer
        A name (``"adam"``, ``"SGD momentum"``, ``"torch.optim.AdamW"``, Hugging
        Face's ``"adamw_torch"``), or an :class:`Optimizer`, returned unchanged.
    momentum, nesterov, centered : optional
        torch.optim's switches for SGD and RMSprop, overriding what the name
        says: ``optimizer("sgd", momentum=0.9)`` is ``"sgd+momentum"`` (only
        whether momentum is non-zero changes the state).

    Raises
    ------
    UnknownOptimizerError
        For a name memtheory does not know (the message lists the known names
        and the closest), or switches no known optimizer has.

    Examples
    --------
    >>> optimizer("AdamW").title
    'AdamW'
    >>> optimizer("sgd", momentum=0.9) is optimizer("sgd+momentum")
    True
    >>> optimizer("adamm")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownOptimizerError: unknown optimizer 'adamm'. Did you mean 'adam'? ...
    """
    found = spec if isinstance(spec, Optimizer) else OPTIMIZER_REGISTRY[spec]
    if momentum is None and nesterov is None and centered is None:
        return found
    if momentum is not None and (
        isinstance(momentum, bool) or not isinstance(momentum, Real) or not momentum >= 0
    ):
        raise InvalidSizeError(f"momentum must be a number >= 0, got {momentum!r}.")
    given = {"momentum": momentum, "nesterov": nesterov, "centered": centered}
    family, *defaults = _SWITCHES.get(found.name, (found.title, False, False, False))
    switches = [
        bool(default if value is None else value)
        for default, value in zip(defaults, given.values(), strict=True)
    ]
    name = _BY_SWITCHES.get((family, switches[0], switches[1], switches[2]))
    if name is None:
        options = ", ".join(f"{k}={v!r}" for k, v in given.items() if v is not None)
        raise UnknownOptimizerError(
            f"no optimizer memtheory knows is {found.title} with {options}. "
            "The switches describe torch.optim.SGD "
            "(momentum > 0: 'sgd+momentum'; and nesterov=True: 'nesterov') and "
            "torch.optim.RMSprop (momentum > 0: 'rmsprop+momentum'; centered=True: "
            "'rmsprop-centered'); describe another with memtheory.Optimizer.",
            name=spec,
            known=tuple(OPTIMIZERS),
        )
    return OPTIMIZERS[name]
