"""The backward pass of a step: its graph of autograd nodes, and PyTorch's engine running it.

Each layer of the storage plan becomes the backward nodes it records
(:attr:`~memtheory.layers.base.Autograd.stages`, autocast's casts of its
parameters and inputs), numbered as autograd creates them; :func:`run_backward`
runs them in the CPU engine's order, allocating gradients and freeing what
each node kept, on a :class:`~memtheory.conventions.autograd.live_bytes.Timeline`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import sympy as sp

from memtheory.conventions.autograd.live_bytes import Holders, Timeline, freeable
from memtheory.conventions.autograd.storage_plan import PlannedRow, StepPlan, row_parameters
from memtheory.errors import UnsupportedError
from memtheory.layers.base import Stage, elements

__all__ = ["run_backward"]


@dataclass
class _Node:
    """One backward node: what it keeps, where its gradients go, and how they are made.

    ``edges`` are (next node or None, the gradient's bytes, whether it is the
    incoming gradient or a view of it); ``grads`` the
    parameter gradients it makes: (tensor, bytes, the cast node they go through
    or None for ``.grad``).
    """

    seq: int
    label: str
    holder: tuple[str, int] | None
    saved: set[str]
    edges: list[tuple[int | None, sp.Expr, bool]] = field(default_factory=list)
    grads: list[tuple[str, sp.Expr, int | None]] = field(default_factory=list)
    temporaries: list[sp.Expr] = field(default_factory=list)
    steals: bool = False


def _graph(plan: StepPlan, tensors: dict[str, sp.Expr]) -> tuple[list[_Node], int]:
    """Return the backward graph, nodes in creation (sequence) order, and its root."""
    return _Graph(plan, tensors).build()


class _Graph:
    """Builds the backward graph layer by layer, numbering nodes as autograd creates them."""

    def __init__(self, plan: StepPlan, tensors: dict[str, sp.Expr]) -> None:
        self.plan = plan
        self.tensors = tensors
        self.nodes: list[_Node] = []
        self.grad_fn: dict[str, int | None] = {
            plan.rows[0].in_keys[0] if plan.rows else "": None
        }
        self.accumulate: dict[str, int] = {}

    def new(
        self, label: str, holder: tuple[str, int] | None = None, saved: set[str] | None = None
    ) -> int:
        """Create a node; return its sequence number."""
        self.nodes.append(_Node(len(self.nodes), label, holder, saved or set()))
        return len(self.nodes) - 1

    def grad_bytes(self, tensor: str) -> sp.Expr:
        """Bytes of a parameter's ``.grad``."""
        return self.tensors[tensor] * self.plan.precision.gradients.bytes

    def build(self) -> tuple[list[_Node], int]:
        """Return the nodes and the root, where the backward pass starts."""
        self._accumulators()
        for entry in self.plan.rows:
            name = entry.row.name
            sources = [self.grad_fn.get(reads) for reads in entry.row.inputs]
            if entry.records:
                self.grad_fn[name] = _LayerGraph(self, entry, sources).build()
            else:  # an identity (no node) hands its input's node on
                self.grad_fn[name] = sources[0] if not entry.spec.records and sources else None
        return self.nodes, self._root()

    def _accumulators(self) -> None:
        """Add an AccumulateGrad node for each parameter two layers read (a tied projection).

        Its gradients meet in the node's input buffer, which turns their sum
        into ``.grad``.
        """
        shared = {
            entry.tied[0] for entry in self.plan.rows if entry.tied is not None and entry.records
        }
        for tensor in sorted(shared):
            self.accumulate[tensor] = node = self.new(f"{tensor} (accumulate)")
            self.nodes[node].grads.append((tensor, self.grad_bytes(tensor), None))
            self.nodes[node].steals = True

    def _root(self) -> int:
        plan = self.plan
        if plan.loss is None:
            root = self.new("output.sum()")
            last = self.grad_fn.get(plan.rows[-1].row.name)
            self.nodes[root].edges.append((last, plan.sizes["loss"], True))
            return root
        loss_node = self.grad_fn[plan.loss.row.name]
        if loss_node is None:
            raise UnsupportedError("nothing before the loss needs a gradient.")
        return loss_node


