"""Turn what a user names (a builder, a config.json, a preset, ``file.py:factory``) into a Network.

:func:`resolve_model` is the one place that does it, so that other sources
(``memtheory.models.from_config`` and its presets, ``memtheory.torch.trace``)
plug in here and nowhere else. Both are looked up by name when needed, so
this module works without them and says what is missing.

Examples
--------
>>> resolved = resolve_model("gpt2-medium", sequence=128)
>>> resolved.name, resolved.network.parameter_count, resolved.kind
('GPT-2 medium', 354823168, 'sequence')
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from memtheory._validation import SizeLike
from memtheory.errors import UnsupportedError
from memtheory.network import Network
from memtheory.registry import Registry
from memtheory.symbols import B, S

__all__ = [
    "BUILDERS", "BUILDER_REGISTRY", "Builder", "ResolvedModel", "config_of", "model_type",
    "resolve_model", "takes_image",
]

Kind = Literal["sequence", "image"]


@dataclass(frozen=True)
class Builder:
    """A named model memtheory builds itself: how to build it, and what its input is.

    Attributes
    ----------
    build : callable
        ``build(batch=..., sequence=...)`` or ``build(batch=..., image_size=...)``.
    kind : {"sequence", "image"}
    positions : int or None
        Longest sequence the model takes (GPT-2: 1024).

    Examples
    --------
    >>> builder = BUILDER_REGISTRY["gpt-2"]  # any spelling of a built-in model
    >>> builder.kind, builder.positions
    ('sequence', 1024)
    >>> builder.build(batch=2, sequence=16).parameter_count
    124439808
    """

    build: Callable[..., Network]
    kind: Kind
    positions: int | None = None


def _gpt2(size: str) -> Callable[..., Network]:
    """Build GPT-2 as Hugging Face's ``GPT2LMHeadModel`` runs it: ``gelu_new``, dropout 0.1.

    transformers' GPT-2 configurations say ``activation_function="gelu_new"``,
    seven element-wise operations that keep four tensors per MLP
    (:class:`~memtheory.layers.NewGELU`), where the textbook builder counts one
    fused GELU; ``memtheory estimate gpt2`` answers for the model users load.
    """

    def build(**sizes: Any) -> Network:
        from memtheory.models import GPT2_SIZES, gpt2

        hugging_face = replace(GPT2_SIZES[size], activation="gelu_new")
        return gpt2(hugging_face, loss=True, **sizes)

    return build


def _lazy(name: str, **fixed: Any) -> Callable[..., Network]:
    def build(**sizes: Any) -> Network:
        import memtheory.models as models

        return getattr(models, name)(**fixed, **sizes)

    return build


BUILDERS: dict[str, Builder] = {
    "gpt2": Builder(_gpt2("small"), "sequence", 1024),
    "gpt2-medium": Builder(_gpt2("medium"), "sequence", 1024),
    "gpt2-large": Builder(_gpt2("large"), "sequence", 1024),
    "gpt2-xl": Builder(_gpt2("xl"), "sequence", 1024),
    "bert-base": Builder(_lazy("bert_base"), "sequence", 512),
    "bert-base-mlm": Builder(_lazy("bert_base_mlm", loss=True), "sequence", 512),
    "resnet18": Builder(_lazy("resnet18"), "image"),
    "resnet34": Builder(_lazy("resnet34"), "image"),
    "resnet50": Builder(_lazy("resnet50"), "image"),
    "vgg16": Builder(_lazy("vgg16"), "image"),
    "vit-b-16": Builder(_lazy("vit_b_16"), "image"),
    "mobilenet-v2": Builder(_lazy("mobilenet_v2"), "image"),
}
"""The models memtheory builds from its own builders, by name (Hugging Face / torchvision names)."""

BUILDER_REGISTRY: Registry[Builder] = Registry(
    "model",
    BUILDERS,
    aliases={
        "gpt2-small": "gpt2",
        "gpt-2": "gpt2",
        "openai-community/gpt2": "gpt2",
        "bert-base-uncased": "bert-base-mlm",
        "google-bert/bert-base-uncased": "bert-base-mlm",
        "vit_b_16": "vit-b-16",
        "mobilenet_v2": "mobilenet-v2",
    },
    hint="(or a config.json path, or file.py:factory)",
)
"""The builders by any spelling."""


@dataclass(frozen=True)
class ResolvedModel:
    """A model ready for memory formulas.

    Attributes
    ----------
    network : Network
        Built for ``batch`` and ``sequence`` (or image size), symbols where not given.
    name : str
    kind : {"sequence", "image"}
    positions : int or None
        Longest sequence, where known.
    source : str
        How it was found: ``"builder"``, ``"config"``, ``"trace"``.
    dtype : str or None
        The dtype its published weights are stored in (what ``from_pretrained``
        loads by default), where known: a preset's or config's ``torch_dtype``;
        fp32 for the built-in models (the GPT-2, BERT and torchvision
        checkpoints are fp32).

    Examples
    --------
    >>> resolved = resolve_model("llama-3-8b", batch=1, sequence=8)
    >>> resolved.source, resolved.kind, resolved.positions, resolved.dtype
    ('config', 'sequence', 8192, 'bf16')
    >>> resolve_model("gpt2", batch=2).dtype  # the built-in models' checkpoints are fp32
    'fp32'
    """

    network: Network
    name: str
    kind: Kind
    positions: int | None
    source: str
    dtype: str | None = None


def resolve_model(
    spec: str | Mapping[str, Any],
    *,
    batch: SizeLike = B,
    sequence: SizeLike = S,
    image: SizeLike | None = None,
    flash: bool = False,
) -> ResolvedModel:
    """Build the Network that ``spec`` names.

    Parameters
    ----------
    spec : str or mapping
        A builder name (:data:`BUILDERS`: ``"gpt2"``, ``"bert-base"``,
        ``"resnet50"``, ...); a Hugging Face ``config.json`` path, a config
        dict or a preset name (``"llama-3-8b"``), through
        ``memtheory.models.from_config``; or ``"file.py:factory"``, a Python
        file whose ``factory()`` returns a PyTorch module (or ``(module,
        example_input)``), through ``memtheory.torch.trace``.
    batch, sequence : size
        Symbols by default (``B``, ``S``).
    image : size, optional
        Image side for vision models (224 when not given), and for the
        vision-language models that take an image of any size (Qwen2-VL and
        Qwen2.5-VL: 448 when not given); other language models ignore it.
    flash : bool, default False
        Memory-efficient (flash) attention in the transformers memtheory
        builds: no :math:`s^2` attention tensors kept.

    Raises
    ------
    UnknownNameError
        For a name that is none of these (the closest builder is suggested).
    UnsupportedError
        When the route it needs is not available here (no torch, no
        ``from_config``), saying what to install or use instead.

    Examples
    --------
    >>> resolve_model("resnet50", batch=8).network.output_shape
    (8, 1000)
    """
    if isinstance(spec, Mapping):
        return _from_config(spec, batch, sequence, flash, image)
    text = str(spec).strip()
    if ".py:" in text:
        return _from_trace(text, batch, sequence, 224 if image is None else image)
    if text in BUILDERS or (text and BUILDER_REGISTRY.get(text) is not None):
        name = BUILDER_REGISTRY.canonical(text)
        builder = BUILDERS[name]
        if builder.kind == "sequence":
            network = builder.build(batch=batch, sequence=sequence, flash=flash)
        else:
            network = builder.build(batch=batch, image_size=224 if image is None else image)
        return ResolvedModel(
            network, network.name, builder.kind, builder.positions, "builder", "fp32"
        )
    if text.endswith(".json") or Path(text).is_file() or _has_from_config():
        return _from_config(text, batch, sequence, flash, image)
    error = BUILDER_REGISTRY.unknown(text)
    error.args = (
        f"{error.args[0]} Hugging Face config.json files and presets (such as 'llama-3-8b') "
        "need memtheory.models.from_config, which this version of memtheory does not have.",
    )
    raise error


def _has_from_config() -> bool:
    import memtheory.models as models

    return hasattr(models, "from_config")


def _from_config(
    spec: str | Mapping[str, Any],
    batch: SizeLike,
    sequence: SizeLike,
    flash: bool = False,
    image: SizeLike | None = None,
) -> ResolvedModel:
    import memtheory.models as models

    from_config = getattr(models, "from_config", None)
    if from_config is None:
        known = ", ".join(BUILDERS)
        raise UnsupportedError(
            f"{spec!r}: reading a Hugging Face config.json or a preset needs "
            "memtheory.models.from_config, which this version of memtheory does not have. "
            f"Use one of the built-in models ({known}) or file.py:factory."
        )
    if isinstance(spec, str) and spec.endswith(".json") and not Path(spec).is_file():
        raise UnsupportedError(f"no such config file: {spec!r}.")
    sized = {"image": image} if image is not None and takes_image(spec) else {}
    network = from_config(spec, batch=batch, sequence=sequence, flash=flash, loss=True, **sized)
    positions = _positions(spec)
    name = network.name if isinstance(network, Network) else str(spec)
    return ResolvedModel(network, name, "sequence", positions, "config", _checkpoint_dtype(spec))


_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16",
           "fp16": "fp16", "fp32": "fp32"}


def config_of(spec: str | Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Return the configuration ``spec`` names, or None: a mapping, config.json, folder or preset.

    A preset's configuration carries its published weights' dtype as
    ``torch_dtype``. A file that cannot be read as a JSON object, and a name
    that is no preset (a built-in model, a factory), give None.

    Examples
    --------
    >>> config_of("llama-3-8b")["num_key_value_heads"], config_of("resnet50")
    (8, None)
    """
    import json

    if isinstance(spec, Mapping):
        return spec
    text = str(spec).strip()
    path = Path(text)
    try:
        if path.is_dir():
            path = path / "config.json"
        readable = path.suffix == ".json" and path.is_file()
    except OSError:  # a name too long for a path
        readable = False
    if readable:
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return config if isinstance(config, Mapping) else None
    from memtheory.models.presets import PRESETS

    found = PRESETS.get(text)
    return None if found is None else {**found.config, "torch_dtype": found.dtype}


