"""``trace``: the exact memory of a PyTorch training step, as formulas, without running it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import sympy as sp
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from memtheory.errors import (
    InvalidArgumentError,
    MemtheoryError,
    MissingArgumentError,
    TraceTimeoutError,
    UnsupportedError,
)
from memtheory.max_pruning import maximum, undominated
from memtheory.optimizers import Optimizer as NamedOptimizer
from memtheory.optimizers import OptimizerLike
from memtheory.recipes import Setup
from memtheory.torch.loop import Loop
from memtheory.torch.setup_step import DEFAULT_OPTIMIZER, SetupStep, setup_step
from memtheory.torch.tracing.branch_values import branches_taken, mask_branches
from memtheory.torch.tracing.budget import DEFAULT_TIME_LIMIT, time_budget
from memtheory.torch.tracing.clashes import clash_error
from memtheory.torch.tracing.errors import failed, located
from memtheory.torch.tracing.fakes import (
    fake_inputs,
    fake_parameters,
    layout_of,
    shared_storage_notes,
)
from memtheory.torch.tracing.fit import FitFailedError, fitted_trace
from memtheory.torch.tracing.guards import (
    Specialisation,
    conditions,
    name_user_frames,
    specialised,
)
from memtheory.torch.tracing.modules import LOSS
from memtheory.torch.tracing.numbers_memo import memoised_numbers
from memtheory.torch.tracing.ones import answered, below_two
from memtheory.torch.tracing.quiet import quiet_fake_tensor_errors
from memtheory.torch.tracing.result import ModuleRow, TracedMemory
from memtheory.torch.tracing.rewrites import SizeGenericFunctions
from memtheory.torch.tracing.size_arithmetic_memo import memoised_size_arithmetic
from memtheory.torch.tracing.sizes import SymbolMap, dimension_symbols, from_polynomial
from memtheory.torch.tracing.step import Departed, Expected, StepRecord, record_step
from memtheory.torch.tracing.verify import drop_harmless
from memtheory.torch.versions import warn_if_unchecked_torch

__all__ = ["trace"]

OptimizerChoice = (
    OptimizerLike | torch.optim.Optimizer | Callable[[list[torch.Tensor]], torch.optim.Optimizer]
)


def trace(
    model: nn.Module,
    example_inputs: Any,
    dims: Mapping[Any, int],
    *,
    loss: Callable[..., torch.Tensor] | None = None,
    target: torch.Tensor | None = None,
    optimizer: OptimizerChoice = DEFAULT_OPTIMIZER,
    dtype: torch.dtype | str | None = None,
    autocast: torch.dtype | str | None = None,
    keeps_outputs: bool | None = None,
    setup: Setup | str | Mapping[str, Any] | None = None,
    fit: bool = True,
    check_conditions: bool = True,
    at_one: bool = True,
    time_limit: float = DEFAULT_TIME_LIMIT,
) -> TracedMemory:
    """Trace a training step of ``model`` on fake tensors into exact formulas in its sizes.

    Nothing is computed and no weight is allocated: the step (forward, loss,
    backward, optimizer step) runs on PyTorch's fake tensors, whose sizes are
    symbols, and every storage it creates and frees is followed as
    :func:`memtheory.torch.measure` follows them, so that the formulas,
    evaluated at any sizes, are what ``measure`` would report there (CPU
    tensor storages, to the byte).

    Parameters
    ----------
    model : torch.nn.Module
        Any module, on the CPU or built on the meta device (``with
        torch.device("meta"):``), whose weights are then never allocated.
    example_inputs : tensor, tuple or dict
        What the model is called with: ``model(x)``, ``model(*inputs)`` or
        ``model(**inputs)``. Only shapes and dtypes are read (meta tensors are
        fine), except a Hugging Face model's ``attention_mask``: all ones, it is
        skipped as the model's own code skips it, and the result's conditions
        say so (:mod:`memtheory.torch.tracing.branch_values`).
    dims : mapping
        A name (``"B"``, or a sympy Symbol) for each example size to keep
        symbolic, mapped to that size: ``{"B": 4, "S": 128}`` makes every
        input dimension of size 4 the batch ``B`` and of size 128 ``S``.
        Sizes must be at least 2 and distinct, and should differ from the
        model's fixed sizes.
    loss : callable, optional
        ``loss(output, target)`` (or ``loss(output)`` without ``target``),
        e.g. ``torch.nn.CrossEntropyLoss()``. By default the model's output
        is the loss: its ``.loss`` (a Hugging Face output given ``labels``)
        or the output itself when it is a scalar.
    target : torch.Tensor, optional
        Labels for ``loss``; its sizes are matched against ``dims`` too.
    optimizer : str, memtheory Optimizer, torch optimizer or callable, default "adamw"
        A memtheory optimizer (``"adam"``, ``"sgd+momentum"``, ...) built with
        :func:`memtheory.torch.torch_optimizer`, a ``torch.optim`` optimizer
        (one of its class, with its ``defaults``, is built over the fake
        parameters), or ``factory(parameters)`` returning any ``torch.optim``
        optimizer. With ``setup``, the Setup's optimizer and implementation.
    dtype : torch.dtype or str, optional
        Cast floating parameters, buffers and inputs to this dtype first
        (``torch.bfloat16``, or a name: ``"bf16"``, ``"fp16"``, ``"fp32"``, ``"fp64"``).
    autocast : torch.dtype or str, optional
        Run the forward and the loss under ``torch.autocast("cpu", dtype=autocast)``:
        ``torch.bfloat16`` or ``torch.float16`` (or ``"bf16"``, ``"fp16"``).
    keeps_outputs : bool, default True
        Which loop is traced (:class:`memtheory.torch.loop.Loop`, the result's
        :attr:`~TracedMemory.loop`): True holds the model's output (logits,
        a decoder's cache) until the step ends, as ``out = model(**batch);
        out.loss.backward()`` does; False frees it once the loss exists, as
        ``model(**batch).loss.backward()`` and Hugging Face's ``Trainer`` do.
        With ``setup``, the Setup's ``keeps_logits``.
    setup : Setup, str or mapping, optional
        A :class:`memtheory.recipes.Setup` or a recipe's name
        (``"pytorch-amp"``, ``"hf-trainer"``): the precision (``dtype`` and
        ``autocast``), the optimizer and its implementation, and
        ``keeps_outputs`` are the Setup's
        (:func:`memtheory.torch.setup_step.setup_step`). The model is checked,
        never changed: a Hugging Face model's attention and gradient
        checkpointing must be the Setup's. What one CPU process cannot run
        (``zero``, ``offload``, ``quantization``, ``mixed-*`` precision) is
        refused, and so is an explicit keyword above that says otherwise. The
        result keeps the Setup and prints its ``assumed:`` lines.
    fit : bool, default True
        If the model's code fixes a size to its example value (e.g. Hugging
        Face mask code), or the symbolic trace fails on an operation (an LSTM
        or GRU, ``F.interpolate(size=...)``), trace at several concrete sizes
        the model accepts and fit each moment exactly (see
        :func:`memtheory.torch.tracing.fit.fitted_trace`); False raises
        instead, naming the size and the line, or the operation and the module.
    check_conditions : bool, default True
        Trace again at fixed sizes just beyond each condition on one size
        (:mod:`memtheory.torch.tracing.verify`, at most
        :data:`~memtheory.torch.tracing.verify.MAX_CHECKS` traces): one
        under which the bytes are those of the formulas (a kernel choice such
        as ``B < 16``, ``B >= 2``) stops limiting evaluation and is marked
        harmless. False skips this (faster; every condition then limits).
    at_one : bool, default True
        Where a check finds that the formulas do not hold at a size of 1
        (``B >= 2`` stays), trace the step once more with that size at 1 and
        the other sizes symbolic, and answer that size from it
        (:mod:`memtheory.torch.tracing.ones`; on GPT-2 small at B=4, S=512
        this took about as long again: at B = 1 transformers' causal-LM loss
        saves its shifted labels without a copy, a view of the padded labels'
        S + 1 integers, 8 bytes more than the formulas). False skips it: that
        size of 1 is then refused.
    time_limit : float, default 1800
        Seconds the whole trace may take; past them it stops with a
        :class:`~memtheory.errors.TraceTimeoutError` (a forward that sleeps
        or waits cannot hang it).

    Returns
    -------
    TracedMemory
        A Footprint: components, total, the step's peak with its moments, the
        inference peak, where the formulas hold, and a per-module table.

    Raises
    ------
    UntraceableError
        For an operation whose output shape depends on values (``nonzero``),
        code that reads values, or an operator without a fake kernel, and for
        any other error the step raises on fake tensors (a move to ``"cuda"``,
        runaway recursion): the operator and the module are named.
    InvalidArgumentError
        Where a real step would raise a dtype error (an ``int64`` or
        ``float64`` input to a ``float32`` ``Linear``): the operator, the
        module and the fix are named.
    TraceTimeoutError
        Past ``time_limit`` seconds.

    Notes
    -----
    The model's ``forward`` (and the loss) really run, on fake tensors:
    twice for a symbolic trace (the training step and the inference pass),
    and twice more for each condition ``check_conditions`` checks (at most
    :data:`~memtheory.torch.tracing.verify.MAX_CHECKS`).
    A fitted trace runs them twice at each size it traces: for ``k`` symbols
    and degree ``d``, ``C(k + d, d) + 2`` sizes (8 for B and S at degree 2,
    more if the degree must rise), each size once. Side effects in
    ``forward`` (printing, counting calls, writing files) happen that often.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    >>> memory = trace(model, torch.randn(8, 16), {"B": 8}, loss=nn.CrossEntropyLoss(),
    ...                target=torch.randint(0, 4, (8,)), optimizer="adam")
    >>> memory["saved_activations"]  # ReLU output, log-probabilities, the loss's total weight
    144*B + 4
    >>> from memtheory.torch import measure
    >>> x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    >>> measured = measure(model, x, nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()),
    ...                    target=y)
    >>> memory.evaluate(B=64).peak == measured.peak
    True
    >>> print(memory.loop)  # the loop traced, as measure runs it by default
    out = model(x); loss_fn(out, y).backward() (outputs kept until the step ends)

    ``measure`` takes the same arguments (``dims`` is not needed there):

    >>> again = measure(model, x, loss=nn.CrossEntropyLoss(), target=y, optimizer="adam",
    ...                 keeps_outputs=False)
    >>> x8, y8 = torch.randn(8, 16), torch.randint(0, 4, (8,))
    >>> trace(model, x8, {"B": 8}, loss=nn.CrossEntropyLoss(), target=y8, optimizer="adam",
    ...       keeps_outputs=False).evaluate(B=64).peak == again.peak
    True

    A recipe says the step for both (``"pytorch-amp"``: ``autocast="bf16"``,
    AdamW with ``foreach=True``, the outputs kept), and the result says it back:

    >>> amp = trace(model, x8, {"B": 8}, loss=nn.CrossEntropyLoss(), target=y8,
    ...             setup="pytorch-amp")
    >>> amp.evaluate(B=64).peak == measure(model, x, loss=nn.CrossEntropyLoss(), target=y,
    ...                                    setup="pytorch-amp").peak
    True
    >>> print(amp.assumed[2])
    optimizer adamw, foreach implementation (PyTorch's default on cuda)
    """
    if not isinstance(model, nn.Module):
        raise InvalidArgumentError(
            f"trace() takes a torch.nn.Module, got {type(model).__name__}."
        )
    warn_if_unchecked_torch()
    sizes = dimension_symbols(dims)
    told = _told(model, setup, _dtype(dtype, "dtype"), _dtype(autocast, "autocast"), optimizer,
                 keeps_outputs)
    loop = Loop(keeps_outputs=told.keeps_outputs, loss_inside=loss is None)
    branches = mask_branches(model, example_inputs)
    step = _StepChoices(loss, target, told.optimizer, told.dtype, told.autocast,
                        told.keeps_outputs, branches.skipped, check_conditions, at_one=at_one)
    was_training = model.training
    model.train()
    try:
        with (time_budget(time_limit), quiet_fake_tensor_errors(),
              branches_taken(model, branches)):
            traced = _traced(model, example_inputs, sizes, step, fit)
        return _told_everywhere(traced, loop, branches.conditions, branches.notes, told)
    finally:
        model.train(was_training)
        _forget_shape_envs()


@dataclass(frozen=True)
class _Told:
    """The step's precision, optimizer and loop: as the keywords or the Setup say."""

    dtype: torch.dtype | None
    autocast: torch.dtype | None
    optimizer: OptimizerChoice
    keeps_outputs: bool
    setup: Setup | None = None
    assumed: tuple[str, ...] = ()


def _told(
    model: nn.Module,
    setup: Setup | str | Mapping[str, Any] | None,
    dtype: torch.dtype | None,
    autocast: torch.dtype | None,
    optimizer: Any,
    keeps_outputs: bool | None,
) -> _Told:
    """Read the keywords, or map the Setup onto them (refusing a keyword that contradicts it)."""
    if setup is None:
        chosen = "adamw" if optimizer is DEFAULT_OPTIMIZER else optimizer
        return _Told(dtype, autocast, chosen, True if keeps_outputs is None else keeps_outputs)
    mapped: SetupStep = setup_step(setup, model, dtype=dtype, autocast=autocast,
                                   optimizer=optimizer, keeps_outputs=keeps_outputs)
    return _Told(mapped.dtype, mapped.autocast, mapped.optimizer, mapped.keeps_outputs,
                 mapped.setup, mapped.assumed)


@dataclass(frozen=True)
class _StepChoices:
    """What the step runs besides the model: the loss, the optimizer, dtypes, the loop."""

    loss: Callable[..., torch.Tensor] | None
    target: torch.Tensor | None
    optimizer: OptimizerChoice
    dtype: torch.dtype | None
    autocast: torch.dtype | None
    keeps_outputs: bool
    skipped: frozenset[str] = frozenset()
    check_conditions: bool = True
    at_one: bool = True
    fixed_at_one: tuple[str, ...] = ()


_DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
    "fp64": torch.float64,
    "float64": torch.float64,
    "double": torch.float64,
}


