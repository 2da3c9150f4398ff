"""What the builders' new layers say they save, against what PyTorch 2.13's autograd saves.

Each check runs the PyTorch operations the layer stands for under
``torch.autograd.graph.saved_tensors_hooks`` and sorts the saved storages into
the input's, the output's and new ones, with their bytes and dtypes.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.dtypes import dtype as mt_dtype  # noqa: E402
from memtheory.torch.hf_losses import causal_lm_loss, masked_lm_loss  # noqa: E402

TORCH_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.int64: "int64"}


def _saved(run, inputs):
    """Return the output and (role, bytes, dtype name) of every distinct saved storage."""
    found: dict[int, torch.Tensor] = {}

    def pack(tensor):
        found.setdefault(tensor.untyped_storage().data_ptr(), tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = run(*inputs)
    input_ptrs = {t.untyped_storage().data_ptr() for t in inputs}
    output_ptr = output.untyped_storage().data_ptr()
    saved = []
    for ptr, tensor in found.items():
        if tensor.numel() == 1 and tensor.dim() == 0:
            continue  # nll_loss's total_weight, added by the autograd convention
        role = "input" if ptr in input_ptrs else "output" if ptr == output_ptr else "new"
        saved.append((role, tensor.untyped_storage().nbytes(), TORCH_NAMES[tensor.dtype]))
    return output, sorted(saved)


def _claimed(layer, shape, activation_dtype):
    claims = []
    for spec in layer.saved_for_backward(shape):
        role = spec.role if spec.role in ("input", "output") else "new"
        if spec.role == "target":
            role = "input"
        kind = spec.dtype or mt_dtype(activation_dtype)
        claims.append((role, int(spec.nbytes(kind)), kind.name))
    return sorted(claims)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_relu6(inplace, dtype):
    """Out of place it keeps its input; in place, a copy of the input it overwrites."""
    x = torch.randn(3, 5, 4, 4, dtype=dtype, requires_grad=True) * 1
    output, saved = _saved(lambda t: nn.ReLU6(inplace=inplace)(t), (x,))
    layer = mt.layers.ReLU6(inplace=inplace)
    assert saved == _claimed(layer, tuple(x.shape), TORCH_NAMES[dtype])
    assert (output.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) == inplace


def test_patches_class_token_and_positions_keep_nothing():
    """Reshape + permute is a view; cat and the broadcast sum keep nothing for backward."""
    image = torch.randn(3, 8, 2, 3, requires_grad=True) * 1
    token = nn.Parameter(torch.randn(1, 1, 8))
    table = nn.Parameter(torch.randn(1, 7, 8))

    def run(x):
        sequence = x.reshape(3, 8, -1).permute(0, 2, 1)
        with_token = torch.cat([token.expand(3, -1, -1), sequence], dim=1)
        return with_token + table

    output, saved = _saved(run, (image,))
    assert saved == []
    assert tuple(output.shape) == mt.layers.LearnedPositions(7).output_shape(
        mt.layers.ClassToken().output_shape(mt.layers.PatchSequence().output_shape((3, 8, 2, 3)))
    )
    sequence = image.reshape(3, 8, -1).permute(0, 2, 1)
    assert sequence.untyped_storage().data_ptr() == image.untyped_storage().data_ptr()
    assert not mt.layers.PatchSequence().stores_output()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_lm_loss(dtype):
    """fp32 log-probabilities (whatever the logits' dtype) and a shifted int64 label copy."""
    logits = torch.randn(2, 5, 13, dtype=dtype, requires_grad=True) * 1
    labels = torch.randint(0, 13, (2, 5))
    _, saved = _saved(lambda t, y: causal_lm_loss(t, y), (logits, labels))
    assert saved == _claimed(mt.layers.LanguageModelLoss(), (2, 5, 13), TORCH_NAMES[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masked_lm_loss(dtype):
    """Log-probabilities in the logits' dtype, and the labels themselves."""
    logits = torch.randn(2, 5, 13, dtype=dtype, requires_grad=True) * 1
    labels = torch.randint(0, 13, (2, 5))
    _, saved = _saved(lambda t, y: masked_lm_loss(t, y), (logits, labels))
    layer = mt.layers.LanguageModelLoss(shift=False, upcast=False)
    assert saved == _claimed(layer, (2, 5, 13), TORCH_NAMES[dtype])


@pytest.mark.parametrize("size", [1, 2, (3, 2)])
def test_adaptive_average_pooling(size):
    """A 1x1 output is a mean (keeps nothing); other sizes keep the input."""
    x = torch.randn(3, 4, 6, 6, requires_grad=True) * 1
    _, saved = _saved(lambda t: nn.AdaptiveAvgPool2d(size)(t), (x,))
    assert saved == _claimed(mt.layers.AdaptiveAvgPool2d(size), tuple(x.shape), "fp32")


def test_from_module_converts_relu6():
    """nn.ReLU6 (in place or not) becomes memtheory's ReLU6."""
    from memtheory.torch import from_module

    module = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU6(inplace=True), nn.Flatten(), nn.ReLU6())
    net = from_module(module, (2, 3, 8, 8))
    relus = [layer for layer in net.layers if layer.kind == "ReLU6"]
    assert [layer.inplace for layer in relus] == [True, False]


def _relu6_stack() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, 2, 1),
        nn.ReLU6(inplace=True),
        nn.Conv2d(8, 8, 3, 1, 1, groups=8),
        nn.ReLU6(),
        nn.Conv2d(8, 16, 1),
        nn.ReLU6(inplace=True),
        nn.Flatten(),
        nn.Linear(16 * 9 * 9, 7),
    ).train()


