"""A timeline moved moment by moment, kept as a running sum (``live_bytes.shifted``).

Each moment of ``shifted(moments, shift)`` is the expression, argument for argument, that
adding the shift to the built moment gives (``SumBuilder.add_scaled``, as ``sp.Add``
adds), and the exact peak read from its changes is the peak of the built moments. LoRA's
adapters kept in fp32 (``finetune_memory``'s rise of each moment) use it; the step is the
same, moment by moment, as when each moment is built and moved.
"""

from __future__ import annotations

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import memtheory.conventions.autograd.live_bytes as live_bytes
from memtheory.conventions.autograd.live_bytes import (
    Moments,
    SumBuilder,
    Timeline,
    shifted,
)
from memtheory.estimate.step import step_memory
from memtheory.finetuning import LoRA
from memtheory.max_pruning import maximum
from memtheory.models.hf_config import from_config
from memtheory.symbols import B, S

TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "num_hidden_layers": 2,
    "vocab_size": 256, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
}
"""A two-layer Llama config: its bf16 step with fp32 adapters is peft's and the Trainer's."""
SIZES = [4 * B, 2 * B * S, 8, 3 * S, B * S + 5, 6 * B * S - 2 * S, 16, 2 * B * (S + 1),
         (B + 1) * (S + 2)]
SHIFTS = [[], [(sp.S.One, sp.Integer(100))], [(sp.S.One, -2 * B * S)],
          [(sp.Rational(3, 2), 4 * B), (sp.S.NegativeOne, sp.Integer(8))],
          [(sp.S.NegativeOne, 4 * B + 8)], [(sp.S.One, B * S + S)],
          [(sp.Rational(-3, 4), B * (S + 1)), (sp.S.One, 2 * B)]]


def _run(timeline: Timeline, events: list[tuple[int, bool, bool]]) -> dict[int, str]:
    """Allocate ``SIZES[size]`` (or free the oldest storage) per event; mark where asked.

    The last event is always marked. Returns each marked event's index and its label.
    """
    live: list[str] = []
    marked = {}
    for index, (size, free, mark) in enumerate(events):
        if free and live:
            timeline.free(live.pop(0))
        else:
            timeline.alloc(f"s{index}", SIZES[size])
            live.append(f"s{index}")
        if mark or index == len(events) - 1:
            marked[index] = f"m{index}"
            timeline.mark(marked[index])
    return marked


@settings(max_examples=60, deadline=None)
@given(events=st.lists(st.tuples(st.integers(0, len(SIZES) - 1), st.booleans(),
                                 st.integers(0, len(SHIFTS) - 1), st.booleans()),
                       min_size=1, max_size=30),
       expand=st.booleans())
def test_every_moment_is_the_built_moment_moved(events, expand):
    """Random allocations, frees and shifts (some cancel whole terms): the same expressions.

    With ``expand``, products of sums (``B*(S + 1)``) are expanded, in the moments and
    the shifts alike, and monomials that several terms share add up (or cancel). A
    moment is marked after some events only, so that a term changes several times
    between two moments, or comes and goes between them (the merge takes each term's
    last change there): the moments, their coefficients read from the log and the
    exact peak read from its changes are still the built moments'.
    """
    from memtheory.estimate.compiled import _moment_coefficients

    timeline = Timeline()
    marked = _run(timeline, [(size, free, mark) for size, free, _, mark in events])
    shifts = {label: SHIFTS[events[index][2]] for index, label in marked.items()}
    others = {label: SHIFTS[(SHIFTS.index(chosen) + 3) % len(SHIFTS)]
              for label, chosen in shifts.items()}
    for each in (shifts, others, shifts):  # the plan kept from the first serves the others
        moved = shifted(timeline.moments, each.__getitem__, expand=expand)
        assert isinstance(moved, Moments)
        builder = SumBuilder()
        expected = {label: builder.add_scaled([(sp.S.One, value), *each[label]], expand=expand)
                    for label, value in timeline.moments.items()}
        assert list(moved) == list(expected)
        for label, value in expected.items():
            assert moved[label] == value and sp.srepr(moved[label]) == sp.srepr(value)
        assert maximum(moved.values()) == maximum(list(expected.values()))
        read = _moment_coefficients(moved)
        assert ([dict(r) for r in read]
                == [dict(v.as_coefficients_dict()) for v in expected.values()])


