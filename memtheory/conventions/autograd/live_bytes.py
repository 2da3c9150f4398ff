"""The live bytes of a step: storages allocated and freed, and the total at labelled moments.

:class:`Timeline` keeps the live total as sympy's ``Add`` keeps it, so that
each moment is the same expression as adding every live storage again, at a
fraction of the cost; :mod:`~memtheory.conventions.autograd.timeline` (the
forward and inference) and :mod:`~memtheory.conventions.autograd.backward`
(the autograd engine) run a step through it. A moment is recorded as its place
in the log of the total's changes and built only when read (:class:`Moments`,
:class:`Parts`), so a deep network's step costs time linear in its depth, and
its exact peak is read from the changes (:class:`~memtheory.max_pruning.RunningSum`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from functools import cmp_to_key
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import sympy as sp
from sympy.core.basic import _cmp_name, ordering_of_classes

from memtheory.max_pruning import RunningSum

if TYPE_CHECKING:
    from memtheory.conventions.autograd.storage_plan import StepPlan

__all__ = [
    "Holders", "Moments", "PartAt", "Parts", "Shift", "SumBuilder", "Timeline", "freeable",
    "moved", "part_at", "part_value", "shifted",
]

Holders: TypeAlias = dict[str, set[tuple[str, int]]]
"""Each storage's keepers: the backward nodes (layer name, stage) that saved it."""


@dataclass
class Timeline:
    """Live storages (name -> bytes) and the live total at labelled moments.

    The live total is kept as sympy's ``Add`` keeps it, term -> coefficient,
    and updated on every allocation and free; a moment sorts only its own terms
    (by their place in a canonical order kept as terms first appear) instead of
    adding every live storage again. A moment is the same expression, argument
    for argument, as ``sp.Add(*live.values())``, which it falls back on for
    anything but rational coefficients. :attr:`moments` and :attr:`parts` keep
    each moment as a place in the total's log of changes, built when read.
    """

    live: dict[str, sp.Expr] = field(default_factory=dict)
    moments: Moments = field(default_factory=lambda: Moments())
    categories: dict[str, str] = field(default_factory=dict)
    """Storage name -> component, for the storages whose live bytes each moment also keeps
    by component (:attr:`parts`)."""
    parts: Parts = field(default_factory=lambda: Parts())
    """Moment -> the live bytes of each component of :attr:`categories` at that moment."""
    _sum: _Sum = field(default_factory=lambda: _Sum())
    _nonzero: dict[str, None] = field(default_factory=dict)
    _by_category: dict[str, _Category] = field(default_factory=dict)

    def alloc(self, key: str, nbytes: sp.Expr) -> None:
        """Add a live storage."""
        if key in self.live:
            raise AssertionError(f"storage {key!r} allocated twice")
        value = sp.sympify(nbytes)
        self.live[key] = value
        if value is not sp.S.Zero:
            self._nonzero[key] = None
            self._sum.add(value, 1)
            self._count(key, value)

    def free(self, key: str) -> None:
        """Remove a live storage."""
        value = self.live.pop(key)
        if value is not sp.S.Zero:
            del self._nonzero[key]
            self._sum.add(value, -1)
            self._count(key, sp.S.Zero)

    def _count(self, key: str, value: sp.Expr) -> None:
        category = self.categories.get(key)
        if category is not None:
            sums = self._by_category.get(category)
            if sums is None:
                sums = self._by_category[category] = _Category()
            sums.count(key, value)

    def total(self) -> sp.Expr:
        """Return the live bytes now."""
        if not self._sum.exact:
            return sp.Add(*self.live.values())
        if len(self._nonzero) < 2:  # sympy returns a lone argument as it is
            return self.live[next(iter(self._nonzero))] if self._nonzero else sp.S.Zero
        return self._sum.expression()

    def mark(self, label: str, extra: sp.Expr | int = 0) -> None:
        """Record the live bytes (plus ``extra``) as the moment ``label``.

        A moment of two or more rational-coefficient terms is recorded as a place
        in the running sum's log, and built only when read (:class:`Moments`).
        """
        if self.categories:
            self.parts.record(label, {
                category: sums.recorded() for category, sums in self._by_category.items()
            })
        extra = sp.sympify(extra)
        if extra is sp.S.Zero:  # what sympy's total + 0 returns, without hashing the total
            if self._sum.exact and len(self._nonzero) >= 2:
                self.moments.record(label, self._sum)
            else:
                self.moments.record(label, self._sum, self.total())
            return
        if not self._nonzero or not self._sum.exact or not _parts(extra):
            self.moments.record(label, self._sum, self.total() + extra)
            return
        self._sum.add(extra, 1)
        self.moments.record(label, self._sum)
        self._sum.add(extra, -1)


_GAP = 1 << 32


class _Category:
    """The live bytes of one component: its storages, and their sum kept as :class:`_Sum` does.

    The same expression as ``sp.Add`` of the component's live storages, built
    only when a moment asks for it after a change (adding to a growing ``Add``
    on every allocation re-sorts every term: quadratic in depth).
    """

    def __init__(self) -> None:
        self.live: dict[str, sp.Expr] = {}
        self.sum = _Sum()
        self.value: sp.Expr | None = sp.S.Zero

    def count(self, key: str, value: sp.Expr) -> None:
        """Add the storage ``key`` of ``value`` bytes; a value of zero removes it."""
        if value is sp.S.Zero:
            self.sum.add(self.live.pop(key), -1)
        else:
            self.live[key] = value
            self.sum.add(value, 1)
        self.value = None

    def expression(self) -> sp.Expr:
        """Return the component's live bytes now."""
        if self.value is None:
            if not self.sum.exact:
                self.value = sp.Add(*self.live.values())
            elif len(self.live) < 2:  # sympy returns a lone argument as it is
                self.value = next(iter(self.live.values())) if self.live else sp.S.Zero
            else:
                self.value = self.sum.expression()
        return self.value

    def recorded(self) -> sp.Expr | _Place:
        """Return the component's live bytes now, or the place in its log to build them from."""
        if self.value is None and self.sum.exact and len(self.live) >= 2:
            return self.sum.replay, len(self.sum.log)
        return self.expression()


