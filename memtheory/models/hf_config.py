"""Networks from a Hugging Face ``config.json``: a file, a folder holding one, a dict, a preset.

Nothing is downloaded. :func:`from_config` reads the configuration's
``model_type`` and builds the matching memtheory network:

=================================  ===========================================================
``model_type``                     builder
=================================  ===========================================================
``llama``, ``mistral``, ``qwen2``  :func:`~memtheory.models.decoder` (RMSNorm, SwiGLU, rotary,
``gemma``, ``mixtral``, ``qwen3``  grouped-query attention, sliding windows, experts; Qwen3's
``phi3`` (Phi-3, Phi-4),           query/key norms, Phi-3's fused projections, Gemma 2's
``gemma2``, ``gemma3_text``,       soft-capping and four norms per layer, Gemma 3's per-head
``olmo``, ``olmo2``, ``olmo3``,    query/key norms, OLMo's norms, the Qwen-MoE and OLMoE
``qwen2_moe``, ``qwen3_moe``,      experts: :mod:`~memtheory.models.hf_families`)
``olmoe``
``gpt_neox``, ``falcon``           :func:`~memtheory.models.parallel_decoder.parallel_decoder`
``gpt2``                           :func:`~memtheory.models.gpt2`
``bert``                           :func:`~memtheory.models.bert` (masked-LM head when
                                   ``architectures`` names ``BertForMaskedLM``)
``vit``                            :func:`~memtheory.models.vision_transformer`
=================================  ===========================================================

``deepseek_v2`` and ``deepseek_v3`` build :func:`~memtheory.models.deepseek.deepseek`
(multi-head latent attention, routed and shared experts). The vision-language
models ``qwen2_vl``, ``qwen2_5_vl``, ``llava`` and ``gemma3`` build
:func:`~memtheory.models.vision_language.vision_language` (a vision tower, a
projector, the language model; ``image`` sets Qwen's image size); ``mllama``
is refused with the reason and the nearest family memtheory builds
(:data:`~memtheory.models.hf_families.REFUSED`).

A key the architecture cannot do without (``hidden_size``, ...) that is
missing raises :class:`~memtheory.errors.InvalidArgumentError` naming it; a
value memtheory does not model (an unknown ``hidden_act``, a BERT whose
``intermediate_size`` is not four times its width) raises
:class:`~memtheory.errors.UnsupportedError` naming the key and what to do.
Keys that change no memory (``rope_theta``, ``rope_scaling``,
``rms_norm_eps``, token ids, ...) are read by nobody. Where Hugging Face's
configuration class has a default for an optional key, the same default is
used here (written beside each key below).

Examples
--------
>>> config = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
...           "intermediate_size": 11008, "num_hidden_layers": 32,
...           "num_attention_heads": 32}
>>> from_config(config).parameter_count
6738415616
>>> from_config("llama-3-8b", batch=1, sequence=8192).output_shape
(1, 8192, 128256)
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, cast

from memtheory._shown import shown
from memtheory._validation import SizeLike
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.models._config_keys import (
    config_activation,
    config_flag,
    optional_int,
    required_value,
    soft_cap,
)
from memtheory.models.bert import bert
from memtheory.models.decoder import DecoderConfig, decoder
from memtheory.models.deepseek import deepseek, deepseek_config
from memtheory.models.gpt2 import GPT2_ACTIVATIONS, GPT2Activation, GPT2Config, gpt2
from memtheory.models.hf_families import REFUSED, decoder_fields, parallel_config
from memtheory.models.parallel_decoder import parallel_decoder
from memtheory.models.presets import PRESETS
from memtheory.models.vision_language import (
    ANY_RESOLUTION,
    VISION_LANGUAGE,
    text_config,
    vision_language,
)
from memtheory.models.vit import vision_transformer
from memtheory.network import Network
from memtheory.registry import Registry
from memtheory.symbols import B, S

__all__ = [
    "CONFIG_LIMIT", "LAYER_LIMIT", "MODEL_TYPES", "decoder_config", "from_config", "load_config",
    "preset",
]

CONFIG_LIMIT = 16 * 2**20
"""Largest config.json read, in bytes (16 MiB): a real one is a few kilobytes."""

LAYER_LIMIT = 1024
"""Most layers :func:`from_config` builds: published models have at most a few hundred
(Llama 3.1 405B: 126), and a network is built layer by layer (about 1.5 ms each)."""

ConfigLike = Mapping[str, Any] | str | os.PathLike[str]



_JSON_SCALARS = (str, int, float, bool, type(None), numbers.Number)


def _has_elements(value: object) -> bool:
    """Whether ``value`` is an array of one or more dimensions (a NumPy scalar has shape ())."""
    shape: object = getattr(value, "shape", None)
    return bool(shape)


def _check_json_values(config: Mapping[str, Any]) -> None:
    """Refuse a mapping holding what no ``config.json`` can (arrays, arbitrary objects).

    A configuration read from JSON holds text, numbers, booleans, null, lists and
    objects; a dict passed in code may hold anything, and a NumPy array or an
    object where a size belongs would otherwise fail deep in the builder.
    """
    pending: list[tuple[str, object]] = [(repr(key), value) for key, value in config.items()]
    while pending:
        where, value = pending.pop()
        if isinstance(value, Mapping):
            pending += [(f"{where}[{key!r}]", item) for key, item in value.items()]
        elif isinstance(value, list | tuple):
            pending += [(f"{where}[{i}]", item) for i, item in enumerate(value)]
        elif not isinstance(value, _JSON_SCALARS) or _has_elements(value):
            raise InvalidArgumentError(
                f"from_config: the configuration's {shown(where)} is a {type(value).__name__}; "
                "a Hugging Face configuration holds text, numbers, booleans, null, lists and "
                "dicts only (as in config.json). Pass the value as one of those."
            )



def load_config(source: ConfigLike) -> dict[str, Any]:
    """Return the configuration as a dict: from a dict, a ``config.json``, a folder, a preset.

    A string that is neither an existing file nor folder is looked up as a
    preset name (:data:`memtheory.models.PRESETS`), with "did you mean".

    Examples
    --------
    >>> load_config("mistral-7b-v0.1")["sliding_window"]
    4096
    """
    if isinstance(source, Mapping):
        _check_json_values(source)
        return dict(source)
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        try:
            is_dir, is_file = path.is_dir(), path.is_file()
            if is_dir:
                path = path / "config.json"
                is_file = path.is_file()
                if not is_file:
                    raise InvalidArgumentError(
                        f"from_config: the folder {shown(str(source))} has no config.json; pass "
                        "the path of the configuration file itself, or a dict."
                    )
            size = path.stat().st_size if is_file else 0
        except OSError as error:  # a name too long for a path, a folder it may not read, ...
            raise InvalidArgumentError(
                f"from_config: {shown(str(source))} is neither a preset name nor a path this "
                f"system can look at ({error.strerror or error}). Pass a preset name, a "
                "config.json path, a folder holding one, or a dict."
            ) from None
        if is_file:
            if size > CONFIG_LIMIT:
                raise InvalidArgumentError(
                    f"from_config: {shown(str(path))} is {size:,} bytes; a config.json is a few "
                    f"kilobytes, and memtheory reads none over {CONFIG_LIMIT // 2**20} MiB. Pass "
                    "the model's config.json."
                )
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
                raise InvalidArgumentError(
                    f"from_config: cannot read {shown(str(path))} as JSON ({error}). Pass a "
                    "Hugging Face config.json."
                ) from None
            if not isinstance(loaded, dict):
                raise InvalidArgumentError(
                    f"from_config: {shown(str(path))} holds a JSON {type(loaded).__name__}, not "
                    "the object a config.json holds."
                )
            return loaded
        if isinstance(source, str) and source in PRESETS:
            return dict(PRESETS[source].config)
        looks_like_path = isinstance(source, os.PathLike) or any(
            mark in str(source) for mark in ("/", "\\", ".json")
        )
        if looks_like_path:
            raise InvalidArgumentError(
                f"from_config: no file or folder {shown(str(source))}. memtheory downloads "
                "nothing: save the model's config.json locally and pass its path, or pass a preset "
                f"name ({', '.join(PRESETS)})."
            )
        return dict(PRESETS[str(source)].config)
    raise InvalidArgumentError(
        "from_config: pass a config.json path, a folder holding one, a dict or a preset name, "
        f"got {type(source).__name__}."
    )


def _windows(config: Mapping[str, Any], layers: int) -> tuple[int | None, ...]:
    """Each layer's sliding window: ``layer_types`` when given, else the family's rule.

    Gemma 2 slides on every other layer (the first, third, ...) by default,
    Gemma 3 on five of every six, OLMo 3 on three of every four, with a window
    of 4096 unless ``sliding_window`` says otherwise.

    Examples
    --------
    >>> _windows({"model_type": "gemma2", "sliding_window": 8}, 4)
    (8, None, 8, None)
    """
    family = config.get("model_type")
    pattern = _SLIDING_PATTERNS.get(str(family))
    window = optional_int(config, "sliding_window", 4096 if pattern else None)
    if family in _QWEN and not config_flag(config, "use_sliding_window", False):
        window = None
    types = config.get("layer_types")
    if types is None and pattern:
        pattern = optional_int(config, "sliding_window_pattern", pattern) or pattern
        types = ["full_attention" if (index + 1) % pattern == 0 else "sliding_attention"
                 for index in range(layers)]
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise InvalidArgumentError(
                f"from_config: layer_types must list one entry per layer ({layers}), "
                f"got {shown(types)}."
            )
        unknown = sorted({t for t in types if t not in ("full_attention", "sliding_attention")})
        if unknown:
            raise UnsupportedError(
                f"from_config: layer_types {unknown} are not modelled; memtheory knows "
                "'full_attention' and 'sliding_attention'."
            )
        if "sliding_attention" in types and window is None:
            raise InvalidArgumentError(
                "from_config: layer_types has sliding_attention layers but sliding_window is "
                "null; give sliding_window."
            )
        return tuple(window if t == "sliding_attention" else None for t in types)
    if family in _QWEN and window is not None:
        first = optional_int(config, "max_window_layers", 28) or 0
        return tuple(window if index >= first else None for index in range(layers))
    return tuple(window for _ in range(layers)) if window is not None else ()


def decoder_config(config: Mapping[str, Any]) -> DecoderConfig:
    """Read a Llama-family configuration (llama, mistral, qwen2/3, phi3, gemma/2, mixtral).

    Optional keys and the defaults of Hugging Face's configuration classes:
    ``num_key_value_heads`` (the heads), ``head_dim`` (``hidden_size //
    num_attention_heads``; Gemma and Gemma 2 256, Qwen3 128),
    ``tie_word_embeddings`` (False; Gemma and Gemma 2 True),
    ``attention_bias`` (False; Qwen2 always has q/k/v biases; Phi-3 has
    none) and ``mlp_bias`` (False; read for the Llama family of old, none in
    Qwen3, Phi-3, Gemma 2), ``hidden_act`` (``silu``; Gemma
    ``gelu_pytorch_tanh``), ``sliding_window`` (Mistral, Phi-3: used when
    set; Qwen2 and Qwen3: only with ``use_sliding_window``, from layer
    ``max_window_layers`` on; Gemma 2: on alternate layers, 4096),
    ``layer_types``, ``attention_dropout`` (0), ``attn_logit_softcapping``
    and ``final_logit_softcapping`` (Gemma 2: 50 and 30; null turns one off).
    Phi-3's ``resid_pdrop`` other than 0 and a partial rotary factor are
    refused (not modelled).

    Examples
    --------
    >>> c = decoder_config({"model_type": "qwen2", "vocab_size": 151646, "hidden_size": 3584,
    ...     "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    ...     "num_key_value_heads": 4})
    >>> c.qkv_bias, c.output_bias, c.key_value_heads, c.head_width
    (True, False, 4, 128)
    """
    family = str(config.get("model_type", ""))
    if family not in _DECODERS:
        raise UnsupportedError(
            f"decoder_config: model_type {family!r} is not a Llama-family decoder; use "
            "from_config, which dispatches every known model_type."
        )
    gemma = family in _GEMMA
    phi3 = family == "phi3"
    layers = required_value(config, "num_hidden_layers")
    heads = required_value(config, "num_attention_heads")
    attention_bias = config_flag(config, "attention_bias", False) and not phi3
    qwen = family == "qwen2" or (family == "qwen2_moe" and config_flag(config, "qkv_bias", True))
    if phi3:
        _check_phi3(config)
    dropout = config.get("attention_dropout", 0.0) or 0.0
    if not isinstance(dropout, int | float) or not 0 <= dropout < 1:
        raise InvalidArgumentError(
            f"from_config: attention_dropout must be in [0, 1), got {shown(dropout)}."
        )
    fields: dict[str, Any] = dict(
        vocabulary=required_value(config, "vocab_size"),
        hidden=required_value(config, "hidden_size"),
        layers=layers,
        heads=heads,
        ffn_hidden=required_value(config, "intermediate_size"),
        kv_heads=optional_int(config, "num_key_value_heads", heads),
        head_dim=optional_int(config, "head_dim", _HEAD_DIMS.get(family)),
        positions=optional_int(config, "max_position_embeddings", None),
        tied=config_flag(config, "tie_word_embeddings", gemma),
        qkv_bias=attention_bias or qwen,
        output_bias=attention_bias and not qwen,
        mlp_bias=family in _MLP_BIAS and config_flag(config, "mlp_bias", False),
        activation=config_activation(config, "gelu_pytorch_tanh" if gemma else "silu"),
        windows=_windows(config, layers),
        gemma=gemma,
        attention_dropout=float(dropout),
        qk_norm=family == "qwen3",
        fused=phi3,
        sandwich_norms=family == "gemma2",
        family=family,
        **_mixtral(config, family),
        **_softcaps(config, family),
    )
    fields.update(decoder_fields(config))
    return DecoderConfig(**fields)


def _mixtral(config: Mapping[str, Any], family: str) -> dict[str, Any]:
    """Mixtral's experts and experts per token (8 and 2 by default); none for the others."""
    if family != "mixtral":
        return {}
    return {"experts": optional_int(config, "num_local_experts", 8),
            "top_k": optional_int(config, "num_experts_per_tok", 2)}


def _softcaps(config: Mapping[str, Any], family: str) -> dict[str, Any]:
    """Gemma 2's soft-capping (50 and 30 by default), Gemma 3's (none by default)."""
    if family not in ("gemma2", "gemma3_text"):
        return {}
    gemma2 = family == "gemma2"
    return {
        "attention_softcap": soft_cap(config, "attn_logit_softcapping", 50.0 if gemma2 else None),
        "final_softcap": soft_cap(config, "final_logit_softcapping", 30.0 if gemma2 else None),
    }


_SLIDING_PATTERNS = {"gemma2": 2, "gemma3_text": 6, "olmo3": 4}
"""Families whose layers slide by default: every n-th layer attends in full."""
_QWEN = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")
_GEMMA = ("gemma", "gemma2", "gemma3_text")
_HEAD_DIMS = {"gemma": 256, "gemma2": 256, "gemma3_text": 256, "qwen3": 128}
_MLP_BIAS = ("llama", "mistral", "qwen2", "gemma", "mixtral")


def _check_phi3(config: Mapping[str, Any]) -> None:
    """Refuse the Phi-3 options whose memory is not modelled: residual dropout, partial rotary."""
    dropout = config.get("resid_pdrop") or 0.0
    if dropout != 0:
        raise UnsupportedError(
            f"from_config: Phi-3 with resid_pdrop={shown(dropout)} is not modelled (its two "
            "residual dropouts keep masks); set \"resid_pdrop\" to 0.0 for an estimate "
            "without them."
        )
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    factor = config.get("partial_rotary_factor", rope.get("partial_rotary_factor", 1.0)
                        if isinstance(rope, Mapping) else 1.0)
    if factor not in (None, 1, 1.0):
        raise UnsupportedError(
            f"from_config: Phi-3 with partial_rotary_factor={shown(factor)} is not modelled "
            "(memtheory rotates the whole head); remove it for an estimate that rotates all."
        )


def _decoder(
    config: Mapping[str, Any], batch: SizeLike, sequence: SizeLike, **options: Any
) -> Network:
    return decoder(decoder_config(config), batch=batch, sequence=sequence, **options)


def _parallel(
    config: Mapping[str, Any], batch: SizeLike, sequence: SizeLike, **options: Any
) -> Network:
    return parallel_decoder(parallel_config(config), batch=batch, sequence=sequence, **options)


def _deepseek(
    config: Mapping[str, Any], batch: SizeLike, sequence: SizeLike, **options: Any
) -> Network:
    return deepseek(deepseek_config(config), batch=batch, sequence=sequence, **options)


def _gpt2(
    config: Mapping[str, Any], batch: SizeLike, sequence: SizeLike, **options: Any
) -> Network:
    hidden = required_value(config, "n_embd")
    inner = config.get("n_inner")
    if inner not in (None, 4 * hidden):
        raise UnsupportedError(
            f"from_config: GPT-2 with n_inner={inner} (not 4 * n_embd = {4 * hidden}) is not "
            "modelled; memtheory's GPT-2 blocks have a 4x MLP."
        )
    size = GPT2Config(
        layers=required_value(config, "n_layer"),
        hidden=hidden,
        heads=required_value(config, "n_head"),
        vocabulary=required_value(config, "vocab_size"),
        positions=required_value(config, "n_positions"),
        activation=_gpt2_activation(config),
        dropout=_gpt2_dropout(config, "resid_pdrop"),
        attention_dropout=_gpt2_dropout(config, "attn_pdrop"),
        embedding_dropout=_gpt2_dropout(config, "embd_pdrop"),
    )
    kept = _only(options, "gpt2", "flash", "lm_head", "loss", "device")
    return gpt2(size, batch=batch, sequence=sequence, **kept)


def _gpt2_activation(config: Mapping[str, Any]) -> GPT2Activation:
    """Return the config's ``activation_function`` (transformers' default ``gelu_new``)."""
    act = config.get("activation_function", "gelu_new")
    if act not in GPT2_ACTIVATIONS:
        raise UnsupportedError(
            f"from_config: GPT-2 with activation_function={shown(act)} is not modelled; "
            f"memtheory models {', '.join(GPT2_ACTIVATIONS)}."
        )
    return cast("GPT2Activation", act)


def _gpt2_dropout(config: Mapping[str, Any], key: str) -> float:
    """Return a GPT-2 dropout probability (transformers' default 0.1), or refuse it."""
    p = config.get(key, 0.1)
    if p is None:
        p = 0.1
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p < 1:
        raise InvalidArgumentError(f"from_config: {key} must be in [0, 1), got {shown(p)}.")
    return float(p)



def _architectures(config: Mapping[str, Any]) -> list[str]:
    """Return the config's ``architectures`` (a list of class names), or say it is not one."""
    names = config.get("architectures") or []
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise InvalidArgumentError(
            f"from_config: 'architectures' must be a list of class names such as "
            f"[\"BertForMaskedLM\"], got {shown(names)} ({type(names).__name__})."
        )
    return list(names)

def _bert(
    config: Mapping[str, Any], batch: SizeLike, sequence: SizeLike, **options: Any
) -> Network:
    hidden = required_value(config, "hidden_size")
    inner = required_value(config, "intermediate_size")
    if inner != 4 * hidden:
        raise UnsupportedError(
            f"from_config: BERT with intermediate_size={inner} (not 4 * hidden_size = "
            f"{4 * hidden}) is not modelled; memtheory's BERT blocks have a 4x MLP."
        )
    act = config.get("hidden_act", "gelu")
    if not isinstance(act, str):
        raise InvalidArgumentError(
            f"from_config: 'hidden_act' must be the name of an activation (text), got "
            f"{shown(act)} ({type(act).__name__})."
        )
    if act != "gelu":
        raise UnsupportedError(
            f"from_config: BERT with hidden_act={shown(act)} is not modelled (only 'gelu')."
        )
    mlm = "BertForMaskedLM" in _architectures(config)
    kept = _only(options, "bert", "flash", "loss")
    return bert(
        layers=required_value(config, "num_hidden_layers"),
        hidden=hidden,
        heads=required_value(config, "num_attention_heads"),
        vocabulary=required_value(config, "vocab_size"),
        positions=required_value(config, "max_position_embeddings"),
        token_types=optional_int(config, "type_vocab_size", 2) or 2,
        batch=batch,
        sequence=sequence,
        pooler=not mlm,
        mlm_head=mlm,
        **kept,
    )


def _vit(
    config: Mapping[str, Any], batch: SizeLike, sequence: SizeLike, **options: Any
) -> Network:
    if sequence is not S:
        raise InvalidArgumentError(
            "from_config: a ViT's sequence is its patches plus the class token, fixed by "
            "image_size and patch_size; leave sequence unset."
        )
    if not config_flag(config, "qkv_bias", True):
        raise UnsupportedError("from_config: a ViT with qkv_bias=false is not modelled.")
    if config.get("num_channels", 3) != 3:
        raise UnsupportedError("from_config: memtheory's ViT takes RGB images (num_channels 3).")
    labels = config.get("id2label")
    classes = len(labels) if isinstance(labels, Mapping) and labels else 1000
    _only(options, "vit")
    return vision_transformer(
        image_size=required_value(config, "image_size"),
        patch_size=required_value(config, "patch_size"),
        layers=required_value(config, "num_hidden_layers"),
        hidden=required_value(config, "hidden_size"),
        heads=required_value(config, "num_attention_heads"),
        mlp_dim=required_value(config, "intermediate_size"),
        classes=classes,
        batch=batch,
    )


def _vision_language(
    config: Mapping[str, Any], batch: SizeLike, sequence: SizeLike, **options: Any
) -> Network:
    language = decoder_config(text_config(config))
    return vision_language(config, language, batch=batch, sequence=sequence, **options)


def _only(options: Mapping[str, Any], family: str, *allowed: str) -> dict[str, Any]:
    """Return ``options`` after refusing any this family's builder does not take."""
    extra = sorted(set(options) - set(allowed))
    if extra:
        raise UnsupportedError(
            f"from_config: option(s) {', '.join(extra)} do not apply to {family} models"
            + (f" (they take {', '.join(allowed)})." if allowed else ".")
        )
    return dict(options)


_DECODERS = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "mixtral",
             "gemma3_text", "olmo", "olmo2", "olmo3", "qwen2_moe", "qwen3_moe", "olmoe")

_Builder = Callable[..., Network]
_BUILDERS: dict[str, _Builder] = {
    **{family: _decoder for family in _DECODERS},
    "gpt2": _gpt2,
    "bert": _bert,
    "vit": _vit,
    "gpt_neox": _parallel,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "falcon": _parallel,
    **{family: _vision_language for family in VISION_LANGUAGE},
}

MODEL_TYPES: Registry[_Builder] = Registry(
    "model_type",
    _BUILDERS,
    hint="(a config.json's \"model_type\"; other architectures are not modelled yet)",
)
"""The ``model_type`` values :func:`from_config` builds."""


def from_config(
    config: ConfigLike,
    *,
    batch: SizeLike = B,
    sequence: SizeLike = S,
    flash: bool = False,
    lm_head: bool = True,
    loss: bool = False,
    image: SizeLike | tuple[int, int] | None = None,
    device: Literal["cuda", "cpu"] | None = None,
) -> Network:
    """Build the memtheory network of a Hugging Face configuration; nothing is downloaded.

    Parameters
    ----------
    config : dict, path or str
        A ``config.json``'s contents, the path of one (or of the folder
        holding it), or a preset name (:data:`memtheory.models.PRESETS`:
        ``"llama-3-8b"``, ``"mixtral-8x7b"``, ...).
    batch, sequence : size, default ``B`` and ``S``
        Sequences per step and tokens per sequence (symbols unless given).
        A ViT's sequence follows from its image and patch sizes: leave it.
    flash : bool, default False
        Memory-efficient attention (no :math:`S^2` tensors kept): a CUDA
        assumption. False: Hugging Face's eager attention.
    lm_head : bool, default True
        Decoders and GPT-2: end with the logits ``(B, S, vocab_size)``.
    loss : bool, default False
        Decoders, GPT-2 and masked-LM BERT: end with the training loss.
    image : int or (int, int), optional
        Qwen2-VL and Qwen2.5-VL: the image's side, or (height, width), in
        pixels (one image per sequence; default 448). Refused for the others.
    device : {"cuda", "cpu"} or None, default None
        GPT-2: whose dropout kernel runs (``bool`` masks on CUDA, the
        default; the activation dtype on the CPU, where ``measure`` checks
        it). DeepSeek V2/V3 with ``flash``: where SDPA runs (on the CPU its
        math path, as values narrower than the queries need). The other
        families ignore it.

    Returns
    -------
    Network

    Raises
    ------
    UnknownNameError
        An unknown ``model_type`` or preset name (with the known ones, and the closest).
    InvalidArgumentError
        A missing or malformed key, or a path that does not exist.
    UnsupportedError
        A value or option memtheory does not model, with what to do.

    Examples
    --------
    >>> from_config("mixtral-8x7b").parameter_count
    46702792704
    >>> from_config({"model_type": "llama"})
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: from_config: the llama configuration has no 'num_hidden_layers', ...
    """  # noqa: E501 - a doctest's expected output is one line
    values = load_config(config)
    family = values.get("model_type")
    if not isinstance(family, str) or not family:
        raise InvalidArgumentError(
            "from_config: the configuration has no \"model_type\" (every Hugging Face "
            f"config.json has one). Add it; memtheory builds: {', '.join(MODEL_TYPES)}."
        )
    if family in REFUSED:
        raise UnsupportedError(f"from_config: model_type {family!r} is refused: {REFUSED[family]}.")
    builder = MODEL_TYPES[family]
    for key in ("num_hidden_layers", "n_layer"):
        depth = values.get(key)
        if isinstance(depth, int) and depth > LAYER_LIMIT:
            raise InvalidArgumentError(
                f"from_config: {key}={depth} is deeper than any published model; memtheory "
                f"builds at most {LAYER_LIMIT} layers. Check the config."
            )
    options: dict[str, Any] = {}
    if flash:
        options["flash"] = True
    if image is not None:
        if family not in ANY_RESOLUTION:
            raise UnsupportedError(
                f"from_config: image applies to Qwen2-VL and Qwen2.5-VL, not {family} (LLaVA "
                "resizes every image to its vision tower's image_size, and so does Gemma 3)."
            )
        options["image"] = image
    if family in _DECODERS or family in ("gpt2", "gpt_neox", "falcon", "deepseek_v2",
                                         "deepseek_v3", *VISION_LANGUAGE):
        options["lm_head"] = lm_head
    elif not lm_head:
        raise UnsupportedError(f"from_config: lm_head applies to decoders and GPT-2, not {family}.")
    if loss:
        options["loss"] = True
    options.update(_device_option(device, family))
    return builder(values, batch, sequence, **options)


def _device_option(device: object, family: str) -> dict[str, Any]:
    """Return the builder's ``device`` option (GPT-2's dropout kernel), or refuse a bad one."""
    if device not in (None, "cuda", "cpu"):
        raise InvalidArgumentError(f"from_config: device must be 'cuda' or 'cpu', got {device!r}.")
    wanted = family in ("gpt2", "deepseek_v2", "deepseek_v3")
    return {"device": device} if device is not None and wanted else {}


def preset(
    name: str,
    *,
    batch: SizeLike = B,
    sequence: SizeLike = S,
    flash: bool = False,
    lm_head: bool = True,
    loss: bool = False,
) -> Network:
    """Build a preset's network: :func:`~memtheory.models.from_config` of its configuration.

    Examples
    --------
    >>> preset("mistral-7b-v0.1").parameter_count
    7241732096
    >>> preset("lama-3-8b")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownPresetError: unknown model preset 'lama-3-8b'. Did you mean 'llama-3-8b'? ...
    """  # noqa: E501 - a doctest's expected output is one line
    return from_config(
        PRESETS[name].config,
        batch=batch,
        sequence=sequence,
        flash=flash,
        lm_head=lm_head,
        loss=loss,
    )