def _dtype(value: Any, name: str) -> torch.dtype | None:
    """Read ``dtype=`` or ``autocast=``: a floating torch.dtype or its name (``"bf16"``)."""
    if value is None:
        return None
    chosen = _DTYPES.get(value.strip().lower()) if isinstance(value, str) else value
    allowed = (torch.bfloat16, torch.float16) if name == "autocast" else tuple(_DTYPES.values())
    if not isinstance(chosen, torch.dtype) or chosen not in allowed:
        names = "'bf16', 'fp16'" if name == "autocast" else "'bf16', 'fp16', 'fp32', 'fp64'"
        raise InvalidArgumentError(
            f"{name}= takes a floating torch.dtype or its name ({names}), got {value!r:.60}"
            + (" (CPU autocast runs in bfloat16 or float16 only)" if name == "autocast" else "")
            + f". Pass e.g. {name}=torch.bfloat16."
        )
    return chosen


def _told_everywhere(
    traced: TracedMemory, loop: Loop, conditions: tuple[str, ...], notes: tuple[str, ...],
    told: _Told,
) -> TracedMemory:
    """Return the result, and each trace at 1 it keeps, with the loop, Setup and branches."""
    return replace(
        traced,
        loop=loop,
        conditions=(*traced.conditions, *conditions),
        notes=(*traced.notes, *notes),
        setup=told.setup,
        assumed=told.assumed,
        at_one={symbol: _told_everywhere(piece, loop, conditions, notes, told)
                for symbol, piece in traced.at_one.items()},
    )


