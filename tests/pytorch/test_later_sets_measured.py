"""Book answers of the sets ch10, ch11 and ch12 against PyTorch: CPU measurements, a built model.

ch10 asks for the temporaries of Adam's step (foreach and for-loop), which the
autograd convention derives; here they are measured as the rise of the
optimizer-step phase, on two images (the temporaries do not depend on the batch).

ch11 asks for the autograd convention's figures of the small CNN (softmax as its
last layer, no loss); the measured PyTorch step ends in the cross-entropy loss
instead, so it also holds the int64 targets and the loss's saved scalar, which
the test adds by hand.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from torch import nn  # noqa: E402

from memtheory.exercises import find_variant  # noqa: E402
from memtheory.torch import measure, phase_peaks  # noqa: E402
from memtheory.validation import ZOO  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
MIB = 2**20


def _step_rise(module, x, implementation):
    """Measured bytes the optimizer step adds (Adam, the given implementation), CPU."""
    y = torch.zeros(x.shape[0], dtype=torch.int64)
    adam = torch.optim.Adam(module.parameters(), foreach=implementation == "foreach")
    step = measure(module, x, nn.CrossEntropyLoss(), adam, target=y, record=True)
    assert step.implementation == implementation
    return phase_peaks(step)["optimizer step"].rise, step.parameters


def test_ch10_step_temporaries_are_measured():
    """ch10.q7 (foreach, the small CNN) and ch10.q8 (for-loop, a 784-256-128-10 MLP), measured."""
    entry = ZOO["StackExchange CNN"]
    x, _ = entry.batch()
    rise, _ = _step_rise(entry.module(), x[:2], "foreach")
    assert find_variant("ch10.q7").expected * MIB == rise
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                        nn.Linear(128, 10))
    rise, parameters = _step_rise(mlp, torch.randn(2, 784), "for-loop")
    assert find_variant("ch10.q8").expected == Fraction(100 * rise, parameters)


@pytest.mark.slow
def test_ch11_book_answers_are_the_measured_step():
    """Batch 64, Adam, fp32: peak and saved tensors as measured, less the loss's own tensors."""
    entry = ZOO["StackExchange CNN"]
    module = entry.module()
    x, y = entry.batch()
    assert tuple(x.shape) == (64, 3, 50, 50)
    step = measure(
        module, x, nn.CrossEntropyLoss(), torch.optim.Adam(module.parameters()), target=y
    )
    targets = 64 * 8  # int64 class indices, one per image
    loss_output = 4  # the fp32 scalar the loss saves
    assert find_variant("ch11.q2").expected * MIB == step.peak - targets
    assert find_variant("ch11.q1").expected * MIB == step.components["saved_activations"] - (
        loss_output
    )


def test_ch12_gpt2_parameters_are_hugging_faces():
    """GPT-2 small and medium, built by transformers from their configs (no weights loaded)."""
    transformers = pytest.importorskip("transformers")
    for size, (layers, width, heads) in {"small": (12, 768, 12), "medium": (24, 1024, 16)}.items():
        config = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=heads)
        with torch.device("meta"):
            model = transformers.GPT2LMHeadModel(config)
        counted = sum(p.numel() for p in model.parameters())  # the tied head counted once
        variant = find_variant("ch12.q1")
        exercise = variant.exercise
        params = type(variant.params)(size=size)
        assert type(variant)("ch12", exercise, None, params).expected == counted, size


@pytest.mark.parametrize("inplace", [False, True])
def test_ch10_relu_pair_saves_what_autograd_keeps(inplace):
    """ch10.q3: a padded 3x3 conv (3 -> 16 channels, 32x32) and its ReLU, in place or not.

    The saved activations measured on the CPU (loss: the output's sum, which saves nothing) are
    the ReLU's output, whichever ReLU: the exercise's answer for either variant.
    """
    from memtheory.exercises import Params
    from memtheory.exercises.loader import get_set
    from memtheory.exercises.model import Variant

    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(inplace=inplace))
    step = measure(module, torch.randn(1, 3, 32, 32), loss=lambda out: out.sum(), optimizer="sgd")
    relu = "ReLU(inplace=True)" if inplace else "ReLU()"
    exercise = get_set("ch10").exercise("q3")
    variant = Variant("ch10", exercise, None, Params(relu=relu, size=32, filters=16))
    assert variant.expected * 4 == step.components["saved_activations"]
