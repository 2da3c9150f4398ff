"""The layers a vision-language model adds: pixel patches, their projection, merging, scattering.

A vision-language model (Qwen2-VL, Qwen2.5-VL, LLaVA, Gemma 3) feeds its language
model a sequence in which some positions hold image tokens. The image enters
as pixel patches (:class:`PixelPatches`: the processor cuts each image into
``patch x patch`` squares, Qwen2-VL also into pairs of frames); a convolution
whose stride is its kernel embeds each patch, which is one matrix product over
the flattened patch (:class:`PatchProjection`, whose weight keeps the
convolution's shape); Qwen2-VL's merger concatenates each ``2 x 2`` group of
neighbouring patches (:class:`PatchMerge`, a view); Gemma 3's projector
averages each square of neighbouring patches (:class:`PatchPool`) and
multiplies by an ``(in, out)`` matrix (:class:`MatrixProjection`); and the projected image
features replace the image-token positions of the text embeddings
(:class:`ImageTokenScatter`, ``inputs_embeds.masked_scatter(mask, image)``).

Examples
--------
>>> from memtheory.symbols import B, S
>>> PixelPatches(1024, 1176).output_shape((B, S))
(B, 1024, 1176)
>>> PatchMerge(4).output_shape((B, 1024, 1280))
(B, 256, 5120)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import sympy as sp

from memtheory._validation import SizeLike, as_size
from memtheory.dtypes import DTypeLike
from memtheory.dtypes import dtype as as_dtype
from memtheory.errors import RankError, ShapeError
from memtheory.layers.base import Autograd, Layer, Shape, TensorSpec, describe_shape
from memtheory.layers.core import Dense
from memtheory.layers.grouped_attention import GroupedQueryAttention
from memtheory.layers.merge import Merge
from memtheory.layers.vision_transformer import ClassToken, LearnedPositions

__all__ = [
    "DropClassToken",
    "EncoderAttention",
    "FlatClassToken",
    "FlatPositions",
    "ImageTokenScatter",
    "MatrixProjection",
    "PatchMerge",
    "PatchPool",
    "PatchProjection",
    "PixelPatches",
]


def _check_rank3(layer: Layer, input_shape: Shape) -> None:
    if len(input_shape) != 3:
        raise RankError(
            f"{layer.label}: needs (batch, patches, features), got "
            f"{describe_shape(tuple(input_shape))}."
        )


@dataclass(frozen=True)
class PixelPatches(Layer):
    """The images of a step as flattened pixel patches: ``(batch, patches, features)``.

    It reads the token ids only for their batch (one image per sequence) and
    stands for the ``pixel_values`` the processor hands the model: data, in
    the model's dtype, that needs no gradient. ``features`` is
    ``channels * patch * patch`` (Qwen2-VL: ``* temporal_patch_size``).

    Parameters
    ----------
    patches : size
        Patches per image.
    features : size
        Pixel values per patch.
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> PixelPatches(576, 588).output_shape((B, S))
    (B, 576, 588)
    """

    patches: SizeLike
    features: SizeLike
    name: str | None = None
    kind = "PixelPatches"
    autograd_checked = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "patches", as_size(self.patches, "patches", self.label))
        object.__setattr__(self, "features", as_size(self.features, "features", self.label))

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, patches, features)``; the batch is the token ids'."""
        if len(input_shape) != 2:
            raise RankError(
                f"{self.label}: reads the token ids, (batch, sequence), got "
                f"{describe_shape(tuple(input_shape))}."
            )
        return (input_shape[0], self.patches, self.features)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: the pixels need no gradient."""
        return ()

    def autograd(
        self,
        input_shapes: tuple[Shape, ...],
        *,
        training: bool = True,
        input_dtype: DTypeLike | None = None,
        autocast: DTypeLike | None = None,
    ) -> Autograd:
        """Nothing saved; the pixels come in the parameters' dtype."""
        return Autograd(reads_ids=True, autocast="parameters")

    def describe(self) -> str:
        """Patches and values per patch."""
        return f"{self.patches} x {self.features}"