def _forget_shape_envs() -> None:
    """Empty the caches that ShapeEnv's methods keep on the class, keyed by the ShapeEnv.

    PyTorch caches ``ShapeEnv`` methods with ``functools.lru_cache`` (some
    unbounded), so every traced ShapeEnv, with its symbols and fake-tensor
    cache, stayed alive after its trace: about 2 MB more per ``trace`` call.
    The caches only save time within one trace.
    """
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    for value in vars(ShapeEnv).values():
        clear = getattr(value, "cache_clear", None)
        if callable(clear):
            clear()


def _traced(
    model: nn.Module, example_inputs: Any, sizes: dict[int, sp.Symbol], step: _StepChoices,
    fit: bool,
) -> TracedMemory:
    """Trace, noting the example inputs that were views (traced as fresh tensors)."""
    with _ConcreteSteps(model, step) as concrete:
        memory = _formulas(model, example_inputs, sizes, step, fit, concrete)
    views = shared_storage_notes((example_inputs, step.target))
    return replace(memory, notes=(*memory.notes, *views)) if views else memory


def _formulas(
    model: nn.Module, example_inputs: Any, sizes: dict[int, sp.Symbol], step: _StepChoices,
    fit: bool, concrete: _ConcreteSteps,
    done: dict[frozenset[str], TracedMemory] | None = None,
) -> TracedMemory:
    """Trace; where the formulas do not hold at a size of 1, trace there too (:mod:`.ones`).

    ``done`` keeps the traces at 1 by the sizes fixed there, so that ``B = 1,
    S = 1`` is traced once, not once under each of ``B = 1`` and ``S = 1``.
    ``concrete`` traces the step at fixed sizes, for every check and fit of the call.
    """
    memory = _general(model, example_inputs, sizes, step, fit, concrete)
    if not (step.check_conditions and step.at_one):
        return memory
    done = {} if done is None else done
    fixed = frozenset(step.fixed_at_one)
    at_one: dict[sp.Symbol, TracedMemory] = {}
    constraints = dict(memory.constraints)
    words = list(memory.conditions)
    for size, symbol in sizes.items():
        label = below_two(constraints, symbol)
        if label is None:
            continue
        key = fixed | {symbol.name}
        if key not in done:
            piece = _at_one(model, example_inputs, sizes, size, step, fit, concrete, done)
            if piece is None:
                continue
            done[key] = piece
        at_one[symbol] = done[key]
        del constraints[label]
        words = [answered(word, label, symbol) for word in words]
    if not at_one:
        return memory
    return replace(memory, constraints=constraints, conditions=tuple(words), at_one=at_one)


