"""Mixtral's mixture of experts under the autograd convention against measure() on transformers.

transformers 5.24 builds ``MixtralForCausalLM`` from a tiny configuration
(no download) with its default experts implementation, ``grouped_mm``
(``torch.nn.functional.grouped_mm`` on CPU with PyTorch 2.13), and
``memtheory.torch.measure`` runs one training step on CPU with random token
ids. memtheory predicts the step from ``from_config(config, loss=True)``. In
the grouped path every tensor has the B*S*k routed rows whatever the router
picks, so the step must be exact for every routing: balanced, random, and
skewed so that every token goes to the same experts (the busiest expert then
gets all B*S rows, the worst case of a per-expert loop). The skew is forced
by a bias added in place to the router's logits (a shape-preserving edit
that allocates nothing); a forward hook on the router records how many rows
each expert got, so the test can see the routing it asked for.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from hf_decoders import NAMES, Logits, compared, decoder_step, torch_optimizer  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention, autocast_precision  # noqa: E402
from memtheory.errors import InvalidArgumentError, UnsupportedError  # noqa: E402
from memtheory.models import from_config  # noqa: E402
from memtheory.torch import Measurement, measure  # noqa: E402
from memtheory.torch.hf_losses import causal_lm_loss  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

EXPERTS, TOP_K = 4, 2
TINY = {"model_type": "mixtral", "vocab_size": 50, "hidden_size": 32, "intermediate_size": 40,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 128, "tie_word_embeddings": False,
        "num_local_experts": EXPERTS, "num_experts_per_tok": TOP_K}


def _biased_router(router: nn.Module, bias: torch.Tensor) -> None:
    """Make ``MixtralTopKRouter`` add ``bias`` to its logits in place (its forward otherwise).

    The in-place add allocates nothing and the linear map's backward does
    not read its output, so the step keeps the same storages.
    """

    def forward(hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden_states = hidden_states.reshape(-1, router.hidden_dim)
        router_logits = nn.functional.linear(hidden_states, router.weight)
        router_logits.add_(bias.to(router_logits.dtype))
        router_probs = torch.nn.functional.softmax(router_logits.float(), dim=-1)
        top_value, indices = torch.topk(router_probs, router.top_k, dim=-1)
        top_value /= top_value.sum(dim=-1, keepdim=True)
        return router_logits, top_value, indices

    router.forward = forward


def _measured(precision: str, batch: int, sequence: int, biases: list[list[float]] | None = None,
              seed: int = 0, experts: str = "grouped_mm", record: bool = False
              ) -> tuple[Measurement, list[list[int]]]:
    """Measure one step of the tiny Mixtral; return it and each layer's rows per expert."""
    values = {k: v for k, v in TINY.items() if k != "model_type"}
    chosen = {} if experts == "grouped_mm" else {"experts_implementation": experts}
    hf = transformers.AutoConfig.for_model("mixtral", attn_implementation="eager", **chosen,
                                           **values)
    torch.manual_seed(seed)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = transformers.AutoModelForCausalLM.from_config(hf)
    assert model.config._experts_implementation == experts  # grouped_mm: transformers' default
    counts: list[list[int]] = []
    for number, layer in enumerate(model.model.layers):
        if biases is not None:
            _biased_router(layer.mlp.gate, torch.tensor(biases[number]))
        layer.mlp.gate.register_forward_hook(
            lambda _m, _i, out: counts.append(
                torch.bincount(out[2].flatten(), minlength=EXPERTS).tolist()
            )
        )
    module = Logits(model).to(dtype).train()
    ids = torch.randint(0, TINY["vocab_size"], (batch, sequence))
    measured = measure(module, ids, causal_lm_loss, torch_optimizer("sgd", module.parameters()),
                       target=ids.clone(), warmup_steps=1, record=record)
    return measured, counts[-len(model.model.layers):]


