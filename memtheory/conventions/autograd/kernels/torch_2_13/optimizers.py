"""The optimizer step's temporaries, as ``torch.optim`` (PyTorch 2.13) allocates them.

Each implementation of each optimizer is written down as the Python statements
of its ``torch/optim/*.py`` source that allocate: ``grad = -grad`` (maximize),
``grad = grad.add(param, alpha=weight_decay)`` (coupled weight decay),
``denom = (exp_avg_sq.sqrt() / c).add_(eps)`` (Adam), and so on; in-place
operations allocate nothing. :func:`step_temporaries` runs those statements
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
>>> step_temporaries(optimizer("adam"), "for-loop", [40, 12, 28])  # 2 x 40 > 40 + 2 x 12
80
>>> step_temporaries(optimizer("adam", weight_decay=0.1), "for-loop", [40, 12, 28])
120
>>> step_temporaries(optimizer("adam", maximize=True), "foreach", [40, 12, 28])  # -grads, 1.0
84
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sympy as sp

from memtheory.errors import UnsupportedError
from memtheory.layers.base import Shape
from memtheory.optimizers import Optimizer

__all__ = ["step_temporaries", "step_text"]

_SCALAR = "float32 scalar"
"""An allocation of ``torch.tensor(1.0)``: a float32 scalar (4 bytes), whatever the dtype."""

_ITEM = "scalar"
"""A 0-dimensional tensor of the parameters' dtype (a norm read with ``.item()``)."""

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
    "adafactor",
)
"""The optimizers whose for-loop and foreach temporaries are written down here."""

Size = int | str
"""A multiple of the tensor's bytes (1: parameter-sized), or a named size: :data:`_SCALAR`,
:data:`_ITEM`, and for Adafactor ``"row"``, ``"col"`` (a row or column factor's bytes) and
``"mean"`` (``shape[-1]`` and ``shape[-2]`` both reduced to 1)."""


@dataclass(frozen=True)
class _Statement:
    """``target = <expression>``: the expression allocates ``allocs`` in order.

    The last allocation is the value bound to ``target`` (none: ``target`` is
    bound to a tensor that already exists, such as the gradient or a state
    buffer); the others die when the statement ends, and so does the tensor
    ``target`` held before unless another name still holds it.
    ``target=None`` is an expression statement; ``delete`` is ``del target``;
    ``alias`` binds ``target`` to the tensor another name holds.
    """

    target: str | None
    allocs: tuple[Size, ...] = ()
    what: str = ""
    delete: bool = False
    alias: str | None = None


def _let(target: str, *allocs: Size, what: str = "") -> _Statement:
    return _Statement(target, allocs, what)


def _run(*allocs: Size, what: str = "") -> _Statement:
    return _Statement(None, allocs, what)


def _refuse(optimizer: Optimizer, implementation: str) -> None:
    if optimizer.name not in _MODELLED:
        raise UnsupportedError(
            f"the autograd convention models the optimizer step of torch.optim's "
            f"{', '.join(_MODELLED)}, not {optimizer.title}"
            + (" (not in torch.optim)" if optimizer.torch_name is None else "")
            + ". Use another convention (convention='breakdown') for its state alone."
        )
    if implementation == "fused" and optimizer.name not in _FUSED:
        raise UnsupportedError(
            f"torch.optim.{optimizer.torch_name} has no fused implementation "
            f"(fused=True exists for SGD, Adam, AdamW and Adagrad): use "
            "implementation='for-loop' or 'foreach'."
        )


def _program(optimizer: Optimizer, implementation: str, matrix: bool = False) -> list[_Statement]:
    """Return the allocating statements of one iteration (for-loop) or of a step (foreach).

    ``matrix``: the parameter (for-loop) or group (foreach) has two or more
    dimensions, which only Adafactor treats differently.
    """
    _refuse(optimizer, implementation)
    name = optimizer.name
    if implementation == "fused":
        return []
    maximize = optimizer.maximize
    # AdamW and Adafactor decay the parameter in place: no temporary.
    decay = optimizer.weight_decay != 0 and name not in ("adamw", "adafactor")
    if name == "adafactor":
        return _adafactor_program(implementation, maximize, matrix)
    if implementation == "foreach":
        return _foreach_program(name, maximize, decay)
    return _for_loop_program(name, maximize, decay)


