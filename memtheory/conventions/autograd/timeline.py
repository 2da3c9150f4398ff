"""The live tensors of a step: a timeline of bytes through training and through inference.

A training step runs the storage plan
(:mod:`memtheory.conventions.autograd.storage_plan`) forward and backward:
each layer allocates its output and the tensors it saves, frees its input once
nothing reads or keeps it, and in the backward allocates gradients and frees
what its node kept; the optimizer step adds its implementation's temporaries.
Inference (eval mode under ``no_grad``) frees each input once its output
exists. The live total at each labelled moment is the timeline that
:class:`~memtheory.conventions.autograd.AutogradConvention` hands to
:class:`~memtheory.memory_breakdown.MemoryBreakdown`, whose maximum is the peak.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field
from functools import cmp_to_key
from operator import itemgetter
from typing import TypeAlias

import sympy as sp
from sympy.core.basic import _cmp_name

from memtheory.conventions.autograd.storage_plan import PlannedRow, StepPlan, row_parameters
from memtheory.errors import UnsupportedError
from memtheory.layers.base import Stage, elements

__all__ = ["Timeline", "inference_timeline", "run_backward", "run_forward"]

_Holders: TypeAlias = dict[str, set[tuple[str, int]]]


@dataclass
class Timeline:
    """Live storages (name -> bytes) and the live total at labelled moments.

    The live total is kept as sympy's ``Add`` keeps it, term -> coefficient,
    and updated on every allocation and free; a moment sorts only its own terms
    (by their place in a canonical order kept as terms first appear) instead of
    adding every live storage again. A moment is the same expression, argument
    for argument, as ``sp.Add(*live.values())``, which it falls back on for
    anything but rational coefficients.
    """

    live: dict[str, sp.Expr] = field(default_factory=dict)
    moments: dict[str, sp.Expr] = field(default_factory=dict)
    _sum: _Sum = field(default_factory=lambda: _Sum())
    _nonzero: dict[str, None] = field(default_factory=dict)

    def alloc(self, key: str, nbytes: sp.Expr) -> None:
        """Add a live storage."""
        if key in self.live:
            raise AssertionError(f"storage {key!r} allocated twice")
        value = sp.sympify(nbytes)
        self.live[key] = value
        if value is not sp.S.Zero:
            self._nonzero[key] = None
            self._sum.add(value, 1)

    def free(self, key: str) -> None:
        """Remove a live storage."""
        value = self.live.pop(key)
        if value is not sp.S.Zero:
            del self._nonzero[key]
            self._sum.add(value, -1)

    def total(self) -> sp.Expr:
        """Return the live bytes now."""
        if not self._sum.exact:
            return sp.Add(*self.live.values())
        if len(self._nonzero) < 2:  # sympy returns a lone argument as it is
            return self.live[next(iter(self._nonzero))] if self._nonzero else sp.S.Zero
        return self._sum.expression()

    def mark(self, label: str, extra: sp.Expr | int = 0) -> None:
        """Record the live bytes (plus ``extra``) as the moment ``label``."""
        extra = sp.sympify(extra)
        if extra is sp.S.Zero or not self._nonzero or not self._sum.exact or not _parts(extra):
            self.moments[label] = self.total() + extra
            return
        self._sum.add(extra, 1)
        self.moments[label] = self._sum.expression()
        self._sum.add(extra, -1)


_GAP = 1 << 32


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

    def add(self, value: sp.Expr, sign: int) -> None:
        """Add ``sign`` (1 or -1) times ``value``'s terms."""
        if not self.exact:
            return
        if value not in self._split:
            self._split[value] = _parts(value)
        parts = self._split[value]
        if parts is None:
            self.exact = False
            return
        constant, terms = parts
        if constant:
            self.constant = self.constant + constant if sign > 0 else self.constant - constant
        for term, coefficient in terms:
            total = self.terms.get(term, sp.S.Zero)
            total = total + coefficient if sign > 0 else total - coefficient
            if total:
                self.terms[term] = total
            else:
                del self.terms[term]

    def expression(self) -> sp.Expr:
        """Return the sum as ``sp.Add`` would build it from the same values."""
        built, rank = self._built, self._rank
        ranked = []
        for term, coefficient in self.terms.items():
            argument = term if coefficient is sp.S.One else built.get((term, coefficient))
            if argument is None:
                argument = self._term(term, coefficient)
            place = rank.get(argument)
            if place is None:
                place = self._key(argument)
                rank = self._rank  # a new term may have renumbered every place
            ranked.append((place, argument))
        ranked.sort(key=itemgetter(0))  # places are distinct: the arguments are never compared
        arguments = [argument for _, argument in ranked]
        if self.constant is not sp.S.Zero:
            arguments.insert(0, self.constant)
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
            key = cmp_to_key(self._compare)
            place = bisect.bisect_left(order, key(argument), key=key)
            low = self._rank[order[place - 1]] if place else 0
            high = self._rank[order[place]] if place < len(order) else low + 2 * _GAP
            order.insert(place, argument)
            if high - low < 2:
                self._rank = {a: (i + 1) * _GAP for i, a in enumerate(order)}
            else:
                self._rank[argument] = (low + high) // 2
            rank = self._rank[argument]
        return rank

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


