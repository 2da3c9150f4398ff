"""What every layer knows about itself: shapes, parameters, activations, saved tensors."""

from __future__ import annotations

import dataclasses
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import sympy as sp

from memtheory._numpy_types import numpy_types
from memtheory.dtypes import DType, DTypeLike
from memtheory.errors import InvalidArgumentError, RankError, UnsupportedError

__all__ = [
    "Autograd",
    "ForwardMoment",
    "Layer",
    "ReadParameter",
    "Shape",
    "Stage",
    "TensorSpec",
    "describe_shape",
    "elements",
]

Shape = tuple[sp.Expr, ...]
"""A tensor shape, batch first: ``(B, C, H, W)`` for images, ``(B, F)`` for features."""

Role = Literal[
    "input", "output", "indices", "mask", "statistics", "target", "buffer", "intermediate",
    "weight copy",
]
AutocastRule = Literal["follow", "low", "fp32", "parameters", "promote"]
WeightCopyRule = Literal["always", "if the input needs a gradient", "never"]


def elements(shape: Shape) -> sp.Expr:
    """Return the number of elements of a tensor of ``shape``.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> elements((B, 3, 50, 50))
    7500*B
    """
    return sp.Mul(*shape) if shape else sp.Integer(1)


def describe_shape(shape: Shape) -> str:
    """Write a shape as ``(B, 32, 50, 50)``.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> describe_shape((B, 500))
    '(B, 500)'
    """
    return "(" + ", ".join(str(d) for d in shape) + ")"


@dataclass(frozen=True)
class TensorSpec:
    """A tensor a layer keeps: a saved tensor for the backward pass, or a buffer.

    Parameters
    ----------
    role : str
        What it is. ``"input"`` and ``"output"`` are the layer's own input or
        output tensor (shared storage with the neighbouring layer, so an
        accounting convention can count it once); ``"indices"``, ``"mask"``,
        ``"statistics"``, ``"target"``, ``"buffer"`` and ``"intermediate"`` are
        tensors the layer allocates itself; ``"weight copy"`` is a
        low-precision cast of a weight that the layer makes itself (a frozen
        weight under autocast, which autocast does not cache), counted with
        autocast's weight copies.
    shape : tuple of sympy expressions
        Its shape, batch first where it has a batch dimension.
    dtype : DType or None
        Its element type; ``None`` means "the activation dtype of the run"
        (or the parameter dtype, for buffers).
    view_of : int or None
        The position, in the same layer's saved tensors, of the tensor whose
        storage this one is a view of (attention's V is a view of the packed
        in-projection output): it adds no storage and keeps that one alive.
    label : str or None
        A more specific name than the role, for listings
        (``"log-probabilities"``).
    operand : int, default 0
        For ``role="input"``: which of the layer's inputs it is (a merge that
        multiplies two tensors keeps both, ``operand=0`` and ``operand=1``).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> from memtheory.dtypes import dtype
    >>> spec = TensorSpec("indices", (B, 32, 25, 25), dtype("int64"))
    >>> spec.elements, spec.nbytes(dtype("fp32"))
    (20000*B, 160000*B)
    """

    role: Role
    shape: Shape
    dtype: DType | None = None
    view_of: int | None = None
    label: str | None = None
    operand: int = 0

    @property
    def elements(self) -> sp.Expr:
        """Number of elements."""
        return elements(self.shape)

    def nbytes(self, default: DType) -> sp.Expr:
        """Bytes, with ``default`` standing in for an unspecified dtype."""
        return self.elements * (self.dtype or default).bytes


