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

from memtheory.errors import UnknownOptimizerError

__all__ = ["OPTIMIZERS", "Optimizer", "OptimizerLike", "optimizer"]


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

_ALIASES = {
    "momentum": "sgd+momentum",
    "sgd-momentum": "sgd+momentum",
    "sgd_momentum": "sgd+momentum",
    "sgdm": "sgd+momentum",
    "sgd+nesterov": "nesterov",
    "rms": "rmsprop",
    "rmsprop-momentum": "rmsprop+momentum",
}

OptimizerLike = str | Optimizer


def optimizer(spec: OptimizerLike) -> Optimizer:
    """Look up an optimizer by name (case-insensitive; ``"momentum"`` means SGD with momentum).

    Raises
    ------
    UnknownOptimizerError
        For a name memtheory does not know; the message lists the known names.

    Examples
    --------
    >>> optimizer("AdamW").title
    'AdamW'
    >>> optimizer("adamm")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownOptimizerError: unknown optimizer 'adamm'. Known optimizers: sgd, ...
    """
    if isinstance(spec, Optimizer):
        return spec
    if not isinstance(spec, str):
        raise UnknownOptimizerError(
            f"an optimizer is given by name, got {spec!r}. "
            f"Known optimizers: {', '.join(OPTIMIZERS)}."
        )
    key = spec.strip().lower().replace(" ", "")
    key = _ALIASES.get(key, key)
    try:
        return OPTIMIZERS[key]
    except KeyError:
        raise UnknownOptimizerError(
            f"unknown optimizer {spec!r}. Known optimizers: {', '.join(OPTIMIZERS)} "
            "(or describe a new one with memtheory.Optimizer)."
        ) from None
