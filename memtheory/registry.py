"""Looking names up: one way to spell-fold, alias, and say "did you mean ...?".

Optimizers, dtypes, precisions, units and conventions are each looked up by
name through a :class:`Registry`. A registry maps canonical names to objects
and also accepts aliases (``"half"`` for ``"fp16"``) and, by default, any
case and any separators (``"SGD Momentum"``, ``"sgd_momentum"`` and
``"sgd+momentum"`` are one name). A name it does not know raises the
registry's own :class:`~memtheory.errors.UnknownNameError` subclass, whose
message lists the known names and, when one is close, suggests it.

Examples
--------
>>> colours = Registry("colour", {"red": 1, "dark-blue": 2}, aliases={"scarlet": "red"})
>>> colours["Dark Blue"], colours["SCARLET"], colours.canonical("dark_blue")
(2, 1, 'dark-blue')
>>> colours["dark blu"]
Traceback (most recent call last):
...
memtheory.errors.UnknownNameError: unknown colour 'dark blu'. Did you mean 'dark-blue'? Known colours: red, dark-blue.
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TypeVar

from memtheory._shown import shown
from memtheory.errors import UnknownNameError

__all__ = ["Registry", "normalize_name"]

_SUGGEST_LIMIT = 200
"""Longest name compared with the known ones for "did you mean"."""

T = TypeVar("T")

_SEPARATORS = re.compile(r"[\s_+\-]+")


def normalize_name(name: str, *, separators: bool = True, prefixes: tuple[str, ...] = ()) -> str:
    """Fold a name to the key a registry compares: lower case, no separators.

    Parameters
    ----------
    name : str
        The name as written.
    separators : bool, default True
        Drop spaces, ``_``, ``-`` and ``+``. Units keep them (and their exact
        spelling comes first), so that ``"MB"`` and ``"MiB"`` stay apart.
    prefixes : tuple of str
        Lower-case prefixes to drop, the first one that matches
        (``"torch."`` for ``"torch.float16"``).

    Examples
    --------
    >>> normalize_name(" SGD+Momentum "), normalize_name("rule of_thumb")
    ('sgdmomentum', 'ruleofthumb')
    >>> normalize_name("torch.bfloat16", prefixes=("torch.",))
    'bfloat16'
    """
    key = name.strip().casefold()
    for prefix in prefixes:
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    return _SEPARATORS.sub("", key) if separators else key


class Registry(Mapping[str, T]):
    """Objects by canonical name, found by any spelling memtheory accepts.

    A read-only mapping over ``entries`` (kept by reference, so an entry added
    to that dict later is found too). Iterating yields the canonical names.

    Parameters
    ----------
    kind : str
        What the names name, for messages (``"optimizer"``).
    entries : mapping of str to object
        Canonical name to object.
    aliases : mapping of str to str, optional
        Other spelling to canonical name.
    error : type of UnknownNameError, default UnknownNameError
        The exception an unknown name raises.
    plural : str, optional
        ``kind`` in the plural; default ``kind + "s"``.
    hint : str, optional
        Appended to the list of known names in the message
        (``"(or describe a new one with memtheory.optimizers.Optimizer)"``).
    separators : bool, default True
        Whether spaces, ``_``, ``-`` and ``+`` are ignored (see :func:`normalize_name`).
    prefixes : tuple of str
        Prefixes that are ignored (see :func:`normalize_name`).

    Examples
    --------
    >>> sizes = Registry("size", {"small": 1, "large": 3}, aliases={"big": "large"})
    >>> sizes["BIG"], "Small" in sizes, list(sizes), sizes.get("huge")
    (3, True, ['small', 'large'], None)
    """

    def __init__(
        self,
        kind: str,
        entries: Mapping[str, T],
        aliases: Mapping[str, str] | None = None,
        *,
        error: type[UnknownNameError] = UnknownNameError,
        plural: str | None = None,
        hint: str = "",
        separators: bool = True,
        prefixes: tuple[str, ...] = (),
    ) -> None:
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self.error = error
        self.hint = hint
        self.separators = separators
        self.prefixes = prefixes
        self._entries = entries
        self.aliases: Mapping[str, str] = MappingProxyType(dict(aliases or {}))
        self._cache: tuple[tuple[str, ...], dict[str, tuple[str, str]]] | None = None

    def __getitem__(self, name: str) -> T:
        return self._entries[self.canonical(name)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._entries)})"

    def normalize(self, name: str) -> str:
        """Fold ``name`` as this registry compares names.

        Examples
        --------
        >>> Registry("unit", {}, separators=False).normalize(" KiB")
        'kib'
        """
        return normalize_name(name, separators=self.separators, prefixes=self.prefixes)

    def canonical(self, name: str) -> str:
        """Return the canonical name that ``name`` spells.

        Raises
        ------
        UnknownNameError
            The registry's ``error``, listing the known names and the closest one.

        Examples
        --------
        >>> Registry("size", {"small": 1}, aliases={"tiny": "small"}).canonical(" Tiny")
        'small'
        """
        if isinstance(name, str):
            if name in self._entries:
                return name
            found = self._index().get(self.normalize(name))
            if found is not None:
                return found[0]
        raise self.unknown(name)

    def suggestions(self, name: str, n: int = 3) -> tuple[str, ...]:
        """Return up to ``n`` known spellings close to ``name``, best first, one per entry.

        Examples
        --------
        >>> Registry("size", {"small": 1, "smaller": 2, "large": 3}).suggestions("smal")
        ('small', 'smaller')
        """
        import difflib  # here, not at import: only a misspelt name needs it

        if not isinstance(name, str) or len(name) > _SUGGEST_LIMIT:
            return ()  # no known name is that long: comparing would only take time
        key = self.normalize(name)
        scored = []
        for order, (other, found) in enumerate(self._index().items()):
            ratio = difflib.SequenceMatcher(None, key, other).ratio()
            if ratio >= 0.6:  # difflib.get_close_matches' cutoff
                # Ties go to the longer common prefix ("fp12" -> "fp16", not "fp32").
                prefix = len(os.path.commonprefix([key, other]))
                scored.append((-ratio, -prefix, order, found))
        best: dict[str, str] = {}
        for *_, (canonical, spelling) in sorted(scored):
            best.setdefault(canonical, spelling)
        return tuple(best.values())[:n]

    def unknown(self, name: object, *, context: str = "") -> UnknownNameError:
        """Build the error for an unknown ``name``: the known names, and the closest one.

        Parameters
        ----------
        name : object
            What was looked up.
        context : str, optional
            A sentence to put after the first (what else ``name`` may be).

        Examples
        --------
        >>> print(Registry("size", {"small": 1}).unknown("smal"))
        unknown size 'smal'. Did you mean 'small'? Known sizes: small.
        """
        known = tuple(self._entries)
        suggestions = self.suggestions(name) if isinstance(name, str) else ()
        if isinstance(name, str):
            parts = [f"unknown {self.kind} {shown(name)}."]
        else:
            parts = [f"{self.plural} are given by name, got {shown(name)} ({type(name).__name__})."]
        if suggestions:
            parts.append(f"Did you mean {suggestions[0]!r}?")
        if context:
            parts.append(context)
        hint = f" {self.hint}" if self.hint else ""
        parts.append(f"Known {self.plural}: {', '.join(known)}{hint}.")
        return self.error(" ".join(parts), name=name, known=known, suggestions=suggestions)

    def _index(self) -> dict[str, tuple[str, str]]:
        """Folded spelling -> (canonical name, spelling to suggest); rebuilt when entries change."""
        names = tuple(self._entries)
        if self._cache is None or self._cache[0] != names:
            index: dict[str, tuple[str, str]] = {}
            for name in names:
                index.setdefault(self.normalize(name), (name, name))
            for alias, target in self.aliases.items():
                index.setdefault(self.normalize(alias), (target, alias))
            self._cache = (names, index)
        return self._cache[1]