def test_a_plan_kept_with_moments_follows_moments_recorded_since():
    """Moments marked after a merge extend its plan; a moment marked again starts a new one.

    Marked again later, a moment's place comes after the next one's: no running sum
    to follow, so ``shifted`` refuses (None) and ``moved`` adds moment by moment.
    """
    def checked(timeline: Timeline, rise: sp.Expr) -> None:
        moments = live_bytes.moved(timeline.moments, lambda label: [(sp.S.One, rise)],
                                   expand=True)
        assert dict(moments) == {label: sp.expand(value + rise)
                                 for label, value in timeline.moments.items()}

    timeline = Timeline()
    timeline.alloc("x", 4 * B * (S + 1))
    timeline.mark("forward")
    checked(timeline, B)
    plan = timeline.moments._plans[True]
    timeline.alloc("y", 2 * B * S)
    timeline.mark("backward")  # a new moment: the same plan, one more span
    checked(timeline, 3 * S)
    assert timeline.moments._plans[True] is plan
    timeline.alloc("z", 8 * S)
    timeline.mark("backward")  # the last moment marked again, later: a new plan
    checked(timeline, S)
    assert timeline.moments._plans[True] is not plan
    plan = timeline.moments._plans[True]
    timeline.free("x")
    timeline.mark("forward")  # marked again, after "backward": places out of order
    assert shifted(timeline.moments, lambda label: [(sp.S.One, B)], expand=True) is None
    checked(timeline, B + 1)
    assert timeline.moments._plans[True] is not plan


def test_changes_between_two_moments_are_merged_as_one():
    """A storage allocated and freed between two moments leaves nothing in the merged log.

    The merge takes each term's last change before a moment, so the moved log has one
    change per term that differs from the moment before (and one per shift).
    """
    timeline = Timeline()
    timeline.alloc("w", 4 * B)
    timeline.mark("start")
    for index in range(5):  # comes and goes: in no moment
        timeline.alloc(f"t{index}", 2 * B * S)
        timeline.free(f"t{index}")
    timeline.alloc("x", 2 * B * S)
    timeline.alloc("y", 2 * B * S)  # the same term twice: one change in all
    timeline.mark("end")
    # one change per allocation or free: w, five t's allocated and freed, x, y
    assert len(timeline.moments._sum.log) == 1 + 5 * 2 + 2
    for expand in (False, True):
        moved = shifted(timeline.moments, lambda label: [], expand=expand)
        assert moved is not None
        assert moved._sum.log == [(B, 4), (B * S, 2 + 2)]  # w's 4*B, then x's and y's 2*B*S
        assert dict(moved) == dict(timeline.moments)


def test_a_built_dictionary_is_left_to_the_caller():
    """Moments given as a dictionary are not a running sum: None, and the caller adds."""
    assert shifted({"forward": 4 * B + 8}, lambda label: [(sp.S.One, B)]) is None


@pytest.mark.parametrize("rank", [4, 16])
def test_lora_adapters_in_fp32_are_the_step_moved_moment_by_moment(monkeypatch, rank):
    """A two-layer Llama with fp32 adapters, as estimate derives it: the same step, everywhere."""
    network = from_config(TINY_LLAMA, batch=B, sequence=S, flash=True, loss=True)

    def step():
        return step_memory(network, lora=LoRA(rank), precision="bf16", convention="autograd",
                           adapter_dtype=adapter_dtype).memory

    adapter_dtype = "bf16"
    unmoved = step()
    adapter_dtype = "fp32"

    kept = step()
    assert isinstance(kept.timeline, Moments)
    monkeypatch.setattr(live_bytes, "shifted", lambda *args, **kwargs: None)
    built = step()
    assert not isinstance(built.timeline, Moments)
    assert list(kept.timeline) == list(built.timeline)
    assert all(sp.srepr(kept.timeline[m]) == sp.srepr(built.timeline[m]) for m in built.timeline)
    assert kept.components == built.components
    assert kept.peak == built.peak and kept.peak.free_symbols == {B, S}
    assert kept.components["parameters"] == 2 * unmoved.components["parameters"]  # fp32


def _steps():
    """Running-sum steps of three kinds: a decoder with LoRA, GPT-2 small, ResNet-50's floors."""
    from memtheory import training_memory
    from memtheory.models import gpt2, resnet50
    from memtheory.symbols import H

    llama = from_config(TINY_LLAMA, batch=B, sequence=S, flash=True, loss=True)
    return {
        "Llama LoRA": step_memory(llama, lora=LoRA(4), precision="bf16", convention="autograd",
                                  adapter_dtype="fp32").memory,
        "GPT-2 small": training_memory(gpt2("small"), optimizer="adamw", convention="autograd",
                                       precision="autocast-bf16"),
        "ResNet-50": training_memory(resnet50(image_size=H), optimizer="sgd",
                                     convention="autograd"),
    }


def test_a_pickled_step_keeps_its_log_and_reads_the_same():
    """Pickled as logs and places, no moment built; loaded, every moment and part the same."""
    import pickle

    from memtheory.conventions.autograd.live_bytes import Parts
    from memtheory.estimate.derivation_cache import dumps

    for name, memory in _steps().items():
        assert isinstance(memory.timeline, Moments), name
        loaded = pickle.loads(dumps(memory))
        assert isinstance(loaded.timeline, Moments) and isinstance(loaded.timeline_parts, Parts)
        assert list(loaded.timeline) == list(memory.timeline)
        for moment, value in memory.timeline.items():
            assert sp.srepr(loaded.timeline[moment]) == sp.srepr(value), (name, moment)
        for moment in memory.timeline_parts:
            assert loaded.timeline_parts[moment] == memory.timeline_parts[moment]
        assert loaded.peak == memory.peak