class _LayerGraph:
    """The backward nodes of one layer: autocast's casts, then its stages in creation order."""

    def __init__(self, graph: _Graph, entry: PlannedRow, sources: list[int | None]) -> None:
        self.graph, self.entry = graph, entry
        name = entry.row.name
        self.own = [tensor for tensor, _ in row_parameters(entry.row)]
        if entry.tied is not None:
            self.own.insert(0, entry.tied[0])
        self.stages = entry.spec.stage_list()
        self.claimed = {
            f"{name}.{part}" for stage in self.stages if stage.parameters
            for part in stage.parameters
        }
        self.local = {tensor: tensor[len(name) + 1 :] for tensor in self.own}
        self.param_casts: dict[str, int] = {}
        self.shapes = entry.row.input_shapes or (entry.row.input_shape,)
        # A later stage that makes a parameter's gradient casts that parameter just before it
        # runs; the first stage's and unclaimed parameters are cast before the layer's input.
        first = set(self.stages[0].parameters or ())
        self._cast([t for t in self.own if t not in self.claimed or self.local[t] in first])
        self.targets = self._input_targets(sources)
        self.recorded = entry.spec.recorded_stages(
            tuple(entry.needs_grad) if entry.needs_grad else False
        )
        self.made: list[int] = []

    def build(self) -> int | None:
        """Create the stages' nodes; return the last (the layer's ``grad_fn``)."""
        previous: int | None = None
        for number, stage in enumerate(self.stages):
            previous = self._stage(number, stage, previous)
        return previous

    def _cast(self, parameters: list[str]) -> None:
        """Add the nodes of autocast's casts of these parameters (it casts right to left)."""
        graph = self.graph
        for tensor in reversed(parameters):
            if tensor in self.entry.copy_keys:
                self.param_casts[tensor] = node = graph.new(f"{tensor} cast")
                graph.nodes[node].grads.append(
                    (tensor, graph.grad_bytes(tensor), graph.accumulate.get(tensor))
                )

    def _input_targets(self, sources: list[int | None]) -> list[int | None]:
        """Return where each input's gradient goes: its node, or the cast autocast made of it."""
        entry, graph = self.entry, self.graph
        targets: list[int | None] = []
        for index, source in enumerate(sources):
            if not entry.needs_grad[index] or entry.read_keys[index] == entry.in_keys[index]:
                targets.append(source)
                continue
            name = entry.row.name
            kind = entry.in_dtypes[index]
            cast = graph.new(f"{name} (cast to {kind})" if entry.is_loss else f"{name} input cast")
            graph.nodes[cast].edges.append((source, elements(self.shapes[index]) * kind.bytes,
                                            False))
            targets.append(cast)
        return targets

    def _gradient_of(self, tensor: str) -> tuple[str, sp.Expr, int | None]:
        """Return a parameter's gradient: into .grad, or low-precision into its cast."""
        graph = self.graph
        if tensor in self.param_casts:
            nbytes = graph.tensors[tensor] * self.entry.read_dtype.bytes
            return tensor, nbytes, self.param_casts[tensor]
        return tensor, graph.grad_bytes(tensor), graph.accumulate.get(tensor)

    def _stage(self, number: int, stage: Stage, previous: int | None) -> int:
        entry, graph = self.entry, self.graph
        name = entry.row.name
        if number:
            self._cast([t for t in self.own if self.local[t] in (stage.parameters or ())])
        node = graph.new(
            f"{name} ({stage.label})" if stage.label else name,
            (name, number),
            entry.stage_saved[number],
        )
        self.made.append(node)
        graph.nodes[node].temporaries = [t.nbytes(entry.read_dtype) for t in stage.temporaries]
        self._stage_edges(node, stage)
        if stage.parameters is not None:
            graph.nodes[node].grads += [
                self._gradient_of(t) for t in self.own
                if t in self.claimed and self.local[t] in stage.parameters
            ]
        if stage.edges:
            return node
        if number == 0:
            self._first_stage_outputs(node, stage)
        else:
            size = elements(self.shapes[0]) * entry.read_dtype.bytes
            graph.nodes[node].edges.append((previous, size, False))
        return node

    def _stage_edges(self, node: int, stage: Stage) -> None:
        """Add a stage's stated edges: to an earlier stage (if recorded) or to an input."""
        entry = self.entry
        for position, gradient in stage.edges:
            size = gradient.nbytes(entry.read_dtype)
            if position >= 0:
                if self.recorded[position]:
                    self.graph.nodes[node].edges.append((self.made[position], size, False))
            elif entry.needs_grad[-1 - position]:  # -1: the first input, -2 the second, ...
                self.graph.nodes[node].edges.append((self.targets[-1 - position], size, False))

    def _first_stage_outputs(self, node: int, stage: Stage) -> None:
        """Send a first stage without stated edges to every input and unclaimed parameter."""
        entry, graph = self.entry, self.graph
        for index, target in enumerate(self.targets):
            if entry.needs_grad[index]:
                # a promoted narrower input: the engine casts its gradient to its dtype
                kind = entry.in_dtypes[index] if entry.spec.promotes else entry.read_dtype
                view = stage.gradient_is_view and kind == entry.read_dtype
                size = elements(self.shapes[index]) * kind.bytes
                graph.nodes[node].edges.append((target, size, view))
        graph.nodes[node].grads += [
            self._gradient_of(t) for t in self.own
            if t in graph.tensors and t not in self.claimed
        ]