class _Sum:
    """A sum of sympy expressions kept as ``Add.flatten`` collects it: term -> coefficient.

    ``exact`` turns False for good once a coefficient is not rational (a float,
    an infinity): the caller then adds the values with sympy itself.
    """

    def __init__(self) -> None:
        self.terms: dict[sp.Expr, sp.Number] = {}
        self.constant: sp.Number = sp.S.Zero
        self.exact = True
        self._order: list[sp.Expr] = []
        self._rank: dict[sp.Expr, int] = {}
        self._built: dict[tuple[sp.Expr, sp.Number], sp.Expr] = {}
        self._compared: dict[tuple[sp.Basic, sp.Basic], int] = {}
        self._split: dict[sp.Expr, _Split | None] = {}
        self._by_id: dict[int, tuple[sp.Expr, _Split | None]] = {}
        """Each value object added, by ``id`` (kept alive beside it), with its split, whose
        terms are the one object kept for each distinct term (:attr:`_canonical`): an
        allocation and its free add the same object, so neither compares it again, and
        every term is found in :attr:`terms` by identity (comparing two equal terms walks
        them, as deep as a network's nested floors)."""
        self._canonical: dict[sp.Expr, sp.Expr] = {}
        self._last: dict[sp.Expr, tuple[sp.Number, sp.Expr]] = {}
        self._sort_keys: list[tuple[Any, ...]] | None = []  # _order's keys, while all have one
        self._key_memo: dict[int, tuple[sp.Basic, tuple[Any, ...]]] = {}
        self.log: list[tuple[sp.Expr | None, sp.Number]] = []
        """Every change, in order: (term, its coefficient now; 0 when gone); None: the constant."""
        self.replay = _Replay(self)

    def add(self, value: sp.Expr, sign: int) -> None:
        """Add ``sign`` (1 or -1) times ``value``'s terms."""
        if not self.exact:
            return
        known = self._by_id.get(id(value))
        if known is not None:
            parts = known[1]
        else:
            if value in self._split:
                parts = self._split[value]
            else:
                parts = self._split[value] = self._canonical_parts(value)
            self._by_id[id(value)] = (value, parts)
        if parts is None:
            self.exact = False
            return
        constant, terms = parts
        log = self.log
        if constant:
            self.constant = self.constant + constant if sign > 0 else self.constant - constant
            log.append((None, self.constant))
        for term, coefficient in terms:
            total = self.terms.get(term, sp.S.Zero)
            total = total + coefficient if sign > 0 else total - coefficient
            if total:
                self.terms[term] = total
            else:
                del self.terms[term]
            log.append((term, total))

    def _canonical_parts(self, value: sp.Expr) -> _Split | None:
        """:func:`_parts` of ``value``, each term the one object kept for it."""
        parts = _parts(value)
        if parts is None:
            return None
        canonical = self._canonical
        return parts[0], [(canonical.setdefault(term, term), c) for term, c in parts[1]]

    def expression(self) -> sp.Expr:
        """Return the sum as ``sp.Add`` would build it from the same values."""
        return self.built(self.terms, self.constant)

    def built(self, terms: dict[sp.Expr, sp.Number], constant: sp.Number) -> sp.Expr:
        """Return ``sp.Add`` of ``terms`` (term -> coefficient) and ``constant``, in its order."""
        built, rank, last = self._built, self._rank, self._last
        ranked = []
        for term, coefficient in terms.items():
            known = last.get(term)  # the term's argument when its coefficient was this object
            if known is not None and known[0] is coefficient:
                argument = known[1]
            else:
                argument = term if coefficient is sp.S.One else built.get((term, coefficient))
                if argument is None:
                    argument = self._term(term, coefficient)
                last[term] = (coefficient, argument)
            place = rank.get(argument)
            if place is None:
                place = self._key(argument)
                rank = self._rank  # a new term may have renumbered every place
            ranked.append((place, argument))
        ranked.sort(key=itemgetter(0))  # places are distinct: the arguments are never compared
        arguments = [argument for _, argument in ranked]
        if constant is not sp.S.Zero:
            arguments.insert(0, constant)
        return sp.Add._exec_constructor_postprocessors(sp.Add._from_args(arguments, True))

    def _term(self, term: sp.Expr, coefficient: sp.Number) -> sp.Expr:
        """``coefficient * term`` as ``Add.flatten`` writes it."""
        if coefficient is sp.S.One:
            return term
        built = self._built.get((term, coefficient))
        if built is None:
            if term.is_Mul:
                built = term._new_rawargs(coefficient, *term.args)
            elif term.is_Add:
                built = sp.Mul(coefficient, term, evaluate=False)
            else:
                built = sp.Mul(coefficient, term)
            self._built[(term, coefficient)] = built
        return built

    def _key(self, argument: sp.Expr) -> int:
        """Return the argument's place in sympy's canonical order (``Basic.compare``)."""
        rank = self._rank.get(argument)
        if rank is None:
            order = self._order
            place = self._place(argument)
            low = self._rank[order[place - 1]] if place else 0
            high = self._rank[order[place]] if place < len(order) else low + 2 * _GAP
            order.insert(place, argument)
            if high - low < 2:
                self._rank = {a: (i + 1) * _GAP for i, a in enumerate(order)}
            else:
                self._rank[argument] = (low + high) // 2
            rank = self._rank[argument]
        return rank

    def _place(self, argument: sp.Expr) -> int:
        """Return where a new argument goes in :attr:`_order`, as ``Basic.compare`` sorts.

        By its sort key (:func:`_sort_key`: comparing two keys is comparing the two
        expressions, done once per subexpression instead of once per pair); by
        ``Basic.compare`` itself, for good, once an argument has no key.
        """
        keys = self._sort_keys
        if keys is not None:
            try:
                key = _sort_key(argument, self._key_memo)
                place = bisect.bisect_left(keys, key)
            except (TypeError, _UnkeyedError):
                self._sort_keys = None
            else:
                keys.insert(place, key)
                return place
        compared = cmp_to_key(self._compare)
        return bisect.bisect_left(self._order, compared(argument), key=compared)

    def _compare(self, a: sp.Basic, b: sp.Basic) -> int:
        """``a.compare(b)``, remembering the pairs of subexpressions already compared.

        Terms of a deep network nest floors many levels deep, and ``Basic.compare``
        walks them again for every pair; this is the same walk, each pair once.
        """
        if a is b:
            return 0
        known = self._compared.get((a, b))
        if known is not None:
            return known
        result = _cmp_name(type(a), type(b))
        if not result:
            left, right = a._hashable_content(), b._hashable_content()
            result = (len(left) > len(right)) - (len(left) < len(right))
            for x, y in zip(left, right, strict=False) if not result else ():
                if isinstance(x, sp.Basic) and type(x).compare is sp.Basic.compare:
                    result = self._compare(x, y)
                elif isinstance(x, sp.Basic):
                    result = x.compare(y)
                elif isinstance(x, frozenset):
                    result = sp.Basic(*x).compare(sp.Basic(*y))
                else:
                    result = (x > y) - (x < y)
                if result:
                    break
        self._compared[(a, b)] = result
        return result