def _last_reads(plan: StepPlan) -> dict[str, int]:
    """Return the position of the last layer that reads or holds each storage.

    A block with branches is written as a function of its input (torchvision's
    ``identity = x``, MobileNetV2's ``x + self.conv(x)``), so the input, where
    the branches fork, stays alive until the merge that joins them has run.
    """
    last: dict[str, int] = {}
    storage = {entry.row.name: entry.out_key for entry in plan.rows}
    inputs = {entry.row.name: entry.row.inputs for entry in plan.rows}
    index = {entry.row.name: entry.row.index for entry in plan.rows}
    ancestry = _Ancestry(inputs, index)
    for position, entry in enumerate(plan.rows):
        for key in (*entry.in_keys, *entry.read_keys):
            last[key] = position
        if len(entry.in_keys) > 1:
            fork = ancestry.fork(entry.row.inputs)
            if fork in storage:
                last[storage[fork]] = position
    _hold_call_arguments(plan, last)
    return last


def _hold_call_arguments(plan: StepPlan, last: dict[str, int]) -> None:
    """Keep what a module call reads from before it alive until the call returns.

    ``nn.Module.__call__`` holds its arguments, and the caller its variables,
    until ``forward`` returns (:attr:`~memtheory.network.Network.calls`).
    """
    position = {entry.row.name: number for number, entry in enumerate(plan.rows)}
    made: dict[str, int] = {}
    for number, entry in enumerate(plan.rows):
        for key in (*entry.allocs, entry.out_key):
            made.setdefault(key, number)
    for first, end in plan.calls:
        if first not in position:  # a call around the loss, in inference
            continue
        start, stop = position[first], position.get(end, len(plan.rows) - 1)
        for entry in plan.rows[start : stop + 1]:
            for key in entry.in_keys:
                if made.get(key, -1) < start and last.get(key, -1) < stop:
                    last[key] = stop


def _done(ends: dict[int, list[str]], position: int, reads: tuple[str, ...]) -> list[str]:
    """Return the layer's inputs and the storages whose last reader or holder it is."""
    return [*reads, *ends.get(position, ())]


def _ends(last: dict[str, int]) -> dict[int, list[str]]:
    ends: dict[int, list[str]] = {}
    for key, position in last.items():
        ends.setdefault(position, []).append(key)
    return ends


def _fork(
    reads: tuple[str, ...], inputs: dict[str, tuple[str, ...]], index: dict[str, int]
) -> str | None:
    """Return the nearest layer every one of ``reads`` descends from (where branches fork).

    Only layers in ``index`` (name -> running position) count.
    """
    return _Ancestry(inputs, index).fork(reads)