def _at_one(
    model: nn.Module, example_inputs: Any, sizes: dict[int, sp.Symbol], size: int,
    step: _StepChoices, fit: bool, concrete: _ConcreteSteps,
    done: dict[frozenset[str], TracedMemory],
) -> TracedMemory | None:
    """Trace with the example size ``size`` at 1 and the others still symbols, or None."""
    inputs, target = _resized((example_inputs, step.target), {size: 1})
    others = {k: s for k, s in sizes.items() if k != size}
    fixed = (*step.fixed_at_one, sizes[size].name)
    try:
        return _formulas(model, inputs, others, replace(step, target=target, fixed_at_one=fixed),
                         fit, concrete, done)
    except TraceTimeoutError:
        raise
    except MemtheoryError:
        return None  # the step cannot be traced there: the limit stays, and 1 is refused


def _general(
    model: nn.Module, example_inputs: Any, sizes: dict[int, sp.Symbol], step: _StepChoices,
    fit: bool, concrete: _ConcreteSteps,
) -> TracedMemory:
    """Trace symbolically; fit at concrete sizes where the model's code fixes a size or fails."""
    traced = _symbolic_or_why(model, example_inputs, sizes, step, fit)
    if isinstance(traced, str):  # outside the except block: the raw error is not chained
        return _fitted(model, example_inputs, sizes, step, [traced], concrete)
    record, symbols, env = traced
    fixed = specialised(env, symbols)
    if fixed:
        clash = clash_error(model, (example_inputs, step.target), sizes,
                            [f.symbol for f in fixed])
        if clash is not None and not fit:
            raise clash
        if not fit:
            raise UnsupportedError(
                "the model's code fixed a size, so no formula can be traced: "
                + "; ".join(map(str, fixed))
                + ". Pass fit=True to recover the formula from traces at several sizes."
            )
        return _fitted(model, example_inputs, sizes, step, fixed, concrete)
    where = conditions(env, symbols)
    memory = _result(record, symbols, where.words, where.constraints)
    if not step.check_conditions or not memory.constraints:
        return memory

    def at(values: dict[sp.Symbol, int], expected: Expected) -> TracedMemory:
        record = concrete(example_inputs, sizes, values, keep_all=False, expected=expected,
                          step=step)
        return _result(record, SymbolMap({}), (), {})

    return drop_harmless(memory, at, {symbol: size for size, symbol in sizes.items()})