class _UnkeyedError(Exception):
    """An expression :func:`_sort_key` cannot key: its class compares in its own way."""


def _class_rank(name: str) -> tuple[int, str]:
    """Order class names as ``sympy.core.basic._cmp_name`` does: listed ones first, then by name."""
    rank = _CLASS_RANKS.get(name)
    if rank is None:
        try:
            rank = ordering_of_classes.index(name), ""
        except ValueError:
            rank = len(ordering_of_classes) + 1, name
        _CLASS_RANKS[name] = rank
    return rank


_CLASS_RANKS: dict[str, tuple[int, str]] = {}


def _sort_key(
    expression: sp.Basic, memo: dict[int, tuple[sp.Basic, tuple[Any, ...]]]
) -> tuple[Any, ...]:
    """Return a key whose order is ``Basic.compare``'s: class, then length, then the contents.

    ``a.compare(b)`` compares the classes (:func:`_class_rank`), then the lengths of
    the hashable contents, then their items in turn (expressions recursively, sets
    as sympy sets them, anything else as Python compares it): the same comparisons a
    tuple of (rank, length, item keys) makes. ``memo`` keeps each subexpression's
    key by identity (the expression held beside it, so that its id stays its own).
    Raises :class:`_UnkeyedError` for a class that overrides ``compare``.
    """
    known = memo.get(id(expression))
    if known is not None:
        return known[1]
    cls = type(expression)
    if cls.compare is not sp.Basic.compare:
        raise _UnkeyedError(cls.__name__)
    content = expression._hashable_content()
    items = tuple(
        _sort_key(item, memo) if isinstance(item, sp.Basic)
        else _sort_key(sp.Basic(*item), memo) if isinstance(item, frozenset)
        else item
        for item in content
    )
    key = (_class_rank(cls.__name__), len(content), items)
    memo[id(expression)] = (expression, key)
    return key


_Split: TypeAlias = tuple[sp.Number, list[tuple[sp.Expr, sp.Number]]]


def _parts(value: sp.Expr) -> _Split | None:
    """Split ``value`` as ``Add.flatten`` does: a rational constant and (term, coefficient) pairs.

    None when something is not a plain rational-coefficient sum.
    """
    constant: sp.Number = sp.S.Zero
    terms: list[tuple[sp.Expr, sp.Number]] = []
    pending = [value]
    while pending:
        o = pending.pop()
        if not isinstance(o, sp.Expr) or o.is_Order:
            return None
        if o.is_Number:
            if not o.is_Rational:
                return None
            constant += o
            continue
        if o.is_Add:
            pending.extend(reversed(o.args))
            continue
        if o.is_Mul:
            c, s = o.as_coeff_Mul()
        elif o.is_Pow:
            b, e = o.as_base_exp()
            if b.is_Number and (e.is_Integer or (e.is_Rational and e.is_negative)):
                pending.append(b**e)
                continue
            c, s = sp.S.One, o
        else:
            c, s = sp.S.One, o
        if not c.is_Rational:
            return None
        terms.append((s, c))
    return constant, terms