def run_backward(
    plan: StepPlan,
    timeline: Timeline,
    holders: Holders,
    tensors: dict[str, sp.Expr],
) -> None:
    """Run PyTorch's autograd engine over the backward graph.

    The CPU engine keeps one ready queue and runs the ready node created last
    (highest sequence number) first. A node allocates its outputs, then its
    incoming gradient and the tensors it kept are released, and its outputs
    are added to the input buffers of the nodes they go to. A second gradient
    arriving at a buffer (a tensor read by two layers) is added into a new
    tensor, ``old + new``: that is what PyTorch does while a
    ``TorchDispatchMode`` is active, as in :func:`memtheory.torch.measure`
    (``isTensorSubclassLike`` is then true for every tensor, so
    ``InputBuffer::accumulate`` never adds in place). Without a mode it adds
    in place when the first gradient is the only reference to a dense
    storage, so the real peak can be lower by one gradient at such a moment.
    Parameter gradients become ``.grad`` at once (AccumulateGrad runs first);
    ``backward()`` holds the seed gradient, ``ones_like(loss)``, until it
    returns.
    """
    nodes, root = _graph(plan, tensors)
    seed = sp.Integer(plan.loss.out_dtype.bytes) if plan.loss is not None else plan.sizes["loss"]
    _Engine(plan, timeline, holders, nodes).run(root, seed)


def _pending(nodes: list[_Node], root: int) -> dict[int, int]:
    """Count the gradients each node waits for: edges from nodes reachable from the root."""
    pending: dict[int, int] = {}
    stack, seen = [root], {root}
    while stack:
        for target, _, _ in nodes[stack.pop()].edges:
            if target is None:
                continue
            pending[target] = pending.get(target, 0) + 1
            if target not in seen:
                seen.add(target)
                stack.append(target)
    for node in nodes:  # parameter casts are reached through the nodes that feed them
        for _, _, cast_node in node.grads:
            if cast_node is not None:
                pending[cast_node] = pending.get(cast_node, 0) + 1
    return pending


_FIRST = -(1 << 62)
"""The ready-queue priority of AccumulateGrad nodes: the highest sequence number, run first."""


