"""Self-check boxes for the book: each exercise's answers as data, checked in the reader's browser.

Under each exercise of the book an answer box checks what the reader types,
offline (the page works from ``file://``, no server). Everything the check
compares against is computed here, when the book is built, from the same
variant the grader uses (the book's numbers): the expected answer, each listed
mistake's answer with its name, title, hint and detail, the answers of two
mistakes made together, and for a formula its values at the sample points of
the grader's equivalence test. :func:`selfcheck_html` writes them as JSON in
the page; ``selfcheck.js`` (beside this module, pasted once per chapter by
:func:`selfcheck_script`) reads the answer and gives the grader's feedback.

What the browser reads
----------------------
A documented subset of the grader's grammar (:mod:`memtheory.exercises.parsing`):

- numbers: digits (any Unicode decimal digits, fullwidth ``７８５００`` too, read as
  0-9 as the grader reads them) grouped by commas (thousands only), spaces or underscores,
  decimals with a point, e-notation, fractions and arithmetic with
  ``+ - * / x × ^ **`` and parentheses; a leading ``~``, ``≈`` or ``about``
  where a tolerance applies; a trailing ``%`` or ``percent``; one trailing
  period; ``k``/``M`` suffixes refused as the grader refuses them;
- sizes: such a number, then a byte unit (``B``, ``bytes``, ``kB``, ``MB``,
  ``GB``, ``TB``, ``KiB``, ``MiB``, ``GiB``, ``TiB``; case does not matter);
- formulas: the question's symbols, numbers, ``+ - * / ^ **``, juxtaposition,
  parentheses, ``floor``, ``ceiling``/``ceil``, ``Min``, ``Max``;
- choices: a letter (``b``, ``(b)``, ``b)``, ``B.``) or an option's text.

Numbers and sizes are read and compared exactly, as the grader does (fractions
of big integers), so the tolerance and the named mistakes give the same verdict
and the same feedback. Where the browser is narrower than the grader (the
page says so once per chapter): a formula is compared by its values at the
shipped sample points (the grader's own points, double precision, 1e-9
relative), not by sympy's proof; a count is read as a number alone (the
grader also reads ``78500 parameters`` and, for bytes, ``2 MB``); powers
are whole numbers from -64 to 64; the grader's limits on size become a
500-character limit; and an answer given from a notebook as a Python object
has no counterpart. The grader
(``memtheory grade``) stays the reference.

Examples
--------
>>> from memtheory.exercises.loader import find_variant
>>> data = selfcheck_data(find_variant("ch02.q1"))
>>> data["kind"], data["expected"], sorted({m["name"] for m in data["mistakes"]})
('integer', '78500', ['forgot_bias', 'parameters_times_batch'])
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import sympy as sp

from memtheory.exercises.errors import ExerciseDefinitionError
from memtheory.exercises.expressions import sample_points
from memtheory.exercises.kinds import Choice, Expression, Integer, Number, Quantity
from memtheory.exercises.misconceptions import SLIPS
from memtheory.exercises.model import MistakenAnswer, Variant
from memtheory.units import UNITS

__all__ = ["SAFE_INTEGER", "selfcheck_data", "selfcheck_html", "selfcheck_script"]

SAFE_INTEGER = 2**53 - 1
"""The largest whole number a browser's numbers hold exactly."""

_POINTS = 16
"""Random sample points a formula is compared at (besides the small sizes and the marks)."""


def _exact(value: object) -> str:
    """Write an exact number as ``"p"`` or ``"p/q"`` (the browser reads it with BigInt)."""
    number = sp.Rational(value)
    return str(number.p) if number.q == 1 else f"{number.p}/{number.q}"


def _points(variant: Variant) -> list[dict[str, int]]:
    kind = variant.kind
    assert isinstance(kind, Expression)
    expected = sp.sympify(variant.expected)
    exprs = [expected, *(sp.sympify(m.value) for m in variant.mistaken_answers())]
    points = []
    for point in sample_points(kind.symbols, exprs, count=_POINTS, sizes=kind.sizes):
        values = [expected.xreplace({s: sp.Integer(v) for s, v in point.items()})]
        if all(v.is_number and v.is_finite and abs(v) < SAFE_INTEGER for v in values):
            points.append({s.name: v for s, v in point.items()})
    return points


def _value(variant: Variant, value: object, points: list[dict[str, int]], what: str) -> Any:
    kind = variant.kind
    if isinstance(kind, Expression):
        expr = sp.sympify(value)
        # values at the sample points, compared to 1e-9 relative: a float is close enough
        return [
            float(expr.xreplace({s: sp.Integer(p[s.name]) for s in kind.symbols})) for p in points
        ]
    if isinstance(kind, Choice):
        return int(value)  # type: ignore[call-overload]
    return _exact(value)


