"""Differential: a trace of each builder's PyTorch twin against the autograd convention.

The autograd convention derives a builder's training step from memtheory's
layer descriptions; the trace follows the twin module's real PyTorch step on
fake tensors. Neither reads the other, so agreement checks both. For the
transformer builders the comparison is symbolic in the batch ``B`` and the
sequence ``S``; for the image builders in ``B`` (the image size is fixed by
the ViT's position table, and kept fixed for all image models alike). Each
component must be the same expression; the peaks (a ``Max`` of many
candidates each side, written differently) must agree at every batch from 2
to 15 (for the language models at four (B, S) pairs from 2 to 40), the
range where the trace holds (CPU convolutions choose their kernel by batch:
``B < 16``).

The one difference found, shown and explained: the caller's tensors. For the
language models the convention counts the input tokens and the targets as two
storages (``input`` and ``targets``, one int64 per token each), as a training
loop that feeds separate label tensors holds them (Hugging Face's collators
pass ``input_ids.clone()``). A loop that passes the input tensor itself as
the targets (``loss(model(ids), ids)``) holds a single storage; the trace and
:func:`memtheory.torch.measure` follow the tensors they are given, so their
peak is then exactly ``8*B*S`` bytes lower than the convention's, while every
component (``input`` and ``targets`` included) still agrees. The comparison
below therefore traces with separate targets and asserts 0 bytes everywhere;
:func:`test_targets_that_are_the_input_tensor_are_one_storage` measures both
loops and asserts the ``8*B*S`` explicitly, so a change on either side is seen.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import sympy as sp  # noqa: E402

from memtheory import training_memory  # noqa: E402
from memtheory.layers import CrossEntropyLoss  # noqa: E402
from memtheory.models import bert, gpt2, mobilenet_v2, resnet, vision_transformer  # noqa: E402
from memtheory.models.gpt2 import GPT2Config  # noqa: E402
from memtheory.symbols import B, S  # noqa: E402
from memtheory.torch import measure, torch_optimizer, trace  # noqa: E402
from memtheory.validation import PAIRS  # noqa: E402
from memtheory.validation.reference_models import as_measured  # noqa: E402

_IMAGE = {"ResNet-50-style": 36, "MobileNetV2-style": 40, "ViT-style": 24}


def _symbolic_network(name: str):
    """The builder's network of PAIRS[name] with the batch (and sequence) left symbolic."""
    loss = CrossEntropyLoss(name="loss")
    if name == "ResNet-50-style":
        net = resnet((2, 1, 1, 1), block="bottleneck", width=4, image_size=36, batch=B, classes=7)
    elif name == "MobileNetV2-style":
        setting = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2))
        net = mobilenet_v2(width_mult=0.25, setting=setting, image_size=40, batch=B, classes=10)
    elif name == "ViT-style":
        net = vision_transformer(image_size=24, batch=B, patch_size=8, layers=2, hidden=32,
                                 heads=4, mlp_dim=48, classes=5)
    elif name == "BERT-MLM-style":
        net = bert(layers=2, hidden=32, heads=4, vocabulary=101, positions=40, batch=B,
                   sequence=S, pooler=False, mlm_head=True, loss=True)
        return as_measured(net, None)
    else:
        config = GPT2Config(layers=2, hidden=32, heads=4, vocabulary=97, positions=40)
        return as_measured(gpt2(config, batch=B, sequence=S, loss=True), None)
    return as_measured(net, loss)


def _traced(name: str):
    pair = PAIRS[name]
    module = pair.build_module()
    if name in _IMAGE:
        side = _IMAGE[name]
        x, y = torch.randn(5, 3, side, side), torch.randint(0, 5, (5,))
        dims = {"B": 5}
    else:  # separate label tensors, as the convention counts them (module docstring)
        x, y = torch.randint(0, 30, (5, 11)), torch.randint(0, 30, (5, 11))
        dims = {"B": 5, "S": 11}
    return trace(module, x, dims, loss=pair.loss, target=y, optimizer="adam")


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["GPT-2-style", "BERT-MLM-style", "ResNet-50-style", "ViT-style", "MobileNetV2-style"]
)
def test_trace_equals_the_autograd_convention(name):
    """Every component is the same expression; the peak agrees at every batch where both hold."""
    traced = _traced(name)
    derived = training_memory(_symbolic_network(name), optimizer="adam", convention="autograd")
    assert set(traced.components) == {k for k, v in derived.components.items() if v != 0}
    for component, value in traced.components.items():
        assert sp.expand(value - derived[component]) == 0, component
    language_model = S in traced.free_symbols
    grid = [(2, 2), (5, 11), (15, 40), (3, 40)] if language_model else [
        (batch, None) for batch in range(2, 16)
    ]
    for batch, sequence in grid:
        values = {"B": batch} if sequence is None else {"B": batch, "S": sequence}
        assert derived.evaluate(**values).peak == traced.evaluate(**values).peak, values


@pytest.mark.slow
@pytest.mark.parametrize("name", ["GPT-2-style", "BERT-MLM-style"])
def test_targets_that_are_the_input_tensor_are_one_storage(name):
    """The input tensor passed as its own targets: one storage, a peak ``8*B*S`` bytes lower.

    Measured at a size of its own: with separate targets (a clone) the peak is
    the convention's to the byte; with the input tensor itself it is lower by
    one int64 per token, the targets' storage.
    """
    pair, (batch, sequence) = PAIRS[name], (3, 7)
    derived = training_memory(_symbolic_network(name), optimizer="adam", convention="autograd")
    predicted = derived.evaluate(B=batch, S=sequence)
    tokens = torch.randint(0, 30, (batch, sequence))
    peaks = {}
    for loop, targets in (("separate", tokens.clone()), ("shared", tokens)):
        module = pair.build_module()
        measured = measure(module, tokens, pair.loss,
                           torch_optimizer("adam", module.parameters()), target=targets)
        assert (measured.input, measured.targets) == (predicted["input"], predicted["targets"])
        peaks[loop] = measured.peak
    token_bytes = batch * sequence * tokens.element_size()
    assert tokens.dtype == torch.int64 and predicted["targets"] == token_bytes
    assert peaks == {"separate": predicted.peak, "shared": predicted.peak - token_bytes}
