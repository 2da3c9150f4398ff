"""The autograd convention itself: its components, and the peak of a training step.

:class:`AutogradConvention` sums the storage plan
(:mod:`memtheory.conventions.autograd.storage_plan`) into a
:class:`~memtheory.memory_breakdown.MemoryBreakdown`, and runs it through the
live-tensor timeline (:mod:`memtheory.conventions.autograd.timeline` and
:mod:`memtheory.conventions.autograd.backward`) for the peak.
:data:`IMPLEMENTATIONS` lists the ``torch.optim`` implementations it can
assume, which differ in the optimizer step's temporaries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Literal

import sympy as sp

from memtheory.conventions.autograd.backward import run_backward
from memtheory.conventions.autograd.kernels.torch_2_13.optimizers import step_temporaries, step_text
from memtheory.conventions.autograd.live_bytes import Timeline
from memtheory.conventions.autograd.loops import (
    LOOPS,
    Loop,
    LoopScalars,
    autocast_cache,
    clipping_temporaries,
    loop_scalars,
    zero_grad_after_forward,
)
from memtheory.conventions.autograd.master_weights import (
    CAST_MOMENT,
    DEEPSPEED,
    MASTER_GRADIENT,
    cast_moment,
    working_precision,
)
from memtheory.conventions.autograd.storage_plan import (
    StepPlan,
    buffer_bytes,
    checked_network,
    holders_of,
    parameter_tensors,
    registered_tensors,
    saved_bytes,
    step_plan,
)
from memtheory.conventions.autograd.timeline import inference_timeline, run_forward
from memtheory.conventions.autograd.torch_version import (
    installed_torch_version,
    warn_if_unchecked_torch,
)
from memtheory.conventions.base import Convention, Model
from memtheory.conventions.optimizer_state import parameter_shapes, state_bytes
from memtheory.dtypes import dtype
from memtheory.errors import (
    InvalidArgumentError,
    MissingArgumentError,
    UnsupportedError,
)
from memtheory.layers.base import Shape
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.optimizers import Optimizer
from memtheory.precision import Precision

__all__ = ["IMPLEMENTATIONS", "AutogradConvention", "Implementation"]

Implementation = Literal["for-loop", "foreach", "fused"]

IMPLEMENTATIONS: dict[str, str] = {
    "for-loop": "one parameter at a time (torch.optim's default on CPU)",
    "foreach": "each operation over the list of all parameters (the default on CUDA)",
    "fused": "one kernel per step (fused=True)",
}
"""The implementations of ``torch.optim`` optimizers, which differ in their temporaries."""

MASTER_NOTE = (
    f"fp32 master weights, optimizer state and the step's fp32 gradient as {DEEPSPEED} "
    "keeps them: modelled from its source, not measured; the forward and backward are the "
    "16-bit model's, exact"
)
"""The note a step with a master copy carries (:mod:`.master_weights`)."""

_STEP_COUNTER = dtype("fp32")
"""torch.optim keeps each ``state["step"]`` as a float32 scalar tensor (``_get_scalar_dtype()``)."""


class AutogradConvention(Convention):
    r"""What PyTorch's autograd keeps, storage by storage, and the live-tensor peak of a step.

    Parameters
    ----------
    implementation : {"for-loop", "foreach", "fused"}, default "for-loop"
        Which ``torch.optim`` implementation the peak assumes. They keep the
        same state but different temporaries: the for-loop Adam computes
        ``denom = (exp_avg_sq.sqrt() / c).add_(eps)`` one parameter at a time,
        so two temporaries of one parameter tensor are alive with the previous
        tensor's ``denom``; the foreach Adam takes the square root of every
        second moment at once (one temporary per parameter); fused kernels
        and plain SGD (with or without momentum) allocate none. ``maximize``
        (``-grad``) and coupled ``weight_decay`` (``grad + wd * param``) add a
        gradient-sized temporary per parameter (all at once in foreach).
        Derived from ``torch/optim/*.py`` for every optimizer torch.optim has
        (:mod:`memtheory.conventions.autograd.kernels.torch_2_13.optimizers`). PyTorch picks
        for-loop on CPU and foreach on CUDA unless told.
    keeps_logits : bool, default True
        Whether the training loop holds the model's output (the loss layer's
        input) until the step ends, as ``out = model(x); loss_fn(out,
        y).backward()`` does. ``False`` is a loop that keeps only the loss, as
        Hugging Face's ``Trainer.training_step`` does (``compute_loss`` returns
        the loss alone): the logits are freed in the forward unless a backward
        node saves them.

    Notes
    -----
    The timeline of one steady-state step (the optimizer state exists, the
    previous step's gradients are still allocated):

    1. **step start**: parameters, buffers, gradients, optimizer state and
       step counters, input batch and targets. ``zero_grad()`` frees the
       gradients (``set_to_none=True``, PyTorch's default).
    2. **forward**, layer by layer in the graph's order: the layer allocates
       its output (not a view, an in-place layer or an identity) and the
       tensors it saves for itself (pooling indices, dropout masks, batch
       statistics), as its :meth:`~memtheory.layers.Layer.autograd` states; a
       storage is freed once the last layer that reads it has run and no
       backward node keeps it. Where branches fork (a residual block's
       input), the fork stays alive until the merge that joins them, as in a
       block written as a function. Layers before the first one with
       parameters record nothing. The loss (cross-entropy, MSE, L1, BCE with
       logits) ends the forward; the caller keeps the loss until the step
       ends, and the logits too unless ``keeps_logits=False``. A network
       without a loss layer is trained on
       ``output.sum()``, which saves nothing.
    3. **backward**, as PyTorch's engine runs it: the ready node created last
       goes first. A node allocates its inputs' gradients (new tensors, or
       the incoming gradient itself for a view, a sum or a concatenation) and
       its parameters' gradients (which become ``.grad`` without a copy), then
       frees the incoming gradient and the saved tensors no other node
       keeps. A gradient reaching a tensor read twice is added into a new
       tensor, as PyTorch does under :func:`memtheory.torch.measure`.
       Cross-entropy is two nodes (log-softmax, NLL), L1 three;
       ``backward()`` holds the seed gradient, ``ones_like(loss)``, until it
       returns.
    4. **optimizer step**: everything the step ends with, plus the
       implementation's temporaries.

    Peaks are read at the moment after each allocation and before the frees
    that follow it, the live total's local maxima. Workspaces that kernels
    allocate internally (im2col buffers, cuDNN workspaces) are not tensors and
    are not counted; nor is the CUDA context or the caching allocator's slack.

    Precisions: one dtype for everything (``model.to(torch.bfloat16)``) or
    :func:`autocast_precision` (``torch.autocast``): then convolutions and
    linear layers save low-precision copies of their input (a new storage when
    the input was fp32) and of their weight (``weight_copies``), the casts of
    the biases live until the forward ends (autocast's cache), and the loss
    runs in fp32.

    Limits: layers whose autograd behaviour was checked against PyTorch
    (``Layer.autograd_checked``; any other is refused, naming it); for the
    step's temporaries, the optimizers of torch.optim that memtheory lists
    (SGD, momentum, Nesterov, Adagrad, RMSprop, Adadelta, Adam, AdamW,
    Adamax, NAdam and Adafactor, with ``weight_decay``, ``amsgrad`` and
    ``maximize``); Adafactor's factored state needs the weights' shapes, known
    for Dense, Conv2d, BatchNorm2d and LayerNorm. Each layer's input is
    released once it has run (or, at a fork, once the merge has), unless
    :attr:`~memtheory.network.Network.calls` says Python keeps it longer (a
    stage's input while an ``nn.Sequential`` runs, a variable a block's
    ``forward`` keeps): the builders declare torchvision's and Hugging Face's,
    and with them the inference peaks of the reference pairs are exact.

    Language models and vision transformers: a network whose first layer is
    an :class:`~memtheory.layers.Embedding` is fed int64 token ids; a tied
    :class:`~memtheory.layers.Unembedding` reads the embedding's matrix
    (cast once under autocast), and its gradient waits in that parameter's
    AccumulateGrad buffer until the embedding's backward adds its own.
    ``nn.MultiheadAttention``'s CPU flash path runs as PyTorch's nodes
    (:attr:`~memtheory.layers.base.Autograd.stages`), at every precision:
    under autocast each projection's weight copy is released by the node that
    reads it, and a parameter's cast node is created just before the stage
    that makes its gradient (``tests/pytorch/test_transformer_pairs.py``).
    Its math path (attention dropout in training) runs as one node: the fp32
    upcasts of its forward at 16 bits and its backward's temporaries are not
    modelled, so a peak that falls inside it is read low (a known gap,
    ``tests/pytorch/test_graphs.py``); where the peak lies elsewhere, as in
    the GPT-2, BERT and Hugging Face pairs, it is exact.

    Examples
    --------
    >>> from memtheory import Dense, Dropout, Input, Network, ReLU, training_memory
    >>> mlp = Network([Input((784,), batch=64), Dense(256), ReLU(), Dropout(0.2, device="cpu"),
    ...                Dense(10)])
    >>> memory = training_memory(mlp, optimizer="sgd", convention="autograd")
    >>> memory["saved_activations"]  # ReLU output, dropout mask, dropout output: 64 x 256 x 4 each
    196608
    >>> memory.format("KiB", name="peak"), memory.peak_moment
    ('1852.59 KiB', 'backward dense_1')
    """

    name = "autograd"
    title = "autograd (what PyTorch keeps, and the peak)"

    def __init__(
        self, implementation: Implementation = "for-loop", *, keeps_logits: bool = True,
        loop: Loop = "plain",
    ) -> None:
        if not isinstance(implementation, str) or implementation not in IMPLEMENTATIONS:
            raise InvalidArgumentError(
                f"implementation must be one of {', '.join(IMPLEMENTATIONS)}, got "
                f"{implementation!r:.60}."
            )
        if not isinstance(keeps_logits, bool | int) or keeps_logits not in (True, False):
            raise InvalidArgumentError(
                f"keeps_logits must be True or False, got {keeps_logits!r:.60}."
            )
        if not isinstance(loop, str) or loop not in LOOPS:
            raise InvalidArgumentError(f"loop must be one of {', '.join(LOOPS)}, got {loop!r:.60}.")
        self.implementation = implementation
        self.keeps_logits = bool(keeps_logits)
        self.loop: Loop = loop

    def __repr__(self) -> str:
        logits = "" if self.keeps_logits else ", keeps_logits=False"
        loop = "" if self.loop == "plain" else f", loop={self.loop!r}"
        return f"AutogradConvention(implementation={self.implementation!r}{logits}{loop})"

    # -- public ------------------------------------------------------------------------
    def training(
        self, model: Model, optimizer: Optimizer | None, precision: Precision
    ) -> MemoryBreakdown:
        """Components of a training step and the timeline of its live bytes."""
        if optimizer is None:
            raise MissingArgumentError(
                'training memory needs an optimizer: pass optimizer="adam" (or "sgd", '
                '"sgd+momentum", memtheory.optimizer("adamw", amsgrad=True), ...); list '
                "the known ones with list(memtheory.optimizers.OPTIMIZERS)."
            )
        _warn_if_unchecked_torch()
        network = checked_network(model)
        master = precision.master_weights is not None
        working = working_precision(precision) if master else precision
        plan = step_plan(network, working, training=True, keeps_logits=self.keeps_logits)
        if not any(r.records for r in plan.rows):
            raise UnsupportedError(
                f"{network.name!r} has no parameters: a training step has nothing to train."
            )
        tensors = parameter_tensors(network)
        count = sp.Add(*tensors.values())
        parameters = count * precision.parameters.bytes
        gradients = count * precision.gradients.bytes
        state = state_bytes(optimizer, network, precision)
        counters = sp.Integer(
            0 if master else len(tensors) * len(optimizer.scalar_states) * _STEP_COUNTER.bytes
        )
        saved = saved_bytes(plan)
        components = {
            "parameters": parameters,
            "gradients": gradients,
            "optimizer_state": state,
            "optimizer_step_counters": counters,
            "saved_activations": saved,
            "input": plan.sizes["input"],
        }
        buffers = buffer_bytes(network, precision)
        if buffers != 0:
            components["buffers"] = buffers
        if plan.weight_copies:
            components["weight_copies"] = sp.Add(*plan.weight_copies.values())
        if "targets" in plan.sizes:
            components["targets"] = plan.sizes["targets"]
        if not optimizer.scalar_states or master:
            del components["optimizer_step_counters"]
        if master:
            components.update(_master_components(count, precision, optimizer))
        scalars = self._loop_scalars(plan)
        if scalars.total != 0 and self.loop == "hf-trainer":  # Lightning's: in the timeline
            components["loop_scalars"] = scalars.total
        registered = registered_tensors(network)  # the order torch.optim steps them
        shapes = None
        if optimizer.factored_state_names:
            by_name = parameter_shapes(network)
            shapes = [by_name[name] for name in registered]
        timeline, parts = self._training_timeline(
            plan, tensors, optimizer, components, (registered, shapes), precision
        )
        notes: tuple[str, ...] = (
            f"{optimizer}, {self.implementation} implementation: "
            f"{step_text(optimizer, self.implementation)}",
            *((MASTER_NOTE,) if master else ()),
            "zero_grad(set_to_none=True); the caller keeps the input, targets, "
            + ("logits and loss" if self.keeps_logits else "and loss (not the logits)"),
            "saved activations: each storage once; the input batch and targets counted apart",
            "peak: live tensor storages; kernel workspaces and allocator slack not included",
        )
        if self.loop == "lightning":
            notes += (f"loop: {LOOPS[self.loop]}",)
        elif self.loop != "plain":
            notes += ("the Trainer's loop: its bookkeeping scalars (loop_scalars) through the "
                      "step, gradient clipping's norms before the optimizer step",)
        return MemoryBreakdown(
            components, "training", self.name, precision, optimizer, notes, timeline,
            timeline_parts=parts,
        )

    def inference(self, model: Model, precision: Precision) -> MemoryBreakdown:
        """Weights, buffers, input, and the most activation bytes alive at once (eval, no_grad).

        In inference (``module.eval()`` under ``torch.no_grad()``) no layer saves
        anything: a layer's input is freed as soon as its output exists (the
        input batch stays: the caller holds it), dropout is the identity, and
        a loss layer is not run. The peak is the weights, buffers and input plus
        the largest input-and-output pair (max pooling also allocates its int64
        indices for a moment).

        Examples
        --------
        >>> from memtheory import Dense, Input, Network, inference_memory
        >>> net = Network([Input((784,), batch=64), Dense(256), Dense(10)])
        >>> memory = inference_memory(net, convention="autograd")
        >>> memory["activations"], memory.total == memory.peak  # both outputs alive at dense_2
        (68096, True)
        """
        network = checked_network(model)
        for row in network.rows[1:]:
            if not row.layer.autograd_inference_checked:
                raise UnsupportedError(
                    f"the autograd convention does not model the inference peak of "
                    f"{row.layer.label} (layer {row.index} of {network.name!r}) yet: its "
                    "forward's transients were checked against PyTorch in training only."
                )
        _warn_if_unchecked_torch()
        plan = step_plan(network, precision, training=False)
        tensors = parameter_tensors(network)
        parameters = sp.Add(*tensors.values()) * precision.parameters.bytes
        base = {"parameters": parameters, "input": plan.sizes["input"]}
        buffers = buffer_bytes(network, precision)
        if buffers != 0:
            base["buffers"] = buffers
        timeline = inference_timeline(plan, sp.Add(*base.values()))
        notes = (
            "eval mode under no_grad: nothing saved, each input freed once its output exists",
            "activations: the most activation bytes alive at once (so total = peak)",
        )
        memory = MemoryBreakdown(
            base, "inference", self.name, precision, notes=notes, timeline=timeline
        )
        activations = sp.expand(memory.peak - sp.Add(*base.values()))
        return replace(memory, components={**base, "activations": activations})

    # -- the training timeline ---------------------------------------------------------
    def _training_timeline(
        self,
        plan: StepPlan,
        tensors: dict[str, sp.Expr],
        optimizer: Optimizer,
        components: dict[str, sp.Expr],
        step: tuple[dict[str, sp.Expr], list[Shape] | None],
        stepped: Precision,
    ) -> tuple[Mapping[str, sp.Expr], Mapping[str, Mapping[str, sp.Expr]]]:
        """Run the step; ``step`` is the parameters in registration order, and their shapes."""
        precision = plan.precision
        registered, shapes = step
        scalars = self._loop_scalars(plan)
        timeline = Timeline(categories=_categories(plan, tensors))
        for name in ("parameters", "buffers", "optimizer_state", "optimizer_step_counters",
                     "master_weights"):
            if name in components:
                timeline.alloc(name, components[name])
        for key, nbytes in (*scalars.whole_step.items(), *scalars.until_backward_ends.items()):
            timeline.alloc(key, nbytes)
        for key in sorted(plan.data):
            timeline.alloc(key, plan.sizes[key])
        for tensor, count in tensors.items():
            timeline.alloc(f"grad {tensor}", count * precision.gradients.bytes)
        timeline.mark("step start")
        late = zero_grad_after_forward(self.loop)  # Lightning: zero_grad after training_step
        for tensor in () if late else tensors:
            timeline.free(f"grad {tensor}")
        holders = holders_of(plan)
        run_forward(plan, timeline, holders, autocast_cache=autocast_cache(self.loop))
        for key, nbytes in scalars.after_forward.items():
            timeline.alloc(key, nbytes)
        for tensor in tensors if late else ():
            timeline.free(f"grad {tensor}")
        for key, nbytes in scalars.in_backward.items():
            timeline.alloc(key, nbytes)
        run_backward(plan, timeline, holders, tensors)
        for key in (*scalars.in_backward, *scalars.until_backward_ends):
            timeline.free(key)
        clipping = clipping_temporaries(self.loop, len(tensors), precision.gradients.bytes)
        if clipping != 0:
            timeline.mark("gradient clipping", clipping)
        stepped_bytes = _stepped_tensors(timeline, registered, stepped)
        temporaries = step_temporaries(optimizer, self.implementation, stepped_bytes, shapes)
        timeline.mark("optimizer step", temporaries)
        return timeline.moments, timeline.parts

    def _loop_scalars(self, plan: StepPlan) -> LoopScalars:
        """Return the loop's own scalars: the loss in its dtype, the norm in the gradients'."""
        loss = (sp.Integer(plan.loss.out_dtype.bytes) if plan.loss is not None
                else plan.sizes["loss"])
        return loop_scalars(self.loop, loss_bytes=loss,
                            gradient_bytes=plan.precision.gradients.bytes)


def _categories(plan: StepPlan, tensors: dict[str, sp.Expr]) -> dict[str, str]:
    """Return the storages whose live bytes a split step scales, by component.

    The parameters' gradients, the storages backward nodes keep (as
    :func:`saved_bytes` counts them) and autocast's weight copies: the
    components that come and go during the step (:attr:`MemoryBreakdown.timeline_parts`).
    """
    saved = {key for entry in plan.rows for key in entry.saved}
    saved -= plan.data
    saved -= set(plan.weight_copies)
    categories = dict.fromkeys(saved, "saved_activations")
    categories.update(dict.fromkeys(plan.weight_copies, "weight_copies"))
    categories.update(dict.fromkeys((f"grad {tensor}" for tensor in tensors), "gradients"))
    categories.update(dict.fromkeys(("flat 16-bit gradient", MASTER_GRADIENT), "master_gradients"))
    return categories


def _stepped_tensors(
    timeline: Timeline, tensors: dict[str, sp.Expr], stepped: Precision
) -> list[sp.Expr]:
    """Return the bytes of each tensor the optimizer steps, casting DeepSpeed's gradient first.

    ``torch.optim`` steps the parameters themselves. With a master copy
    (:mod:`.master_weights`) DeepSpeed casts the flat 16-bit gradients to
    fp32 (a moment of its own) and steps the one flat fp32 master tensor.
    """
    if stepped.master_weights is None:
        return [count * stepped.parameters.bytes for count in tensors.values()]
    cast = cast_moment(sp.Add(*tensors.values()), stepped)
    for key, nbytes in cast.items():
        timeline.alloc(key, nbytes)
    timeline.mark(CAST_MOMENT)
    timeline.free("flat 16-bit gradient")
    return [cast[MASTER_GRADIENT]]


def _master_components(
    count: sp.Expr, precision: Precision, optimizer: Optimizer
) -> dict[str, sp.Expr]:
    """Return the master copy and the fp32 gradient its optimizer step holds (DeepSpeed)."""
    if optimizer.factored_state_names:
        raise UnsupportedError(
            f"{optimizer}'s factored state is kept per weight matrix; over DeepSpeed's flat "
            "fp32 master partition it is not modelled: use a non-factored optimizer "
            "(adamw) or precision='bf16'."
        )
    assert precision.master_weights is not None
    return {
        "master_weights": count * precision.master_weights.bytes,
        "master_gradients": count * precision.master_weights.bytes,
    }


def _warn_if_unchecked_torch() -> None:
    """Warn once when the installed PyTorch is not the release the kernel plans were checked on."""
    version = installed_torch_version()
    if version is not None:
        warn_if_unchecked_torch(version)
