"""A printed number from a source document beside the number memtheory computes.

A :class:`Figure` holds the digits exactly as a document printed them, the
unit it really meant (a document that writes "MB" after dividing by
:math:`1024^2` meant MiB, and the figure records both), memtheory's exact
value, and, when the two disagree, the document's own arithmetic redone and
an explanation. A :class:`WorkedExample` gathers the figures of one document.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

import sympy as sp

from memtheory.errors import UnknownNameError, UnknownUnitError
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.tables import Column, Table
from memtheory.units import UNITS, round_half_up

__all__ = ["COUNT_UNITS", "Figure", "WorkedExample", "scale_of"]

COUNT_UNITS: dict[str, int] = {
    "elements": 1,
    "K elements": 10**3,
    "M elements": 10**6,
    "%": 1,
    "": 1,
}
"""Units of figures that are not byte sizes: element counts (plain, K, M) and percents."""


def scale_of(unit: str) -> int:
    """Return the base quantities (bytes or elements) in one ``unit``.

    Examples
    --------
    >>> scale_of("MiB"), scale_of("K elements")
    (1048576, 1000)
    """
    if unit in UNITS:
        return UNITS[unit]
    try:
        return COUNT_UNITS[unit]
    except KeyError:
        raise UnknownUnitError(
            f"unknown figure unit {unit!r}; use a byte unit or one of {list(COUNT_UNITS)}"
        ) from None


def _round_significant(value: sp.Rational, significant: int) -> Decimal:
    if value == 0:
        return Decimal(0)
    exponent = sp.floor(sp.log(abs(value), 10))
    # floor(log10) may be off by one near powers of ten when evaluated in floats: fix it exactly.
    while abs(value) >= sp.Integer(10) ** (exponent + 1):
        exponent += 1
    while abs(value) < sp.Integer(10) ** exponent:
        exponent -= 1
    step = int(exponent) - significant + 1
    rounded = round_half_up(sp.Rational(value) / sp.Integer(10) ** step, 0)
    if step >= 0:
        return Decimal(int(rounded) * 10**step)
    return rounded.scaleb(step)


@dataclass(frozen=True)
class Figure:
    """One number of a worked example.

    Parameters
    ----------
    label : str
        What the number is.
    exact : sympy expression or None
        memtheory's exact value, in bytes (byte units) or elements (count units);
        ``None`` for a number the document assumed rather than computed.
    unit : str
        The unit the printed number is really in (``"MiB"``, ``"MB"``,
        ``"K elements"``, ``"%"``...).
    printed : str or None
        The digits as printed (thousands separators kept), or ``None`` for a
        number memtheory adds that the document does not print.
    written_unit : str or None
        The unit label the document wrote, when it differs from ``unit``.
    significant : int or None
        Compare at this many significant digits (for "about 303,000,000");
        by default at the printed number of decimals.
    decimal_comma : bool
        The document writes a decimal comma (``"224,69"``), not a thousands separator.
    document_arithmetic : sympy expression or None
        The document's own steps redone exactly, in ``unit`` (e.g. a sum of
        already-rounded parts), when they explain a difference.
    explanation : str
        Why memtheory's number and the printed one differ, or what the number shows.

    Examples
    --------
    >>> f = Figure("total", exact=779_021_856, unit="MiB", printed="742.34",
    ...            document_arithmetic=sp.Rational("4.06") * 128 + sp.Rational("218.27")
    ...            + sp.Rational("4.39"), explanation="rounded before multiplying")
    >>> f.memtheory_value, f.matches_printed, f.document_matches_printed
    (Decimal('742.93'), False, True)
    """

    label: str
    exact: sp.Expr | int | None
    unit: str
    printed: str | None = None
    written_unit: str | None = None
    significant: int | None = None
    decimal_comma: bool = False
    document_arithmetic: sp.Expr | None = None
    explanation: str = ""

    def __post_init__(self) -> None:
        scale_of(self.unit)
        if self.exact is not None:
            object.__setattr__(self, "exact", sp.sympify(self.exact))

    @property
    def printed_value(self) -> sp.Rational | None:
        """The printed number, exactly."""
        return None if self.printed is None else sp.Rational(self._plain_digits())

    def _plain_digits(self) -> str:
        assert self.printed is not None
        if self.decimal_comma:
            return self.printed.replace(".", "").replace(",", ".")
        return self.printed.replace(",", "")

    @property
    def decimals(self) -> int:
        """Decimals printed (2 for ``"742.34"``); unprinted: 0 for counts, 2 for sizes."""
        if self.printed is None:
            return 0 if self.unit in COUNT_UNITS else 2
        digits = self._plain_digits()
        return len(digits.split(".")[1]) if "." in digits else 0

    def rounded(self, value_in_unit: sp.Expr) -> Decimal:
        """Round a value in :attr:`unit` the way the printed figure is rounded."""
        if self.significant is not None:
            return _round_significant(sp.Rational(value_in_unit), self.significant)
        return round_half_up(value_in_unit, self.decimals)

    @property
    def exact_in_unit(self) -> sp.Expr | None:
        """Return memtheory's value in :attr:`unit`, exactly."""
        return None if self.exact is None else self.exact / scale_of(self.unit)

    @property
    def memtheory_value(self) -> Decimal | None:
        """Return memtheory's value rounded like the printed figure."""
        value = self.exact_in_unit
        return None if value is None else self.rounded(value)

    @property
    def matches_printed(self) -> bool | None:
        """Whether memtheory's exact value, rounded as printed, gives the printed digits."""
        if self.printed is None or self.exact is None:
            return None
        return self.memtheory_value == self.rounded(self.printed_value)

    @property
    def document_matches_printed(self) -> bool | None:
        """Whether the document's own arithmetic, redone, gives the printed digits."""
        if self.printed is None or self.document_arithmetic is None:
            return None
        return self.rounded(self.document_arithmetic) == self.rounded(self.printed_value)

    @property
    def verdict(self) -> str:
        """Classify the figure: agrees, slip explained, differs, memtheory only, or assumed."""
        if self.printed is None:
            return "memtheory only"
        if self.exact is None:
            return "assumed"
        if self.matches_printed:
            return "agrees"
        return "slip explained" if self.explanation else "differs"


