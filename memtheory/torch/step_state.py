"""What a training step's state holds, shared by ``measure`` and ``trace``.

:func:`state_tensors` lists an optimizer's state tensors (Adam's moments and
step counts), and :func:`eval_without_gradients` puts a module in eval mode
with its gradients set aside for an inference pass, and back afterwards.

Examples
--------
>>> import torch
>>> model = torch.nn.Linear(2, 2)
>>> model(torch.ones(1, 2)).sum().backward()
>>> with eval_without_gradients(model) as parameters:
...     model.training, parameters[0].grad
(False, None)
>>> model.training, model.weight.grad is not None
(True, True)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["eval_without_gradients", "state_tensors"]


def state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Return every tensor in the optimizer's per-parameter state.

    Examples
    --------
    >>> import torch
    >>> p = torch.nn.Parameter(torch.ones(3))
    >>> adam = torch.optim.Adam([p])
    >>> p.sum().backward(); adam.step()
    >>> sorted(t.numel() for t in state_tensors(adam))  # step, exp_avg, exp_avg_sq
    [1, 3, 3]
    """
    return [
        value
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    ]


@contextmanager
def eval_without_gradients(module: nn.Module) -> Iterator[list[nn.Parameter]]:
    """Run the block in eval mode with the gradients set aside; give both back after.

    Yields the module's parameters. The module is put back in training mode.
    """
    parameters = list(module.parameters())
    grads = [p.grad for p in parameters]
    for p in parameters:
        p.grad = None
    module.eval()
    try:
        yield parameters
    finally:
        module.train()
        for p, grad in zip(parameters, grads, strict=True):
            p.grad = grad