def _step(precision: str, batch: int, sequence: int, biases: list[list[float]] | None = None,
          seed: int = 0) -> tuple[dict[str, int], dict[str, int], list[list[int]]]:
    """Return (predicted, measured) components and peak, and each layer's rows per expert."""
    measured, counts = _measured(precision, batch, sequence, biases, seed)
    network = from_config(TINY, batch=batch, sequence=sequence, loss=True)
    predicted = mt.training_memory(network, optimizer="sgd", precision=precision,
                                   convention=AutogradConvention(measured.implementation))
    got = {n: int(predicted.components.get(n, 0)) for n in NAMES}
    want = {n: int(getattr(measured, n)) for n in NAMES}
    got["peak"], want["peak"] = int(predicted.peak), int(measured.peak)
    return got, want, counts


@pytest.mark.parametrize(("precision", "batch", "sequence"),
                         [("fp32", 2, 6), ("bf16", 2, 6), ("fp32", 3, 5)])
def test_grouped_experts_step_is_exact(precision, batch, sequence):
    """Every component and the step's peak equal what PyTorch keeps, byte for byte."""
    got, want, counts = _step(precision, batch, sequence)
    assert all(sum(c) == batch * sequence * TOP_K for c in counts)  # k rows per token
    assert got == want


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_all_tokens_to_the_same_experts_is_exact(precision):
    """Skewed routing (two experts get every token) keeps exactly what balanced routing keeps."""
    batch, sequence = 2, 6
    skew = [[0.0, 0.0, 50.0, 60.0]] * TINY["num_hidden_layers"]
    got, want, counts = _step(precision, batch, sequence, skew)
    assert all(c == [0, 0, batch * sequence, batch * sequence] for c in counts)
    assert got == want
    balanced, _, _ = _step(precision, batch, sequence)
    assert balanced["peak"] == want["peak"]  # the routing changes nothing in the grouped path


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    biases=st.lists(st.lists(st.floats(-30, 30, allow_nan=False), min_size=EXPERTS,
                             max_size=EXPERTS), min_size=2, max_size=2),
    seed=st.integers(0, 2**16),
)
@pytest.mark.slow
def test_random_router_biases_never_exceed_the_prediction(biases, seed):
    """Over random router biases (from balanced to every token on the same experts): exact.

    The prediction is one number for every routing, so it is both the upper
    bound and the balanced case; the tracked peak must equal it (hence lie
    within [balanced, bound]) whatever the rows per expert.
    """
    got, want, counts = _step("fp32", 2, 5, biases, seed)
    busiest = max(max(c) for c in counts)
    assert math.ceil(2 * 5 * TOP_K / EXPERTS) <= busiest <= 2 * 5
    assert want["peak"] <= got["peak"]
    assert got == want


def test_autocast_is_refused_with_the_reason():
    """Under autocast grouped_mm casts its input to the fp32 experts: not measured, refused."""
    network = from_config(TINY, batch=2, sequence=6, loss=True)
    with pytest.raises(UnsupportedError, match="grouped_mm"):
        mt.training_memory(network, optimizer="sgd", precision=autocast_precision(),
                           convention="autograd")



