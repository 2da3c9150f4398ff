"""``import memtheory`` loads what-if analysis and the subpackages on first use only.

Every public name stays importable from ``memtheory`` and listed by ``dir()``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import memtheory
import memtheory.layers


def test_import_leaves_the_heavy_subpackages_unloaded():
    """A fresh interpreter importing memtheory has not imported whatif, models or rarer layers."""
    code = (
        "import sys, memtheory; "
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['memtheory', 'whatif'], ['memtheory', 'techniques'], ['memtheory', 'models'], "
        "['memtheory', 'exercises'])) + "
        "[m for m in ('attention', 'recurrent', 'embedding', 'vision_transformer') "
        "if 'memtheory.layers.' + m in sys.modules])"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"


@pytest.mark.parametrize("name", memtheory.__all__)
def test_every_public_name_is_importable_and_listed(name):
    """``from memtheory import name`` works for all of __all__, which dir() lists."""
    namespace: dict[str, object] = {}
    exec(f"from memtheory import {name}", namespace)
    assert namespace[name] is getattr(memtheory, name)
    assert name in dir(memtheory)


def test_lazy_names_are_the_subpackage_objects():
    """A lazily loaded name is the object its home module defines, and subpackages resolve."""
    from memtheory.whatif import max_batch, sensitivity

    assert memtheory.max_batch is max_batch
    assert memtheory.sensitivity is sensitivity
    assert memtheory.models.resnet50 is not None
    assert "models" in dir(memtheory)


def test_unknown_attribute_is_a_memtheory_attribute_error():
    """An unknown name raises memtheory's UnknownAttributeError, an AttributeError."""
    with pytest.raises(memtheory.errors.UnknownAttributeError):
        memtheory.no_such_name  # noqa: B018
    assert not hasattr(memtheory, "no_such_name")


@pytest.mark.parametrize("name", memtheory.layers.__all__)
def test_every_layer_name_is_importable_and_listed(name):
    """``from memtheory.layers import name`` works for all of its __all__, which dir() lists."""
    namespace: dict[str, object] = {}
    exec(f"from memtheory.layers import {name}", namespace)
    assert namespace[name] is getattr(memtheory.layers, name)
    assert name in dir(memtheory.layers)
    if name in memtheory.__all__:
        assert getattr(memtheory, name) is namespace[name]