def _mistake(
    variant: Variant, mistaken: MistakenAnswer, points: list[dict[str, int]]
) -> dict[str, Any]:
    return {
        "name": mistaken.name,
        "title": mistaken.title,
        "hint": mistaken.hint,
        "detail": mistaken.detail,
        "value": _value(variant, mistaken.value, points, f"{variant.id} {mistaken.name}"),
    }


def selfcheck_data(variant: Variant) -> dict[str, Any]:
    """Return what the browser needs to check answers to ``variant``, as JSON-ready data.

    Keys: ``id``, ``kind`` (the answer kind's name), ``expected`` (for a
    formula, its values at ``points``), ``shown`` (the expected answer as the
    grader writes it), ``rtol``, ``unit`` and ``units`` (a size), ``percent``
    (a number), ``options`` (a choice), ``symbols`` and ``points`` (a formula),
    ``hint`` (the exercise's own), ``mistakes`` (each listed mistake: name,
    title, hint, detail, value), ``pairs`` (two mistakes made together) and
    ``slips`` (the slips in writing an answer the grader names), ``worth`` (the
    exercise's points) and ``partial`` (its partial credit per named slip).

    Raises
    ------
    ExerciseDefinitionError
        If a count is too large for a browser's numbers, or a formula has no
        sample point where every value fits.

    Examples
    --------
    >>> from memtheory.exercises.loader import find_variant
    >>> data = selfcheck_data(find_variant("ch03.q6"))
    >>> data["kind"], data["symbols"], len(data["points"]) == len(data["expected"]) > 10
    ('expression', ['H'], True)
    """
    kind = variant.kind
    points = _points(variant) if isinstance(kind, Expression) else []
    if isinstance(kind, Expression) and not points:
        raise ExerciseDefinitionError(f"{variant.id}: no sample point fits a browser's numbers.")
    data: dict[str, Any] = {
        "id": variant.id,
        "kind": kind.name,
        "expected": _value(variant, variant.expected, points, variant.id),
        "shown": kind.display(variant.expected),
        "hint": variant.exercise.hint,
        "worth": variant.exercise.points,
        "partial": dict(variant.exercise.partial),
        "rtol": str(getattr(kind, "rtol", 0)),  # read exactly, as the grader reads str(rtol)
        "mistakes": [_mistake(variant, m, points) for m in variant.mistaken_answers()],
        "pairs": [
            {
                "mistakes": [_mistake(variant, m, points) for m in pair],
                "value": _value(variant, pair[0].value, points, variant.id),
            }
            for pair in variant._pairs
        ],
    }
    if isinstance(kind, Quantity):
        data |= {"unit": kind.unit, "units": {name: str(size) for name, size in UNITS.items()}}
        data["slips"] = {name: _slip(name) for name in ("unit_label_swapped", "bare_bytes")}
    elif isinstance(kind, Number):
        data["percent"] = kind.percent
        data["slips"] = {
            name: _slip(name) for name in ("fraction_for_percent", "percent_for_fraction")
        }
    elif isinstance(kind, Choice):
        data["options"] = list(kind._options())
    elif isinstance(kind, Expression):
        data |= {"symbols": [s.name for s in kind.symbols], "points": points}
    elif not isinstance(kind, Integer):
        raise ExerciseDefinitionError(
            f"{variant.id}: no self-check for answers of kind {kind.name}."
        )
    return data


def _slip(name: str) -> dict[str, str]:
    slip = SLIPS[name]
    return {"name": slip.name, "title": slip.title, "hint": slip.hint}


def selfcheck_html(variant: Variant) -> str:
    r"""Return the answer box of one exercise: one line of HTML with its data as JSON.

    The line is a raw HTML block in MyST Markdown; ``</`` is escaped inside
    the JSON so that no text of a set can close the script element.

    Examples
    --------
    >>> from memtheory.exercises.loader import find_variant
    >>> html = selfcheck_html(find_variant("ch02.q1"))
    >>> html.startswith('<div class="mt-selfcheck" data-exercise="ch02.q1">'), "\n" in html
    (True, False)
    """
    payload = json.dumps(selfcheck_data(variant), ensure_ascii=True, separators=(",", ":"))
    payload = payload.replace("</", "<\\/").replace("<!--", "<\\!--")
    return (
        f'<div class="mt-selfcheck" data-exercise="{variant.id}">'
        f'<script type="application/json">{payload}</script></div>'
    )


def selfcheck_script() -> str:
    r"""Return the checker as an HTML block: ``selfcheck.js`` in a script element (no blank line).

    Examples
    --------
    >>> script = selfcheck_script()
    >>> script.startswith("<script>") and script.endswith("</script>"), "\n\n" in script
    (True, False)
    """
    source = resources.files("memtheory.exercises").joinpath("selfcheck.js").read_text("utf-8")
    lines = [line for line in source.splitlines() if line.strip()]
    return "<script>\n" + "\n".join(lines) + "\n</script>"