@dataclass(frozen=True)
class WorkedExample:
    """A source document's worked example rebuilt with memtheory.

    Attributes
    ----------
    document : str
        The document's number (``"000"`` ...), the start of its file name.
    filename : str
        The source document's file name.
    source : str
        What the document is (a StackExchange answer, a forum thread, ...).
    title : str
    inputs : mapping
        The example's inputs, as the document states them.
    figures : tuple of Figure
    breakdowns : mapping of str to MemoryBreakdown
        memtheory's own estimates for the same setting, evaluated.
    network : Network or None
        The network, where the document describes one layer by layer.
    summary : str
        What the example shows, in a few sentences.

    Examples
    --------
    >>> from memtheory.worked_examples import worked_example
    >>> example = worked_example("003")
    >>> example.title, dict(example.inputs)["parameters"]
    ('Two million parameters and a 32 MB input', 2000000)
    >>> print(example.table())
    figure                                 printed  memtheory  unit  verdict
    -------------------------------------  -------  ---------  ----  --------------
    parameters                                   8          8  MB    agrees
    input                                       32         32  MB    agrees
    total                                       40         40  MB    agrees
    training with SGD, activations aside         -      48.00  MB    memtheory only
    training with Adam, activations aside        -      64.00  MB    memtheory only
    """

    document: str
    filename: str
    source: str
    title: str
    inputs: Mapping[str, object]
    figures: tuple[Figure, ...]
    summary: str
    breakdowns: Mapping[str, MemoryBreakdown] = field(default_factory=dict)
    network: Network | None = None

    def figure(self, label: str) -> Figure:
        """Return the figure called ``label``."""
        for figure in self.figures:
            if figure.label == label:
                return figure
        raise UnknownNameError(
            f"no figure {label!r} in document {self.document}; "
            f"figures: {[f.label for f in self.figures]}"
        )

    def _rows(self) -> list[tuple[str, str, str, str, str]]:
        return [
            (
                f.label,
                f.printed or "-",
                "-" if f.memtheory_value is None else f"{f.memtheory_value:,}",
                f.unit + (f" (written {f.written_unit})" if f.written_unit else ""),
                f.verdict,
            )
            for f in self.figures
        ]

    def table(self) -> Table:
        """Tabulate the figures: printed, memtheory's exact value, unit, verdict."""
        columns = [
            Column("figure"),
            Column("printed", align="right"),
            Column("memtheory", align="right"),
            Column("unit"),
            Column("verdict"),
        ]
        return Table(columns, self._rows())

    def markdown(self) -> str:
        """Render the figures as a Markdown table, followed by the explanations as a list.

        Examples
        --------
        >>> from memtheory.worked_examples import worked_example
        >>> print(worked_example("003").markdown().splitlines()[2])
        | parameters | 8 | 8 | MB | agrees |
        """
        notes = [f"* **{f.label}**: {f.explanation}" for f in self.figures if f.explanation]
        return "\n".join([self.table().markdown(), "", *notes])
