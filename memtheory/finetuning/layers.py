"""The layers fine-tuning adds to a network: a frozen wrapper, a scaling, LoRA on attention.

:class:`Frozen` keeps a layer's parameters but trains none of them: they count
as frozen weights, with no gradient and no optimizer state. What autograd
still keeps for a frozen layer was measured on CPU (PyTorch 2.13, see
``tests/pytorch/test_finetuning_measured.py``): a frozen ``Linear`` whose
input needs no gradient records no backward node at all; one whose input
does need a gradient records a node that keeps only its weight (a parameter,
no new memory), *not* its input, which only the weight's gradient would need.
A LoRA adapter beside it keeps that same input storage through its ``A``
matrix, so the input stays alive all the same.

Under ``torch.autocast`` (fp32 weights, bf16 compute: TRL's and the Trainer's
``bf16=True``) a frozen ``Linear`` casts its weight to bf16 at every call and,
when its input needs a gradient, its backward node keeps that copy: a new
storage, half the weight's fp32 bytes, per frozen projection, for as long as
the node lives (autocast caches only the casts of weights that need a
gradient). Measured on CPU in peft-LoRA Llama steps under TRL
(``tests/pytorch/test_trl_recipe.py``).

Examples
--------
>>> from memtheory.layers import Dense
>>> from memtheory.symbols import B
>>> frozen = Frozen(Dense(10, name="fc"))
>>> frozen.parameter_count((B, 500)), [s.elements for s in frozen.buffers((B, 500))]
(0, [5000, 10])
>>> [s.label for s in frozen.autograd(((B, 500),), autocast="bf16").saved]
['frozen weight copy']
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sympy as sp

from memtheory.dtypes import DTypeLike, dtype
from memtheory.errors import UnsupportedError
from memtheory.layers.attention import MultiHeadAttention
from memtheory.layers.base import Autograd, Layer, Shape, Stage, TensorSpec, elements
from memtheory.layers.core import Dense
from memtheory.layers.embedding import Embedding, Unembedding
from memtheory.layers.layer_norm import LayerNorm
from memtheory.layers.moe import MixtureOfExperts
from memtheory.layers.rms_norm import GemmaRMSNorm, RMSNorm

__all__ = [
    "ATTENTION_PROJECTIONS",
    "AdapterInputCast",
    "CastLoRADown",
    "CastLoRAUp",
    "Frozen",
    "LoRAAttention",
    "LoRAUp",
    "ConstantScale",
    "frozen_tensors",
]

ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
"""The linear maps inside a :class:`~memtheory.layers.MultiHeadAttention`, by Hugging Face names."""


def frozen_tensors(layer: Layer, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
    """Return a layer's parameter tensors ``(name, shape)``, as it registers them.

    A layer that does not state its shapes gives ``weight`` and ``bias`` as flat tensors.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> frozen_tensors(Dense(3), (B, 4))
    (('weight', (3, 4)), ('bias', (3,)))
    """
    try:
        return layer.parameter_shapes(input_shape)
    except UnsupportedError:
        parts = (
            ("weight", layer.weight_count(input_shape)),
            ("bias", layer.bias_count(input_shape)),
        )
        return tuple((name, (count,)) for name, count in parts if count != 0)


@dataclass(frozen=True)
class Frozen(Layer):
    """A layer whose parameters are kept but not trained (``requires_grad_(False)``).

    Its parameters become frozen weights (listed by :meth:`buffers` with the
    label ``"frozen ..."``): no gradient, no optimizer state. Under autograd
    it behaves as the layer does, except that a frozen :class:`~memtheory.layers.Dense`
    keeps nothing (measured on CPU, PyTorch 2.13). A frozen
    :class:`~memtheory.layers.LayerNorm` keeps what it keeps when trained (its
    input's gradient needs the same tensors), and a frozen
    :class:`~memtheory.layers.Embedding` fed token ids records nothing: both
    measured. Other frozen layers are described as the layer itself and are
    not marked as checked, so the autograd convention refuses them rather
    than guess. Under ``torch.autocast`` a frozen Dense keeps its weight's
    low-precision copy instead (see :meth:`autograd`).

    Parameters
    ----------
    layer : Layer
        The layer to freeze.
    name : str, optional
        Defaults to the layer's name.
    transient : bool, default False
        Its output is freed during the forward pass (a LoRA ``base_layer``,
        whose output only feeds the sum): the breakdown convention, which
        counts every kept output, does not count it. The autograd convention
        follows the storage either way.

    Examples
    --------
    A frozen head: its 1010 weights are kept (fp32) but get no gradient and no Adam state.

    >>> from memtheory import Dense, Input, Network, training_memory
    >>> net = Network([Input((500,)), Dense(100, name="body"), Frozen(Dense(10, name="head"))])
    >>> memory = training_memory(net, optimizer="adam", convention="autograd")
    >>> memory.components["buffers"], memory.components["gradients"]  # 4 x 1010; 4 x 50100
    (4040, 200400)
    """

    layer: Layer
    name: str | None = None
    transient: bool = False
    kind = "Frozen"

    def __post_init__(self) -> None:
        if isinstance(self.layer, Frozen):
            raise UnsupportedError(f"{self.layer.label} is frozen already.")
        if self.name is None:
            object.__setattr__(self, "name", self.layer.name)
        elif self.layer.name is None:
            object.__setattr__(self, "layer", replace(self.layer, name=self.name))  # type: ignore[type-var]

    @property
    def autograd_checked(self) -> bool:  # type: ignore[override]
        """Checked (measured) frozen: Dense, LayerNorm, Embedding, Llama and Gemma RMSNorm, lm_head.

        The RMSNorm (Hugging Face's ``LlamaRMSNorm``) and the untied
        :class:`~memtheory.layers.Unembedding` were measured inside LoRA-tuned
        Llama, Qwen2 and Mistral decoders
        (``tests/pytorch/test_lora_decoder_measured.py``), the tied one (which
        reads the frozen embedding's matrix) in peft-LoRA Llama under the
        Trainer, bf16 and autocast, and Gemma's ``GemmaRMSNorm`` in peft-LoRA
        Gemma 1 and 2 under the Trainer in bf16
        (``tests/pytorch/test_peft_tied.py``); a frozen
        :class:`~memtheory.layers.MixtureOfExperts` in LoRA-tuned Mixtral
        (``tests/pytorch/test_moe_autograd.py``).
        """
        if type(self.layer) is RMSNorm:
            return self.layer.implementation == "llama"
        if type(self.layer) in (Unembedding, GemmaRMSNorm):
            return True
        if type(self.layer) is MixtureOfExperts:
            return self.layer.autograd_checked
        return type(self.layer) in (Dense, LayerNorm, Embedding)

    def check_input(self, input_shape: Shape) -> None:
        """Check the input as the wrapped layer does."""
        self.layer.check_input(input_shape)

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the wrapped layer's output shape."""
        return self.layer.output_shape(input_shape)

    def buffers(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the wrapped layer's buffers, then its parameters, frozen."""
        frozen = tuple(
            TensorSpec("buffer", shape, label=f"frozen {name}")
            for name, shape in frozen_tensors(self.layer, input_shape)
        )
        return (*self.layer.buffers(input_shape), *frozen)

    def stores_output(self) -> bool:
        """As the wrapped layer."""
        return self.layer.stores_output()

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """As the wrapped layer, or none when its output is transient."""
        if self.transient:
            return sp.Integer(0)
        return self.layer.activation_count(input_shape)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing for a frozen Dense; otherwise what the wrapped layer keeps."""
        if isinstance(self.layer, Dense):
            return ()
        return self.layer.saved_for_backward(input_shape)

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """As the wrapped layer, but a frozen Dense keeps nothing (its weight is a parameter).

        Under ``torch.autocast`` a frozen Dense (or
        :class:`~memtheory.layers.Unembedding`, tied or not: tied, the matrix
        is the embedding's) casts its weight to the low dtype at every call:
        autocast caches only the casts of leaves that need a gradient, so the
        copy is the layer's own storage, kept by its backward node when its
        input needs a gradient (``grad_input = grad @ weight``) and freed once
        it has run otherwise; its bias's cast is
        freed at once. Measured on CPU (PyTorch 2.13) in peft-LoRA Llama steps
        under TRL (``tests/pytorch/test_trl_recipe.py``,
        ``test_dpo_recipe.py``), as were a frozen Llama RMSNorm and Embedding
        under autocast; other frozen layers under autocast are refused.
        """
        if autocast is not None and not self._autocast_checked():
            raise UnsupportedError(
                f"{self.label}: a frozen {self.layer.kind} under torch.autocast is not "
                "modelled (measured: frozen Dense, lm_head, Llama RMSNorm and Embedding); "
                "use one dtype (precision='bf16') for fine-tuning."
            )
        spec = self.layer.autograd(
            input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )
        if isinstance(self.layer, Dense | Unembedding):
            frozen = replace(spec, saved=(), weight_copy="never", reads_parameter=None)
            if autocast is None:
                return frozen
            return _own_casts(frozen, _read_tensors(self.layer, tuple(input_shapes[0])))
        if type(self.layer) is RMSNorm and self.layer.elementwise_affine:
            return _frozen_scale(spec)
        if type(self.layer) is GemmaRMSNorm:
            return _frozen_gemma_scale(spec)
        if isinstance(self.layer, MixtureOfExperts):
            return self.layer.frozen_autograd(spec)
        return spec

    def _autocast_checked(self) -> bool:
        """Whether the layer, frozen, was measured under autocast."""
        layer = self.layer
        if type(layer) is Unembedding:
            return True
        if type(layer) is RMSNorm:
            return layer.implementation == "llama"
        return type(layer) in (Dense, Embedding)

    def describe(self) -> str:
        """``frozen`` and the wrapped layer's description."""
        inner = self.layer.describe()
        return f"frozen {self.layer.kind}" + (f" {inner}" if inner else "")


def _read_tensors(layer: Layer, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
    """Return the tensors a frozen linear layer reads as its own: a tied head's is the embedding's.

    A tied :class:`~memtheory.layers.Unembedding` (``tie_word_embeddings``)
    reads the token embedding's matrix, ``vocabulary x features``; frozen, no
    gradient joins it (so it does not point the plan at the embedding's
    parameter, which is a frozen weight there too), but autocast casts it at
    every call as it casts an untied head's own.
    """
    tensors = frozen_tensors(layer, input_shape)
    if isinstance(layer, Unembedding) and layer.tied:
        return (("weight", (layer.num_embeddings, input_shape[-1])), *tensors)
    return tensors


def _own_casts(spec: Autograd, tensors: tuple[tuple[str, Shape], ...]) -> Autograd:
    """Return a frozen linear layer's autograd under autocast: its weight's cast is its own.

    The low-precision copy of the weight is saved (kept only when the node
    is recorded, that is when the input needs a gradient); the bias's copy
    is a transient. Both in the compute dtype (dtype ``None``).
    """
    saved = tuple(TensorSpec("weight copy", shape, label=f"frozen {name} copy")
                  for name, shape in tensors if name == "weight")
    transients = tuple(TensorSpec("weight copy", shape, label=f"frozen {name} copy")
                       for name, shape in tensors if name != "weight")
    return replace(spec, saved=saved, transients=(*spec.transients, *transients))


def _frozen_scale(spec: Autograd) -> Autograd:
    """Return the autograd of an RMSNorm whose scale is frozen: the weight alone is kept.

    PyTorch's ``mul`` saves a factor only for the other factor's gradient: with
    the weight frozen, the normalised input (the last saved tensor) is not
    kept, and the scale's node makes no weight gradient (nor the unsummed
    product behind it). Measured on CPU (PyTorch 2.13) in LoRA-tuned decoders.
    """
    stages = list(spec.stage_list())
    last = stages[-1]
    stages[-1] = replace(last, saved=(), temporaries=(), parameters=())
    return replace(spec, saved=spec.saved[:-1], stages=tuple(stages))


def _frozen_gemma_scale(spec: Autograd) -> Autograd:
    """Return the autograd of a Gemma RMSNorm whose weight is frozen: ``1 + w`` alone is kept.

    ``normed * (1.0 + weight.float())`` in fp32: PyTorch's ``mul`` saves a
    factor only for the other factor's gradient, so with the weight frozen
    the fp32 normalised input (saved position 2) is not kept, and the
    scale's node makes no unsummed product for a weight gradient.
    """
    saved = (*spec.saved[:2], *spec.saved[3:])
    stages = []
    for stage in spec.stage_list():
        if stage.label == "scale":
            stage = replace(stage, saved=(2,), temporaries=(), parameters=())
        stages.append(stage)
    return replace(spec, saved=saved, stages=tuple(stages))


@dataclass(frozen=True)
class LoRAUp(Dense):
    """LoRA's ``lora_B``: a Dense layer whose output is scaled and summed at once, then freed.

    The breakdown convention, which counts every kept output, does not count
    its output; everything else is :class:`~memtheory.layers.Dense`'s.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> LoRAUp(64, bias=False).activation_count((B, 8)), Dense(64).activation_count((B, 8))
    (0, 64*B)
    """

    kind = "Dense"

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Return none: the output is transient."""
        return sp.Integer(0)


def _keeps_weight_copy(spec: Autograd, weight: sp.Expr) -> Autograd:
    """Return a matmul's autograd that also saves autocast's cast of its (wider) weight.

    ``grad_input = grad @ weight_copy``: the copy is kept only when the input
    needs a gradient (PyTorch's ``mm`` saves one factor for the other's gradient).
    """
    copy = TensorSpec("weight copy", (weight,), label="adapter weight copy")
    saved = (*spec.saved, copy)
    stage = Stage("mm", saved=tuple(range(len(saved))), kept_for=((len(saved) - 1, -1),))
    return replace(spec, saved=saved, stages=(stage,))


class _KeepsWeightCopy(Layer):
    """An adapter kept wider than the step computes in: its weight's compute-dtype cast is kept."""

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """As the adapter's own class (Dense or LoRAUp), with its weight's cast kept."""
        _refuse_autocast(self, autocast)
        spec = super().autograd(
            input_shapes, training=training, input_dtype=input_dtype, autocast=autocast
        )
        return _keeps_weight_copy(spec, self.weight_count(tuple(input_shapes[0])))


@dataclass(frozen=True)
class CastLoRADown(_KeepsWeightCopy, Dense):
    """peft's ``lora_A`` kept in a wider dtype than the step computes in (fp32 under autocast).

    peft 0.21 (``tuners/tuners_utils.py``, ``get_peft_model(...,
    autocast_adapter_dtype=True)``) keeps the adapters in fp32 on a 16-bit
    base; under ``torch.autocast`` (the Trainer's ``bf16=True``) each adapter
    matmul casts its fp32 weight to the compute dtype. Autocast caches that
    cast (the weight requires a gradient) and the matmul's backward keeps it
    when the input needs a gradient (``grad_input = grad @ weight``): a
    compute-dtype copy of the weight per adapter, alive until its backward
    runs. An adapter whose input needs no gradient (``lora_A`` in the first
    decoder layer, fed by the frozen embedding) keeps none; its copy lives
    in autocast's cache until the forward ends, which this layer does not
    follow (it frees the copy at once). Otherwise as
    :class:`~memtheory.layers.Dense`, in the step's compute dtype; the
    adapters' own dtype is applied by
    :func:`~memtheory.finetuning.finetune_memory` (``adapter_dtype``).
    Measured on CPU (PyTorch 2.13, peft 0.21, transformers 5) in
    ``tests/pytorch/test_peft_recipe.py``.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> spec = CastLoRADown(4, bias=False).autograd(((B, S, 32),))
    >>> [(s.label, s.elements) for s in spec.saved], spec.kept((True,)), spec.kept((False,))
    ([(None, 32*B*S), ('adapter weight copy', 128)], ((0, 1),), ((0,),))
    """

    kind = "Dense"


@dataclass(frozen=True)
class CastLoRAUp(_KeepsWeightCopy, LoRAUp):
    """peft's ``lora_B`` kept wider than the step computes in: as :class:`CastLoRADown`.

    Its input (``lora_A``'s output) always needs a gradient, so its weight's
    compute-dtype copy is always kept until its backward runs. Its output is
    transient as :class:`LoRAUp`'s.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> [s.label for s in CastLoRAUp(64, bias=False).autograd(((B, 4),)).saved]
    [None, 'adapter weight copy']
    """

    kind = "Dense"


def _refuse_autocast(layer: Layer, autocast: DTypeLike | None) -> None:
    """Refuse a step planned under autocast: these layers count autocast's copies themselves."""
    if autocast is not None:
        raise UnsupportedError(
            f"{layer.label}: a wider LoRA adapter is planned in the step's compute dtype (the "
            "16-bit base as loaded); under an autocast precision its weight copy would be "
            "counted twice: pass precision='bf16' with adapter_dtype='fp32'."
        )


@dataclass(frozen=True)
class AdapterInputCast(Layer):
    """peft's cast of an adapted layer's input to the adapters' dtype, and autocast's cast back.

    peft 0.21 ``tuners/lora/layer.py``, ``Linear.forward``: ``x =
    self._cast_input_dtype(x, lora_A.weight.dtype)`` turns the 16-bit input
    into a new ``dtype`` (fp32) tensor, and under ``torch.autocast``
    ``lora_A``'s matmul casts that back to the compute dtype: a new storage,
    the adapter's *own* copy of its input, which ``lora_A`` keeps for its
    weight's gradient (the input it was cast from is freed where nothing else
    keeps it: a frozen ``Linear`` keeps only its weight). The ``dtype``
    tensor is a transient here (in peft it lives until the adapted layer's
    sum is made); the backward makes one of the input gradient too.
    Measured on CPU (PyTorch 2.13, peft 0.21) in
    ``tests/pytorch/test_peft_recipe.py``.

    Parameters
    ----------
    dtype : str, default "fp32"
        The adapters' dtype.
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> spec = AdapterInputCast().autograd(((B, S, 32),))
    >>> spec.saved, [(t.elements, t.dtype.name) for t in spec.transients]
    ((), [(32*B*S, 'fp32')])
    """

    dtype: str = "fp32"
    name: str | None = None
    kind = "AdapterInputCast"
    autograd_checked = True

    def __post_init__(self) -> None:
        dtype(self.dtype)  # a clear error for an unknown name

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input's shape."""
        return tuple(input_shape)

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Count the copy (the adapter's ``lora_A`` keeps it)."""
        return elements(tuple(input_shape))

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: a cast's gradient is the incoming one cast back."""
        return ()

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Make a new copy of the input, the ``dtype`` tensor between (forward and backward)."""
        shape = tuple(input_shapes[0])
        wide = TensorSpec("intermediate", shape, dtype(self.dtype), label=f"input in {self.dtype}")
        return Autograd(
            transients=(wide,),
            stages=(Stage("to", temporaries=(wide,)),),
        )

    def describe(self) -> str:
        """Show the adapters' dtype."""
        return f"via {self.dtype}"


@dataclass(frozen=True)
class ConstantScale(Layer):
    """Multiply by a Python number (LoRA's ``alpha / rank``): nothing is kept for backward.

    Not :class:`~memtheory.layers.TensorScale` (Gemma's multiplication by a 0-dimensional
    tensor, which keeps the tensor).

    In LoRA its output feeds the sum at once and is freed: the breakdown
    convention does not count it (the autograd convention follows it).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> ConstantScale(2.0).autograd(((B, 4),)).saved
    ()
    """

    factor: float
    name: str | None = None
    kind = "ConstantScale"
    autograd_checked = True

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the input's shape."""
        return tuple(input_shape)

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Return none: the output is transient."""
        return sp.Integer(0)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: the gradient is the incoming one times the constant."""
        return ()

    def describe(self) -> str:
        """Show the factor."""
        return f"x{self.factor:g}"


@dataclass(frozen=True)
class LoRAAttention(Layer):
    r"""A frozen :class:`~memtheory.layers.MultiHeadAttention` with LoRA adapters on projections.

    Each adapted projection (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``) of
    :math:`n_\text{in}` inputs and :math:`n_\text{out}` outputs gets a trainable
    ``lora_A`` (``rank x n_in``) and ``lora_B`` (``n_out x rank``). Its forward
    keeps, per adapter and position, ``rank`` values (the output of ``A``,
    which ``B``'s weight gradient needs) and the projection's output with the
    update added (:math:`n_\text{out}`, a new tensor beside the fused
    projection's); ``B``'s output and its scaled copy are freed at once. The
    autograd convention does not follow it (not checked against PyTorch): it
    refuses it.

    Parameters
    ----------
    layer : MultiHeadAttention
    projections : tuple of str
        Which of :data:`ATTENTION_PROJECTIONS` carry adapters.
    rank : int
    alpha : float

    Examples
    --------
    Rank-8 adapters on the query and value projections of a 4096-wide attention with
    8 key/value heads (of 128): only they are trained.

    >>> from memtheory.layers import MultiHeadAttention
    >>> from memtheory.symbols import B, S
    >>> lora = LoRAAttention(MultiHeadAttention(32, kv_heads=8), ("q_proj", "v_proj"), 8, 16)
    >>> lora.parameter_count((B, S, 4096))  # 8 x (4096 + 4096) + 8 x (4096 + 1024)
    106496
    >>> sum(s.elements for s in lora.buffers((B, S, 4096)))  # the frozen attention
    41953280
    """

    layer: MultiHeadAttention
    projections: tuple[str, ...]
    rank: int
    alpha: float
    name: str | None = None
    kind = "LoRAAttention"

    def __post_init__(self) -> None:
        unknown = set(self.projections) - set(ATTENTION_PROJECTIONS)
        if unknown:
            raise UnsupportedError(
                f"LoRAAttention: unknown projections {sorted(unknown)}; "
                f"known: {', '.join(ATTENTION_PROJECTIONS)}."
            )
        if self.name is None:
            object.__setattr__(self, "name", self.layer.name)

    def projection_shapes(self, input_shape: Shape) -> dict[str, tuple[sp.Expr, sp.Expr]]:
        """Return ``(inputs, outputs)`` of each adapted projection.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> attention = MultiHeadAttention(32, kv_heads=8)
        >>> LoRAAttention(attention, ("q_proj", "v_proj"), 8, 16).projection_shapes((B, S, 4096))
        {'q_proj': (4096, 4096), 'v_proj': (4096, 1024)}
        """
        features = input_shape[-1]
        width = self.layer.width(input_shape)
        inner = self.layer.heads * width
        kv = (self.layer.kv_heads or self.layer.heads) * width
        sizes = {
            "q_proj": (features, inner),
            "k_proj": (features, kv),
            "v_proj": (features, kv),
            "o_proj": (inner, features),
        }
        return {p: sizes[p] for p in ATTENTION_PROJECTIONS if p in self.projections}

    def check_input(self, input_shape: Shape) -> None:
        """Check the input as the attention layer does."""
        self.layer.check_input(input_shape)

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return the attention layer's output shape."""
        return self.layer.output_shape(input_shape)

    def weight_count(self, input_shape: Shape) -> sp.Expr:
        """Adapter weights: ``rank * (n_in + n_out)`` per adapted projection."""
        sizes = self.projection_shapes(input_shape).values()
        return sp.Add(*(self.rank * (n_in + n_out) for n_in, n_out in sizes))

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``{projection}.lora_A.weight`` and ``{projection}.lora_B.weight``, per projection."""
        shapes: list[tuple[str, Shape]] = []
        for projection, (n_in, n_out) in self.projection_shapes(input_shape).items():
            shapes.append((f"{projection}.lora_A.weight", (sp.Integer(self.rank), n_in)))
            shapes.append((f"{projection}.lora_B.weight", (n_out, sp.Integer(self.rank))))
        return tuple(shapes)

    def buffers(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the attention layer's parameters, frozen."""
        return Frozen(self.layer).buffers(input_shape)

    def activation_count(self, input_shape: Shape) -> sp.Expr:
        """Count the attention output plus, per adapter, A's output and the summed projection."""
        positions = elements(tuple(input_shape[:-1]))
        extra = sp.Add(
            *(positions * (self.rank + n_out)
              for _, n_out in self.projection_shapes(input_shape).values())
        )
        return self.layer.activation_count(input_shape) + extra

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return what the attention keeps, plus each adapter's ``A`` output."""
        batch_dims = tuple(input_shape[:-1])
        extra = tuple(
            TensorSpec(
                "intermediate", (*batch_dims, sp.Integer(self.rank)), label=f"{p} lora_A output"
            )
            for p in self.projection_shapes(input_shape)
        )
        return (*self.layer.saved_for_backward(input_shape), *extra)

    def describe(self) -> str:
        """Rank and adapted projections."""
        return f"LoRA r={self.rank} on {', '.join(self.projections)}"
