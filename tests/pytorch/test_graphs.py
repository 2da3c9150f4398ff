"""The autograd convention on random graph networks, byte for byte against measure().

Each drawn spec is built twice (tests/pytorch/graph_builder.py): as a memtheory
Network and as a PyTorch module whose forward() runs the same steps. Residual
blocks with and without a 1x1-conv + BN projection, in-place and new sums,
concatenations, a tensor read by two consumers, depthwise convolutions, BN,
dropout, GELU/SiLU/ReLU6, adaptive pooling; and sequence graphs: pre-norm
residual blocks of nn.MultiheadAttention or an MLP, LayerNorm or nn.RMSNorm,
dropout, a class-token head; cross-entropy, MSE, L1 or BCE with logits at the end.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from graph_builder import LOSSES, GraphSpec, build, graph_specs, sequence_specs  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention, autocast_precision  # noqa: E402
from memtheory.torch import measure  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

PRECISIONS = ("fp32", "bf16", "autocast")
OPTIMIZERS = {
    "sgd": lambda p, impl: torch.optim.SGD(p, lr=0.01, **impl),
    "sgd+momentum": lambda p, impl: torch.optim.SGD(p, lr=0.01, momentum=0.9, **impl),
    "adam": lambda p, impl: torch.optim.Adam(p, lr=0.001, **impl),
}
IMPLEMENTATIONS = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {}}


def compare(spec, precision, optimizer, implementation, *, known_gaps=False):
    """Predicted and measured bytes by category, for one spec and setting.

    ``known_gaps=False`` leaves out the one category a pinned known gap reads wrong (the
    training peak of a 16-bit step with attention dropout); True keeps it, for that gap's test.
    """
    torch.manual_seed(0)
    net, module = build(spec)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    module = module.to(dtype)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(*spec.input_shape(), generator=generator).to(dtype)
    if spec.loss == "cross_entropy":
        y = torch.randint(0, spec.classes, (spec.batch,), generator=generator)
    else:  # the caller's targets: the input's dtype (fp32 under autocast)
        y = torch.rand(spec.batch, spec.classes, generator=generator).to(dtype)
    options = dict(IMPLEMENTATIONS[implementation])
    if implementation == "fused":
        options = {"fused": True} if optimizer == "adam" else {"foreach": False}
    opt = OPTIMIZERS[optimizer](module.parameters(), options)
    measured = measure(
        module, x, LOSSES[spec.loss][1](), opt, target=y, warmup_steps=1,
        autocast=torch.bfloat16 if precision == "autocast" else None,
    )
    ours = autocast_precision() if precision == "autocast" else precision
    convention = AutogradConvention(measured.implementation)
    predicted = mt.training_memory(net, optimizer=optimizer, precision=ours,
                                   convention=convention)
    names = ("parameters", "gradients", "optimizer_state", "saved_activations")
    got = {n: int(predicted[n]) if n in predicted.components else 0 for n in names}
    got |= {"peak": int(predicted.peak)}
    want = {n: getattr(measured, n) for n in names}
    want |= {"peak": measured.peak}
    refused = any(  # inference refused: RMSNorm; attention off its eval fast path (odd heads)
        kind == "rms" or (kind == "attn" and options["heads"] % 2)
        for _, kind, options, _ in spec.steps
    )
    if not refused:  # the convention may still refuse (a bf16 query under autocast)
        try:
            inference = mt.inference_memory(net, precision=ours, convention=convention)
        except mt.UnsupportedError as error:
            assert precision == "autocast" and "skips its eval fast path" in str(error)
        else:
            got["inference"], want["inference"] = int(inference.peak), measured.inference_peak
    if not known_gaps and precision != "fp32" and any(
        kind == "attn" and options.get("p", 0) > 0 for _, kind, options, _ in spec.steps
    ):  # known gap, pinned by test_attention_math_path_transients_are_a_known_gap
        del got["peak"], want["peak"]
    got["targets"], want["targets"] = int(predicted["targets"]), measured.targets
    return got, want, measured


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph_specs(),
    st.sampled_from(PRECISIONS),
    st.sampled_from(sorted(OPTIMIZERS)),
    st.sampled_from(sorted(IMPLEMENTATIONS)),
)
def test_random_graphs_are_predicted_byte_for_byte(spec, precision, optimizer, implementation):
    """P, G, optimizer state, saved activations, training and inference peak: 0 bytes off."""
    got, want, measured = compare(spec, precision, optimizer, implementation)
    assert got == want, (spec, measured.peak_moment)


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sequence_specs(),
    st.sampled_from(PRECISIONS),
    st.sampled_from(sorted(OPTIMIZERS)),
    st.sampled_from(sorted(IMPLEMENTATIONS)),
)
def test_random_sequence_graphs_are_predicted_byte_for_byte(
    spec, precision, optimizer, implementation
):
    """Attention, LayerNorm/RMSNorm, dropout, every loss: 0 bytes off (inference where modelled)."""
    got, want, measured = compare(spec, precision, optimizer, implementation)
    assert got == want, (spec, measured.peak_moment)


@pytest.mark.xfail(
    strict=True,
    reason="with attention dropout in training, nn.MultiheadAttention runs its CPU math path "
    "as one node: at 16 bits its forward's fp32 upcasts (and its backward's temporaries) are "
    "not modelled, and a step whose peak falls inside it is read low (found by "
    "test_random_sequence_graphs with dropout drawn on attention)",
)
def test_attention_math_path_transients_are_a_known_gap():
    """Known gap: a bf16 step peaking inside the math path's forward."""
    spec = GraphSpec(3, 8, 4, sequence=True, loss="bce")
    spec.steps += [
        ("linear0", "linear", {"out": 8}, ("x",)),
        ("ln1", "ln", {}, ("linear0",)),
        ("attn2", "attn", {"heads": 2, "p": 0.25}, ("ln1",)),
        ("add3", "add", {"inplace": False, "block_input": "linear0"}, ("attn2", "linear0")),
        ("head", "head", {}, ("add3",)),
    ]
    got, want, _ = compare(spec, "bf16", "sgd", "for-loop", known_gaps=True)
    assert "peak" in got
    assert got == want