def _for_loop_program(name: str, maximize: bool, decay: bool) -> list[_Statement]:
    """One iteration of the for-loop implementation: the gradient, its decay, the update's."""
    neg: tuple[Size, ...] = (1,) if maximize else ()
    body: list[_Statement] = []
    if name in ("sgd", "sgd+momentum", "nesterov", "adam", "adamw", "nadam"):
        body.append(_let("grad", *neg, what="-grad" if maximize else ""))  # one statement
    else:  # grad = grads[i] (or the zip), then grad = -grad
        body += [_let("grad"), *([_let("grad", 1, what="-grad")] if maximize else [])]
    if decay:
        body.append(_let("grad", 1, what="grad + weight_decay * param"))
    key = "rmsprop" if name.startswith("rmsprop") else name
    return [*body, *_FOR_LOOP_UPDATE.get(key, ())]


_FOR_LOOP_UPDATE: dict[str, tuple[_Statement, ...]] = {
    "nesterov": (_let("grad", 1, what="grad + momentum * buf"),),
    "sgd+momentum": (_let("grad"),),  # grad = buf
    "adam": (_let("denom", 1, 1, what="denom (sqrt, then quotient)"),),
    "adamw": (_let("denom", 1, 1, what="denom (sqrt, then quotient)"),),
    "nadam": (_let("denom", 1, 1, what="denom (quotient, then sqrt)"),),
    "adagrad": (_let("std", 1, what="std = sum.sqrt()"),),
    "rmsprop": (_let("avg", 1, what="avg"),),
    "adadelta": (_let("std", 1, what="std"), _let("delta", 1, what="delta")),
    "adamax": (_run(1, what="grad.abs()"),),
}
"""What each optimizer's for-loop update allocates after its gradient (plain SGD: nothing)."""


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


def _adafactor_program(implementation: str, maximize: bool, matrix: bool) -> list[_Statement]:
    """torch/optim/_adafactor.py: norms read with .item(), factors' means, the variance estimate."""
    norm = _run(_ITEM, what="")  # param.norm(2).item(), update.norm(2).item()
    if implementation == "foreach":
        start = [_let("grads"), *([_let("grads", 1, what="-grads")] if maximize else [])]
        start += [_run(_SCALAR), norm]
        if matrix:
            middle = [
                _let("row_means", "row"),
                _Statement("row_means", delete=True),
                _let("col_means", "col"),
                _Statement("col_means", delete=True),
                _let("var_estimates", 1, what="row_var @ col_var"),
                _let("row_var_means", "mean"),
                _Statement("row_var_means", delete=True),
            ]
        else:
            middle = [
                _let("grads_squared", 1, what="grads * grads"),
                _Statement("grads_squared", delete=True),
                _let("var_estimates", 1, what="variance.clone()"),
            ]
        return [*start, *middle, _Statement("updates", alias="var_estimates"), norm]
    start = [_let("grad", *((1,) if maximize else ()), what="-grad" if maximize else ""), norm]
    if matrix:
        middle = [
            _let("row_mean", "row"),
            _let("col_mean", "col"),
            _let("var_estimate", 1, what="row_var @ col_var"),
            _run("mean"),
        ]
    else:
        middle = [
            _let("grad_squared", 1, what="grad * grad"),
            _let("var_estimate", 1, what="variance.clone()"),
        ]
    return [*start, *middle, _Statement("update", alias="var_estimate"), norm]


