"""Training and inference memory of a model: the front door to the conventions.

Examples
--------
>>> from memtheory import Dense, Input, Network
>>> net = Network([Input((784,)), Dense(100), Dense(10)])
>>> training_memory(net, optimizer="sgd").total
4016*B + 636080
>>> inference_memory(net).total
3576*B + 318040
"""

from __future__ import annotations

from dataclasses import replace

from memtheory._collector import with_fewer_collections
from memtheory._recursion import nesting_guard
from memtheory.constraints import carry
from memtheory.conventions import ConventionLike, Model
from memtheory.conventions import convention as _convention
from memtheory.counts import ModelCounts
from memtheory.errors import InvalidArgumentError
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.optimizers import OptimizerLike
from memtheory.optimizers import optimizer as _optimizer
from memtheory.precision import PrecisionLike
from memtheory.precision import precision as _precision
from memtheory.recipes import Setup, setup_from

__all__ = ["MemoryBreakdown", "inference_memory", "training_memory"]


@with_fewer_collections
def training_memory(
    model: Model,
    *,
    optimizer: OptimizerLike | None = None,
    precision: PrecisionLike | None = None,
    convention: ConventionLike | None = None,
    setup: Setup | str | None = None,
) -> MemoryBreakdown:
    """Memory of one training step, by component, in bytes.

    Parameters
    ----------
    model : Network or ModelCounts
    optimizer : str or Optimizer, optional
        Required by the breakdown convention (``"sgd"``, ``"adam"``, ...); the
        rule of thumb counts three parameter copies whatever it is. Default
        the setup's, if one is given.
    precision : str or Precision, optional
        A dtype name for everything, ``"mixed-fp16"``/``"mixed-bf16"``, or a
        :class:`~memtheory.precision.Precision`. Default the setup's, else
        ``"fp32"``.
    convention : str or Convention, optional
        Default the setup's exact convention (:meth:`Setup.convention
        <memtheory.recipes.Setup.convention>`: its optimizer implementation
        and training loop), else ``"breakdown"``.
    setup : Setup or recipe name, optional
        Every assumption of the step at once (:mod:`memtheory.recipes`); the
        keywords above override its fields. The network must be built with
        the setup's attention kernel (``flash=setup.flash``, or
        ``flash=setup.flash_for(network)`` where CUDA's SDPA falls to its
        math path): a mismatch is refused.

    Examples
    --------
    >>> from memtheory import ModelCounts
    >>> counts = ModelCounts.per_sample(parameters=10**6, activations=10**5, input_elements=10**4)
    >>> training_memory(counts, optimizer="adam").total
    840000*B + 16000000
    >>> training_memory(counts, convention="rule_of_thumb").total
    840000*B + 12000000

    Under a recipe, the step a plain PyTorch loop under ``torch.autocast`` runs on a GPU:

    >>> from memtheory import Dense, Input, Network
    >>> net = Network([Input((784,), batch=32), Dense(100), Dense(10)])
    >>> step = training_memory(net, setup="pytorch-amp")
    >>> step.convention, step.precision.parameters.name, step.peak
    ('autograd', 'fp32', 1691210)
    """
    chosen_setup = setup_from(setup)
    if chosen_setup is not None:
        _check_attention(model, chosen_setup)
        _refuse_unapplied(chosen_setup, "training_memory", _TRAINING_ELSEWHERE)
        optimizer = chosen_setup.optimizer if optimizer is None else optimizer
        precision = chosen_setup.precision_for(None) if precision is None else precision
        convention = chosen_setup.convention() if convention is None else convention
    chosen = _convention("breakdown" if convention is None else convention)
    spec = None if optimizer is None else _optimizer(optimizer)
    with nesting_guard(f"training memory ({chosen.name} convention)"):
        chosen_precision = _precision("fp32" if precision is None else precision)
        return _checked_sizes(chosen.training(model, spec, chosen_precision), model)