def test_coefficients_read_from_the_log_are_the_built_moments():
    """CompiledFootprint's rows from a running sum's changes: each moment's own coefficients."""
    from memtheory.estimate.compiled import _moment_coefficients

    for name, memory in _steps().items():
        read = _moment_coefficients(memory.timeline)
        built = [value.as_coefficients_dict() for value in memory.timeline.values()]
        assert [dict(r) for r in read] == [dict(b) for b in built], name


def test_the_symbols_read_from_the_log_are_the_built_moments():
    """A running sum's symbols, read from its changes: those of its built moments."""
    for name, memory in _steps().items():
        read = memory.timeline.moment_symbols()
        built = set().union(*(value.free_symbols for value in memory.timeline.values()))
        assert read == built and read, name
        assert memory.free_symbols >= read


@pytest.mark.parametrize(("precision", "zero", "copies"), [
    ("autocast-bf16", 3, False), ("mixed-bf16", 3, True), ("autocast-bf16", 2, True),
    ("bf16", 1, True)])
def test_a_split_across_gpus_is_each_moment_built_and_moved(monkeypatch, precision, zero,
                                                            copies):
    """ZeRO's device timeline (its copies dropped, DeepSpeed's partition held): the same.

    Every moment of every device's timeline, kept as a running sum, against the one
    built moment by moment (``shifted`` refused), at three data-parallel sizes.
    """
    import memtheory.techniques.parallel as parallel
    from memtheory import training_memory
    from memtheory.models import gpt2

    network = gpt2("small")
    memory = training_memory(network, optimizer="adamw", precision=precision,
                             convention="autograd")
    splits = [parallel.parallel_memory(memory, data=n, zero=zero, network=network,
                                       autocast_copies=copies) for n in (1, 2, 8)]
    monkeypatch.setattr(live_bytes, "shifted", lambda *args, **kwargs: None)
    monkeypatch.setattr(parallel, "_per_replica", parallel._LastReplica())
    for n, split in zip((1, 2, 8), splits, strict=True):
        built = parallel.parallel_memory(memory, data=n, zero=zero, network=network,
                                         autocast_copies=copies).device
        kept = split.device
        assert isinstance(kept.timeline, Moments) and not isinstance(built.timeline, Moments)
        assert list(kept.timeline) == list(built.timeline)
        for moment, value in built.timeline.items():
            assert sp.srepr(kept.timeline[moment]) == sp.srepr(value), (n, moment)
        assert kept.peak == built.peak


@settings(max_examples=60, deadline=None)
@given(events=st.lists(st.tuples(st.integers(0, len(SIZES) - 1), st.booleans(), st.booleans(),
                                 st.booleans()), min_size=1, max_size=30),
       share=st.sampled_from([sp.Rational(-3, 4), sp.S.NegativeOne, sp.Rational(1, 2)]),
       expand=st.booleans())
def test_a_part_read_from_its_log_moves_a_moment_as_the_part_built(events, share, expand):
    """A shift of ``part_value`` (a PartAt, read from its log) moves each moment as ``part_at``.

    A device count's shares of the gradients alive at each moment (ZeRO) are read from
    the gradients' running sum without building it; the moments, argument for argument,
    and the exact peak are those of the built parts. Each PartAt splits into the terms
    the built part splits into.
    """
    timeline = Timeline(categories={f"s{i}": "gradients" for i, e in enumerate(events) if e[2]})
    _run(timeline, [(size, free, mark) for size, free, _, mark in events])
    parts = timeline.parts

    def built(label: str) -> list[tuple[sp.Rational, sp.Expr]]:
        return [(share, live_bytes.part_at(parts, label, "gradients", sp.S.Zero)),
                (sp.S.One, sp.Integer(64))]

    def read(label: str) -> list[tuple[sp.Rational, object]]:
        return [(share, live_bytes.part_value(parts, label, "gradients", sp.S.Zero)),
                (sp.S.One, sp.Integer(64))]

    for label in timeline.moments:
        value = live_bytes.part_value(parts, label, "gradients", sp.S.Zero)
        if isinstance(value, live_bytes.PartAt):  # the same terms (in the log's order)
            constant, pairs = value.split()
            assert (constant, dict(pairs)) == (lambda c, p: (c, dict(p)))(
                *live_bytes._parts(value.expression()))
    expected = live_bytes.moved(dict(timeline.moments), built, expand=expand)
    moved = live_bytes.moved(timeline.moments, read, expand=expand)
    assert isinstance(moved, Moments)
    assert list(moved) == list(expected)
    for label, value in expected.items():
        assert sp.srepr(moved[label]) == sp.srepr(value)
    assert maximum(moved.values()) == maximum(list(expected.values()))