def test_the_eager_experts_loop_is_refused_with_the_reason():
    """experts_implementation='eager' is a layer option, refused: never answered as grouped."""
    from memtheory import Dense, Input, Network
    from memtheory.layers import MixtureOfExperts
    from memtheory.symbols import S

    eager = MixtureOfExperts(4, top_k=2, ffn_hidden=8, router="mixtral", implementation="eager")
    with pytest.raises(UnsupportedError, match="eager experts loop.*select_backward"):
        mt.training_memory(Network([Input((S, 16)), Dense(16), eager]), optimizer="sgd",
                           convention="autograd")
    with pytest.raises(InvalidArgumentError, match="grouped_mm"):
        MixtureOfExperts(4, top_k=2, ffn_hidden=8, implementation="loop")


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_eager_loop_peak_follows_the_routing(precision):
    """Why the eager loop is refused: measured on transformers' loop over the experts.

    Its saved tensors are the same under every routing, but each hit
    expert's backward makes a full (E, 2f, h) gradient of ``gate_up_proj``
    (``select_backward``), so its peak changes with the experts hit: with
    every expert hit it lies at least two such tensors above the grouped
    path's, which keeps one.
    """
    batch, sequence = 2, 6
    natural, counts = _measured(precision, batch, sequence, experts="eager", record=True)
    skew = [[0.0, 0.0, 50.0, 60.0]] * TINY["num_hidden_layers"]
    skewed, skewed_counts = _measured(precision, batch, sequence, skew, experts="eager")
    grouped, _ = _measured(precision, batch, sequence)
    assert all(min(c) > 0 for c in counts)  # every expert hit in every layer
    assert all(c == [0, 0, batch * sequence, batch * sequence] for c in skewed_counts)
    assert natural.saved_activations == skewed.saved_activations
    assert natural.peak != skewed.peak
    full = EXPERTS * 2 * TINY["intermediate_size"] * TINY["hidden_size"] * (
        2 if precision == "bf16" else 4)
    timeline = natural.timeline
    grown = [after[2] - before[2] for before, after in zip(timeline, timeline[1:], strict=False)
             if after[1] == "aten.select_backward.default"]
    assert full in grown
    assert natural.peak >= grouped.peak + 2 * full


QWEN = {"vocab_size": 50, "hidden_size": 32, "intermediate_size": 48, "head_dim": 8,
        "moe_intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 128, "tie_word_embeddings": False,
        "num_experts": EXPERTS, "num_experts_per_tok": TOP_K}


@pytest.mark.parametrize(
    ("family", "norm_topk_prob", "precision"),
    [("qwen3_moe", True, "fp32"), ("qwen3_moe", True, "bf16"), ("qwen3_moe", False, "bf16"),
     ("olmoe", False, "bf16")],
)
def test_qwen_router_step_is_exact(family, norm_topk_prob, precision):
    """Qwen3-MoE and OLMoE (weights cast back to the model's dtype, optional renorm): exact."""
    config = {**QWEN, "model_type": family, "norm_topk_prob": norm_topk_prob}
    if family == "olmoe":
        config["intermediate_size"] = config.pop("moe_intermediate_size")
    predicted, measured = decoder_step(config, precision, "sgd", 2, 6)
    got, want = compared(predicted, measured)
    assert got == want


#: An untuned second size: other widths, 6 experts with top 3 and renormalised
#: weights, a grouped-query attention of one key/value head, and a dense layer
#: between two sparse ones (``mlp_only_layers``). Widths keep grouped_mm's rows
#: a multiple of 16 bytes in bf16 (24 * 2 = 48), which its CPU kernel requires.
QWEN2_UNTUNED = {"model_type": "qwen2_moe", "vocab_size": 71, "hidden_size": 48,
                 "intermediate_size": 56, "head_dim": 12, "moe_intermediate_size": 24,
                 "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 1,
                 "max_position_embeddings": 128, "tie_word_embeddings": False,
                 "num_experts": 6, "num_experts_per_tok": 3,
                 "shared_expert_intermediate_size": 36, "mlp_only_layers": [1],
                 "norm_topk_prob": True}


@pytest.mark.parametrize(("config", "precision", "batch", "sequence"), [
    ({**QWEN, "model_type": "qwen2_moe", "shared_expert_intermediate_size": 24}, "fp32", 2, 6),
    ({**QWEN, "model_type": "qwen2_moe", "shared_expert_intermediate_size": 24}, "bf16", 2, 6),
    pytest.param(QWEN2_UNTUNED, "fp32", 3, 7, marks=pytest.mark.slow),
    pytest.param(QWEN2_UNTUNED, "bf16", 3, 7, marks=pytest.mark.slow),
])
def test_qwen2_moe_shared_expert_gate_is_exact(config, precision, batch, sequence):
    """Qwen2-MoE: routed experts plus the sigmoid-gated shared expert, 0 bytes off, peak included.

    ``Qwen2MoeSparseMoeBlock`` runs the shared expert first, then the router
    and the experts, then ``sigmoid(shared_expert_gate(x)) * shared``; the
    order fixes which gradients are alive while the experts' backward runs.
    """
    predicted, measured = decoder_step(config, precision, "sgd", batch, sequence)
    got, want = compared(predicted, measured)
    assert got == want