def takes_image(spec: str | Mapping[str, Any]) -> bool:
    """Whether ``spec`` is a vision-language model that takes an image of any size.

    Qwen2-VL and Qwen2.5-VL make more image tokens of a larger image
    (``--image`` sets its side); LLaVA resizes every image to one size.

    Examples
    --------
    >>> takes_image({"model_type": "qwen2_vl"}), takes_image({"model_type": "llava"})
    (True, False)
    >>> takes_image("resnet50")
    False
    """
    from memtheory.models.vision_language import ANY_RESOLUTION

    return model_type(spec) in ANY_RESOLUTION


def model_type(spec: str | Mapping[str, Any]) -> str | None:
    """Return the ``model_type`` of a config mapping, a config.json or a preset, if known.

    Examples
    --------
    >>> model_type("gemma-2-2b"), model_type("resnet50")
    ('gemma2', None)
    """
    config = config_of(spec)
    kind = None if config is None else config.get("model_type")
    return kind if isinstance(kind, str) else None


def _checkpoint_dtype(spec: str | Mapping[str, Any]) -> str | None:
    """Return the dtype of the published weights: a preset's, or the config's ``torch_dtype``."""
    config = config_of(spec)
    for key in ("torch_dtype", "dtype"):
        value = None if config is None else config.get(key)
        if isinstance(value, str) and value in _DTYPES:
            return _DTYPES[value]
    return None