class SumBuilder:
    """Adds sympy expressions as ``sp.Add`` does, from their terms: many sums, one order kept.

    Each sum is the same expression, argument for argument, as ``sp.Add(*values)``
    (or ``sp.expand`` of it, with ``expand=True``), but built as :class:`Timeline`
    builds its moments: the terms' coefficients are added in a dictionary and the
    arguments put in sympy's canonical order by keys kept from one sum to the next,
    so a timeline's thousands of moments, each moved by a few terms, cost no
    ``Add.flatten`` (and none of the assumption queries it makes); expanded, each
    distinct term is expanded once for all the sums. A value that is not a plain
    sum with rational coefficients is added (and expanded) by sympy itself.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> builder = SumBuilder()
    >>> moment = 4 * B * S + 2 * S + 100
    >>> builder.add(moment, 3 * B * S - 2 * S + 8) == sp.Add(moment, 3 * B * S - 2 * S + 8)
    True
    >>> builder.add(moment, -moment)
    0
    >>> builder.add(moment, 2 * B * (S + 1), expand=True)
    6*B*S + 2*B + 2*S + 100
    """

    def __init__(self) -> None:
        self._sum = _Sum()
        self._splits: dict[sp.Expr, _Split | None] = {}
        self._expanded: dict[sp.Expr, _Split | None] = {}

    def add(self, *values: sp.Expr, expand: bool = False) -> sp.Expr:
        """Return ``sp.Add(*values)`` (``sp.expand`` of it if ``expand``), built from terms."""
        return self.add_scaled([(sp.S.One, value) for value in values], expand=expand)

    def add_scaled(
        self, scaled: Sequence[tuple[sp.Rational, sp.Expr]], *, expand: bool = False
    ) -> sp.Expr:
        """Return ``sp.Add`` of each ``factor * value`` (``sp.expand`` of it if ``expand``).

        A rational factor times a sum distributes over its terms, as sympy's
        ``Mul`` does, so no product is built.

        Examples
        --------
        >>> from memtheory.symbols import B, S
        >>> SumBuilder().add_scaled([(sp.S.One, 4 * B * S + 8), (sp.Rational(-3, 4), B * S + 4)])
        13*B*S/4 + 5
        """
        terms: dict[sp.Expr, sp.Number] = {}
        constant: sp.Number = sp.S.Zero
        for index, (factor, value) in enumerate(scaled):
            if not factor:
                continue  # nothing of it: sympy's 0 * value is 0
            # the first value is a new moment each time; the others repeat (remembered)
            split = _parts(sp.sympify(value)) if index == 0 else self._split(value)
            if split is None or not factor.is_Rational:
                built = sp.Add(*(f * v for f, v in scaled))
                return sp.expand(built) if expand else built
            found, pairs = split
            constant += factor * found
            for term, times in pairs:
                coefficient = factor * times
                if not expand:
                    constant = _added(terms, term, coefficient, constant)
                    continue
                opened = self._expanded_split(term)
                if opened is None:
                    return sp.expand(sp.Add(*(f * v for f, v in scaled)))
                constant += coefficient * opened[0]
                for part, inner in opened[1]:
                    constant = _added(terms, part, coefficient * inner, constant)
        return self._sum.built(terms, constant)

    def _split(self, value: sp.Expr) -> _Split | None:
        if value not in self._splits:
            self._splits[value] = _parts(sp.sympify(value))
        return self._splits[value]

    def _expanded_split(self, term: sp.Expr) -> _Split | None:
        if term not in self._expanded:
            self._expanded[term] = _parts(sp.expand(term))
        return self._expanded[term]


def _added(
    terms: dict[sp.Expr, sp.Number], term: sp.Expr, coefficient: sp.Number, constant: sp.Number
) -> sp.Number:
    """Add ``coefficient * term`` into ``terms`` (a number into the constant); return it."""
    if term.is_Number:  # an expanded term that is a number (none of a plain split is)
        return constant + coefficient * term
    total = terms.get(term, sp.S.Zero) + coefficient
    if total:
        terms[term] = total
    else:
        del terms[term]
    return constant


def freeable(key: str, plan: StepPlan, holders: Holders, timeline: Timeline) -> bool:
    """Return whether a storage can go: live, not the caller's, and kept by no backward node."""
    return key in timeline.live and key not in plan.held and not holders.get(key)


_Place: TypeAlias = tuple["_Replay", int]
"""A running sum's replay and a place in its log: the sum as it stood there, built when read."""


class _Replay:
    """A :class:`_Sum` as it stood at earlier places of its log, each built once when read.

    Reading places in increasing order replays the log once in all (a running total
    kept as its changes); an earlier place replays it from the start.
    """

    def __init__(self, sums: _Sum) -> None:
        self.sums = sums
        self.terms: dict[sp.Expr, sp.Number] = {}
        self.constant: sp.Number = sp.S.Zero
        self.at = 0
        self.built: dict[int, sp.Expr] = {}
        self.splits: dict[int, _Split | None] = {}

    def expression(self, place: int) -> sp.Expr:
        """Return the sum as ``sp.Add`` built it after the first ``place`` changes of the log."""
        known = self.built.get(place)
        if known is None:
            self._replay_to(place)
            known = self.built[place] = self.sums.built(self.terms, self.constant)
        return known

    def split(self, place: int) -> _Split | None:
        """Return the sum after ``place`` changes as :func:`_parts` splits it, without building it.

        None where a term is itself a sum (a coefficient times a sum, kept whole), which
        :func:`_parts` would open once the coefficient is 1: build and split it then.
        """
        if place in self.splits:
            return self.splits[place]
        self._replay_to(place)
        pairs = list(self.terms.items())
        split = None if any(term.is_Add for term, _ in pairs) else (self.constant, pairs)
        self.splits[place] = split
        return split

    def _replay_to(self, place: int) -> None:
        """Bring :attr:`terms` and :attr:`constant` to the sum after ``place`` changes."""
        if place < self.at:
            self.terms, self.constant, self.at = {}, sp.S.Zero, 0
        terms = self.terms
        for term, value in self.sums.log[self.at : place]:
            if term is None:
                self.constant = value
            elif value:
                terms[term] = value
            else:
                del terms[term]
        self.at = place


class PartAt:
    """One component's live bytes at one moment, as a place in its running sum's log.

    What :func:`part_value` returns where :class:`Parts` keeps a moment unbuilt. A
    :data:`Shift` may hold it in place of the expression: :func:`shifted` reads its
    terms from the log without building the sum (a ZeRO-3 device count's shares of
    the gradients alive at each of two thousand moments), and :func:`moved` builds
    it only where it adds moment by moment.

    Examples
    --------
    >>> from memtheory.symbols import B, S
    >>> grads = Timeline(categories={"a": "gradients", "b": "gradients", "c": "gradients"})
    >>> for key, size in (("a", 2 * B * S), ("b", 16), ("c", 2 * B * S)):
    ...     grads.alloc(key, size)
    >>> grads.mark("step")
    >>> alive = part_value(grads.parts, "step", "gradients", sp.S.Zero)
    >>> alive.expression(), alive.split()
    (4*B*S + 16, (16, [(B*S, 4)]))
    """

    __slots__ = ("place", "replay")

    def __init__(self, replay: _Replay, place: int) -> None:
        self.replay = replay
        self.place = place

    def __hash__(self) -> int:
        return hash((id(self.replay), self.place))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PartAt) and other.replay is self.replay
                and other.place == self.place)

    def expression(self) -> sp.Expr:
        """Return the component's live bytes, built (once) as ``sp.Add`` builds them."""
        return self.replay.expression(self.place)

    def split(self) -> _Split | None:
        """Return the live bytes' constant and (term, coefficient) pairs, read from the log."""
        return self.replay.split(self.place)


