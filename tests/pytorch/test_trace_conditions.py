"""Conditions that help: harmless ones checked and dropped, the rest kept by derived values.

A small CNN traced at B=5, H=20 on PyTorch 2.13's CPU: its convolution picks
a kernel by batch (a guard ``B < 16``) and a size of 1 is treated apart
(``B >= 2``). Traced at fixed sizes beyond them, neither changes a byte, so
neither blocks B=16 or B=1, which are then exact against ``measure``. A
condition that is kept (with ``check_conditions=False``) is respected by
``max_batch`` on the result, on a pickled copy, and on ``peak + reserve``.
"""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")

from small_cnn import small_cnn, small_cnn_data  # noqa: E402
from torch import nn  # noqa: E402

from memtheory.errors import EvaluationError  # noqa: E402
from memtheory.torch import measure, trace  # noqa: E402
from memtheory.whatif import max_batch  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_GIB = 2**30


_model, _data = small_cnn, small_cnn_data


def _trace(model, check):
    x, y = _data(5, 20)
    return trace(model, x, {"B": 5, "H": 20}, loss=nn.CrossEntropyLoss(), target=y,
                 optimizer="adam", check_conditions=check)


@pytest.fixture(scope="module")
def traced():
    """The model, its trace with conditions checked, and one without."""
    model = _model()
    return model, _trace(model, True), _trace(model, False)


def test_kernel_choice_and_size_one_are_harmless_and_exact(traced):
    """B < 16 and B >= 2 are marked harmless; B=1 and B=16 equal measure to the byte."""
    model, checked, unchecked = traced
    assert "B < 16" in unchecked.constraints and "B >= 2" in unchecked.constraints
    assert "B < 16" not in checked.constraints and "B >= 2" not in checked.constraints
    assert any(c.startswith("B < 16: harmless (traced at B=16") for c in checked.conditions)
    for batch in (1, 16):
        x, y = _data(batch, 12)
        measured = measure(model, x, loss=nn.CrossEntropyLoss(), target=y, optimizer="adam")
        at = checked.evaluate(B=batch, H=12)
        assert at.peak == measured.peak
        assert {k: int(v) for k, v in at.components.items()} == measured.components


def test_max_batch_answers_one(traced):
    """When only B=1 fits, max_batch says 1 (the formula holds there)."""
    _, checked, _ = traced
    one, two = (checked.evaluate(B=b, H=12).peak for b in (1, 2))
    assert max_batch(checked, (one + two) // 2, H=12) == 1


@pytest.mark.parametrize("derived", ["pickled", "peak", "peak plus a reserve"])
def test_derived_values_keep_the_conditions(traced, derived):
    """max_batch refuses past B < 16 on a pickled result, its peak, and peak + 1.5 GiB."""
    _, _, unchecked = traced
    value = {
        "pickled": lambda: pickle.loads(pickle.dumps(unchecked)),
        "peak": lambda: unchecked.peak,
        "peak plus a reserve": lambda: unchecked.peak + 3 * _GIB // 2,
    }[derived]()
    with pytest.raises(EvaluationError, match="B < 16"):
        max_batch(value, "1 TiB", H=12)


@pytest.mark.slow
def test_resnet_traced_at_224_answers_cifar_sizes():
    """A ResNet-18-shaped model traced at H=224 evaluates at H=32, equal to measure there.

    Its shape conditions (each stage's feature map not 1 x 1) are traced beyond,
    at H = 32, 16, ..., and change no byte, so none blocks CIFAR's 32 x 32.
    """
    from memtheory.validation.reference_models import ResNetReference

    torch.manual_seed(0)
    model = ResNetReference("basic", (2, 2, 2, 2), width=8, classes=10).train()
    x, y = torch.randn(5, 3, 224, 224), torch.randint(0, 10, (5,))
    memory = trace(model, x, {"B": 5, "H": 224}, loss=nn.CrossEntropyLoss(), target=y,
                   optimizer="adam")
    assert not memory.constraints
    x, y = _data(4, 32)
    measured = measure(model, x, loss=nn.CrossEntropyLoss(), target=y, optimizer="adam")
    assert memory.evaluate(B=4, H=32).peak == measured.peak


_FRESH_PROCESS = """
import pickle, sys
from memtheory.errors import MemtheoryError
from memtheory.evaluation import evaluate
from memtheory.whatif import max_batch
peak, shifted = pickle.loads(sys.stdin.buffer.read())
print(type(peak).__name__, evaluate(peak, B=8, H=12), evaluate(shifted, B=8, H=12))
for call in (lambda: evaluate(peak, B=20, H=12), lambda: max_batch(shifted, "1 TiB", H=12)):
    try:
        print("answered", call())
    except MemtheoryError as error:
        print("refused", type(error).__name__, error)
"""


def test_a_bare_pickled_peak_keeps_its_conditions_in_a_fresh_process(traced):
    """traced.peak (and peak + reserve), pickled and loaded elsewhere, refuse B >= 16 by name.

    Inside the conditions the loaded peak gives the bytes ``measure`` gives.
    """
    import os
    import subprocess
    import sys

    model, _, unchecked = traced
    reserve = 3 * _GIB // 2
    payload = pickle.dumps((unchecked.peak, unchecked.peak + reserve))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, "-c", _FRESH_PROCESS], input=payload,
                         capture_output=True, check=True, env=environment, timeout=300)
    lines = run.stdout.decode().splitlines()
    x, y = _data(8, 12)
    measured = measure(model, x, loss=nn.CrossEntropyLoss(), target=y, optimizer="adam").peak
    assert lines[0] == f"Max {measured} {measured + reserve}"
    assert lines[1].startswith("refused KernelTooLargeError B=20 is outside B < 16")
    assert lines[2].startswith("refused") and "B < 16" in lines[2]


def test_the_kept_peak_is_the_peak_it_wraps():
    """The peak that keeps its conditions equals, hashes and prints as the plain maximum.

    ``maximum`` leaves its Max unsorted (moments in step order); the kept one has
    the same arguments in the same order, so the registry finds it under either.
    """
    from memtheory.constraints import SizeConstraint, candidates
    from memtheory.max_pruning import maximum
    from memtheory.symbols import B, H
    from memtheory.torch.tracing.kept_conditions import keeping

    plain = maximum([9 * B * H + 1, 7 * B * H + 40, 8 * B * H + 20])
    rule = SizeConstraint(16 - B, "B < 16")
    kept = keeping(plain, (rule,))
    assert kept is not plain and kept.args == plain.args
    assert kept == plain and plain == kept and hash(kept) == hash(plain)
    assert str(kept) == str(plain) and {plain: 1}[kept] == 1
    loaded = pickle.loads(pickle.dumps(kept + 5))
    assert loaded == plain + 5
    assert candidates(loaded).sets == ((rule,),)


def test_a_peak_of_one_polynomial_keeps_its_conditions_too():
    """A peak that is one polynomial (an Add) is kept the same way, and evaluates in order."""
    from memtheory.constraints import SizeConstraint, candidates
    from memtheory.symbols import B
    from memtheory.torch.tracing.kept_conditions import keeping

    plain = 12 * B + 7
    rule = SizeConstraint(16 - B, "B < 16")
    kept = keeping(plain, (rule,))
    assert type(kept) is not type(plain) and kept == plain and hash(kept) == hash(plain)
    loaded = pickle.loads(pickle.dumps(kept))
    assert loaded == plain and candidates(loaded).sets == ((rule,),)
    assert keeping(plain, ()) is plain  # nothing to keep: the plain expression
