"""``import memtheory`` loads what-if analysis and the subpackages on first use only.

Every public name stays importable from ``memtheory`` and listed by ``dir()``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    assert _printed_by_a_fresh_python(code) == "[]"


def _printed_by_a_fresh_python(code: str) -> str:
    """What ``code`` prints, run by a new interpreter (nothing imported before it)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


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


def test_techniques_load_each_module_on_first_use():
    """Splitting a step across GPUs imports the parallel technique, not the inference ones."""
    code = (
        "import sys; from memtheory.techniques import parallel_memory; "
        "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules "
        "if m.startswith('memtheory.techniques.') and m.rsplit('.', 1)[1] in "
        "('kv_cache', 'working_memory', 'megatron_peak', 'quantization', 'checkpointing')))"
    )
    assert _printed_by_a_fresh_python(code) == "[]"


@pytest.mark.parametrize("name", sorted(__import__("memtheory.techniques").techniques.__all__))
def test_every_technique_name_is_its_modules_object(name):
    """Each of ``memtheory.techniques.__all__`` is its home module's object, and dir() lists it."""
    import memtheory.techniques as techniques

    namespace: dict[str, object] = {}
    exec(f"from memtheory.techniques import {name}", namespace)
    home = sys.modules[techniques._LAZY[name]]
    assert namespace[name] is getattr(techniques, name) is getattr(home, name)
    assert name in dir(techniques)


def test_a_function_named_as_its_module_keeps_the_name():
    """``working_memory`` stays the function when its module is imported after it, and before.

    Imported eagerly, the package bound each such function after its module; lazily, a
    module imported later (by another technique) must not replace the function.
    """
    code = (
        "import importlib, memtheory.techniques as t; "
        "first = t.quantization; "
        "importlib.import_module('memtheory.techniques.quantization'); "
        "importlib.import_module('memtheory.techniques.working_memory'); "
        "importlib.import_module('memtheory.techniques.context_parallel'); "
        "importlib.import_module('memtheory.techniques.cache_layers'); "
        "print(callable(first), t.quantization is first, "
        "[type(getattr(t, n)).__name__ for n in "
        "('quantization', 'working_memory', 'context_parallel', 'cache_layers')], "
        "type(t.kv_cache).__name__)"
    )
    said = _printed_by_a_fresh_python(code)
    assert said == "True True ['function', 'function', 'function', 'function'] module"
    techniques = memtheory.techniques
    modules = {p.stem for p in Path(techniques.__file__).parent.glob("*.py")}
    assert techniques._SHADOWED == set(techniques._LAZY) & modules
    with pytest.raises(memtheory.errors.UnknownAttributeError):
        memtheory.techniques.no_such_technique  # noqa: B018
