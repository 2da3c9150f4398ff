"""Derive once, evaluate many: estimate's cache and compiled evaluation change no answer."""

import pickle

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from memtheory.constraints import carried, known_sizes
from memtheory.errors import DoesNotFitError
from memtheory.estimate import derivation_cache
from memtheory.estimate.compiled import CompiledFootprint, largest_fitting
from memtheory.estimate.derivation_cache import cache_directory, dumps, remembered
from memtheory.estimate.plan import estimate
from memtheory.symbols import B, S
from memtheory.techniques.parallel import parallel_memory
from memtheory.whatif import max_value

QUESTION = {"batch": 2, "sequence": 128, "lora": 8, "gpu": "T4"}


@pytest.fixture(autouse=True, scope="module")
def _as_in_a_fresh_process():
    """Each test sees the size-constraint registry of a process that built nothing else.

    ``memtheory estimate`` runs in a process of its own. In a long test session
    other networks register size constraints under expressions this step shares,
    and a step that might carry them is (rightly) neither compiled to the fast
    path nor written to disk: correct, only slower, and not what these tests pin.
    """
    with pytest.MonkeyPatch.context() as patch:
        for module, name in (
            (carried, "_WHOLE"),
            (carried, "_CROWDED"),
            (known_sizes, "_NODES"),
            (known_sizes, "_RANK"),
        ):
            patch.setattr(module, name, {})
        yield


def _fresh(monkeypatch, cache):
    """Forget what this process derived, and point the disk cache at ``cache``."""
    monkeypatch.setattr(derivation_cache, "_MEMORY", {})
    monkeypatch.setenv("MEMTHEORY_CACHE", str(cache))


def _answer(**changes):
    answer = estimate("gpt2", **{**QUESTION, **changes})
    return answer.to_dict(), answer.report()


@pytest.fixture(scope="module")
def derived_afresh():
    """The answer derived with no cache at all (memory forgotten, disk off)."""
    with pytest.MonkeyPatch.context() as patch:
        _fresh(patch, "off")
        return _answer()


def test_disk_cache_gives_the_answer_derived_afresh(monkeypatch, tmp_path, derived_afresh):
    """A first run writes one entry; a new process reading it answers byte for byte the same."""
    _fresh(monkeypatch, tmp_path)
    assert _answer() == derived_afresh
    entries = list(tmp_path.glob("*.pickle"))
    assert len(entries) == 1
    _fresh(monkeypatch, tmp_path)  # a new process: nothing in memory, the entry on disk
    assert _answer() == derived_afresh


def test_a_corrupt_entry_is_derived_again(monkeypatch, tmp_path, derived_afresh):
    """Garbage or a truncated pickle in the cache is ignored, not raised."""
    _fresh(monkeypatch, tmp_path)
    _answer()
    entry = next(tmp_path.glob("*.pickle"))
    for garbage in (b"not a pickle", entry.read_bytes()[:100], pickle.dumps({"other": 1})[:5]):
        entry.write_bytes(garbage)
        _fresh(monkeypatch, tmp_path)
        assert _answer() == derived_afresh


def test_an_unwritable_cache_is_no_error(monkeypatch, tmp_path, derived_afresh):
    """A cache directory that cannot be created (a file is in the way) only costs the time."""
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    _fresh(monkeypatch, blocker / "cache")
    assert _answer() == derived_afresh
    assert blocker.read_text() == "in the way"


def test_each_question_has_its_own_entry(monkeypatch, tmp_path):
    """A setting that changes the formulas (the LoRA rank) is a second entry; a size is not."""
    _fresh(monkeypatch, tmp_path)
    _answer()
    _answer(batch=3, sequence=64, gpu="L4")
    assert len(list(tmp_path.glob("*.pickle"))) == 1
    _answer(lora=4)
    assert len(list(tmp_path.glob("*.pickle"))) == 2


@pytest.mark.parametrize("value", ["off", "0", "", "none", "OFF"])
def test_the_environment_turns_the_disk_cache_off(monkeypatch, value):
    """MEMTHEORY_CACHE=off (or 0, empty, none) keeps nothing on disk."""
    monkeypatch.setenv("MEMTHEORY_CACHE", value)
    assert cache_directory() is None