@dataclass(frozen=True)
class PatchProjection(Dense):
    """A patch convolution whose stride is its kernel, as a product over flattened patches.

    ``Conv2d(C, E, p, stride=p)`` on ``p x p`` patches (CLIP) or
    ``Conv3d(C, E, (t, p, p), stride=(t, p, p))`` (Qwen2-VL) computes
    ``patches @ W.reshape(E, -1).T``: the same parameters and the same
    ``(batch, patches, E)`` output as a dense layer; the weight keeps the
    convolution's shape, ``(E, *kernel)``. CLIP's and Qwen's have no bias,
    SigLIP's (Gemma 3) has one (``bias=True``).

    Parameters
    ----------
    units : size
        Embedding width ``E``.
    kernel : sequence of int
        The weight's shape after ``E``: ``(C, p, p)`` or ``(C, t, p, p)``.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> PatchProjection(16, kernel=(3, 2, 14, 14)).parameter_shapes((B, 4, 1176))
    (('weight', (16, 3, 2, 14, 14)),)
    """

    kernel: Sequence[int] = field(default=(3, 14, 14))
    bias: bool = False
    kind = "PatchProjection"

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``weight`` of ``(units, *kernel)``: the convolution's; ``bias`` of ``(units,)``."""
        self.check_input(input_shape)
        width = sp.Mul(*(sp.Integer(k) for k in self.kernel))
        if sp.simplify(width - input_shape[-1]) != 0:
            raise ShapeError(
                f"{self.label}: a kernel of {tuple(self.kernel)} covers {width} values, but each "
                f"patch has {input_shape[-1]}."
            )
        weight = (self.units, *(sp.Integer(k) for k in self.kernel))
        return (("weight", weight), ("bias", (self.units,))) if self.bias else (("weight", weight),)


@dataclass(frozen=True)
class PatchMerge(Layer):
    """Concatenate each group of ``group`` neighbouring patches: ``x.view(-1, group * E)``.

    Qwen2-VL's processor orders the patches so that each ``2 x 2`` block of
    neighbours is contiguous; the merger's view joins them (a view: nothing
    stored, nothing kept).

    Parameters
    ----------
    group : int
        Patches joined (``spatial_merge_size ** 2``).
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> PatchMerge(4).output_shape((B, 16, 8))
    (B, 4, 32)
    """

    group: int
    name: str | None = None
    kind = "PatchMerge"
    autograd_checked = False

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, patches / group, group * features)``."""
        _check_rank3(self, input_shape)
        batch, patches, features = input_shape
        patches = sp.sympify(patches)
        rest = sp.Mod(patches, self.group)
        if rest.is_number and rest != 0:
            raise ShapeError(
                f"{self.label}: {patches} patches do not split into groups of {self.group}; "
                "give an image whose patch grid is a multiple of the merge size on each side."
            )
        return (batch, patches / self.group, self.group * features)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: a view."""
        return ()

    def stores_output(self) -> bool:
        """Return False: a view, no new storage."""
        return False

    def describe(self) -> str:
        """Group size."""
        return f"group {self.group}"