def _symbolic_or_why(
    model: nn.Module, example_inputs: Any, sizes: dict[int, sp.Symbol], step: _StepChoices,
    fit: bool,
) -> tuple[StepRecord, SymbolMap, Any] | str:
    """Return the symbolic trace, or why it failed where a fit may still succeed."""
    try:
        return _symbolic(model, example_inputs, sizes, step)
    except MemtheoryError:
        raise
    except Exception as error:  # noqa: BLE001 (PyTorch's or the model's own: said plainly)
        if not fit or isinstance(error, RecursionError):
            raise failed(error) from None
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        return f"the symbolic trace failed at {located(error)} ({first})"


def _fitted(
    model: nn.Module,
    example_inputs: Any,
    sizes: dict[int, sp.Symbol],
    step: _StepChoices,
    fixed: Sequence[Specialisation | str],
    concrete: _ConcreteSteps,
) -> TracedMemory:
    try:
        return fitted_trace(
            lambda values: concrete(example_inputs, sizes, values, step=step), sizes, fixed
        )
    except FitFailedError:  # refused at every size tried: a size the model fixes?
        clash = clash_error(model, (example_inputs, step.target), sizes)
        if clash is None:
            raise
        raise clash from None
    except MemtheoryError:
        raise
    except Exception as error:  # noqa: BLE001 (the step fails at the example sizes themselves)
        shown = ", ".join(f"{s.name}={k}" for k, s in sizes.items())
        raise failed(error, f"at the example sizes ({shown})") from None


