"""Reading a ``config.json``'s keys: required sizes, optional sizes, booleans, activations.

Each helper refuses a value of the wrong type naming the key (JSON's ``"silu"``
or ``-4`` is not a boolean, though Python would read it as true).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memtheory._shown import shown
from memtheory.errors import InvalidArgumentError, UnsupportedError

__all__: list[str] = []

_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
}


def required_value(config: Mapping[str, Any], key: str, kind: type = int) -> Any:
    """Return ``config[key]``, or raise naming the missing or mistyped key."""
    family = config.get("model_type", "?")
    if key not in config or config[key] is None:
        raise InvalidArgumentError(
            f"from_config: the {family} configuration has no {key!r}, which its architecture "
            f"needs. Add \"{key}\" to the config (it is in the model's config.json on the Hub)."
        )
    value = config[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidArgumentError(
            f"from_config: {key!r} must be a positive whole number, got {shown(value)}."
        )
    return value


def config_flag(config: Mapping[str, Any], key: str, default: bool) -> bool:
    """Return ``config[key]`` as a boolean: JSON true or false only (null: the default).

    ``"silu"``, ``-4`` or ``7.5e10`` are not booleans, though Python would read
    them as true: a config holding one is refused, naming the key.

    Examples
    --------
    >>> config_flag({"attention_bias": True}, "attention_bias", False)
    True
    >>> config_flag({"attention_bias": "no"}, "attention_bias", False)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: from_config: 'attention_bias' must be true or false ...
    """
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidArgumentError(
            f"from_config: {key!r} must be true or false (a JSON boolean), got {shown(value)} "
            f"({type(value).__name__}). Fix it in the config.json."
        )
    return value


def optional_int(config: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(
            f"from_config: {key!r} must be a positive whole number or null, got {shown(value)}."
        )
    return value


def config_activation(config: Mapping[str, Any], default: str) -> str:
    key = "hidden_activation" if config.get("hidden_activation") else "hidden_act"
    name = config.get(key) or default
    if not isinstance(name, str):
        raise InvalidArgumentError(
            f"from_config: {key!r} must be the name of an activation (text), got "
            f"{shown(name)} ({type(name).__name__}). Known: {', '.join(_ACTIVATIONS)}."
        )
    if name not in _ACTIVATIONS:
        raise UnsupportedError(
            f"from_config: {key}={shown(name)} is not an activation memtheory models. Known: "
            f"{', '.join(_ACTIVATIONS)}. Its memory is that of the closest one; set \"{key}\" "
            "to it to get an estimate."
        )
    return _ACTIVATIONS[name]


def soft_cap(config: Mapping[str, Any], key: str, default: float | None) -> float | None:
    """Return a soft-capping value: the config's (null: none), or the family's default."""
    if key not in config:
        return default
    value = config[key]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidArgumentError(
            f"from_config: {key!r} must be a positive number or null, got {shown(value)}."
        )
    return float(value)