def _sizes(nbytes: sp.Expr, shape: Shape | None) -> dict[str, sp.Expr]:
    """Return the named sizes of one parameter tensor of ``nbytes`` bytes and ``shape``."""
    sizes = {"full": nbytes, _SCALAR: sp.Integer(4)}
    if shape is not None:
        sizes[_ITEM] = sp.simplify(nbytes / sp.Mul(*shape))
        if len(shape) >= 2:
            sizes["row"] = nbytes / shape[-1]
            sizes["col"] = nbytes / shape[-2]
            sizes["mean"] = nbytes / (shape[-1] * shape[-2])
    return sizes


def step_temporaries(
    optimizer: Optimizer,
    implementation: str,
    tensor_bytes: Sequence[sp.Expr | int],
    shapes: Sequence[Shape] | None = None,
) -> sp.Expr:
    """Most bytes of temporaries alive at once during ``optimizer.step()``.

    ``tensor_bytes`` lists each parameter tensor's bytes in ``module.parameters()``
    order (the temporaries have the parameters' dtype); Adafactor also needs
    their ``shapes``.
    """
    _refuse(optimizer, implementation)
    if optimizer.name == "adafactor" and shapes is None:
        raise UnsupportedError("Adafactor's step temporaries depend on the parameters' shapes.")
    tensors = [
        _sizes(sp.sympify(nbytes), None if shapes is None else shapes[i])
        for i, nbytes in enumerate(tensor_bytes)
    ]
    kinds = [shapes is not None and len(shapes[i]) >= 2 for i in range(len(tensors))]
    runs: list[tuple[dict[str, sp.Expr], list[_Statement]]] = []
    if implementation == "foreach":  # one group per kind (Adafactor), in order of appearance
        for matrix in dict.fromkeys(kinds):
            group = [t for t, kind in zip(tensors, kinds, strict=True) if kind == matrix]
            summed = {key: sp.Add(*(t[key] for t in group)) for key in group[0]}
            summed[_SCALAR] = sp.Integer(4)
            if _ITEM in group[0]:
                summed[_ITEM] = group[0][_ITEM]
            runs.append((summed, _program(optimizer, implementation, matrix)))
    else:
        runs = [
            (sizes, _program(optimizer, implementation, matrix))
            for sizes, matrix in zip(tensors, kinds, strict=True)
        ]
    return _run_programs(runs)


def _run_programs(runs: Sequence[tuple[dict[str, sp.Expr], list[_Statement]]]) -> sp.Expr:
    """Run the statements with Python's lifetimes; return the most temporary bytes at once."""
    bound: dict[str, int] = {}  # name -> tensor
    live: dict[int, sp.Expr] = {}  # tensor -> bytes
    moments: list[sp.Expr] = []

    def release(name: str) -> None:
        tensor = bound.pop(name, None)
        if tensor is not None and tensor not in bound.values():
            del live[tensor]

    for sizes, statements in runs:
        for statement in statements:
            target = statement.target or ""
            if statement.delete:
                release(target)
                continue
            if statement.alias is not None:
                tensor = bound.get(statement.alias)
                release(target)
                if tensor is not None:
                    bound[target] = tensor
                continue
            made: list[sp.Expr] = []
            for size in statement.allocs:
                made.append(size * sizes["full"] if isinstance(size, int) else sizes[size])
                moments.append(sp.Add(*live.values(), *made))
            if statement.target is not None:
                release(target)
                if made:
                    tensor = len(moments)  # a fresh identity
                    live[tensor] = made[-1]
                    bound[target] = tensor
    unique = list(dict.fromkeys(moments))
    return sp.Max(*unique) if unique else sp.Integer(0)


def step_text(optimizer: Optimizer, implementation: str) -> str:
    """Say what the step's temporaries are, in words."""
    program = _program(optimizer, implementation, matrix=True)
    parts = [s.what for s in program if s.allocs and s.what]
    if not parts:
        return "no temporaries"
    if implementation == "foreach":
        return "over all parameters at once: " + ", ".join(parts)
    return (
        "one parameter at a time: " + ", ".join(parts) + " (the previous parameter's still bound)"
    )