def _built(value: sp.Expr | PartAt) -> sp.Expr:
    """Return a shift's value as an expression (a :class:`PartAt` built)."""
    return value.expression() if isinstance(value, PartAt) else value


_Value = TypeVar("_Value")


class _ByMoment(Mapping[str, _Value]):
    """A mapping keyed by moment, in the order the moments were marked (``_records``)."""

    _records: dict[str, Any]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, label: object) -> bool:
        return label in self._records

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} moments)"


class Moments(_ByMoment[sp.Expr]):
    """The labelled moments of a :class:`Timeline`, in order: live bytes, built when read.

    A mapping like the dictionary it replaces. Each moment is kept as its place in
    the running sum's log (the sum then is the previous moment plus the changes
    since), so recording a moment costs nothing however many storages are live,
    and :func:`~memtheory.max_pruning.maximum` reads the whole timeline from the
    changes (:meth:`running_sum`) without building a moment it drops.

    Examples
    --------
    >>> from memtheory.symbols import B, H
    >>> timeline = Timeline()
    >>> timeline.alloc("x", 4 * B * H)
    >>> timeline.alloc("w", 40)
    >>> timeline.mark("forward")
    >>> timeline.free("x")
    >>> timeline.mark("end")
    >>> dict(timeline.moments)
    {'forward': 4*B*H + 40, 'end': 40}
    """

    def __init__(self) -> None:
        self._records: dict[str, tuple[int, sp.Expr | None, bool]] = {}
        self._sum: _Sum | None = None
        self._plans: dict[bool, _Plan] = {}
        """What :func:`shifted` worked out about this log whatever the shift, by ``expand``."""

    def record(self, label: str, sums: _Sum, value: sp.Expr | None = None) -> None:
        """Record ``label``: ``sums`` as it stands now, or ``value`` (what it is then, built)."""
        self._sum = sums
        self._records[label] = (len(sums.log), value, value is None)

    def __getitem__(self, label: str) -> sp.Expr:
        place, value, lazy = self._records[label]
        if value is None:
            assert self._sum is not None
            value = self._sum.replay.expression(place)
            self._records[label] = (place, value, lazy)
        return value


    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (and copy) as the log and the places: no moment is built to be kept.

        The running sum's memos (by ``id``) are not kept: a moment read after loading
        is built again from the log, the same expression (:func:`_moments_of_log`).
        """
        if self._sum is None:
            return dict, (dict(self.items()),)
        records = [(label, place, None if lazy else value)
                   for label, (place, value, lazy) in self._records.items()]
        return _moments_of_log, (self._sum.log, self._sum.exact, records)

    def values(self) -> _MomentValues:
        """Return the moments' live bytes in order: a view that :func:`maximum` reads lazily."""
        return _MomentValues(self)

    def moment_symbols(self) -> set[sp.Symbol]:
        """Return the symbols the moments depend on, read from the log (no moment built).

        The symbols of every term a moment holds (not those of a term only alive
        between two moments), and of the moments kept built.

        Examples
        --------
        >>> from memtheory.symbols import B, H, S
        >>> timeline = Timeline()
        >>> timeline.alloc("x", 4 * B * H)
        >>> timeline.alloc("w", 40)
        >>> timeline.mark("forward")
        >>> timeline.alloc("t", 2 * S)  # freed before the next moment: in no moment
        >>> timeline.free("t")
        >>> timeline.mark("end")
        >>> sorted(s.name for s in timeline.moments.moment_symbols())
        ['B', 'H']
        """
        log = self._sum.log if self._sum is not None else []
        present: dict[sp.Expr, None] = {}
        held: set[sp.Expr] = set()
        symbols: set[sp.Symbol] = set()
        at = 0
        for place, value, lazy in self._records.values():
            if not lazy:
                symbols |= sp.sympify(value).free_symbols
                continue
            for term, coefficient in log[at:place]:
                if term is None:
                    continue
                if coefficient:
                    present[term] = None
                else:
                    present.pop(term, None)
            at = place
            held.update(present)
        for term in held:
            symbols |= term.free_symbols
        return symbols

    def running_sum(self) -> RunningSum:
        """Return the moments as changes of one :class:`~memtheory.max_pruning.RunningSum`."""
        labels = list(self._records)
        places = [
            (place, None if lazy else value)
            for place, value, lazy in self._records.values()
        ]
        log = self._sum.log if self._sum is not None else []
        return RunningSum(log, places, lambda index: self[labels[index]])


def part_at(parts: Mapping[str, Mapping[str, sp.Expr]], label: str, category: str,
            default: sp.Expr) -> sp.Expr:
    """``parts.get(label, {}).get(category, default)``; of :class:`Parts`, that component only."""
    return _built(part_value(parts, label, category, default))


def part_value(parts: Mapping[str, Mapping[str, sp.Expr]], label: str, category: str,
               default: sp.Expr) -> sp.Expr | PartAt:
    """:func:`part_at`, unbuilt (a :class:`PartAt`) where :class:`Parts` keeps it as a place.

    For a :data:`Shift`: :func:`shifted` reads the terms without building the sum.
    """
    if isinstance(parts, Parts):
        return parts.part(label, category, default)
    return parts.get(label, {}).get(category, default)


Shift: TypeAlias = Sequence[tuple[sp.Rational, "sp.Expr | PartAt"]]
"""What a moment moves by: the sum of each ``factor * value`` (rational factors); a value
may be a :class:`PartAt`, read from its log."""


