"""memtheory's optimizers as ``torch.optim`` optimizers: the same state, options and implementation.

:func:`torch_optimizer` builds the ``torch.optim`` optimizer that a
:class:`~memtheory.optimizers.Optimizer` describes, so a prediction and a
measurement (:func:`~memtheory.torch.measure`) run the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.optimizers import OptimizerLike, optimizer

__all__ = ["torch_optimizer"]

_SWITCHES: dict[str, dict[str, float | bool]] = {
    "sgd+momentum": {"momentum": 0.9},
    "nesterov": {"momentum": 0.9, "nesterov": True},
    "rmsprop+momentum": {"momentum": 0.9},
    "rmsprop-centered": {"centered": True},
}
"""The ``torch.optim`` keywords that make each of memtheory's SGD and RMSprop variants."""

_IMPLEMENTATIONS: dict[str, dict[str, bool]] = {
    "for-loop": {"foreach": False},
    "foreach": {"foreach": True},
    "fused": {"fused": True},
}


def torch_optimizer(
    spec: OptimizerLike,
    parameters: Iterable[torch.Tensor],
    *,
    implementation: str | None = None,
    lr: float | None = None,
) -> torch.optim.Optimizer:
    """Build the ``torch.optim`` optimizer that ``spec`` describes, options included.

    Parameters
    ----------
    spec : str or Optimizer
        As :func:`memtheory.optimizer` takes it (``memtheory.optimizer("adam", amsgrad=True)``).
    parameters : iterable of torch.Tensor
    implementation : {"for-loop", "foreach", "fused"}, optional
        Force an implementation; by default PyTorch picks (for-loop on CPU).
    lr : float, optional
        The learning rate; torch.optim's default when not given.

    Raises
    ------
    UnsupportedError
        For an optimizer torch.optim does not have (Lion).

    Examples
    --------
    >>> import torch
    >>> from memtheory import optimizer
    >>> p = [torch.nn.Parameter(torch.ones(3))]
    >>> adam = torch_optimizer(optimizer("adam", weight_decay=0.1, amsgrad=True), p)
    >>> type(adam).__name__, adam.defaults["weight_decay"], adam.defaults["amsgrad"]
    ('Adam', 0.1, True)
    >>> torch_optimizer("nesterov", p, implementation="foreach").defaults["foreach"]
    True
    """
    chosen = optimizer(spec)
    if chosen.torch_name is None:
        raise UnsupportedError(f"{chosen.title} is not in torch.optim: nothing to build.")
    if implementation is not None and implementation not in _IMPLEMENTATIONS:
        raise InvalidArgumentError(
            f"implementation must be one of {', '.join(_IMPLEMENTATIONS)}, got {implementation!r}."
        )
    keywords: dict[str, float | bool] = {
        **_SWITCHES.get(chosen.name, {}),
        "weight_decay": chosen.weight_decay,
        "maximize": chosen.maximize,
    }
    if chosen.amsgrad:
        keywords["amsgrad"] = True
    if implementation is not None:
        keywords.update(_IMPLEMENTATIONS[implementation])
    if lr is not None:
        keywords["lr"] = lr
    cls = getattr(torch.optim, chosen.torch_name)
    built: torch.optim.Optimizer = cls(parameters, **keywords)
    return built