@dataclass(frozen=True)
class Autograd:
    """How a layer behaves under PyTorch's autograd: what it saves, aliases, casts, recasts.

    Every layer states this through :meth:`Layer.autograd`; the autograd
    convention and :meth:`~memtheory.network.Network.saved_tensors` both read
    it, so they agree by construction.

    Attributes
    ----------
    saved : tuple of TensorSpec
        The tensors its backward node keeps. ``"input"`` is its (first) input's
        storage, ``"output"`` its output's; other roles are storages it
        allocates (dtype ``None``: its compute dtype); ``"target"`` is the
        caller's targets.
    aliases_input : bool
        Whether its output is its first input's storage (a view such as
        Flatten, an in-place layer, an identity).
    records : bool
        Whether it creates a backward node at all; False for an identity
        (dropout with ``p=0`` or in eval mode), whose gradient passes through.
    gradient_is_view : bool
        Whether its backward hands on the incoming gradient itself, or views
        of it (a reshape, a sum, a concatenation), instead of new tensors.
    autocast : {"follow", "low", "fp32", "parameters", "promote"}
        Under ``torch.autocast``: ``"low"`` casts its inputs, weight and bias to
        the low-precision dtype and computes in it (convolutions, linear
        layers); ``"fp32"`` casts its inputs to fp32 (losses); ``"follow"``
        computes in its input's dtype. ``"parameters"``, with or without
        autocast: its output has its parameters' dtype whatever its input's
        (an embedding looks rows of its table up from int64 ids). ``"promote"``:
        on autocast's promote list (``cat``), it casts its inputs to the wider
        of theirs and its parameters' dtypes and computes in that.
    compute_dtype : DType or None
        The dtype it computes in whatever the precision, its inputs cast to it
        (Hugging Face's causal-LM loss upcasts the logits with ``.float()``).
    reads_ids : bool
        Whether its input is int64 token ids (an embedding): a network whose
        input batch it reads is fed int64 ids.
    weight_copy : {"always", "if the input needs a gradient", "never"}
        Whether its backward keeps autocast's low-precision weight copy.
    parameter_dtype : tuple of int
        Positions, in ``saved``, of tensors whose unspecified dtype is the
        parameters' (batch norm's statistics: bf16 in a bf16 model, fp32 under
        autocast), not the compute dtype.
    stages : tuple of Stage
        Its backward nodes in creation order, when it runs as several (the
        loss of a classifier); empty for one node keeping everything.
    transients : tuple of TensorSpec
        Storages its forward allocates that nothing keeps (freed once it has
        run), such as L1's absolute values.
    output_elements : sympy expression or None
        Elements of the storage its output lives in, when larger than the
        output (MSE's scalar lives in an input-sized buffer).
    target : TensorSpec or None
        For a loss, the targets the caller feeds (dtype ``None``: the input
        batch's dtype), whether or not its backward keeps them.
    casts_inputs : bool
        Whether an input of another dtype than its compute dtype is cast into
        a new tensor first (autocast's casts); False when the kernel promotes
        it as it reads it (``x_bf16 * cos_fp32`` under autocast, which no
        autocast rule covers, computes in fp32 without a cast of ``x``).
    reads_parameter : ReadParameter or None
        A parameter of another layer that it reads as its weight (a tied
        output projection reads the token embedding's matrix): autocast casts
        that one, and its gradient joins that parameter's.
    without_input_gradient : str or None
        Why the autograd convention refuses the layer when no gradient is
        wanted for its input (it reads the network's input): then none of its
        intermediates is saved, and its forward's own transients, which were
        not checked against PyTorch in that case, can set the peak. ``None``:
        checked.
    inference_refusal : str or None
        Why the autograd convention cannot give the inference peak (eval mode
        under ``no_grad``) of the layer in this configuration, or ``None``.
    promotes : bool
        Whether it reads inputs of different dtypes as they are and computes
        in the widest (PyTorch's type promotion inside ``add``: no cast
        tensor in the forward; the backward casts the gradient of a narrower
        input to its dtype), rather than casting them to its compute dtype.
    forward_moments : tuple of ForwardMoment
        The moments inside its forward, in order, when it peaks before all
        it allocates is alive (:class:`ForwardMoment`); empty: one moment.
    no_grad : tuple of TensorSpec or None
        In eval mode under ``torch.no_grad()``, the storages its forward
        allocates besides its output and frees once it has run, when they
        differ from what it would save (``nn.MultiheadAttention``'s fast path
        allocates no tensor another operation sees). ``None``: the same
        storages as :attr:`saved` and :attr:`transients`, made and freed.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> from memtheory.layers import Flatten
    >>> spec = Flatten().autograd(((B, 4, 2, 2),))
    >>> spec.aliases_input, spec.gradient_is_view, spec.saved
    (True, True, ())
    """

    saved: tuple[TensorSpec, ...] = ()
    aliases_input: bool = False
    records: bool = True
    gradient_is_view: bool = False
    autocast: AutocastRule = "follow"
    compute_dtype: DType | None = None
    reads_ids: bool = False
    weight_copy: WeightCopyRule = "never"
    parameter_dtype: tuple[int, ...] = ()
    stages: tuple[Stage, ...] = ()
    transients: tuple[TensorSpec, ...] = ()
    output_elements: sp.Expr | None = None
    target: TensorSpec | None = None
    casts_inputs: bool = True
    reads_parameter: ReadParameter | None = None
    without_input_gradient: str | None = None
    inference_refusal: str | None = None
    promotes: bool = False
    no_grad: tuple[TensorSpec, ...] | None = None
    forward_moments: tuple[ForwardMoment, ...] = ()

    def stage_list(self) -> tuple[Stage, ...]:
        """Its backward nodes in creation order: :attr:`stages`, or one node keeping everything.

        Examples
        --------
        >>> [s.saved for s in Autograd(saved=(TensorSpec("input", (4,)),)).stage_list()]
        [(0,)]
        """
        if self.stages:
            return self.stages
        return (Stage("", tuple(range(len(self.saved))), self.gradient_is_view),)

    def recorded_stages(self, input_needs_grad: bool | tuple[bool, ...]) -> tuple[bool, ...]:
        """Return, per stage, whether autograd records it when its first input does (not) need grad.

        A stage with :attr:`Stage.edges` exists only if a gradient it makes is
        wanted: one of its parameters', or one going to a recorded stage or to
        an input that needs it (RMSNorm on the network's input records only
        its scale). Every other stage is recorded. ``input_needs_grad`` is one
        flag for every input, or one per input (an edge ``-1`` reads the
        first, ``-2`` the second, ...).

        Examples
        --------
        >>> x = TensorSpec("input", (4,))
        >>> spec = Autograd(stages=(Stage("a", edges=((-1, x),)), Stage("b", edges=((0, x),))))
        >>> spec.recorded_stages(False), spec.recorded_stages(True)
        ((False, False), (True, True))
        """
        recorded: list[bool] = []
        for stage in self.stage_list():
            recorded.append(
                not stage.edges
                or bool(stage.parameters)
                or any(_wanted(p, input_needs_grad, recorded) for p, _ in stage.edges)
            )
        return tuple(recorded)

    def kept(
        self, input_needs_grad: bool | tuple[bool, ...]
    ) -> tuple[tuple[int, ...], ...]:
        """Return, per stage, the saved positions it keeps (none when it is not recorded).

        A position a stage lists in :attr:`Stage.kept_for` is kept only when
        the gradient it serves is wanted.

        Examples
        --------
        >>> x = TensorSpec("input", (4,))
        >>> mm = Stage("a @ b", (0, 1), edges=((-1, x), (-2, x)), kept_for=((0, -2), (1, -1)))
        >>> Autograd(saved=(x, x), stages=(mm,)).kept((True, False))
        ((1,),)
        """
        recorded = self.recorded_stages(input_needs_grad)
        kept: list[tuple[int, ...]] = []
        for stage, on in zip(self.stage_list(), recorded, strict=True):
            serves = dict(stage.kept_for)
            kept.append(
                tuple(
                    i for i in stage.saved
                    if i not in serves or _wanted(serves[i], input_needs_grad, recorded)
                ) if on else ()
            )
        return tuple(kept)


