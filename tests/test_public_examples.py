"""Every public name has a runnable example in its own docstring.

``memtheory.__all__`` is the supported API: each of its classes and functions
shows how it is used in a ``>>>`` example, which the doctests run (pytest's
``--doctest-modules``). The public subpackages hold the same rule, with no
exception. Constants (``ZOO``, ``PRESETS``, ...) are left out: a value carries
no docstring of its own.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect

import pytest

PUBLIC = (
    "memtheory",
    "memtheory.conventions",
    "memtheory.estimate",
    "memtheory.exercises",
    "memtheory.finetuning",
    "memtheory.layers",
    "memtheory.models",
    "memtheory.network",
    "memtheory.recipes",
    "memtheory.techniques",
    "memtheory.whatif",
    "memtheory.worked_examples",
)
NEEDS_TORCH = ("memtheory.torch", "memtheory.validation")

_HAS_TORCH = importlib.util.find_spec("torch") is not None


def has_example(obj: object) -> bool:
    """Whether a class's or function's own docstring (not an inherited one) holds a ``>>>``."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    return isinstance(doc, str) and ">>>" in doc


def public_names(modules: tuple[str, ...]) -> list[tuple[str, str]]:
    """Each ``(module, name)`` of the modules' ``__all__`` that is a class or a function."""
    found = []
    for module_name in modules:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isroutine(obj):
                found.append((module_name, name))
    return found


def _checked_modules() -> tuple[str, ...]:
    return PUBLIC + (NEEDS_TORCH if _HAS_TORCH else ())


@pytest.mark.parametrize(("module", "name"), public_names(_checked_modules()))
def test_public_name_has_a_runnable_example(module, name):
    """A public class or function shows a ``>>>`` example."""
    obj = getattr(importlib.import_module(module), name)
    assert has_example(obj), f"{module}.{name} has no '>>>' example in its docstring"


def test_the_supported_api_is_small():
    """memtheory.__all__ has tens of names."""
    import memtheory

    assert 20 <= len(memtheory.__all__) <= 60


def test_has_example_reads_only_the_objects_own_docstring():
    """A subclass without a docstring does not borrow its parent's example."""

    class Parent:
        """Has one.

        >>> 1
        1
        """

    class Child(Parent):
        pass

    def bare() -> None:
        """No example here."""

    assert has_example(Parent)
    assert not has_example(Child)
    assert not has_example(bare)