def _relu6_network() -> mt.Network:
    return mt.Network(
        [
            mt.Input((3, 17, 17), batch=3),
            mt.Conv2d(8, 3, stride=2, padding=1),
            mt.layers.ReLU6(inplace=True),
            mt.Conv2d(8, 3, padding=1, groups=8),
            mt.layers.ReLU6(),
            mt.Conv2d(16, 1),
            mt.layers.ReLU6(inplace=True),
            mt.Flatten(),
            mt.Dense(7),
            mt.CrossEntropyLoss(),
        ]
    )


@pytest.mark.parametrize("precision", ["fp32", "bf16", "autocast-bf16"])
def test_autograd_convention_is_exact_on_a_depthwise_relu6_stack(precision):
    """In-place ReLU6's saved copy of its input is in the measured peak, byte for byte."""
    from memtheory.validation.accuracy import compare_with_measurement
    from memtheory.validation.zoo import ZooModel

    entry = ZooModel("ReLU6 stack", "", _relu6_stack, (3, 3, 17, 17), 7, _relu6_network)
    comparison = compare_with_measurement(
        entry, precision=precision, optimizer="adam", conventions=("autograd",)
    )
    assert comparison.predicted("autograd", "peak") == comparison.measured("peak")


def test_from_module_converts_adaptive_average_pooling():
    """nn.AdaptiveAvgPool2d(1) becomes AdaptiveAvgPool2d((1, 1)); output_size None is refused."""
    from memtheory.errors import UnsupportedError
    from memtheory.torch import from_module

    net = from_module(nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1)), (2, 3, 8, 8))
    assert net.output_shape == (2, 4, 1, 1)
    with pytest.raises(UnsupportedError, match="output_size=None"):
        from_module(nn.Sequential(nn.AdaptiveAvgPool2d((None, 2))), (2, 3, 8, 8))


@pytest.mark.parametrize("causal", [True, False])
def test_lm_losses_under_cpu_autocast(causal):
    """Under CPU autocast the cross-entropy runs in fp32: fp32 log-probabilities either way."""
    from memtheory.layers.saved_storages import saved_storages

    logits = (torch.randn(2, 5, 13, requires_grad=True) * 1).bfloat16()
    labels = torch.randint(0, 13, (2, 5))
    loss = causal_lm_loss if causal else masked_lm_loss
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, saved = _saved(lambda t, y: loss(t, y), (logits, labels))
    loss_layer = mt.layers.LanguageModelLoss
    layer = loss_layer() if causal else loss_layer(shift=False, upcast=False)
    claimed = []
    for spec in saved_storages(layer, (2, 5, 13), dtype="bf16", autocast="bf16"):
        if spec.shape == ():
            continue  # nll_loss's total_weight, left out on the measured side too
        role = "input" if spec.role in ("input", "target") else "new"
        claimed.append((role, int(spec.nbytes(spec.dtype)), spec.dtype.name))
    assert saved == sorted(claimed)