def _wanted(edge: int, needs: bool | tuple[bool, ...], recorded: list[bool] | tuple[bool, ...]
            ) -> bool:
    """Whether a gradient sent along ``edge`` is wanted (an input's flag, or a recorded stage)."""
    if edge >= 0:
        return recorded[edge]
    if isinstance(needs, bool):
        return needs
    return needs[-1 - edge] if -1 - edge < len(needs) else any(needs)


@dataclass(frozen=True)
class ReadParameter:
    """A parameter of another layer that a layer reads (a tied projection's matrix).

    Attributes
    ----------
    kind : str
        The :attr:`Layer.kind` of the layer that owns it (``"Embedding"``).
    parameter : str
        Its name in that layer (``"weight"``).
    rows : sympy expression
        Its first dimension, which tells the owner apart from other layers of
        that kind (a vocabulary size).

    Examples
    --------
    >>> ReadParameter("Embedding", "weight", 50257).rows
    50257
    """

    kind: str
    parameter: str
    rows: sp.Expr


@dataclass(frozen=True)
class ForwardMoment:
    """A moment inside a layer's forward, before all it allocates is alive (Falcon's softmax).

    The autograd convention shows a layer's forward as one moment, every
    storage it allocates alive with its output. A layer whose forward frees
    some of them before it makes others, and peaks in between, lists its
    moments in order (:attr:`Autograd.forward_moments`): each allocates the
    storages it names, is marked, then frees those it names that no backward
    node keeps. Storages no moment names are allocated before the first;
    those not yet allocated, and the output, at the layer's own moment, last.

    Attributes
    ----------
    label : str
        Shown in the timeline (``"softmax"``).
    makes : tuple of str
        Labels of the saved tensors and transients allocated before it.
    frees : tuple of str
        Labels of those freed right after it (unless a backward node keeps them).

    Examples
    --------
    >>> ForwardMoment("softmax", ("scores", "softmax"), frees=("scores",)).frees
    ('scores',)
    """

    label: str
    makes: tuple[str, ...] = ()
    frees: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stage:
    """One backward node of a layer that runs as several (cross-entropy: log-softmax, NLL).

    Attributes
    ----------
    label : str
        Shown in the timeline's moments (``"nll_loss"``).
    saved : tuple of int
        Positions, in the layer's saved tensors, of those this node keeps.
    gradient_is_view : bool
        Whether it hands on the incoming gradient (or a view of it).
    temporaries : tuple of TensorSpec
        Tensors its backward allocates and frees before it returns (alive with
        its outputs; dtype ``None``: the layer's compute dtype).
    edges : tuple of (int, TensorSpec)
        Where its gradients go, when not by default (the first stage to the
        layer's inputs, every later one to the stage before it, input-sized):
        the position of an earlier stage, or ``-1`` for the layer's first
        input (``-2`` its second, ...), and the gradient's storage (dtype
        ``None``: the compute dtype).
        Gradients that meet at one stage are added as autograd adds them.
    parameters : tuple of str or None
        The parameters (names relative to the layer, ``"weight"``) whose
        gradients it makes; ``None``: the first stage makes those no stage names.
    kept_for : tuple of (int, int)
        ``(saved position, edge)``: that saved tensor is kept only if the
        gradient sent along that edge is wanted (``a @ b`` keeps ``a`` only for
        ``b``'s gradient: measured on CPU, PyTorch 2.13).

    Examples
    --------
    >>> Stage("nll_loss", (1, 2)).saved
    (1, 2)
    >>> Stage("mul", (2,), edges=((1, TensorSpec("intermediate", (4,))),)).edges[0][0]
    1
    """

    label: str
    saved: tuple[int, ...] = ()
    gradient_is_view: bool = False
    temporaries: tuple[TensorSpec, ...] = ()
    edges: tuple[tuple[int, TensorSpec], ...] = ()
    parameters: tuple[str, ...] | None = None
    kept_for: tuple[tuple[int, int], ...] = ()