def _symbolic(
    model: nn.Module, example_inputs: Any, sizes: dict[int, sp.Symbol], step: _StepChoices
) -> tuple[StepRecord, SymbolMap, Any]:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from memtheory.torch.tracing.plain_cache import PlainSizeFakeMode

    env = ShapeEnv()
    name_user_frames(env)
    mode = PlainSizeFakeMode(shape_env=env, allow_non_fake_inputs=True)
    with fake_parameters(model, mode, step.dtype):
        (inputs, fake_target), found = fake_inputs(
            (example_inputs, step.target), mode, sizes, step.dtype
        )
        symbols = SymbolMap(found)
        with mode, SizeGenericFunctions(), memoised_numbers(), memoised_size_arithmetic():
            record = _record(model, inputs, fake_target, step, symbols)
    return record, symbols, env


class _ConcreteSteps:
    """Traces of the step at fixed sizes that share fake parameters and a warmed optimizer.

    Neither the fake parameters nor the optimizer's state depend on the sizes, so
    the traces at fixed sizes of one ``trace`` call (the checks of its conditions,
    the points of a fit) make them once, on the first trace, in one fake mode, where
    each used to fake the model and run the optimizer's warm-up step again. The
    optimizers memtheory builds by name (``torch.optim``'s, each of which creates its
    state in its first step and updates it in place after) are kept warm: before
    each later trace every gradient is allocated again, as the warm-up allocates it,
    so each trace starts from what a fresh warm-up leaves. An optimizer instance or
    factory passed in is built and warmed afresh for every trace, as before.

    One session serves a whole ``trace`` call: the fake parameters are swapped into the
    model for each fixed-size trace only (the same fakes each time), so the symbolic
    traces between them (at a size of 1, :func:`_at_one`) fake the real parameters, and
    the checks of a trace at 1 use the warm-up of the first check. A trace is of the
    step it is given (:class:`_StepChoices`; a trace at 1 has its own target); the
    optimizer and the loss are the call's.

    Use it as a context manager: it lets the fakes and the optimizer go when it ends.
    """

    def __init__(self, model: nn.Module, step: _StepChoices) -> None:
        self._model, self._step = model, step
        self._mode: Any = None
        self._fakes: dict[int, torch.Tensor] = {}
        self._shared = isinstance(step.optimizer, str | NamedOptimizer)
        self._optimizer: torch.optim.Optimizer | None = None
        self._warm = False

    def __enter__(self) -> _ConcreteSteps:
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode, self._fakes, self._optimizer, self._warm = None, {}, None, False

    def __call__(
        self,
        example_inputs: Any,
        sizes: dict[int, sp.Symbol],
        values: Mapping[sp.Symbol, int],
        keep_all: bool = True,
        expected: Expected | None = None,
        step: _StepChoices | None = None,
    ) -> StepRecord:
        """Trace ``step`` (by default the session's) with each size in ``sizes`` at ``values``.

        With ``expected``, it may stop early with
        :class:`~memtheory.torch.tracing.step.Departed`.
        """
        from memtheory.torch.tracing.plain_cache import PlainSizeFakeMode

        if self._mode is None:  # no shape environment: every size is a number
            self._mode = PlainSizeFakeMode(allow_non_fake_inputs=True)
        step = self._step if step is None else step
        resized = _resized((example_inputs, step.target),
                           {k: values[s] for k, s in sizes.items()})
        (inputs, fake_target), _ = fake_inputs(resized, self._mode, {}, step.dtype)
        faked = fake_parameters(self._model, self._mode, self._step.dtype, self._fakes)
        if not self._shared:
            with faked, self._mode:
                return _record(self._model, inputs, fake_target, step, SymbolMap({}),
                               keep_all=keep_all, expected=expected)
        warmed = self._warm
        try:
            with faked, self._mode:
                record = _record(self._model, inputs, fake_target, step, SymbolMap({}),
                                 keep_all=keep_all, expected=expected,
                                 make_optimizer=self._optimizer_once, warmed=warmed)
        except Departed:  # it stopped in the step, after the warm-up
            self._warm = True
            raise
        except BaseException:  # it may have stopped in the warm-up: warm a new one next time
            if not warmed:
                self._optimizer = None
            raise
        self._warm = True
        return record

    def _optimizer_once(self, parameters: list[torch.Tensor]) -> torch.optim.Optimizer:
        if self._optimizer is None:
            self._optimizer = _optimizer(self._step.optimizer)(parameters)
        return self._optimizer