def test_the_default_directory_is_the_users_cache(monkeypatch, tmp_path):
    """Without MEMTHEORY_CACHE the entries go under $XDG_CACHE_HOME/memtheory, outside the repo."""
    monkeypatch.delenv("MEMTHEORY_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_directory() == tmp_path / "memtheory"


def test_remembered_derives_once_per_key():
    """The same key derives once in a process; another key derives again."""
    calls = []

    def derive():
        calls.append(1)
        return len(calls)

    assert remembered(("test key", 1), derive, disk=False) == 1
    assert remembered(("test key", 1), derive, disk=False) == 1
    assert remembered(("test key", 2), derive, disk=False) == 2


def _sums(depth):
    leaves = st.sampled_from([B, S, B * S, S**2, sp.Integer(7)])
    if depth == 0:
        return leaves
    inner = _sums(depth - 1)
    return st.one_of(
        leaves,
        st.builds(lambda a, b, c: a * b + c, st.integers(1, 10**12), inner, inner),
        st.builds(sp.Max, inner, inner),
        st.builds(lambda a, b: sp.Min(a, b) + 1, inner, inner),
    )


@settings(max_examples=40)
@given(_sums(3))
def test_pickled_sums_and_maxima_are_the_same_expressions(expression):
    """dumps() rebuilds Add, Mul, Max, Min as they were: equal, same hash, same text."""
    loaded = pickle.loads(dumps(expression))
    assert loaded == expression
    assert hash(loaded) == hash(expression)
    assert str(loaded) == str(expression)


@pytest.fixture(scope="module")
def step():
    """A LoRA step's memory in B and S (the autograd convention: a timeline)."""
    answer = estimate("gpt2", batch=1, sequence=64, lora=8)
    return answer.symbolic


@given(st.integers(1, 64), st.integers(1, 1024))
def test_compiled_evaluation_is_footprint_evaluate(step, batch, sequence):
    """Every component, moment and the peak equal what sympy's substitution gives."""
    compiled = CompiledFootprint(step)
    assert compiled.fast
    fast, slow = compiled.evaluate(B=batch, S=sequence), step.evaluate(B=batch, S=sequence)
    assert fast == slow
    assert dict(fast.timeline) == dict(slow.timeline)
    assert fast.peak == slow.peak and fast.peak_moment == slow.peak_moment
    assert compiled.peak(B=batch, S=sequence) == slow.peak


@given(st.integers(1, 16), st.integers(1, 512), st.sampled_from([1, 2, 4]))
def test_compiled_split_is_parallel_memory_evaluate(step, batch, sequence, data):
    """Per device under ZeRO-3 with offload: the compiled split equals ParallelMemory.evaluate."""
    split = parallel_memory(step, data=data, zero=3, offload="optimizer")
    compiled = CompiledFootprint(split)
    fast, slow = compiled.evaluate(B=batch, S=sequence), split.evaluate(B=batch, S=sequence)
    assert fast == slow
    assert compiled.peak(B=batch, S=sequence) == slow.peak


def test_compiled_evaluation_falls_back_for_other_values(step):
    """Values the tables cannot take (a float, a missing size) go through evaluate()'s checks."""
    compiled = CompiledFootprint(step)
    with pytest.raises(Exception) as fast:
        compiled.evaluate(B=1.5, S=8)
    with pytest.raises(Exception) as slow:
        step.evaluate(B=1.5, S=8)
    assert type(fast.value) is type(slow.value) and str(fast.value) == str(slow.value)
    assert compiled.evaluate(B=2) == step.evaluate(B=2)


@given(
    st.integers(1, 10**6), st.integers(0, 10**4), st.integers(0, 10**9),
    st.integers(1, 10**12), st.none() | st.integers(1, 10**5),
)
def test_largest_fitting_is_max_value(slope, square, constant, cap, stop):
    """The search estimate uses finds what max_value finds (0 where even 1 does not fit)."""
    expression = square * B**2 + slope * B + constant
    try:
        expected = max_value(expression, "B", cap, stop=stop)
    except DoesNotFitError:
        expected = 0
    found = largest_fitting(lambda b: square * b * b + slope * b + constant, cap, stop)
    assert found == expected


def test_entries_of_other_code_are_deleted(monkeypatch, tmp_path):
    """Writing an entry deletes those another version of the code wrote; nothing else."""
    stale = tmp_path / f"{'0' * 16}-{'a' * 64}.pickle"
    unrelated = [tmp_path / "notes.pickle", tmp_path / "my-data.pickle", tmp_path / "keep.txt"]
    for path in [stale, *unrelated]:
        path.write_bytes(b"x")
    _fresh(monkeypatch, tmp_path)
    _answer()
    assert not stale.exists()
    assert all(path.exists() for path in unrelated)
    assert len(list(tmp_path.glob("*.pickle"))) == len(unrelated) - 1 + 1
