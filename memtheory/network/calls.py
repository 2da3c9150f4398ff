"""Module calls: which layers run inside one ``nn.Module`` call, named by their module paths.

A module's ``forward`` runs inside ``nn.Module.__call__``, which holds its
arguments until ``forward`` returns; so does the caller's variable that it was
called with. A tensor a module reads from before it therefore lives until the
module's last layer has run, even when no later layer reads it (torchvision's
nested ``nn.Sequential`` stages, a transformer block's input).
:func:`module_calls` lists the calls of a network whose layers carry their
module paths (``features.2.conv.1.0``), for :class:`~memtheory.network.Network`'s
``calls``.

Examples
--------
>>> names = ["input", "features.0.0", "features.0.1", "features.1.conv.0", "features.1.add"]
>>> module_calls(names)
[('features.0.0', 'features.1.add'), ('features.0.0', 'features.0.1'), \
('features.1.conv.0', 'features.1.add'), ('features.1.conv.0', 'features.1.conv.0')]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["module_calls"]


def module_calls(
    names: Sequence[str], *, not_called: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """Return ``(first, last)`` layer names for every module path that prefixes layer names.

    Every proper dotted prefix of a layer's name (``features``, ``features.2``,
    ``features.2.conv`` for ``features.2.conv.1.0``) is taken to be a module
    the network calls as a whole, spanning the layers whose names start with
    it, in running order. ``not_called`` names containers that are iterated
    rather than called (an ``nn.ModuleList`` such as GPT-2's ``h``) or plain
    namespaces: they hold nothing.

    Examples
    --------
    >>> module_calls(["h.0.ln", "h.0.mlp", "h.1.ln"], not_called=["h"])
    [('h.0.ln', 'h.0.mlp'), ('h.1.ln', 'h.1.ln')]
    """
    skip = set(not_called)
    spans: dict[str, list[str]] = {}
    for name in names:
        parts = name.split(".")
        for end in range(1, len(parts)):
            prefix = ".".join(parts[:end])
            if prefix in skip:
                continue
            span = spans.setdefault(prefix, [name, name])
            span[1] = name
    return [(first, last) for first, last in spans.values()]