@dataclass(frozen=True)
class ImageTokenScatter(Merge):
    """Put the image features at the image tokens' positions (``masked_scatter``).

    ``inputs_embeds.masked_scatter(mask, image)`` in transformers.

    Reads the text embeddings ``(batch, sequence, hidden)`` and the image
    features ``(batch, image_tokens, hidden)``; returns a new tensor of the
    text embeddings' shape. With ``tokens`` (the image tokens per sequence) a
    symbolic sequence must be at least that long when sizes are given. Its backward keeps the mask, one byte per element
    of the output (the gradient of the image features is
    ``grad.masked_select(mask)``).

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> ImageTokenScatter().merged_shape(((B, S, 32), (B, 4, 32)))
    (B, S, 32)
    >>> ImageTokenScatter(name="scatter").merged_shape(((B, S, 32), (B, 4, 16)))
    Traceback (most recent call last):
    ...
    memtheory.errors.ShapeError: ImageTokenScatter 'scatter': image features (B, 4, 16) do not match ...
    """  # noqa: E501 - a doctest's expected output is one line

    tokens: int | None = None
    name: str | None = None
    kind = "ImageTokenScatter"
    autograd_checked = False

    def merged_shape(self, input_shapes: tuple[Shape, ...]) -> Shape:
        """Return the text embeddings' shape (whose sequence counts the image tokens)."""
        if len(input_shapes) != 2 or any(len(s) != 3 for s in input_shapes):
            raise RankError(
                f"{self.label}: reads the text embeddings and the image features, two "
                "(batch, tokens, hidden) tensors."
            )
        text, image = (tuple(s) for s in input_shapes)
        gap = sp.expand(text[2] - image[2]) if text[0] == image[0] else sp.Integer(1)
        if gap.is_number and gap != 0:
            raise ShapeError(
                f"{self.label}: image features {describe_shape(image)} do not match the text "
                f"embeddings {describe_shape(text)} (batch and width must agree); the "
                "projector must end at the language model's hidden size."
            )
        return text

    def size_limits(self, input_shape: Shape) -> tuple[tuple[str, sp.Expr], ...]:
        """Return the shortest sequence it takes: the image tokens (checked when sizes are given).

        ``input_shape`` is the text embeddings'; the layer must know its
        ``tokens``.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> ImageTokenScatter(tokens=256).size_limits((B, S, 32))
        (('at least 256 positions (the image tokens)', S - 255),)
        """
        sequence = sp.sympify(input_shape[1]) if len(input_shape) == 3 else sp.Integer(0)
        if self.tokens is None or sequence.is_number:
            return ()
        tokens = sp.sympify(self.tokens)
        return ((f"at least {tokens} positions (the image tokens)", sequence - tokens + 1),)

    def merged_saved_for_backward(self, input_shapes: tuple[Shape, ...]) -> tuple[TensorSpec, ...]:
        """Return the boolean mask, of the output's shape."""
        shape = self.merged_shape(tuple(tuple(s) for s in input_shapes))
        return (TensorSpec("mask", shape, as_dtype("bool"), label="image_mask"),)

    def stores_output(self) -> bool:
        """Return True: a new tensor."""
        return True


@dataclass(frozen=True)
class FlatClassToken(ClassToken):
    """CLIP's class token: :class:`~memtheory.layers.ClassToken` with a ``(features,)`` tensor.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> FlatClassToken().parameter_shapes((B, 4, 16))
    (('class_embedding', (16,)),)
    """

    kind = "ClassToken"

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``class_embedding`` of ``(features,)``."""
        _check_rank3(self, input_shape)
        return (("class_embedding", (input_shape[-1],)),)


@dataclass(frozen=True)
class FlatPositions(LearnedPositions):
    """CLIP's positions: :class:`~memtheory.layers.LearnedPositions` as an embedding table.

    The table is ``(positions, features)``, looked up with ``arange(positions)`` and added.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> FlatPositions(5).parameter_shapes((B, 5, 16))
    (('weight', (5, 16)),)
    """

    kind = "LearnedPositions"

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``weight`` of ``(positions, features)``."""
        _check_rank3(self, input_shape)
        return (("weight", (self.positions, input_shape[-1])),)


@dataclass(frozen=True)
class DropClassToken(Layer):
    """Drop the first position of every sequence: ``x[:, 1:]``, a view (LLaVA's ``"default"``).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> DropClassToken().output_shape((B, 577, 1024))
    (B, 576, 1024)
    """

    name: str | None = None
    kind = "DropClassToken"
    autograd_checked = False

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, sequence - 1, features)``."""
        _check_rank3(self, input_shape)
        batch, sequence, features = input_shape
        return (batch, sequence - 1, features)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Nothing: a view."""
        return ()

    def stores_output(self) -> bool:
        """Return False: a view, no new storage."""
        return False


