"""memtheory raises its own errors: no bare ValueError, KeyError, ... anywhere in the package."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

import memtheory as mt
from memtheory.exercises.errors import UnknownExerciseError

PACKAGE = Path(mt.__file__).parent

# Built-in exceptions that are no caller's mistake: an abstract method, a broken internal
# invariant, a missing optional dependency.
NOT_A_MISTAKE = {"NotImplementedError", "AssertionError", "ImportError"}

# Files other engineers are rewriting right now (issue 9), which still raise built-ins.
# Remove each entry once its file uses memtheory's errors; the list should end empty.
NOT_YET: tuple[str, ...] = ()


def builtin_raises(source: str) -> list[tuple[int, str]]:
    """(line, exception) of each ``raise`` of a built-in exception class in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name):
                cls = getattr(builtins, target.id, None)
                if isinstance(cls, type) and issubclass(cls, BaseException):
                    if target.id not in NOT_A_MISTAKE:
                        found.append((node.lineno, target.id))
    return sorted(found)


def package_files() -> list[str]:
    """Every module of the package, as a path relative to it."""
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))


def is_not_yet(path: str) -> bool:
    """Whether the file is on the NOT_YET list (a file, or under a listed folder)."""
    return any(
        path == entry or (entry.endswith("/") and path.startswith(entry)) for entry in NOT_YET
    )


def test_the_scan_finds_builtin_raises():
    """The AST scan sees ``raise ValueError(...)``, ``raise KeyError`` and skips memtheory's."""
    source = (
        "def f(x):\n"
        "    if x: raise ValueError('bad')\n"
        "    raise KeyError\n"
        "def g():\n"
        "    raise InvalidSizeError('fine')\n"
        "def h():\n"
        "    raise NotImplementedError\n"
    )
    assert builtin_raises(source) == [(2, "ValueError"), (3, "KeyError")]


@pytest.mark.parametrize("path", [p for p in package_files() if not is_not_yet(p)])
def test_no_bare_builtin_exception_is_raised(path):
    """Each module raises memtheory's errors (which subclass the built-ins), never a bare one."""
    raises = builtin_raises((PACKAGE / path).read_text(encoding="utf-8"))
    assert raises == [], f"{path}: use an error from memtheory.errors at lines {raises}"


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (mt.errors.UnknownNameError, KeyError),
        (mt.errors.UnknownPrecisionError, mt.errors.UnknownDTypeError),
        (mt.errors.UnknownAttributeError, AttributeError),
        (mt.errors.UnknownAttributeError, mt.errors.UnknownNameError),
        (mt.InvalidArgumentError, ValueError),
    ],
)
def test_new_errors_keep_the_builtin_callers_catch(error, builtin):
    """Each error is a MemtheoryError and the built-in that was raised there before."""
    assert issubclass(error, mt.MemtheoryError)
    assert issubclass(error, builtin)


def test_unknown_attribute_keeps_hasattr_and_getattr_defaults_working():
    """An UnknownAttributeError is an AttributeError, so hasattr() and getattr(x, n, d) work."""
    import memtheory.torch
    from memtheory.exercises.model import Params

    assert not hasattr(memtheory.torch, "no_such_name")
    assert getattr(Params(filters=32), "kernel", None) is None
    with pytest.raises(
        mt.errors.UnknownAttributeError, match="no parameter 'kernel'; parameters: filters"
    ):
        _ = Params(filters=32).kernel


def _offload_unknown_component():
    """cpu_offload with a component the breakdown does not have."""
    from memtheory.techniques.offload import cpu_offload

    counts = mt.ModelCounts.per_sample(parameters=10, activations=1, input_elements=1)
    cpu_offload(mt.training_memory(counts, optimizer="adam"), components=("activation",))


def _negative_count():
    """ModelCounts with a symbolic count that can be negative."""
    import sympy as sp

    mt.ModelCounts(parameters=10, activations=-sp.Symbol("n", positive=True), input_elements=1)


def _missing_result():
    """A grade report asked for an exercise it does not have."""
    from memtheory.exercises.report import GradeReport

    GradeReport("ada", "7", "file", ("ch03",), ()).result("ch03.q9")


def _bad_seed():
    """A seed that is neither a whole number nor text."""
    from memtheory.exercises.variants import normalize_seed

    normalize_seed(1.5)


def _unknown_misconception():
    """A misconception name that does not exist."""
    from memtheory.exercises.misconceptions import misconception

    misconception("typo")


@pytest.mark.parametrize(
    ("make", "error", "builtin", "words"),
    [
        (_offload_unknown_component, mt.errors.UnknownNameError, KeyError, ["'activation'"]),
        (_negative_count, mt.errors.InvalidSizeError, ValueError, ["activations", "negative"]),
        (_missing_result, UnknownExerciseError, KeyError, ["ch03.q9"]),
        (_bad_seed, mt.UnsupportedError, TypeError, ["whole number or text"]),
        (_unknown_misconception, mt.errors.UnknownNameError, KeyError, ["'typo'", "per_image"]),
        (
            lambda: mt.conventions.RuleOfThumbConvention(0),
            mt.errors.InvalidSizeError,
            ValueError,
            [">= 1"],
        ),
        (
            lambda: mt.AutogradConvention("bogus"),
            mt.InvalidArgumentError,
            ValueError,
            ["implementation", "for-loop"],
        ),
    ],
)
def test_former_builtin_raises_are_memtheory_errors(make, error, builtin, words):
    """Sites that raised bare built-ins raise memtheory's error, still the same built-in."""
    with pytest.raises(error) as raised:
        make()
    assert isinstance(raised.value, builtin)
    for word in words:
        assert word in str(raised.value)