class _Ancestry:
    """Each layer's ancestors, itself included, as the bits of one integer (bit = position).

    Built once, in running order, so a network's every fork costs one
    intersection of two integers, not a walk back to the input.
    """

    def __init__(self, inputs: dict[str, tuple[str, ...]], index: dict[str, int]) -> None:
        self.names = {position: name for name, position in index.items()}
        self.bits: dict[str, int] = {}
        for name in sorted(index, key=index.__getitem__):
            bits = 1 << index[name]
            for source in inputs.get(name, ()):
                bits |= self.bits.get(source, 0)
            self.bits[name] = bits

    def fork(self, reads: tuple[str, ...]) -> str | None:
        """Return the latest layer that every one of ``reads`` is or descends from."""
        common = -1
        for name in reads:
            common &= self.bits.get(name, 0)
        common &= ~1  # position 0 is the network's input, no layer of the plan
        return self.names.get(common.bit_length() - 1) if common > 0 else None


def run_forward(plan: StepPlan, timeline: Timeline, holders: _Holders) -> None:
    """Run the forward (and the loss) in topological order: allocate, mark, free what is done.

    A storage is freed once the last layer that reads it has run, unless a
    backward node keeps it or the caller holds it.
    """
    last = _last_reads(plan)
    ends = _ends(last)
    cached: list[str] = []
    for position, entry in enumerate(plan.rows):
        for key, nbytes in (*entry.allocs.items(), *entry.copies.items()):
            timeline.alloc(key, nbytes)
        if entry.out_key not in timeline.live:
            timeline.alloc(entry.out_key, plan.sizes[entry.out_key])
        timeline.mark(f"forward {entry.row.name}")
        for key in dict.fromkeys((*entry.allocs, *_done(ends, position, entry.in_keys))):
            if key != entry.out_key and last.get(key, -1) <= position:
                if _unheld(key, plan, holders, timeline):
                    timeline.free(key)
        cached += [key for key in entry.copies if not holders.get(key)]
    if plan.loss is None:  # the network alone is trained on output.sum()
        timeline.alloc("loss", plan.sizes["loss"])
        timeline.mark("forward output.sum()")
    for key in cached:  # autocast's cache of parameter casts empties when the forward ends
        timeline.free(key)


def _unheld(key: str, plan: StepPlan, holders: _Holders, timeline: Timeline) -> bool:
    return key in timeline.live and key not in plan.held and not holders.get(key)


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
    holders: _Holders,
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
        self, plan: StepPlan, timeline: Timeline, holders: _Holders, nodes: list[_Node]
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
            if _unheld(key, self.plan, self.holders, self.timeline):
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


def inference_timeline(plan: StepPlan, base: sp.Expr) -> dict[str, sp.Expr]:
    """Eval mode under no_grad: a storage is freed once the last layer that reads it has run.

    Autocast caches its casts of the parameters (leaves that require grad) even
    under no_grad, so under autocast every weight and bias copy made so far
    stays until the forward ends.
    """
    timeline = Timeline()
    timeline.alloc("weights, buffers and input", base)
    last = _last_reads(plan)
    ends = _ends(last)
    held = {plan.rows[-1].out_key} if plan.rows else set()
    for position, entry in enumerate(plan.rows):
        for key, nbytes in (*entry.allocs.items(), *entry.copies.items()):
            timeline.alloc(key, nbytes)
        if entry.out_key not in timeline.live and entry.out_key != "input":
            timeline.alloc(entry.out_key, plan.sizes[entry.out_key])
        timeline.mark(f"forward {entry.row.name}")
        for key in dict.fromkeys((*entry.allocs, *_done(ends, position, entry.in_keys))):
            if key in (entry.out_key, "input") or key in held or key not in timeline.live:
                continue
            if last.get(key, -1) <= position:
                timeline.free(key)
    return timeline.moments
