"""Which module is running: labels for the moments of a step, and per-module records.

:class:`ModuleWatch` registers global forward hooks while a trace runs. It
keeps the stack of running modules (their paths, ``"h.0.attn"``), writes the
innermost path onto every autograd node the module's forward created (in the
node's ``metadata``), so that backward moments name the module too, and
records each module's first output shape and the bytes autograd saved while
it was the innermost running module. Nothing here holds a tensor: the step's
memory is what it would be without the watch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from memtheory.torch.tracing.sizes import Polynomial, add_into

__all__ = ["LOSS", "ModuleRecord", "ModuleWatch"]

LOSS = "loss"
"""The path given to what the loss function computes outside the model."""

_KEY = "memtheory.module"


@dataclass
class ModuleRecord:
    """What a trace saw of one module: its type, output shape, own parameters, saved bytes."""

    path: str
    kind: str
    depth: int
    parameters: int
    output_shape: tuple[Any, ...] | None = None
    saved: dict[int, Polynomial] = field(default_factory=dict)
    calls: int = 0

    def saved_bytes(self, excluded: set[int]) -> Polynomial:
        """Bytes it saved, the storages in ``excluded`` (parameters, data, ...) left out."""
        total: Polynomial = {}
        for key, size in self.saved.items():
            if key not in excluded:
                add_into(total, size)
        return total


class ModuleWatch:
    """Module paths during a trace: the stack in forward, autograd node labels in backward.

    Parameters
    ----------
    root : torch.nn.Module
        The traced model; its submodules are named as ``named_modules()`` names them.
    """

    def __init__(self, root: nn.Module) -> None:
        self.root_name = type(root).__name__
        self.paths: dict[int, str] = {}
        self.records: dict[str, ModuleRecord] = {}
        seen: set[int] = set()
        for path, module in root.named_modules():
            self.paths.setdefault(id(module), path)
            own = [
                p for p in module.parameters(recurse=False) if id(p) not in seen
            ]
            seen |= {id(p) for p in own}
            self.records.setdefault(
                path,
                ModuleRecord(
                    path or self.root_name,
                    type(module).__name__,
                    path.count(".") + 1 if path else 0,
                    sum(int(p.numel()) for p in own),
                ),
            )
        self.stack: list[str] = []
        self.phase = ""
        self.recording = False

    # -- where are we ------------------------------------------------------------------------
    def current(self) -> str:
        """Return the innermost running module's path (the model's class name for its own code)."""
        if self.phase == "backward":
            node = torch._C._current_autograd_node()
            if node is None:
                return ""
            return self._shown(str(_metadata(node).get(_KEY, "")))
        if self.stack:
            return self._shown(self.stack[-1])
        return LOSS if self.phase == "loss" else ""

    def _shown(self, path: str) -> str:
        """Show a path as labels do: the model's name for its own code and before indices."""
        if not path:
            return self.root_name
        return f"{self.root_name}.{path}" if path[0].isdigit() else path

    def label(self, op: str) -> str:
        """Text of the moment after ``op``: ``"forward h.0.attn: aten.bmm.default"``."""
        where = self.current()
        text = f"{self.phase} {where}" if where else self.phase
        return f"{text}: {op}" if op else text

    # -- hooks ----------------------------------------------------------------------------------
    @contextmanager
    def watching(self) -> Iterator[None]:
        """Register the global forward hooks for the duration of the block."""
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        handles = [
            register_module_forward_pre_hook(self._enter),
            register_module_forward_hook(self._leave),
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _enter(self, module: nn.Module, args: Any) -> None:
        path = self.paths.get(id(module))
        if path is not None:
            self.stack.append(path)

    def _leave(self, module: nn.Module, args: Any, output: Any) -> None:
        path = self.paths.get(id(module))
        if path is None:
            return
        if self.stack and self.stack[-1] == path:
            self.stack.pop()
        tensors = [t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor)]
        self.name_nodes(tensors, path)
        record = self.records[path]
        record.calls += 1
        if self.recording and record.output_shape is None and tensors:
            record.output_shape = tuple(tensors[0].shape)

    def name_nodes(self, tensors: list[torch.Tensor], path: str) -> None:
        """Label the autograd nodes behind ``tensors`` that no inner module labelled."""
        pending = [t.grad_fn for t in tensors if t.grad_fn is not None]
        while pending:
            node = pending.pop()
            if node is None or _KEY in _metadata(node):
                continue
            _metadata(node)[_KEY] = path
            pending.extend(child for child, _ in node.next_functions if child is not None)

    def saved(self, key: int, size: Polynomial) -> None:
        """Attribute a storage autograd saved (first time) to the innermost running module."""
        if not self.recording:
            return
        path = self.stack[-1] if self.stack else None
        record = self.records.get(path) if path is not None else None
        if record is None:
            record = self.records.setdefault(LOSS, ModuleRecord(LOSS, "loss function", 0, 0))
        record.saved[key] = size


def _metadata(node: Any) -> dict[str, Any]:
    """Return an autograd node's metadata dict (kept by the node for its lifetime)."""
    return cast(dict[str, Any], node.metadata)