def test_autocast_attention_with_a_low_precision_query_is_refused_for_inference():
    """Under autocast, a bf16 query makes nn.MultiheadAttention skip its fast path: refused.

    The block is Linear -> LayerNorm -> attention: under CPU autocast the Linear's output is
    bf16 and the LayerNorm keeps it bf16, so the query's dtype differs from the fp32
    ``in_proj_bias`` and PyTorch runs the general path (no ``_native_multi_head_attention``
    in the dispatched operations). The convention modelled the fast path there and read the
    inference peak 56 bytes low (916 against 972 measured); it now refuses, with the reason.
    """
    spec = GraphSpec(2, 4, 2, sequence=True, loss="bce", classes=3)
    spec.steps += [
        ("linear0", "linear", {"out": 4}, ("x",)),
        ("ln1", "ln", {}, ("linear0",)),
        ("attn2", "attn", {"heads": 2, "p": 0.0}, ("ln1",)),
        ("add3", "add", {"inplace": False, "block_input": "linear0"}, ("attn2", "linear0")),
        ("head", "head", {}, ("add3",)),
    ]
    torch.manual_seed(0)
    net, module = build(spec)
    x = torch.randn(*spec.input_shape(), generator=torch.Generator().manual_seed(0))
    module.eval()

    class Operations(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), Operations() as seen:
        module(x)
    assert not any("native_multi_head_attention" in name for name in seen.names)
    with pytest.raises(mt.UnsupportedError, match="skips its eval fast path"):
        mt.inference_memory(net, precision=autocast_precision(), convention="autograd")
    training = mt.training_memory(net, optimizer="adam", precision=autocast_precision(),
                                  convention="autograd")
    assert training.peak > 0  # training is not affected: it never takes the fast path
