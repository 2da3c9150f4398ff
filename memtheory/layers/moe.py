r"""A sparse mixture-of-experts feed-forward block (Mixtral), with a top-k router.

Each position's features go through a router (a bias-free linear map to one
logit per expert); the :math:`k` experts with the largest softmax weights
each apply a SwiGLU MLP, and their outputs are summed with those weights
(renormalised over the :math:`k`). Every expert's weights are held, so the
*total* parameters are :math:`E` experts' worth, while each token goes
through only :math:`k` of them: the *active* parameters per token. Derived
in the book's chapter "Transformers".

Examples
--------
>>> from memtheory.symbols import B, S
>>> moe = MixtureOfExperts(8, top_k=2, ffn_hidden=14336)
>>> moe.parameter_count((B, S, 4096)), moe.active_parameter_count((B, S, 4096))
(1409318912, 352354304)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.dtypes import DTypeLike
from memtheory.errors import InvalidArgumentError, InvalidSizeError, RankError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec, describe_shape, elements
from memtheory.layers.kernel_plans import planned_autograd

__all__ = ["MixtureOfExperts"]

_EAGER_REFUSAL = (
    "transformers' eager experts loop (experts_implementation='eager') is not modelled: "
    "its backward makes each hit expert's gradient of the fused weights as a full "
    "(experts, 2 ffn, hidden) tensor (select_backward) and adds it out of place to the "
    "ones before it, so its peak depends on which experts the router hits and in what "
    "order (measured on a tiny Mixtral: about 2 x the gate_up_proj weights' bytes above the "
    "grouped path with every expert hit, less with fewer). Use implementation='grouped_mm', "
    "transformers 5's default"
)


@dataclass(frozen=True)
class MixtureOfExperts(Layer):
    r"""Router plus ``experts`` SwiGLU MLPs, each token sent to ``top_k`` of them.

    Parameters, as Hugging Face's ``MixtralSparseMoeBlock`` registers them:
    the router ``gate.weight`` :math:`(E, h)`, and the experts' weights fused
    into ``experts.gate_up_proj`` :math:`(E, 2f, h)` and ``experts.down_proj``
    :math:`(E, h, f)`: :math:`E h + 3 E h f` in all, of which a token uses
    :math:`E h + 3 k h f`.

    A training step keeps the same storages however the router splits the
    tokens: transformers' default experts implementation (``grouped_mm``)
    sorts the :math:`B S k` (token, expert) pairs by expert and runs every
    expert's rows as one grouped matrix product, so every tensor has
    :math:`B S k` rows, the busiest expert's share notwithstanding (measured
    with balanced, random and fully skewed routing). :meth:`autograd` is
    therefore exact for every routing: the upper bound and the balanced case
    are one number.

    transformers' ``experts_implementation="eager"`` (a Python loop over the
    experts hit, what older transformers ran) keeps the same saved tensors
    whatever the routing, but its backward indexes each expert's slice of
    the fused weights (``gate_up_proj[e]``), so every expert hit makes a
    full :math:`(E, 2f, h)` gradient (``select_backward``) that autograd
    adds out of place to the ones before it: its peak depends on which
    experts are hit and in what order, not only on the busiest expert's
    rows. It is named (``implementation="eager"``) and refused by the
    autograd convention with that reason, so that it is never answered with
    the grouped path's bytes.

    Parameters
    ----------
    experts : size
        Experts :math:`E` (``num_local_experts``, ``num_experts``).
    top_k : size
        Experts per token :math:`k` (``num_experts_per_tok``).
    ffn_hidden : size
        Width :math:`f` of each expert's MLP (``intermediate_size``,
        ``moe_intermediate_size``).
    router : {"mixtral", "qwen"} or None, default None
        How the routing weights are computed, which only the autograd
        convention needs: ``"mixtral"``: softmax, top-k, renormalised, kept
        fp32, so a 16-bit model weights its rows in fp32
        (``MixtralTopKRouter``); ``"qwen"``: cast back to the model's dtype
        (Qwen2-MoE, Qwen3-MoE and OLMoE's routers). None (not stated, as for
        DeepSeek's sigmoid and group-limited routers): the autograd convention
        refuses the layer (:meth:`autograd` then describes Mixtral's).
    renormalize : bool, default True
        Whether the top-k weights are divided by their sum (``norm_topk_prob``;
        always for Mixtral).
    implementation : {"grouped_mm", "eager"}, default "grouped_mm"
        transformers' ``experts_implementation``: ``"grouped_mm"``, its
        default (modelled, exact); ``"eager"``, the loop over the experts
        (refused by the autograd convention: see above).
    name : str, optional

    Examples
    --------
    >>> from memtheory import Dense, Input, Network, training_memory
    >>> from memtheory.symbols import B, S
    >>> moe = MixtureOfExperts(4, top_k=2, ffn_hidden=128, router="mixtral", name="moe")
    >>> net = Network([Input((S, 64)), Dense(64), moe])
    >>> net.parameter_count - 64 * 65  # 4 x 64 router + 3 x 4 x 64 x 128
    98560
    >>> training_memory(net, optimizer="sgd", convention="autograd").peak.subs({B: 1, S: 8})
    835512
    """

    experts: SizeLike
    top_k: SizeLike
    ffn_hidden: SizeLike
    router: Literal["mixtral", "qwen"] | None = None
    renormalize: bool = True
    name: str | None = None
    implementation: Literal["grouped_mm", "eager"] = "grouped_mm"
    kind = "MixtureOfExperts"
    input_rank = 3
    autograd_inference_checked = False

    @property
    def autograd_checked(self) -> bool:  # type: ignore[override]
        """Measured with a stated router, grouped (tests/pytorch/test_moe_autograd.py)."""
        return self.router is not None and self.implementation == "grouped_mm"

    @property
    def autograd_refusal(self) -> str | None:  # type: ignore[override]
        """Why the autograd convention refuses it: the eager loop, or its router not stated.

        Examples
        --------
        >>> moe = MixtureOfExperts(4, top_k=2, ffn_hidden=8, router="mixtral",
        ...                        implementation="eager")
        >>> moe.autograd_checked, "select_backward" in moe.autograd_refusal
        (False, True)
        """
        if self.implementation == "eager":
            return _EAGER_REFUSAL
        if self.router is not None:
            return None
        return (
            "its router is not stated, and what a step keeps depends on it; give "
            "router='mixtral' (Mixtral) or router='qwen' (Qwen2-MoE, Qwen3-MoE, OLMoE). "
            "DeepSeek's sigmoid and group-limited routers are not modelled"
        )

    def __post_init__(self) -> None:
        owner = self.label
        for field_name in ("experts", "top_k", "ffn_hidden"):
            object.__setattr__(
                self, field_name, as_size(getattr(self, field_name), field_name, owner)
            )
        gap = sp.sympify(self.experts) - sp.sympify(self.top_k)
        if gap.is_number and gap < 0:
            raise InvalidSizeError(
                f"{owner}: top_k ({self.top_k}) cannot exceed the number of experts "
                f"({self.experts})."
            )
        if self.router not in ("mixtral", "qwen", None):
            raise InvalidArgumentError(
                f"{owner}: router must be 'mixtral', 'qwen' or None, got {self.router!r}."
            )
        if self.implementation not in ("grouped_mm", "eager"):
            raise InvalidArgumentError(
                f"{owner}: implementation must be 'grouped_mm' (transformers' default) or "
                f"'eager' (its loop over the experts), got {self.implementation!r}."
            )
        if self.router == "mixtral" and not self.renormalize:
            raise InvalidArgumentError(
                f"{owner}: Mixtral's router always renormalises its top-k weights; "
                "use router='qwen' for norm_topk_prob=False."
            )

    def check_input(self, input_shape: Shape) -> None:
        """Raise :class:`RankError` unless the input is ``(batch, sequence, features)``."""
        if len(input_shape) != 3:
            raise RankError(
                f"{self.label}: needs (batch, sequence, features), got "
                f"{describe_shape(tuple(input_shape))}."
            )

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input's shape."""
        self.check_input(input_shape)
        return tuple(input_shape)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """Router :math:`E h` plus experts :math:`3 E h f`."""
        self.check_input(input_shape)
        hidden = input_shape[-1]
        return self.experts * hidden + 3 * self.experts * hidden * self.ffn_hidden

    def active_parameter_count(self, input_shape: Shape) -> sp.Expr:
        """Parameters one token goes through: the router and ``top_k`` experts.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> MixtureOfExperts(4, top_k=1, ffn_hidden=8).active_parameter_count((B, S, 2))
        56
        """
        self.check_input(input_shape)
        hidden = input_shape[-1]
        return self.experts * hidden + 3 * self.top_k * hidden * self.ffn_hidden

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``gate.weight``, ``experts.gate_up_proj``, ``experts.down_proj``."""
        self.check_input(input_shape)
        hidden = input_shape[-1]
        return (
            ("gate.weight", (self.experts, hidden)),
            ("experts.gate_up_proj", (self.experts, 2 * self.ffn_hidden, hidden)),
            ("experts.down_proj", (self.experts, hidden, self.ffn_hidden)),
        )

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return what :meth:`autograd` lists for an fp32 run (Mixtral's router if unstated).

        In fp32 the routers keep tensors of the same sizes, so the activation
        counts (the breakdown convention's) do not depend on the router.
        """
        return self.autograd((tuple(input_shape),)).saved

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return the router's and experts' saved tensors and backward nodes (its kernel plan).

        The plan is transformers' default grouped experts
        (:mod:`memtheory.conventions.autograd.kernels.torch_2_13.experts`):
        every tensor has the :math:`B S k` routed rows, whatever the routing.
        """
        return planned_autograd(
            self, input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )

    def frozen_autograd(self, spec: Autograd) -> Autograd:
        """Return :meth:`autograd`'s ``spec`` for the layer frozen (no parameter gradients).

        A matrix product keeps its input only for its weight's gradient: with
        the router and the experts frozen (LoRA on the attention), the router's
        linear map does not keep the block's input, nor the up projection the
        gathered rows (freed when the forward returns) nor the down
        projection the product (freed as soon as the down projection has run,
        so it is left out of the forward's highest moment). No node makes a
        parameter gradient.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> moe = MixtureOfExperts(4, top_k=2, ffn_hidden=8, router="mixtral")
        >>> frozen = moe.frozen_autograd(moe.autograd(((B, S, 4),)))
        >>> frozen.stages[0].saved, frozen.saved[12].elements
        ((), 0)
        """
        weight_only = {"router linear": "input", "grouped_mm up": "gathered rows",
                       "grouped_mm down": "product"}
        labels = [t.label or t.role for t in spec.saved]
        stages = tuple(
            replace(stage, parameters=(),
                    saved=tuple(i for i in stage.saved
                                if labels[i] != weight_only.get(stage.label)))
            for stage in spec.stage_list()
        )
        saved = tuple(
            replace(t, shape=(0,)) if t.label == "product" else t for t in spec.saved
        )
        return replace(spec, saved=saved, stages=stages)

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Elements of the output and of the activation-dtype tensors it keeps (balanced)."""
        kept = [
            s for s in self.saved_for_backward(input_shape)
            if s.role == "intermediate" and s.dtype is None
        ]
        kept_elements = sum((s.elements for s in kept), sp.Integer(0))
        return sp.expand(elements(self.output_shape(input_shape)) + kept_elements)

    def describe(self) -> str:
        """Experts, top-k and expert width."""
        text = f"{self.experts} experts, top {self.top_k}, ffn {self.ffn_hidden}"
        text = text if self.router is None else f"{text}, {self.router} router"
        return text if self.implementation == "grouped_mm" else f"{text}, eager loop"