def _resized(value: Any, sizes: Mapping[int, int]) -> Any:
    from torch.utils._pytree import tree_map

    made: dict[int, torch.Tensor] = {}  # one tensor passed twice (input and target) stays one

    def resize(tensor: Any) -> Any:
        if not isinstance(tensor, torch.Tensor):
            return tensor
        if id(tensor) not in made:
            shape = [sizes.get(int(n), int(n)) for n in tensor.shape]  # a view: fresh, dense
            layout = layout_of(tensor)
            made[id(tensor)] = torch.empty(shape, dtype=tensor.dtype, device="meta",
                                           memory_format=layout)
        return made[id(tensor)]

    return tree_map(resize, value)


def _record(
    model: nn.Module,
    inputs: Any,
    target: torch.Tensor | None,
    step: _StepChoices,
    symbols: SymbolMap,
    keep_all: bool = False,
    expected: Expected | None = None,
    make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None = None,
    warmed: bool = False,
) -> StepRecord:
    targets = [target] if target is not None else []
    infer: Callable[[], Any] | None = None
    if isinstance(inputs, Mapping):
        passed = {k: v for k, v in inputs.items() if k not in step.skipped}
        call: Callable[[], Any] = lambda: model(**passed)  # noqa: E731
        if target is None and isinstance(passed.get("labels"), torch.Tensor):
            # as measure does: the labels are the targets, left out of the inference pass
            features = {k: v for k, v in passed.items() if k != "labels"}
            infer, targets = lambda: model(**features), [passed["labels"]]  # noqa: E731
            inputs = {k: v for k, v in inputs.items() if k != "labels"}  # a skipped mask stays
    elif isinstance(inputs, tuple | list):
        call = lambda: model(*inputs)  # noqa: E731
    else:
        call = lambda: model(inputs)  # noqa: E731
    data = [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor)]
    return record_step(
        model,
        call,
        _loss(step.loss, target),
        make_optimizer or _optimizer(step.optimizer),
        data,
        targets,
        symbols,
        step.autocast,
        keep_all,
        step.keeps_outputs,
        inference_call=infer,
        expected=expected,
        warmed=warmed,
    )