def shifted(
    moments: Mapping[str, sp.Expr], shift: Callable[[str], Shift], *, expand: bool = False
) -> Moments | None:
    """Return each moment plus its ``shift``, kept as a running sum: no moment is built.

    The same expressions, moment by moment, as ``SumBuilder().add_scaled([(1, moment),
    *shift(label)], expand=expand)``, but as a :class:`Moments` whose log is ``moments``'
    with each shift's terms added to it (with ``expand``, every term expanded, once): a
    moment is built only when read, and :func:`~memtheory.max_pruning.maximum` reads
    them all from the changes. None where ``moments`` is not a running sum of rational
    terms, or a shift (or an expanded term) is not one: the caller then adds moment by
    moment.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> timeline = Timeline()
    >>> timeline.alloc("x", 4 * B)
    >>> timeline.alloc("w", 40)
    >>> timeline.mark("forward")
    >>> timeline.free("x")
    >>> timeline.alloc("y", 2 * B)
    >>> timeline.mark("backward")
    >>> moved = shifted(timeline.moments, lambda label: [(sp.S.One, B + 2)])
    >>> dict(moved) == {label: sp.Add(value, B + 2) for label, value in timeline.moments.items()}
    True
    """
    if not isinstance(moments, Moments) or moments._sum is None or not moments._sum.exact:
        return None
    try:
        return _shifted(moments, shift, expand, _plan_of(moments, expand))
    except _StalePlanError:  # a moment marked again since the plan was made: a new one
        pass
    try:
        return _shifted(moments, shift, expand, _plan_of(moments, expand, fresh=True))
    except _StalePlanError:  # places out of order: no running sum to follow
        return None


def _shifted(
    moments: Moments, shift: Callable[[str], Shift], expand: bool, plan: _Plan
) -> Moments | None:
    merged = _Merged(plan)
    splits: dict[Shift, dict[sp.Expr | None, sp.Number]] = {}
    builder = SumBuilder()  # for a moment kept built, as the caller would add it
    result = Moments()
    result._sum = merged.sums
    try:
        for index, (label, (place, value, lazy)) in enumerate(moments._records.items()):
            merged.follow(index, place)
            scaled = tuple(shift(label))
            rise = splits.get(scaled)
            if rise is None:
                rise = splits[scaled] = merged.terms_of(scaled)
            merged.rise_to(rise)
            if lazy and merged.arguments() >= 2:
                result._records[label] = (len(merged.sums.log), None, True)
            else:  # built: as recorded, or a lone argument (sympy's Add returns it as it is)
                built = builder.add_scaled(
                    [(sp.S.One, value if not lazy else moments[label]),
                     *((factor, _built(part)) for factor, part in scaled)], expand=expand)
                result._records[label] = (len(merged.sums.log), built, False)
    except _NotRationalError:
        return None
    return result


def moved(
    moments: Mapping[str, sp.Expr], shift: Callable[[str], Shift], *, expand: bool = False
) -> Mapping[str, sp.Expr]:
    """Return each moment plus its ``shift``: :func:`shifted` where it can, else built.

    Where ``moments`` is no running sum (a dictionary), each moment is added to its
    shift by :meth:`SumBuilder.add_scaled`, the same expressions :func:`shifted` keeps
    unbuilt; a moment with nothing to add (and nothing to expand) is kept as it is.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> moved({"forward": 4 * B + 8, "end": 8}, lambda label: [(sp.S.One, B)] * (label == "end"))
    {'forward': 4*B + 8, 'end': B + 8}
    """
    kept = shifted(moments, shift, expand=expand)
    if kept is not None:
        return kept
    builder = SumBuilder()
    built = {}
    for moment, value in moments.items():
        scaled = [(factor, _built(part)) for factor, part in shift(moment)]
        built[moment] = (builder.add_scaled([(sp.S.One, value), *scaled], expand=expand)
                         if scaled or expand else value)
    return built


class _NotRationalError(Exception):
    """A shift, or an expanded term, that is not a sum of rational multiples of terms."""


def _net_changes(
    log: Sequence[tuple[sp.Expr | None, sp.Number]], start: int, stop: int
) -> Iterable[tuple[sp.Expr | None, sp.Number]]:
    """Each term changed in ``log[start:stop]`` with its last coefficient there.

    In the order the terms first changed. A step's log changes a term several times
    between two moments (an allocation, a free, another allocation); only where it
    ends matters to the next moment, so :class:`_Plan` takes that change alone:
    about half of a Llama step's changes, and the merged log is as much shorter.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> log = [(B, sp.Integer(4)), (None, sp.Integer(8)), (B, sp.Integer(6)), (B, sp.S.Zero)]
    >>> list(_net_changes(log, 0, 3)), list(_net_changes(log, 3, 4))
    ([(B, 6), (None, 8)], [(B, 0)])
    """
    return dict(log[start:stop]).items()  # a slice: islice would walk the log from its start


_Span: TypeAlias = list[tuple[sp.Expr | None, sp.Number]]
"""The merged terms a running sum changes before one moment, each at its new coefficient."""


