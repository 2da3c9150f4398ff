"""Reading learner answers: numbers, sizes, formulas, choices; malformed ones get clear messages."""

import pytest
import sympy as sp

from memtheory.exercises import AnswerFormatError
from memtheory.exercises.expressions import equivalent, parse_expression
from memtheory.exercises.parsing import (
    parse_choice,
    parse_integer,
    parse_number,
    parse_quantity,
)
from memtheory.symbols import B, H, size_symbol

SYMBOLS = {"B": B, "H": H}


@pytest.mark.parametrize(
    "text", ["4,632,902", "4632902", "4 632 902", "4_632_902", 4_632_902, "4632902.0", "+4,632,902"]
)
def test_integer_spellings(text):
    """Thousands separators and a trailing .0 are accepted for a count."""
    assert parse_integer(text) == 4_632_902


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("abc", "cannot read 'abc'"),
        ("nan", "not a finite number"),
        ("NaN", "not a finite number"),
        ("inf", "not a finite number"),
        ("-Infinity", "not a finite number"),
        (float("nan"), "not a finite number"),
        (float("inf"), "not a finite number"),
        (True, "yes/no"),
        ([1, 2], "text or a number"),
        ("224,69", "comma may only group thousands"),
        ("1e999", "exponents beyond"),
        ("12.5", "not a whole number"),
        ("9.2K", "cannot read"),
        (None, "no answer"),
    ],
)
def test_malformed_integers_get_clear_messages(raw, message):
    """Each unreadable count is refused with a message saying what is wrong."""
    with pytest.raises(AnswerFormatError, match=message):
        parse_integer(raw)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.5", sp.Rational(3, 2)),
        ("3/8", sp.Rational(3, 8)),
        ("2.5e3", 2500),
        (".5", sp.Rational(1, 2)),
    ],
)
def test_numbers_are_exact(text, expected):
    """Decimals, fractions and e-notation are read exactly."""
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("22.9 MiB", "MiB", sp.Rational("22.9")),
        ("22.9MiB", "MiB", sp.Rational("22.9")),
        ("24 MB", "MiB", sp.Rational(24 * 10**6, 2**20)),
        ("1,048,576 B", "MiB", 1),
        ("1,048,576 bytes", "MiB", 1),
        ("1048576", "B", 1048576),
        ("512", "KiB", 512),
        (512, "KiB", 512),
        ("1 GiB", "MB", sp.Rational(2**30, 10**6)),
        ("0.5 gib", "MiB", 512),
    ],
)
def test_sizes_in_any_byte_unit(text, unit, expected):
    """A size is read in the unit written, or the question's unit when none is, and converted."""
    assert parse_quantity(text, unit) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3 parsecs", "unknown unit 'parsecs'"),
        ("MiB", "cannot read 'MiB' as a size"),
        ("twelve MiB", "cannot read"),
        ("nan MiB", "cannot read"),
        ("inf", "not a finite number"),
        ("224,69 MB", "comma may only group thousands"),
        ("5 K", "unknown unit 'K'"),
    ],
)
def test_malformed_sizes_get_clear_messages(text, message):
    """A size whose number or unit does not parse is refused with a reason."""
    with pytest.raises(AnswerFormatError, match=message):
        parse_quantity(text, "MiB")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2*B*H**2 + 5", 2 * B * H**2 + 5),
        ("2B H^2 + 5", 2 * B * H**2 + 5),
        ("floor((H - 2)/2) + 1", sp.floor((H - 2) / 2) + 1),
        ("ceil(H/2)", sp.ceiling(H / 2)),
        ("Max(B, 2*H)", sp.Max(B, 2 * H)),
        ("0.5*B", B / 2),
        ("1e6*B", 10**6 * B),
    ],
)
def test_formulas_parse_to_sympy(text, expected):
    """Plain formulas in the question's symbols become sympy expressions (decimals exact)."""
    assert sp.simplify(parse_expression(text, SYMBOLS) - expected) == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("B**", "incomplete"),
        ("(B", "every '\\(' has its '\\)'"),
        ("__import__('os')", "'__import__' is not allowed"),
        ("B.__class__", "not allowed"),
        ("lambda: 1", "'lambda' is not allowed"),
        ("[B]", "not allowed"),
        ("'B'", "quoted text"),
        ("B; B", "not allowed"),
        ("x + 1", "'x' is not allowed"),
        ("B//2", "floor\\(a/b\\)"),
        ("B = 2", "not allowed"),
        ("exec('1')", "'exec' is not allowed"),
        ("2**1000", "power 1000 is beyond 64"),
        ("9**9**9**9", "is beyond 64"),
        ("B > 2", "not allowed"),
        ("1/0", "divides by zero"),
        ("", "empty"),
    ],
)
def test_malformed_formulas_get_clear_messages(text, message):
    """Anything but a plain formula in the allowed symbols is refused, with the reason."""
    with pytest.raises(AnswerFormatError, match=message):
        parse_expression(text, SYMBOLS)


