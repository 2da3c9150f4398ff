"""The optimizer step's temporaries, as ``torch.optim`` (PyTorch 2.13) allocates them.

Each implementation of each optimizer is written down as the Python statements
of its ``torch/optim/*.py`` source that allocate: ``grad = -grad`` (maximize),
``grad = grad.add(param, alpha=weight_decay)`` (coupled weight decay),
``denom = (exp_avg_sq.sqrt() / c).add_(eps)`` (Adam), and so on; in-place
operations allocate nothing. :func:`_step_temporaries` runs those statements
with Python's lifetimes: an expression's intermediates die when the statement
ends, and a name keeps its tensor until it is bound again, so in the for-loop
implementation the previous parameter's ``denom`` (or weight-decayed gradient)
is still alive while the next parameter's are computed. The foreach
implementation runs the same statements once over the list of all parameters
(a list operation allocates one tensor per parameter at once); fused kernels
allocate no tensors. The result is the most temporary bytes alive at once,
which the training timeline adds at its "optimizer step" moment.

Examples
--------
>>> from memtheory.optimizers import optimizer
>>> _step_temporaries(optimizer("adam"), "for-loop", [40, 12, 28])  # 2 x 40 > 40 + 2 x 12
80
>>> _step_temporaries(optimizer("adam", weight_decay=0.1), "for-loop", [40, 12, 28])
120
>>> _step_temporaries(optimizer("adam", maximize=True), "foreach", [40, 12, 28])  # -grads, 1.0
84
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sympy as sp

from memtheory.errors import UnsupportedError
from memtheory.layers.base import Shape
from memtheory.layers.conv import Conv2d
from memtheory.layers.core import Dense
from memtheory.layers.layer_norm import LayerNorm
from memtheory.layers.normalization import BatchNorm2d
from memtheory.network import Network
from memtheory.optimizers import Optimizer
from memtheory.precision import Precision

__all__: list[str] = []

_SCALAR = -4
"""An allocation of ``torch.tensor(1.0)``: a float32 scalar (4 bytes), whatever the dtype."""

_FUSED = ("sgd", "sgd+momentum", "nesterov", "adam", "adamw", "adagrad")
"""The optimizers with a ``fused=True`` implementation on CPU."""

_MODELLED = (
    *_FUSED,
    "rmsprop",
    "rmsprop+momentum",
    "rmsprop-centered",
    "adadelta",
    "adamax",
    "nadam",
)
"""The optimizers whose for-loop and foreach temporaries are written down here."""


@dataclass(frozen=True)
class _Statement:
    """``target = <expression>``: the expression allocates ``allocs`` in order.

    Each entry is a multiple of the tensor's bytes (1: a parameter-sized
    tensor), or :data:`_SCALAR`. The last allocation is the value bound to
    ``target`` (none: ``target`` is bound to a tensor that already exists, such
    as the gradient or a state buffer); the others die when the statement
    ends, and so does the tensor ``target`` held before. ``target=None`` is an
    expression statement; ``delete`` is ``del target``.
    """

    target: str | None
    allocs: tuple[int, ...] = ()
    what: str = ""
    delete: bool = False


def _let(target: str, *allocs: int, what: str = "") -> _Statement:
    return _Statement(target, allocs, what)


def _run(*allocs: int, what: str = "") -> _Statement:
    return _Statement(None, allocs, what)


def _program(optimizer: Optimizer, implementation: str) -> list[_Statement]:
    """Return the allocating statements of one iteration (for-loop) or of a step (foreach)."""
    name = optimizer.name
    if name not in _MODELLED:
        raise UnsupportedError(
            f"the autograd convention models the optimizer step of torch.optim's "
            f"{', '.join(_MODELLED)}, not {optimizer.title}"
            + (" (not in torch.optim)" if optimizer.torch_name is None else "")
            + ". Use another convention (convention='breakdown') for its state alone."
        )
    if implementation == "fused":
        if name not in _FUSED:
            raise UnsupportedError(
                f"torch.optim.{optimizer.torch_name} has no fused implementation "
                f"(fused=True exists for SGD, Adam, AdamW and Adagrad): use "
                "implementation='for-loop' or 'foreach'."
            )
        return []
    maximize = optimizer.maximize
    decay = optimizer.weight_decay != 0 and name != "adamw"  # AdamW decays the parameter
    neg = (1,) if maximize else ()
    if implementation == "foreach":
        return _foreach_program(name, maximize, decay)
    body: list[_Statement] = []
    if name in ("sgd", "sgd+momentum", "nesterov", "adam", "adamw", "nadam"):
        body.append(_let("grad", *neg, what="-grad" if maximize else ""))  # one statement
    else:  # grad = grads[i] (or the zip), then grad = -grad
        body += [_let("grad"), *([_let("grad", 1, what="-grad")] if maximize else [])]
    if decay:
        body.append(_let("grad", 1, what="grad + weight_decay * param"))
    if name == "nesterov":
        body.append(_let("grad", 1, what="grad + momentum * buf"))
    elif name == "sgd+momentum":
        body.append(_let("grad"))  # grad = buf
    elif name in ("adam", "adamw"):
        body.append(_let("denom", 1, 1, what="denom (sqrt, then quotient)"))
    elif name == "nadam":
        body.append(_let("denom", 1, 1, what="denom (quotient, then sqrt)"))
    elif name == "adagrad":
        body.append(_let("std", 1, what="std = sum.sqrt()"))
    elif name.startswith("rmsprop"):
        body.append(_let("avg", 1, what="avg"))
    elif name == "adadelta":
        body += [_let("std", 1, what="std"), _let("delta", 1, what="delta")]
    elif name == "adamax":
        body.append(_run(1, what="grad.abs()"))
    return body


def _foreach_program(name: str, maximize: bool, decay: bool) -> list[_Statement]:
    neg = [_let("grads", 1, what="-grads")] if maximize else []
    one = _run(_SCALAR, what="torch.tensor(1.0)")  # steps += 1 on CPU
    decayed = []
    if decay and not maximize:  # with maximize the negated copy is decayed in place
        decayed = [_let("grads", 1, what="grads + weight_decay * params")]
    if name in ("sgd", "sgd+momentum", "nesterov"):
        return [*neg, *decayed, *([_let("grads")] if name == "sgd+momentum" else [])]
    if name in ("adam", "adamw"):
        done = _Statement("grads", delete=True)
        return [*neg, one, *decayed, done, _let("sqrt", 1, what="sqrt(exp_avg_sqs)")]
    if name == "nadam":
        return [*neg, one, *decayed, _let("sqrt", 1, what="sqrt(exp_avg_sqs)")]
    if name == "adagrad":
        numerator = [] if decay or maximize else [_let("numerator", 1, what="-clr * grads")]
        return [*neg, one, *decayed, _let("std", 1, what="sqrt(state_sums)"), *numerator]
    if name.startswith("rmsprop"):
        return [*neg, one, *decayed, _let("avg", 1, what="avg")]
    if name == "adadelta":
        return [one, *neg, *decayed, _let("std", 1, what="std"), _let("deltas", 1, what="deltas")]
    absolute = [] if decay or maximize else [_let("grads", 1, what="grads.abs()")]
    return [*neg, one, *decayed, *absolute]  # adamax


def _step_temporaries(
    optimizer: Optimizer, implementation: str, tensor_bytes: Sequence[sp.Expr | int]
) -> sp.Expr:
    """Most bytes of temporaries alive at once during ``optimizer.step()``.

    ``tensor_bytes`` lists each parameter tensor's bytes in ``module.parameters()``
    order (the temporaries have the parameters' dtype).
    """
    program = _program(optimizer, implementation)
    if implementation == "foreach":
        runs = [(sp.Add(*tensor_bytes), program)]
    else:
        runs = [(sp.sympify(nbytes), program) for nbytes in tensor_bytes]
    bound: dict[str, sp.Expr] = {}
    moments: list[sp.Expr] = []
    for nbytes, statements in runs:
        for statement in statements:
            if statement.delete:
                bound.pop(statement.target or "", None)
                continue
            made: list[sp.Expr] = []
            for size in statement.allocs:
                made.append(sp.Integer(4) if size == _SCALAR else size * nbytes)
                moments.append(sp.Add(*bound.values(), *made))
            if statement.target is not None:
                bound.pop(statement.target, None)
                if made:
                    bound[statement.target] = made[-1]
    unique = list(dict.fromkeys(moments))
    return sp.Max(*unique) if unique else sp.Integer(0)


def _step_text(optimizer: Optimizer, implementation: str) -> str:
    """Say what the step's temporaries are, in words."""
    program = _program(optimizer, implementation)
    parts = [s.what for s in program if s.allocs and s.what]
    if not parts:
        return "no temporaries"
    if implementation == "foreach":
        return "over all parameters at once: " + ", ".join(parts)
    return (
        "one parameter at a time: " + ", ".join(parts) + " (the previous parameter's still bound)"
    )


def _parameter_shapes(network: Network) -> dict[str, Shape]:
    """Return each parameter tensor's shape (for Adafactor's factored state), by tensor name."""
    shapes: dict[str, Shape] = {}
    for row in network.rows:
        layer, features = row.layer, row.input_shape[-1] if row.input_shape else 0
        if row.weights != 0:
            if isinstance(layer, Dense):
                shapes[f"{row.name}.weight"] = (layer.units, features)
            elif isinstance(layer, Conv2d):
                kh, kw = layer._kernel_size()
                in_channels = row.input_shape[1] / layer.groups
                shapes[f"{row.name}.weight"] = (layer.out_channels, in_channels, kh, kw)
            elif isinstance(layer, BatchNorm2d | LayerNorm):
                shapes[f"{row.name}.weight"] = (row.weights,)
            else:
                raise UnsupportedError(
                    f"Adafactor keeps factored state for matrices, so it needs the shape of "
                    f"{row.name}'s weight; the autograd convention knows the weight shapes of "
                    "Dense, Conv2d, BatchNorm2d and LayerNorm only."
                )
        if row.biases != 0:
            shapes[f"{row.name}.bias"] = (row.biases,)
    return shapes


def _state_bytes(optimizer: Optimizer, network: Network, precision: Precision) -> sp.Expr:
    """Bytes of the parameter-shaped (or, for Adafactor, factored) optimizer state.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network
    >>> from memtheory.optimizers import optimizer
    >>> from memtheory.precision import precision
    >>> net = Network([Input((784,), batch=64), Dense(256)])
    >>> _state_bytes(optimizer("adafactor"), net, precision("fp32"))  # (256 + 784 + 256) x 4
    5184
    """
    if optimizer.factored_state_names:
        shapes = _parameter_shapes(network).values()
        count = sp.Add(*(optimizer.state_elements(shape) for shape in shapes))
    else:
        rows = network.rows
        count = optimizer.states_per_parameter * sp.Add(*(r.weights + r.biases for r in rows))
    return count * precision.optimizer_state.bytes