@pytest.mark.parametrize(("precision", "batch", "sequence"), [
    ("bf16", 2, 6), pytest.param("bf16", 2, 40, marks=pytest.mark.slow)])
def test_lora_on_the_attention_with_frozen_experts_is_exact(precision, batch, sequence):
    """LoRA on q/v of a tiny Mixtral, router and experts frozen: 0 bytes off, peak included.

    Frozen, the router's linear map and the grouped products keep no input
    for a weight gradient. (In fp32 at these sizes the step peaks in the
    forward: the next test.)
    """
    from test_lora_decoder_measured import ATTENTION, _measure_and_predict
    from test_lora_decoder_measured import NAMES as LORA_NAMES
    from test_lora_decoder_measured import TINY as LORA_TINY

    config = {**LORA_TINY, "model_type": "mixtral", "num_key_value_heads": 2,
              "num_local_experts": EXPERTS, "num_experts_per_tok": TOP_K}
    predicted, measured = _measure_and_predict(config, ATTENTION, 4, 8, precision, batch,
                                               sequence)
    got = {n: int(predicted.components.get(n, 0)) for n in LORA_NAMES}
    want = {n: getattr(measured, n) for n in LORA_NAMES}
    got["peak"], want["peak"] = int(predicted.peak), measured.peak
    assert predicted.peak_moment.startswith("backward")
    assert got == want


def test_an_unstated_router_is_refused_naming_the_fix():
    """DeepSeek's builder states no router: the autograd convention refuses, naming the fix."""
    from memtheory import Dense, Input, Network
    from memtheory.layers import MixtureOfExperts
    from memtheory.symbols import S

    layers = [Input((S, 16)), Dense(16), MixtureOfExperts(4, top_k=2, ffn_hidden=8, name="moe")]
    with pytest.raises(UnsupportedError, match="router='mixtral'"):
        mt.training_memory(Network(layers), optimizer="sgd", convention="autograd")
    stated = [*layers[:2], MixtureOfExperts(4, top_k=2, ffn_hidden=8, router="mixtral")]
    assert mt.training_memory(Network(stated), optimizer="sgd", convention="autograd").peak != 0


@pytest.mark.parametrize(("batch", "sequence"), [
    (2, 6), pytest.param(3, 5, marks=pytest.mark.slow)])
def test_lora_fp32_step_peaks_in_the_forward_exactly(batch, sequence):
    """LoRA on q/v in fp32: 0 bytes off; at B=2, S=6 it peaks in the last experts' forward.

    There ``MixtralModel.forward`` still holds ``inputs_embeds`` (the frozen
    embedding's output, which no backward node keeps), the positions and the
    eager causal mask in its variables; at B=2, S=6 the prediction missed
    them and was 56 B low.
    """
    from test_lora_decoder_measured import ATTENTION, _measure_and_predict
    from test_lora_decoder_measured import NAMES as LORA_NAMES
    from test_lora_decoder_measured import TINY as LORA_TINY

    config = {**LORA_TINY, "model_type": "mixtral", "num_key_value_heads": 2,
              "num_local_experts": EXPERTS, "num_experts_per_tok": TOP_K}
    predicted, measured = _measure_and_predict(config, ATTENTION, 4, 8, "fp32", batch,
                                               sequence)
    got = {n: int(predicted.components.get(n, 0)) for n in LORA_NAMES}
    want = {n: getattr(measured, n) for n in LORA_NAMES}
    got["peak"], want["peak"] = int(predicted.peak), measured.peak
    assert got == want
    if (batch, sequence) == (2, 6):  # at 3 x 5 the backward's unsorting sets the peak
        assert measured.peak_moment.startswith("forward")
        assert predicted.peak_moment.startswith("forward model.layers.1.mlp")