class _Engine:
    """The autograd engine's ready queue, input buffers and gradient references."""

    def __init__(
        self, plan: StepPlan, timeline: Timeline, holders: Holders, nodes: list[_Node]
    ) -> None:
        self.plan, self.timeline, self.holders, self.nodes = plan, timeline, holders, nodes
        self.refs: dict[str, int] = {}
        self.counter = iter(range(1, 1 << 30))
        self.buffers: dict[int, str] = {}
        self.ready: list[tuple[int, int]] = []
        self.pending: dict[int, int] = {}

    def alloc(self, label: str, nbytes: sp.Expr) -> str:
        """Allocate a gradient under a fresh name; one reference to it."""
        key = f"grad {label}"
        while key in self.timeline.live:
            key = f"grad {label} #{next(self.counter)}"
        self.timeline.alloc(key, nbytes)
        self.refs[key] = 1
        return key

    def drop(self, key: str) -> None:
        """Drop a reference to a gradient; free it with the last."""
        self.refs[key] -= 1
        if self.refs[key] == 0:
            self.timeline.free(key)

    def run(self, root: int, seed: sp.Expr) -> None:
        """Run every node from the root, the seed gradient held until ``backward()`` returns."""
        self.pending = _pending(self.nodes, root)
        seed_key = self.alloc("seed gradient", seed)
        self.buffers[root] = seed_key
        self.refs[seed_key] += 1  # backward() holds it
        self.ready = [(-root, root)]
        while self.ready:
            _, index = heapq.heappop(self.ready)
            self._run_node(self.nodes[index], self.buffers.pop(index))
        self.drop(seed_key)

    def _run_node(self, node: _Node, incoming: str) -> None:
        if node.steals:  # AccumulateGrad: the summed gradient becomes .grad, no copy
            tensor, nbytes, _ = node.grads[0]
            self.timeline.alloc(f"grad {tensor}", nbytes)
            self.drop(incoming)
            return
        outputs = self._outputs(node, incoming)
        temporaries = [self.alloc(f"{node.label}:temporary", n) for n in node.temporaries]
        self.timeline.mark(f"backward {node.label}")
        for key in temporaries:
            self.drop(key)
        self.drop(incoming)
        for key in node.saved:
            self.holders[key].discard(node.holder)
            if freeable(key, self.plan, self.holders, self.timeline):
                self.timeline.free(key)
        for target, key, nbytes in outputs:
            self._deliver(target, key, nbytes)

    def _outputs(self, node: _Node, incoming: str) -> list[tuple[int, str, sp.Expr]]:
        """Allocate a node's outputs: input gradients (or views of its own) and ``.grad``."""
        outputs: list[tuple[int, str, sp.Expr]] = []
        for target, nbytes, view in node.edges:
            if view:
                self.refs[incoming] += 1
                key = incoming
            else:
                key = self.alloc(f"{node.label}:input", nbytes)
            if target is not None:
                outputs.append((target, key, nbytes))
            else:
                self.drop(key)
        for tensor, nbytes, cast_node in node.grads:
            if cast_node is None:
                self.timeline.alloc(f"grad {tensor}", nbytes)
            else:
                outputs.append((cast_node, self.alloc(f"{tensor} (low)", nbytes), nbytes))
        return outputs

    def _deliver(self, target: int, key: str, nbytes: sp.Expr) -> None:
        """Add a gradient to a node's input buffer; queue the node when it has them all."""
        if target in self.buffers:  # old + new, into a new tensor (see run_backward)
            label = self.nodes[target].label
            old = self.buffers[target]
            total = self.alloc(f"{label}:input (sum)", nbytes)
            moment = f"backward {label} accumulate"
            sums = 1
            while moment in self.timeline.moments:  # a third gradient into the same buffer
                sums += 1
                moment = f"backward {label} accumulate {sums}"
            self.timeline.mark(moment)
            self.drop(old)
            self.drop(key)
            self.buffers[target] = total
        else:
            self.buffers[target] = key
        self.pending[target] -= 1
        if self.pending[target] == 0:
            priority = _FIRST if self.nodes[target].steals else -target
            heapq.heappush(self.ready, (priority, target))
