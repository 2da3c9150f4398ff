"""Values that sympy rebuilds from a traced peak's terms: refused, or warned about (issue 28).

A traced peak keeps its conditions through its own arithmetic and through
functions that keep a part of it (:mod:`memtheory.torch.tracing.kept_conditions`).
Two forms keep no part: ``sympy.Add(peak, c)`` merges a one-polynomial peak's terms
(refused when an equal value was derived with the conditions, as ``peak + c`` is),
and ``sympy.factor(peak)`` rebuilds it as a product. Nothing can carry the
conditions through those without a table keyed by the expression (issue 27 forbids
one that can collide), so each of the five evaluation paths evaluates such an
expression with a :class:`~memtheory.errors.SizeWarning` naming the sizes, the
condition they break and the fix, never silently, whenever the sizes break a
condition that some traced result in the process puts on a size the expression
depends on. A peak derived properly still refuses; sizes inside the conditions,
and sizes no traced result constrains, get no warning.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import sympy as sp  # noqa: E402

from memtheory.constraints import SizeConstraint  # noqa: E402
from memtheory.errors import EvaluationError, KernelTooLargeError, SizeWarning  # noqa: E402
from memtheory.evaluation import compile_exact, evaluate, evaluate_grid  # noqa: E402
from memtheory.symbols import B, H, size_symbol  # noqa: E402
from memtheory.torch.tracing.kept_conditions import keeping  # noqa: E402
from memtheory.whatif import max_batch, max_value  # noqa: E402

_CONDITION = (SizeConstraint(16 - B, "B < 16"),)
_OUTSIDE = {"B": 20, "H": 64}  # beyond B < 16 only (H large: other traces in this process
# hold conditions that refuse small sizes, which would crowd B < 16 out of the message)
_REFUSED = (EvaluationError, KernelTooLargeError)  # evaluate refuses with one, max_batch the other


def _paths(expression):
    """Each evaluation path, called at sizes outside the condition (or searching past it)."""
    return {
        "evaluate": lambda: evaluate(expression, **_OUTSIDE),
        "compile_exact": lambda: compile_exact(expression)(20, 64),
        "evaluate_grid": lambda: evaluate_grid(expression, B=[20], H=[64]),
        "max_value": lambda: max_value(expression, "B", "40 GiB", H=64),
        "max_batch": lambda: max_batch(expression, "40 GiB", H=64),
    }


def _factored(b=B, h=H):
    """``sympy.factor`` of a traced one-polynomial peak: 12*(b*h + 1), a plain product."""
    peak = keeping(12 * b * h + 12, (SizeConstraint(16 - b, f"{b} < 16"),))
    factored = sp.factor(peak)
    assert factored.is_Mul and sp.expand(factored - peak) == 0  # the same bytes, a product
    assert not getattr(factored, "carried_constraints", ())
    return factored


@pytest.mark.parametrize("path", list(_paths(0)))
def test_a_factored_peak_is_evaluated_with_a_warning_that_names_the_size(path):
    """Each path warns (from the caller's line) that the expression has lost its conditions."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _paths(_factored())[path]()
    lost = [w for w in caught if "carries no conditions" in str(w.message)]
    assert len(lost) == 1 and issubclass(lost[0].category, SizeWarning)
    message = str(lost[0].message)
    assert "within=memory" in message
    searched = path in ("max_value", "max_batch")  # their answer: the largest B that fits
    assert ("is outside B < 16" if searched else "B=20 is outside B < 16") in message
    assert lost[0].filename == __file__


@pytest.mark.parametrize("path", list(_paths(0)))
def test_the_peak_shifted_by_its_own_arithmetic_is_still_refused(path):
    """``peak + c`` (the value's own ``+``) holds the condition: B=20 is refused, not warned."""
    shifted = keeping(12 * B * H + 12, _CONDITION) + 2**30
    with pytest.raises(_REFUSED, match="B < 16"):
        _paths(shifted)[path]()


def test_sympy_add_of_a_one_polynomial_peak_is_refused_or_warned_about():
    """``sympy.Add(peak, c)``: never a silent number for B=20 on any path."""
    peak = keeping(12 * B * H + 5, _CONDITION)
    for path, call in _paths(sp.Add(peak, 3 * 2**30)).items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                call()
            except _REFUSED as refusal:
                assert "B < 16" in str(refusal), path
                continue
        assert any("carries no conditions" in str(w.message) for w in caught), path


def test_sizes_inside_the_conditions_or_of_no_trace_get_no_warning():
    """Only sizes that break a traced result's condition are warned about, on every path.

    Sizes of their own (other traces in this process put conditions on B and H).
    """
    b, h = size_symbol("lost_conditions_b"), size_symbol("lost_conditions_h")
    factored = _factored(b, h)  # a traced value with b < 16 exists in this process
    side = size_symbol("lost_conditions_side")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert evaluate(factored, lost_conditions_b=4, lost_conditions_h=2) == 12 * (4 * 2 + 1)
        assert compile_exact(factored, [b.name, h.name])(4, 2) == 12 * (4 * 2 + 1)
        grid = evaluate_grid(factored, lost_conditions_b=[4, 15], lost_conditions_h=[2, 2])
        assert grid.tolist() == [12 * (4 * 2 + 1), 12 * (15 * 2 + 1)]
        assert max_value(factored, b.name, 12 * (15 * 2 + 1), lost_conditions_h=2) == 15
        assert evaluate(3 * side + 1, lost_conditions_side=40) == 3 * 40 + 1
    assert not [w for w in caught if "carries no conditions" in str(w.message)]
    with pytest.warns(SizeWarning, match="lost_conditions_b=20 is outside lost_conditions_b < 16"):
        evaluate(factored, lost_conditions_b=20, lost_conditions_h=2)  # and outside: warned


def test_within_the_memory_checks_the_conditions_instead():
    """The fix the warning names: within= the conditions refuses B=20 on the factored peak."""
    with pytest.raises(_REFUSED, match="B < 16"):
        evaluate(_factored(), within=_CONDITION, **_OUTSIDE)