@dataclass(frozen=True)
class EncoderAttention(GroupedQueryAttention):
    """A vision tower's attention: every patch of an image attends to every other.

    Its memory in a training step is modelled as
    :class:`~memtheory.layers.GroupedQueryAttention`'s with as many key/value
    heads as heads; it runs once per image, before the language model, so
    generation caches none of its keys and values
    (:func:`~memtheory.techniques.cache_layers.cache_layers` skips it).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> EncoderAttention(2, kv_heads=2, head_dim=8).merged_shape(((B, 4, 16),) * 3)
    (B, 4, 16)
    """

    kind = "EncoderAttention"
    autograd_checked = False


@dataclass(frozen=True)
class PatchPool(Layer):
    """Average each ``kernel x kernel`` square of a ``side x side`` patch grid (Gemma 3).

    Gemma 3's projector turns the vision tower's ``(batch, side^2, features)``
    into a ``(batch, features, side, side)`` grid (``transpose``, then
    ``contiguous``: a copy), averages it with ``AvgPool2d(kernel, kernel)`` and
    flattens the result back to ``(batch, (side // kernel)^2, features)``.
    Training keeps the contiguous copy (``avg_pool2d`` keeps its input, as
    :class:`~memtheory.layers.AvgPool2d`); the output is a new tensor.

    Parameters
    ----------
    side : int
        Patches per side of the image (``image_size // patch_size``).
    kernel : int
        Patches per side of each averaged square.
    name : str, optional

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> PatchPool(64, 4).output_shape((B, 4096, 1152))
    (B, 256, 1152)
    >>> PatchPool(4, 2, name="pool").output_shape((B, 9, 8))
    Traceback (most recent call last):
    ...
    memtheory.errors.ShapeError: PatchPool 'pool': a 4 x 4 patch grid has 16 patches, got 9.
    """

    side: int
    kernel: int
    name: str | None = None
    kind = "PatchPool"
    autograd_checked = False

    def output_shape(self, input_shape: Shape) -> Shape:
        """Return ``(batch, (side // kernel)^2, features)``."""
        _check_rank3(self, input_shape)
        batch, patches, features = input_shape
        if sp.simplify(sp.sympify(patches) - self.side * self.side) != 0:
            raise ShapeError(
                f"{self.label}: a {self.side} x {self.side} patch grid has "
                f"{self.side * self.side} patches, got {patches}."
            )
        per_side = self.side // self.kernel
        return (batch, sp.Integer(per_side * per_side), features)

    def saved_for_backward(self, input_shape: Shape) -> tuple[TensorSpec, ...]:
        """Return the contiguous ``(batch, features, side, side)`` copy ``avg_pool2d`` keeps."""
        batch, patches, features = input_shape
        return (TensorSpec("intermediate", (batch, features, self.side, self.side),
                           label="pooled_grid"),)

    def describe(self) -> str:
        """Grid and kernel."""
        return f"{self.side}x{self.side} / {self.kernel}"


@dataclass(frozen=True)
class MatrixProjection(Dense):
    """``x @ W`` with ``W`` of ``(in_features, units)``: Gemma 3's ``mm_input_projection_weight``.

    A dense layer without bias whose weight is stored transposed (a bare
    ``nn.Parameter`` multiplied with ``torch.matmul``, not an ``nn.Linear``).

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> MatrixProjection(32).parameter_shapes((B, 4, 16))
    (('weight', (16, 32)),)
    """

    bias: bool = False
    kind = "MatrixProjection"

    def parameter_shapes(self, input_shape: Shape) -> tuple[tuple[str, Shape], ...]:
        """``weight`` of ``(in_features, units)``."""
        self.check_input(input_shape)
        return (("weight", (input_shape[-1], self.units)),)