def _loss(
    loss: Callable[..., torch.Tensor] | None, target: torch.Tensor | None
) -> Callable[[Any], torch.Tensor]:
    if loss is not None:
        if target is None:
            return loss
        return lambda output: loss(output, target)
    if target is not None:
        raise MissingArgumentError(
            "a target was given without a loss: pass loss=, e.g. torch.nn.CrossEntropyLoss()."
        )

    def own(output: Any) -> torch.Tensor:
        value = getattr(output, "loss", None)
        if value is None and isinstance(output, Mapping):
            value = output.get("loss")
        if value is None and isinstance(output, torch.Tensor) and output.dim() == 0:
            value = output
        if not isinstance(value, torch.Tensor):
            raise MissingArgumentError(
                "the model's output is not a loss: pass loss= (e.g. loss=torch.nn."
                "CrossEntropyLoss() with target=labels), or labels to a model that returns .loss."
            )
        return value

    return own


def _optimizer(choice: OptimizerChoice) -> Callable[[list[torch.Tensor]], torch.optim.Optimizer]:
    if isinstance(choice, torch.optim.Optimizer):
        kind, defaults = type(choice), dict(choice.defaults)
        return lambda parameters: kind(parameters, **defaults)
    if callable(choice) and not isinstance(choice, str):
        return choice
    from memtheory.torch.optimizers import torch_optimizer

    return lambda parameters: torch_optimizer(choice, parameters)


def _result(
    record: StepRecord,
    symbols: SymbolMap,
    words: tuple[str, ...],
    constraints: dict[str, sp.Expr],
    method: str = "symbolic",
    notes: tuple[str, ...] = (),
) -> TracedMemory:
    components = {
        name: from_polynomial(value) for name, value in record.components.items() if value
    }
    values = [from_polynomial(m) for _, m in record.moments]
    labels = [label for label, _ in record.moments]
    timeline: dict[str, sp.Expr] = {}
    for index in undominated(values):
        label = labels[index]
        while label in timeline:
            label += "'"
        timeline[label] = values[index]
    modules = tuple(
        ModuleRow(
            r.path,
            r.kind,
            r.depth,
            None
            if r.output_shape is None
            else tuple(symbols.expression(s) for s in r.output_shape),
            r.parameters,
            from_polynomial(r.saved_bytes(record.not_activations)),
        )
        for r in record.watch.records.values()
        if r.calls or r.saved or r.path == LOSS
    )
    return TracedMemory(
        components=components,
        timeline=timeline,
        inference_peak=maximum([from_polynomial(m) for _, m in record.inference]),
        step_start=from_polynomial(record.step_start),
        constraints=constraints,
        conditions=words,
        modules=modules,
        method=method,  # type: ignore[arg-type]
        notes=notes,
    )