class Layer(ABC):
    """Base of every layer: a pure description that derives its formulas from an input shape.

    Layers are frozen dataclasses: hyperparameters are fixed at construction
    and validated there. Every formula takes the input shape (batch first,
    entries may be symbolic) and returns sympy expressions.

    Examples
    --------
    Every layer answers the same questions about an input shape:

    >>> from memtheory.layers import Conv2d
    >>> from memtheory.symbols import B
    >>> conv = Conv2d(64, 3, padding=1)
    >>> isinstance(conv, Layer), conv.output_shape((B, 3, 32, 32))
    (True, (B, 64, 32, 32))
    >>> conv.parameter_count((B, 3, 32, 32)), conv.activation_count((B, 3, 32, 32))
    (1792, 65536*B)
    """

    kind: ClassVar[str] = "Layer"
    #: Whether :meth:`autograd` was checked against PyTorch: the autograd convention refuses
    #: a layer that does not say so, naming it, rather than guess.
    autograd_checked: ClassVar[bool] = False
    #: Why the autograd convention does not model it, when that is known (said in the refusal).
    autograd_refusal: ClassVar[str | None] = None
    #: Whether its inference (eval mode, no_grad) peak was checked too, when autograd_checked:
    #: the autograd convention's ``inference`` refuses a layer that says False.
    autograd_inference_checked: ClassVar[bool] = True
    #: Number of dimensions the input must have (batch included), or None for any.
    input_rank: ClassVar[int | None] = None
    name: str | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Make each layer check its options' kinds before its own ``__post_init__`` runs."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__post_init__")
        if own is not None and not getattr(own, "checks_options", False):
            setattr(cls, "__post_init__", _checking_options(own))  # noqa: B010 (a method)

    def __post_init__(self) -> None:
        check_options(self)

    @property
    def label(self) -> str:
        """``Kind 'name'`` for messages and tables (just ``Kind`` while unnamed)."""
        return f"{self.kind} {self.name!r}" if self.name else self.kind

    def check_input(self, input_shape: Shape) -> None:
        """Raise :class:`RankError` unless ``input_shape`` has the rank this layer needs."""
        if self.input_rank is not None and len(input_shape) != self.input_rank:
            raise RankError(
                f"{self.label}: needs a {self.input_rank}-D input "
                f"{self._rank_words()}, got {len(input_shape)}-D {describe_shape(input_shape)}. "
                f"{self._rank_fix(len(input_shape))}"
            )

    def _rank_words(self) -> str:
        return {2: "(batch, features)", 4: "(batch, channels, height, width)"}.get(
            self.input_rank or 0, ""
        )

    def _rank_fix(self, got: int) -> str:
        if self.input_rank == 2 and got > 2:
            return "Insert Flatten() before it."
        if self.input_rank == 4 and got == 2:
            return "It cannot follow Flatten or Dense; move it before them."
        return "Check the layers before it."

    @abstractmethod
    def output_shape(self, input_shape: Shape) -> Shape:
        """Shape of the output for an input of ``input_shape``."""

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """Return the number of trainable weights (biases excluded)."""
        return sp.Integer(0)

    def bias_count(self, input_shape: Shape) -> sp.Expr:
        """Return the number of trainable biases."""
        return sp.Integer(0)

    def parameter_count(self, input_shape: Shape) -> sp.Expr:
        """Weights plus biases."""
        return self.weight_count(input_shape) + self.bias_count(input_shape)

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """Return the trainable tensors as PyTorch registers them: ``(name, shape)``, in order.

        Names are relative to the layer (``"weight"``, ``"bias"``,
        ``"in_proj_weight"``, ...); their elements sum to
        :meth:`parameter_count`. A layer without parameters has none.
        """
        if self.parameter_count(input_shape) == 0:
            return ()
        raise UnsupportedError(f"{self.label}: does not state the shapes of its parameters.")

    def buffers(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Non-trainable state saved with the model (e.g. BatchNorm's running statistics)."""
        return ()

    def size_limits(self, input_shape: Shape) -> tuple[tuple[str, sp.Expr], ...]:
        """Return the largest sizes the layer takes, as ``(words, size)`` with ``size >= 1``.

        A learned table of positions takes sequences no longer than its rows:
        ``("at most 1024 positions", 1025 - S)``. Most layers take any size: none.
        """
        return ()

    def stores_output(self) -> bool:
        """Whether the output is a new tensor (False for views and in-place layers)."""
        return True

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Elements of new activation memory the forward pass creates and keeps.

        The output's elements, or zero for a view (Flatten) or an in-place layer,
        which reuse their input's storage.
        """
        if not self.stores_output():
            return sp.Integer(0)
        return elements(self.output_shape(input_shape))

    @abstractmethod
    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Tensors the backward pass needs, as PyTorch's autograd keeps them."""

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Return how the layer behaves under autograd for inputs of these shapes.

        ``input_dtype`` is the dtype of the tensor the layer receives and
        ``autocast`` the low dtype of ``torch.autocast`` when it is on; a layer
        whose saved tensors depend on them (PyTorch's CPU attention upcasts
        16-bit inputs, LayerNorm keeps fp32 statistics under autocast) states
        concrete dtypes for them. Left ``None``, the description is that of an
        fp32 run with the activation dtype unspecified. A saved tensor whose
        dtype is ``None`` has the layer's compute dtype.

        The default: it saves :meth:`saved_for_backward`, its output aliases its
        input unless :meth:`stores_output`, and it computes in its input's
        dtype under autocast. Layers that differ override it, and set
        ``autograd_checked = True`` once it was measured against PyTorch.

        Examples
        --------
        >>> from memtheory.symbols import B
        >>> from memtheory.layers import ReLU
        >>> ReLU(inplace=True).autograd(((B, 8),)).aliases_input
        True
        """
        shape = input_shapes[0] if input_shapes else ()
        return Autograd(
            saved=self.saved_for_backward(tuple(shape)), aliases_input=not self.stores_output()
        )

    def describe(self) -> str:
        """Hyperparameters in a few characters, for tables."""
        return ""


def check_options(layer: object) -> None:
    """Refuse a layer option of the wrong kind: on/off options, names and named choices.

    An option declared ``bool`` takes True or False (NumPy's too):
    ``Conv2d(8, 3, bias="no")`` would otherwise count a bias, since ``"no"`` is
    true. A name is text (or None), and a choice among names (``approximate``,
    ``implementation``, ...) is text; the layer then checks which.

    Examples
    --------
    >>> from memtheory.layers import Conv2d
    >>> Conv2d(8, 3, bias="no")
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: Conv2d: bias must be True or False, got 'no' (str).
    """
    if not dataclasses.is_dataclass(layer):
        return
    owner = getattr(layer, "kind", type(layer).__name__)
    for field in dataclasses.fields(layer):
        declared = str(field.type)
        value = getattr(layer, field.name)
        if declared == "bool":
            if isinstance(value, numpy_types("bool_")):
                object.__setattr__(layer, field.name, bool(value))
            elif not isinstance(value, bool):
                raise InvalidArgumentError(
                    f"{owner}: {field.name} must be True or False, got {value!r} "
                    f"({type(value).__name__})."
                )
        elif declared in ("str", "str | None") or declared.startswith("Literal["):
            optional = declared.endswith("| None")
            if not (isinstance(value, str) or (optional and value is None)):
                words = "text" + (" or None" if optional else "")
                raise InvalidArgumentError(
                    f"{owner}: {field.name} must be {words}, got {value!r} "
                    f"({type(value).__name__})."
                )


def _checking_options(post_init: Callable[[Any], None]) -> Callable[[Any], None]:
    @functools.wraps(post_init)
    def checked(self: Any) -> None:
        check_options(self)
        post_init(self)

    checked.checks_options = True  # type: ignore[attr-defined]
    return checked