def test_formula_text_is_never_run(tmp_path):
    """Code in a formula is refused before evaluation: it creates no file."""
    target = tmp_path / "pwned"
    for text in (
        f"open({str(target)!r}, 'w')",
        f"__import__('pathlib').Path({str(target)!r}).touch()",
    ):
        with pytest.raises(AnswerFormatError):
            parse_expression(text, SYMBOLS)
    assert not target.exists()


def test_huge_power_is_refused():
    """A power tower is refused instead of being computed (timed: benchmarks/response_times.py)."""
    with pytest.raises(AnswerFormatError):
        parse_expression("9**9**9**9**9", SYMBOLS)


def test_sympy_formula_from_a_notebook_is_matched_by_name():
    """A sympy expression built with plain symbols is mapped onto the question's symbols."""
    learner_b = sp.Symbol("B")
    assert parse_expression(4 * learner_b + 1, SYMBOLS) == 4 * B + 1
    with pytest.raises(AnswerFormatError, match="uses Q"):
        parse_expression(sp.Symbol("Q") + 1, SYMBOLS)


@pytest.mark.parametrize(
    ("given", "expected", "same"),
    [
        (sp.floor((H - 2) / 2) + 1, sp.floor(H / 2), True),
        (sp.floor(sp.floor(sp.floor(H / 2) / 2) / 2), sp.floor(H / 8), True),
        (sp.floor((H + 1) / 2), sp.floor(H / 2), False),
        (2 * B * (H + 1), 2 * B * H + 2 * B, True),
        (2 * B * H, 2 * B * H + 1, False),
        (sp.Rational(1, 2) * B, B / 2, True),
        (H / 2, sp.floor(H / 2), False),
    ],
)
def test_equivalence_is_symbolic_and_checks_integer_points(given, expected, same):
    """Formulas are compared as functions of positive integers, floors included."""
    assert equivalent(given, expected) is same


def test_equivalence_sees_large_memory_sizes():
    """A formula that differs only at GPU-sized values of M is not taken as equivalent."""
    m = size_symbol("M")
    assert not equivalent(sp.floor(m / 4_298_016) - 71, sp.floor((m - 305_167_744) / 4_298_016))


@pytest.mark.parametrize(
    ("raw", "index"), [("b", 1), ("(B)", 1), ("b)", 1), ("  adam ", 1), ("A.", 0)]
)
def test_choices_by_letter_or_text(raw, index):
    """A choice is a letter, with or without parentheses, or the option's text."""
    assert parse_choice(raw, ("SGD", "Adam", "RMSprop")) == index


@pytest.mark.parametrize("raw", ["z", "d", "SGD with momentum", "", 3])
def test_unknown_choices_are_refused(raw):
    """A letter beyond the options, or text that is no option, is refused."""
    with pytest.raises(AnswerFormatError):
        parse_choice(raw, ("SGD", "Adam", "RMSprop"))