def _positions(spec: str | Mapping[str, Any]) -> int | None:
    """Return ``max_position_embeddings`` (or GPT-2's ``n_positions``) of a config or preset."""
    config = config_of(spec)
    if isinstance(config, Mapping):
        for key in ("max_position_embeddings", "n_positions"):
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _from_trace(text: str, batch: SizeLike, sequence: SizeLike, image: SizeLike) -> ResolvedModel:
    path_text, _, factory_name = text.rpartition(":")
    path = Path(path_text)
    if not path.is_file():
        raise UnsupportedError(f"{text!r}: no such file {path_text!r}.")
    if importlib.util.find_spec("torch") is None:
        raise UnsupportedError(
            f"{text!r}: tracing a PyTorch module needs PyTorch: pip install 'memtheory[torch]'."
        )
    loaded = _load(text, path)
    factory = getattr(loaded, factory_name, None)
    if not callable(factory):
        raise UnsupportedError(f"{text!r}: {path_text} has no function {factory_name!r}.")
    made = factory()
    if not (isinstance(made, tuple) and len(made) == 2):
        raise UnsupportedError(
            f"{text!r}: {factory_name}() must return (module, example_input): the example "
            "input's shape (batch first) gives the network's input; got "
            f"{type(made).__name__}."
        )
    network = _network_of(text, *made)
    kind: Kind = "image" if len(network.input_shape) == 4 else "sequence"
    return ResolvedModel(network, f"{path.stem}.{factory_name}", kind, None, "trace")


def _load(text: str, path: Path) -> Any:
    """Import the Python file ``path`` as a module."""
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    if module_spec is None or module_spec.loader is None:
        raise UnsupportedError(f"{text!r}: cannot import {str(path)!r} as Python.")
    loaded = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(loaded)
    return loaded


def _network_of(text: str, module: Any, example: Any) -> Network:
    """Convert a PyTorch stack of layers to a Network over a symbolic batch (and sequence).

    The example's first size becomes ``B``; an integer (token) input of two
    dimensions keeps its second as ``S``. A classifier's 2-D output gets
    PyTorch's cross-entropy loss. A module with its own ``forward()`` is
    traced by :func:`memtheory.torch.from_module` into a footprint that
    ``estimate``'s options (optimizer, precision, LoRA, recipes) cannot
    change: it is refused, pointing to :func:`memtheory.torch.trace`.
    """
    import torch
    from torch import nn

    from memtheory.torch import from_module

    if not isinstance(module, nn.Module) or not isinstance(example, torch.Tensor):
        raise UnsupportedError(
            f"{text!r}: the factory must return (torch.nn.Module, torch.Tensor), got "
            f"({type(module).__name__}, {type(example).__name__})."
        )
    tokens = example.dim() == 2 and not example.is_floating_point()
    shape: tuple[Any, ...] = (B, S) if tokens else (B, *example.shape[1:])
    with torch.device("meta"):
        output = module.to("meta")(example.to("meta"))
    loss = nn.CrossEntropyLoss() if output.dim() == 2 else None
    network = from_module(module, shape, loss=loss)
    if not isinstance(network, Network):
        raise UnsupportedError(
            f"{text!r}: {type(module).__name__} has its own forward(), which memtheory traces "
            "into one footprint that estimate's options cannot change. In Python, use "
            "memtheory.torch.trace(module, example, {'B': batch}) for its exact step; "
            "estimate takes an nn.Sequential of supported layers."
        )
    return network