class _Plan:
    """What merging a running sum's log with a shift takes whatever the shift is.

    The running sum's changes before each moment (each term's last one, expanded into
    monomials where asked, as running totals by merged term), the one object kept for
    each term, and each shift value split into its merged terms. None of it depends on
    the shift, so it is worked out once and kept with the moments (:func:`_plan_of`):
    a ZeRO search merges one replica's timeline with a different shift for every
    device count it tries, and each merge after the first only adds its shift.
    """

    def __init__(self, log: Sequence[tuple[sp.Expr | None, sp.Number]], expand: bool) -> None:
        self.log = log
        self.expand = expand
        self._at = 0
        self._spans: list[tuple[int, _Span]] = []
        self._old: dict[sp.Expr | None, sp.Number] = {}  # the running sum's own, by its term
        self._base: dict[sp.Expr | None, sp.Number] = {}  # the same, expanded, by monomial
        self._canonical: dict[sp.Expr, sp.Expr] = {}
        self._by_id: dict[int, tuple[sp.Expr, list[tuple[sp.Expr | None, sp.Number]]]] = {}
        """Each term object met, by ``id`` (kept alive beside it), with its monomials: one
        object per distinct term, so that every dictionary finds its keys by identity
        (equal terms from different sums are different objects, and comparing two
        sympy products walks them)."""
        self._values: dict[int, tuple[object, sp.Number, _Span]] = {}
        self._places: dict[PartAt, tuple[sp.Number, _Span]] = {}

    def span(self, index: int, place: int) -> _Span:
        """Return the changes before the ``index``-th moment, at ``place`` in the log.

        Each is a merged term (a monomial, with ``expand``) and the running sum's
        coefficient of it from then on: it differs from the moment before, so the
        merge logs it without comparing. Worked out in moment order, each once.
        """
        if index < len(self._spans):
            at, known = self._spans[index]
            if at != place:  # not the moments this plan followed
                raise _StalePlanError
            return known
        if index != len(self._spans) or place < self._at:
            raise _StalePlanError
        span = self._expanded(place) if self.expand else self._plain(place)
        self._spans.append((place, span))
        self._at = place
        return span

    def _plain(self, place: int) -> _Span:
        """Return a span: each term whose coefficient differs from the moment before."""
        old, zero, span = self._old, sp.S.Zero, []
        for term, coefficient in _net_changes(self.log, self._at, place):
            if term is not None:
                term = self._opened(term)[0][0]
            if coefficient == old.get(term, zero):
                continue
            old[term] = coefficient
            span.append((term, coefficient))
        return span

    def _expanded(self, place: int) -> _Span:
        """Return a span expanded: a change moves each monomial of its term's expansion.

        By the change times that monomial's coefficient; two terms may share one.
        """
        zero, one, old, base, span = sp.S.Zero, sp.S.One, self._old, self._base, []
        constant: list[tuple[sp.Expr | None, sp.Number]] = [(None, one)]
        for term, coefficient in _net_changes(self.log, self._at, place):
            change = coefficient - old.get(term, zero)
            if not change:
                continue
            old[term] = coefficient
            for key, inner in constant if term is None else self._opened(term):
                total = base[key] = base.get(key, zero) + (change if inner is one
                                                           else change * inner)
                span.append((key, total))
        return span

    def split(self, value: object) -> tuple[sp.Number, _Span]:
        """Return a shift value's constant and its merged terms, each with its coefficient.

        A :class:`PartAt` is read from its log (by its place), any other value split
        as ``Add.flatten`` splits it (by identity).
        """
        if isinstance(value, PartAt):
            found = self._places.get(value)
            if found is None:
                found = self._places[value] = self._merged(value.split() or _parts(
                    value.expression()))
            return found
        known = self._values.get(id(value))
        if known is None:
            constant, terms = self._merged(_parts(sp.sympify(value)))
            known = self._values[id(value)] = (value, constant, terms)
        return known[1], known[2]

    def _merged(self, split: _Split | None) -> tuple[sp.Number, _Span]:
        """Return a split's constant and its terms as merged terms (monomials, with ``expand``)."""
        if split is None:
            raise _NotRationalError
        constant, pairs = split
        return constant, [(key, times * inner)
                          for term, times in pairs for key, inner in self._opened(term)]

    def _opened(self, term: sp.Expr) -> list[tuple[sp.Expr | None, sp.Number]]:
        """Return the term's monomials (the term itself, times 1, unless ``expand``)."""
        known = self._by_id.get(id(term))
        if known is None:
            known = self._by_id[id(term)] = (term, self._monomials(term))
        return known[1]

    def _monomials(self, term: sp.Expr) -> list[tuple[sp.Expr | None, sp.Number]]:
        """Return the term, the one object kept for it, times 1; expanded with ``expand``.

        Expanded: the monomials and coefficients (a number's: None), as
        :meth:`SumBuilder.add_scaled` adds them with ``expand``.
        """
        if not self.expand:
            return [(self._canonical.setdefault(term, term), sp.S.One)]
        split = _parts(sp.expand(term))
        if split is None:
            raise _NotRationalError
        constant, pairs = split
        known: list[tuple[sp.Expr | None, sp.Number]] = [(None, constant)] if constant else []
        for part, inner in pairs:
            if part.is_Number:
                known.append((None, inner * part))
            else:
                known.append((self._canonical.setdefault(part, part), inner))
        return known


class _StalePlanError(Exception):
    """A plan asked for moments other than those it followed (the moments changed since)."""


def _plan_of(moments: Moments, expand: bool, *, fresh: bool = False) -> _Plan:
    """Return the plan kept with ``moments`` for this log and ``expand``, made if need be."""
    assert moments._sum is not None
    plans = moments._plans
    plan = plans.get(expand)
    if fresh or plan is None or plan.log is not moments._sum.log:
        plan = plans[expand] = _Plan(moments._sum.log, expand)
    return plan


class _Merged:
    """A running sum's log with a shift added that changes from moment to moment."""

    def __init__(self, plan: _Plan) -> None:
        self.sums = _Sum()
        self._plan = plan
        self._now: dict[sp.Expr | None, sp.Number] = {}  # the merged sum: term -> coefficient
        self._base: dict[sp.Expr | None, sp.Number] = {}  # the running sum's, by merged term
        self._rise: dict[sp.Expr | None, sp.Number] = {}  # the shift in force

    def follow(self, index: int, place: int) -> None:
        """Take the running sum's changes before the ``index``-th moment, the shift in force.

        Only each term's last change there is taken (:func:`_net_changes`): a moment
        is the sum as it stands at its place. Each changes its merged coefficient too
        (the shift fixed): it is logged without comparing.
        """
        base, changed = self._base, self._changed
        for key, total in self._plan.span(index, place):
            base[key] = total
            changed(key, total)

    def rise_to(self, rise: dict[sp.Expr | None, sp.Number]) -> None:
        """Put ``rise`` in force (term -> coefficient; None: the constant) from now on."""
        if rise is self._rise:
            return
        base, zero = self._base, sp.S.Zero
        for term in self._rise.keys() | rise.keys():
            self._put(term, base.get(term, zero) + rise.get(term, zero))
        self._rise = rise

    def _changed(self, key: sp.Expr | None, total: sp.Number) -> None:
        """Log ``key`` at the running sum's ``total`` plus the shift: a change, not compared."""
        raised = self._rise.get(key)
        value = total + raised if raised else total
        self.sums.log.append((key, value))
        if value or key is None:
            self._now[key] = value
        else:
            del self._now[key]

    def terms_of(self, scaled: Shift) -> dict[sp.Expr | None, sp.Number]:
        """Each term's coefficient in the sum of ``factor * value`` (None: the constant)."""
        terms: dict[sp.Expr | None, sp.Number] = {None: sp.S.Zero}
        for factor, value in scaled:
            if not factor.is_Rational:
                raise _NotRationalError
            if not factor:
                continue
            constant, split = self._plan.split(value)
            terms[None] += factor * constant
            for key, coefficient in split:
                terms[key] = terms.get(key, sp.S.Zero) + factor * coefficient
        return terms

    def arguments(self) -> int:
        """How many arguments ``sp.Add`` of the merged sum now has."""
        now = self._now
        return len(now) - (None in now and now[None] == 0)

    def _put(self, term: sp.Expr | None, value: sp.Number) -> None:
        now = self._now
        if value == now.get(term, sp.S.Zero):
            return
        self.sums.log.append((term, value))
        if value or term is None:
            now[term] = value
        else:
            del now[term]