@with_fewer_collections
def inference_memory(
    model: Model,
    *,
    precision: PrecisionLike | None = None,
    convention: ConventionLike | None = None,
    setup: Setup | str | None = None,
) -> MemoryBreakdown:
    """Memory of one forward pass without gradients, by component, in bytes.

    ``precision`` defaults to the setup's (else ``"fp32"``) and ``convention``
    to the exact one under a setup (else ``"breakdown"``), as in
    :func:`training_memory`.

    Examples
    --------
    >>> from memtheory import ModelCounts
    >>> inference_memory(ModelCounts(parameters=100, activations=10, input_elements=1),
    ...                  precision="fp16").total
    222
    """
    chosen_setup = setup_from(setup)
    if chosen_setup is not None:
        _check_attention(model, chosen_setup)
        _refuse_unapplied(chosen_setup, "inference_memory", _INFERENCE_ELSEWHERE)
        precision = chosen_setup.precision_for(None) if precision is None else precision
        convention = "autograd" if convention is None else convention
    chosen = _convention("breakdown" if convention is None else convention)
    with nesting_guard(f"inference memory ({chosen.name} convention)"):
        chosen_precision = _precision("fp32" if precision is None else precision)
        return _checked_sizes(chosen.inference(model, chosen_precision), model)


_TRAINING_ELSEWHERE = {
    "checkpointing": (
        False,
        "memtheory.estimate.step_memory(network, checkpointing=True) or "
        "memtheory.estimate.estimate(..., checkpointing=True) (every decoder layer a checkpoint, "
        "as Hugging Face's gradient_checkpointing_enable()), or build the network from "
        "memtheory.techniques.checkpointed_counts",
    ),
    "zero": (0, "memtheory.techniques.parallel_memory(step, data=N, zero=STAGE) on this result, "
                "or memtheory.estimate.estimate(..., gpus=N, zero=STAGE)"),
    "offload": ("none", "memtheory.techniques.parallel_memory(step, ..., offload=...) on this "
                        "result, or memtheory.estimate.estimate(..., offload=...)"),
    "quantization": (None, "memtheory.finetuning.finetune_memory(network, quantization=...) "
                           "or memtheory.estimate.estimate(..., qlora=True)"),
}
"""Setup fields one replica's plain step does not carry out, with the front door that does."""

_INFERENCE_ELSEWHERE = {
    "zero": _TRAINING_ELSEWHERE["zero"],
    "offload": _TRAINING_ELSEWHERE["offload"],
    "quantization": (None, "memtheory.techniques.generation_memory(..., weights=FORMAT) or "
                           "memtheory.estimate.serving_memory"),
}
"""Setup fields a forward pass here does not carry out (checkpointing changes no forward)."""


def _refuse_unapplied(
    setup: Setup, front_door: str, elsewhere: dict[str, tuple[object, str]]
) -> None:
    """Refuse a setup that asks for something ``front_door`` would silently leave out."""
    for field, (plain, where) in elsewhere.items():
        value = getattr(setup, field)
        if value != plain:
            raise InvalidArgumentError(
                f"{front_door}() computes one replica's plain step and does not apply the "
                f"setup's {field}={value!r}: its answer would leave it out. Ask {where}; or "
                f"pass setup.changed({field}={plain!r}) to have the step without it."
            )


def _check_attention(model: Model, setup: Setup) -> None:
    """Refuse a network whose attention layers run another kernel than the setup's."""
    if not isinstance(model, Network):
        return
    for row in model.rows:
        layer = getattr(row.layer, "layer", row.layer)  # a frozen or adapted layer
        flash = getattr(layer, "flash", None)
        # SDPA built without flash is the CUDA math path when CUDA selects it for the layer
        math = setup.flash and setup.attention_kernel(layer) == "math"
        if isinstance(flash, bool) and flash != setup.flash and not (math and not flash):
            built = "SDPA (flash=True)" if flash else "eager (flash=False)"
            raise InvalidArgumentError(
                f"{model.name!r} was built with {built} attention ({row.name}), but the setup "
                f"assumes {setup.attention}: build it with flash={setup.flash} (for example "
                f"memtheory.models.gpt2(..., flash={setup.flash})), or change the setup's "
                f"attention to {'sdpa' if flash else 'eager'}."
            )


def _checked_sizes(memory: MemoryBreakdown, model: Model) -> MemoryBreakdown:
    """Attach the network's symbolic output sizes, which every evaluation checks stay >= 1."""
    own = (
        {c.where: c.size for c in model.size_checks()}
        if isinstance(model, Network | ModelCounts)
        else {}
    )
    if not own:
        if isinstance(model, Network):  # it needs none: say so for its expressions
            for expression in (*memory.components.values(), memory.total):
                carry(expression, memory.size_checks(), vouch=True)
        return memory
    return replace(memory, constraints={**own, **memory.constraints})
