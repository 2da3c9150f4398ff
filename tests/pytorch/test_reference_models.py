"""memtheory's builders against PyTorch modules written independently in reference_models.py.

Every parameter tensor (name, shape, order), every layer's output shape and
the parameter totals are compared at small sizes on CPU and, for the real
models, at full size on the meta device (no memory, no download), where the
totals are also checked against the published figures.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sympy as sp

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from torch import nn  # noqa: E402

from memtheory.models import (  # noqa: E402
    bert_base_mlm,
    gpt2,
    mobilenet_v2,
    resnet18,
    resnet34,
    resnet50,
    vit_b_16,
)
from memtheory.network import Network, parameter_shapes  # noqa: E402
from memtheory.validation.reference_models import (  # noqa: E402
    BATCH,
    PAIRS,
    BertMLMReference,
    GPT2Reference,
    MobileNetV2Reference,
    ResNetReference,
    ViTReference,
)


def _memtheory_parameters(network: Network) -> list[tuple[str, tuple[int, ...]]]:
    return [(name, tuple(int(d) for d in shape)) for name, shape in parameter_shapes(network)]


def _torch_parameters(module: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    return [(name, tuple(p.shape)) for name, p in module.named_parameters()]


@pytest.mark.parametrize("name", list(PAIRS))
def test_pair_has_the_same_parameter_tensors(name):
    """Same parameter names, shapes and order as named_parameters(), and the same total."""
    pair = PAIRS[name]
    module, network = pair.build_module(), pair.build_network()
    assert _memtheory_parameters(network) == _torch_parameters(module)
    assert network.parameter_count == sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", list(PAIRS))
def test_pair_has_the_same_output_shape_at_every_layer(name):
    """A forward hook on every leaf module sees the shape of the memtheory layer of its name."""
    pair = PAIRS[name]
    module, network = pair.build_module(), pair.build_network()
    seen: dict[str, tuple[int, ...]] = {}

    def hook(path: str) -> Callable[..., None]:
        def record(_module: nn.Module, _inputs: object, output: object) -> None:
            tensor = output[0] if isinstance(output, tuple) else output
            assert isinstance(tensor, torch.Tensor)
            seen[path] = tuple(tensor.shape)

        return record

    leaves = [
        (path, m)
        for path, m in module.named_modules()
        if path
        and (not list(m.children()) or isinstance(m, nn.MultiheadAttention))
        and not path.endswith(".out_proj")
    ]
    for path, leaf in leaves:
        leaf.register_forward_hook(hook(path))
    output = module(pair.example_input())
    assert len(seen) == len(leaves) > 5
    rows = {row.name: row for row in network.rows}
    assert set(seen) <= set(rows), set(seen) - set(rows)
    for path, shape in seen.items():
        assert tuple(int(d) for d in rows[path].output_shape) == shape, path
    before_loss = network.rows[-2]
    assert tuple(int(d) for d in before_loss.output_shape) == tuple(output.shape)
    assert output.shape[0] == BATCH


@pytest.mark.parametrize("name", list(PAIRS))
def test_pair_trains_with_its_loss(name):
    """The module, its example batch and its loss run a backward pass; the loss is a scalar."""
    pair = PAIRS[name]
    module = pair.build_module()
    network = pair.build_network()
    loss = pair.loss(module(pair.example_input()), pair.example_target())
    loss.backward()
    assert loss.shape == () == network.output_shape
    assert all(p.grad is not None for p in module.parameters())


# -- the real models, full size, on the meta device -------------------------------------------
# Published totals: torchvision's model cards (the "num_params" of each weights enum:
# ResNet18_Weights.IMAGENET1K_V1 and so on); GPT-2 small: Hugging Face gpt2 (GPT2LMHeadModel,
# lm_head tied); BERT: bert-base-uncased BertForMaskedLM, 109,514,298 (BertModel without the
# pooler, 108,891,648, plus the head's dense 768 x 768 + 768, its LayerNorm 2 x 768 and the
# decoder bias 30,522; Hugging Face `transformers` is not installed here to build it).
REAL_MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], Network], int]] = {
    "ResNet-18": (
        lambda: ResNetReference("basic", (2, 2, 2, 2)),
        lambda: resnet18(batch=1),
        11_689_512,
    ),
    "ResNet-34": (
        lambda: ResNetReference("basic", (3, 4, 6, 3)),
        lambda: resnet34(batch=1),
        21_797_672,
    ),
    "ResNet-50": (
        lambda: ResNetReference("bottleneck", (3, 4, 6, 3)),
        lambda: resnet50(batch=1),
        25_557_032,
    ),
    "MobileNetV2": (MobileNetV2Reference, lambda: mobilenet_v2(batch=1), 3_504_872),
    "ViT-B/16": (ViTReference, lambda: vit_b_16(batch=1), 86_567_656),
    "BERT-base MLM": (BertMLMReference, lambda: bert_base_mlm(batch=1, sequence=512), 109_514_298),
    "GPT-2 small": (GPT2Reference, lambda: gpt2("small", batch=1, sequence=1024), 124_439_808),
}


@pytest.mark.parametrize("name", list(REAL_MODELS))
def test_real_model_matches_its_reference_and_the_published_count(name):
    """Full size on the meta device: same tensors as the reference, the published total."""
    build_module, build_network, published = REAL_MODELS[name]
    with torch.device("meta"):
        module = build_module()
    network = build_network()
    assert _memtheory_parameters(network) == _torch_parameters(module)
    assert network.parameter_count == sum(p.numel() for p in module.parameters()) == published


def test_bert_mlm_head_shares_the_word_embedding_matrix():
    """The decoder is tied: its matrix is not a parameter of its own."""
    with torch.device("meta"):
        module = BertMLMReference(layers=1, hidden=8, heads=2, vocabulary=11)
    names = [name for name, _ in module.named_parameters()]
    assert "cls.predictions.decoder.bias" in names
    assert not any(n.startswith("cls.predictions.decoder.weight") for n in names)
    network = bert_base_mlm()
    assert sp.Integer(network["cls.predictions.decoder"].weights) == 0


@pytest.mark.parametrize(
    "name",
    ["ResNet-18-style", "ResNet-50-style", "MobileNetV2-style", "BERT-MLM-style", "GPT-2-style"],
)
def test_pair_saves_exactly_what_memtheory_says(name):
    """Network.saved_tensors() of the builder is measure()'s saved activations, to the byte.

    Measured with memtheory.torch.measure at fp32 (SGD); the cross-entropy's saved tensors
    include PyTorch's NLL ``total_weight`` (one fp32 value), as the autograd convention's. The
    ViT pair is left out: its head reads ``x[:, 0]``, a view that keeps the whole
    ``(batch, sequence, hidden)`` storage of the final LayerNorm alive, where
    ``Network.saved_tensors()`` counts the view's ``(batch, hidden)`` (issue 10's storage model).
    """
    from memtheory.dtypes import dtype
    from memtheory.torch import measure

    pair = PAIRS[name]
    module, network = pair.build_module(), pair.build_network()
    measured = measure(
        module,
        pair.example_input(),
        pair.loss,
        torch.optim.SGD(module.parameters(), lr=0.01),
        target=pair.example_target(),
        warmup_steps=0,
    )
    data = {network.rows[0].name}
    predicted = sum(
        int(t.spec.nbytes(dtype("fp32")))
        for t in network.saved_tensors()
        if t.owner not in data and t.spec.role != "target"
    )
    assert predicted == measured.saved_activations