def _moments_of_log(
    log: list[tuple[sp.Expr | None, sp.Number]], exact: bool,
    records: list[tuple[str, int, sp.Expr | None]],
) -> Moments:
    """:class:`Moments` as pickled: each moment a place in ``log`` (or its built value)."""
    sums = _Sum()
    sums.log = log
    sums.exact = exact
    moments = Moments()
    moments._sum = sums
    for label, place, value in records:
        moments._records[label] = (place, value, value is None)
    return moments


def _parts_of_logs(
    logs: list[list[tuple[sp.Expr | None, sp.Number]]],
    records: list[tuple[str, dict[str, sp.Expr | tuple[int, int]]]],
) -> Parts:
    """:class:`Parts` as pickled: each component a place in its log (or its built value)."""
    replays = []
    for log in logs:
        sums = _Sum()
        sums.log = log
        replays.append(sums.replay)
    parts = Parts()
    for label, kept in records:
        parts._records[label] = {
            category: (replays[value[0]], value[1]) if isinstance(value, tuple) else value
            for category, value in kept.items()
        }
    return parts


class _MomentValues(ValuesView[sp.Expr]):
    """The values of :class:`Moments`, which :func:`~memtheory.max_pruning.maximum` reads lazily."""

    _mapping: Moments

    def running_sum(self) -> RunningSum:
        """Return the moments as changes of one running sum."""
        return self._mapping.running_sum()


class Parts(_ByMoment[Mapping[str, sp.Expr]]):
    """Moment -> the live bytes of each component then, each built when a moment is read.

    Examples
    --------
    >>> from memtheory.symbols import B
    >>> timeline = Timeline(categories={"g1": "gradients", "g2": "gradients"})
    >>> timeline.alloc("g1", 4 * B)
    >>> timeline.alloc("g2", 8)
    >>> timeline.mark("backward")
    >>> timeline.parts["backward"]
    {'gradients': 4*B + 8}
    """

    def __init__(self) -> None:
        self._records: dict[str, dict[str, sp.Expr | _Place]] = {}
        self._built: dict[str, dict[str, sp.Expr]] = {}

    def record(self, label: str, parts: dict[str, sp.Expr | _Place]) -> None:
        """Record each component's bytes at ``label``: built, or a place in its running sum."""
        self._records[label] = parts
        self._built.pop(label, None)

    def __getitem__(self, label: str) -> dict[str, sp.Expr]:
        built = self._built.get(label)
        if built is None:
            built = self._built[label] = {
                category: value[0].expression(value[1]) if isinstance(value, tuple) else value
                for category, value in self._records[label].items()
            }
        return built

    def changed(self, drop: str | None = None, held: tuple[str, sp.Expr] | None = None) -> Parts:
        """Return these parts without the component ``drop``, or with ``held`` at every moment.

        Nothing is built: the new parts read the same logs.

        Examples
        --------
        >>> from memtheory.symbols import B
        >>> timeline = Timeline(categories={"g": "gradients", "c": "weight_copies"})
        >>> timeline.alloc("g", 4 * B)
        >>> timeline.alloc("c", 8)
        >>> timeline.mark("backward")
        >>> timeline.parts.changed(drop="weight_copies")["backward"]
        {'gradients': 4*B}
        >>> timeline.parts.changed(held=("gradients", 100))["backward"]
        {'gradients': 100, 'weight_copies': 8}
        """
        parts = Parts()
        for label, record in self._records.items():
            kept = {k: v for k, v in record.items() if k != drop}
            if held is not None:
                kept[held[0]] = sp.sympify(held[1])
            parts._records[label] = kept
        return parts

    def part(self, label: str, category: str, default: sp.Expr) -> sp.Expr | PartAt:
        """``self.get(label, {}).get(category, default)``, that component only, not built.

        A component kept as a place in its log is returned as a :class:`PartAt`
        (:func:`part_at` builds it).

        Examples
        --------
        >>> from memtheory.symbols import B
        >>> timeline = Timeline(categories={"g": "gradients", "x": "saved_activations"})
        >>> timeline.alloc("g", 4 * B)
        >>> timeline.mark("backward")
        >>> timeline.parts.part("backward", "gradients", 0), timeline.parts.part("end", "x", 7)
        (4*B, 7)
        """
        known = self._built.get(label)
        if known is not None:
            return known.get(category, default)
        record = self._records.get(label)
        if record is None or category not in record:
            return default
        value = record[category]
        if not isinstance(value, tuple):
            return value
        return PartAt(*value)


    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (and copy) as each component's log and places, as :class:`Moments` does."""
        logs: dict[int, list[tuple[sp.Expr | None, sp.Number]]] = {}
        records: list[tuple[str, dict[str, sp.Expr | tuple[int, int]]]] = []
        for label, parts in self._records.items():
            kept: dict[str, sp.Expr | tuple[int, int]] = {}
            for category, value in parts.items():
                if isinstance(value, tuple):
                    replay, place = value
                    logs.setdefault(id(replay), replay.sums.log)
                    kept[category] = (list(logs).index(id(replay)), place)
                else:
                    kept[category] = value
            records.append((label, kept))
        return _parts_of_logs, (list(logs.values()), records)
