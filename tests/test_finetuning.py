"""Fine-tuning: LoRA counts, NF4 storage, 8-bit Adam, and the LoRA and QLoRA papers' figures.

Sources: Hu et al., "LoRA" (arXiv:2106.09685); Dettmers et al., "QLoRA"
(arXiv:2305.14314); Touvron et al., "LLaMA" (arXiv:2302.13971) Table 2 for
LLaMA-65B's shape; Brown et al., "GPT-3" (arXiv:2005.14165) Table 2.1 for
GPT-3 175B's; bitsandbytes' ``optim/optimizer.py`` for the 8-bit state layout.
"""

from __future__ import annotations

import math

import pytest
import sympy as sp

from memtheory import Dense, Input, Network, training_memory
from memtheory.counts import ModelCounts
from memtheory.errors import InvalidArgumentError, UnknownNameError, UnsupportedError
from memtheory.finetuning import (
    LoRA,
    adam8bit_state_bytes,
    apply_lora,
    constant_bits_per_parameter,
    finetune_memory,
    freeze,
    linear_maps,
    nf4_bytes,
)
from memtheory.models import GPT2Config, gpt2
from memtheory.precision import Precision

# LLaMA-65B (LLaMA paper, Table 2): width 8192, 80 layers, 64 heads; SwiGLU width 22016
# (2/3 * 4 * 8192 rounded up to a multiple of 256, Section 2.2); vocabulary 32,000.
L65, D65, F65, V65 = 80, 8192, 22016, 32000
LINEAR_65B = [(D65, D65)] * 4 + [(F65, D65)] * 2 + [(D65, F65)]  # q k v o, gate up, down


def llama65b_parameters() -> int:
    """LLaMA-65B's parameters from its shape: embeddings, untied head, 80 layers, norms."""
    per_layer = sum(a * b for a, b in LINEAR_65B) + 2 * D65
    return 2 * V65 * D65 + L65 * per_layer + D65


def test_llama65b_count_is_the_papers_65_2b():
    """The shape above gives the LLaMA paper's "65.2B" parameters (65,285,660,672, truncated)."""
    assert llama65b_parameters() // 10**8 == 652


def test_double_quantization_constants_are_0_127_bits():
    """QLoRA Section 3: 32/64 = 0.5 bits per parameter, and 8/64 + 32/(64*256) = 0.127 with DQ."""
    assert constant_bits_per_parameter(double_quant=False) == sp.Rational(1, 2)
    assert round(float(constant_bits_per_parameter()), 3) == 0.127
    # and the byte formula agrees for a tensor of whole blocks
    n = 64 * 256 * 10
    assert nf4_bytes(n) * 8 == n * (4 + constant_bits_per_parameter())


def test_double_quantization_saves_about_3_gb_on_65b():
    """QLoRA Section 3: double quantization saves "about 3 GB for a 65B model" (0.373 bits each)."""
    saved = sum(
        L65 * (nf4_bytes(a * b, double_quant=False) - nf4_bytes(a * b)) for a, b in LINEAR_65B
    )
    assert round(int(saved) / 1e9) == 3


def test_full_16_bit_finetuning_of_65b_needs_over_780_gb():
    """QLoRA abstract: ">780GB" to fine-tune 65B in 16 bits: bf16 weights and gradients, fp32 Adam.

    That is 12 bytes per parameter (no fp32 master copy): the assumption that reproduces it.
    """
    counts = ModelCounts(parameters=llama65b_parameters(), activations=0, input_elements=0)
    precision = Precision(parameters="bf16", optimizer_state="fp32")
    states = training_memory(counts, optimizer="adam", precision=precision)
    assert 780e9 < states.total < 790e9


def test_qlora_65b_model_states_fit_in_48_gb():
    """QLoRA abstract: 65B fine-tunes "on a single 48GB GPU".

    Modelled: NF4 linear weights with double quantization, bf16 embeddings and
    norms, LoRA r=64 on every linear layer (QLoRA Section 4 / Appendix: all
    linear layers) with bf16 adapters and their bf16 gradients, and paged 8-bit
    AdamW state. Not modelled here: activations (the paper uses gradient
    checkpointing; they are the network's, not the method's) and the CUDA
    context. The model states leave about 8 GB of the 48 for them.
    """
    rank = 64
    base = sum(L65 * nf4_bytes(a * b) for a, b in LINEAR_65B)
    other = (2 * V65 * D65 + (2 * L65 + 1) * D65) * 2
    adapter_shapes = [s for a, b in LINEAR_65B for s in [(rank, b), (a, rank)]] * L65
    adapters = sum(a * b for a, b in adapter_shapes)
    states = base + other + adapters * (2 + 2) + adam8bit_state_bytes(adapter_shapes)
    assert adapters == L65 * rank * sum(a + b for a, b in LINEAR_65B)
    assert 35e9 < states < 48e9 - 5e9


def gpt3_175b(**sizes: int) -> Network:
    """GPT-3 175B (GPT-3 paper, Table 2.1): GPT-2's architecture, 96 layers, width 12288."""
    return gpt2(GPT2Config(layers=96, hidden=12288, heads=96, positions=2048), **sizes)


def test_lora_on_gpt3_reproduces_350_gb_and_the_18m_budget():
    """LoRA Section 4.2 and Table 5: r=4 on W_q, W_v of GPT-3 175B.

    Reproduced: the trainable count 96 x 2 x 4 x (12288 + 12288) = 18.9M (Table 5's "18M"),
    its fp16 checkpoint of 37.7 MB (the paper's "roughly 35MB"), and the VRAM of 350 GB: the
    frozen fp16 base. Not reproduced: the paper's 1.2 TB for full fine-tuning; Adam in mixed
    precision (16 bytes per parameter) gives 2.8 TB, and no per-parameter convention we know
    gives 1.2 TB (it is about 6.9 bytes per parameter).
    """
    net = gpt3_175b(batch=1, sequence=1)
    memory = finetune_memory(net, lora=LoRA(4), optimizer="adam", precision="fp16").evaluate()
    assert memory["parameters"] == 18_874_368 * 2
    assert round(int(memory["parameters"]) / 1e6, 1) == 37.7
    assert round(int(memory["frozen_parameters"]) / 1e9) == 349  # "350GB"
    assert memory.total < 351e9
    full = training_memory(net, optimizer="adam", precision="mixed-fp16").evaluate()
    assert round(int(full.total) / 1e12, 1) == 2.8


def test_lora_counts_follow_the_rank_formula():
    """LoRA adds r (n_in + n_out) per adapted map: GPT-2 small, q and v in 12 layers."""
    tuned = apply_lora(gpt2("small"), LoRA(8))
    assert tuned.parameter_count == 12 * 2 * 8 * (768 + 768)
    maps = linear_maps(gpt2("small"))
    assert sum(1 for name in maps if name.endswith("q_proj")) == 12


def test_lora_frozen_base_has_no_gradients_or_state():
    """Gradients and optimizer state are the adapters' only; the base is kept once, frozen."""
    net = gpt2("small", batch=2, sequence=64)
    memory = finetune_memory(net, lora=LoRA(8), optimizer="adam", precision="fp32").evaluate()
    trainable = 12 * 2 * 8 * (768 + 768)
    assert memory["gradients"] == 4 * trainable
    assert memory["optimizer_state"] == 2 * 4 * trainable
    assert memory["frozen_parameters"] == 4 * net.parameter_count


def test_qlora_base_is_4_bit_linear_weights_and_16_bit_rest():
    """QLoRA on GPT-2 small: attention and MLP matrices NF4, embeddings/norms/biases bf16.

    The packed query/key/value matrix counts as three 768 x 768 layers, as
    bitsandbytes quantizes q_proj, k_proj and v_proj one by one.
    """
    net = gpt2("small", batch=1, sequence=32)
    memory = finetune_memory(net, lora=LoRA(16), quantization="nf4").evaluate()
    matrices = [(768, 768)] * 4 + [(3072, 768), (768, 3072)]
    codes = 12 * sum(math.ceil(a * b / 2) for a, b in matrices)
    rest = net.parameter_count - 12 * sum(a * b for a, b in matrices)
    assert memory["frozen_parameters"] == codes + 2 * rest
    assert memory["quantization_constants"] == 12 * sum(
        nf4_bytes(a * b) - math.ceil(a * b / 2) for a, b in matrices
    )
    assert memory["dequantized_copy"] == 2 * 3072 * 768


def test_eight_bit_adam_is_two_bytes_plus_block_constants():
    """bitsandbytes: uint8 moments, an fp32 absmax per 256 values; under 4096 elements fp32."""
    assert adam8bit_state_bytes([(4096, 4096)]) == 2 * 4096**2 + 2 * 4 * 4096**2 // 256
    assert adam8bit_state_bytes([(4095,)]) == 8 * 4095
    net = Network([Input((4096,), batch=2), Dense(4096, name="fc")])
    memory = finetune_memory(net, frozen=(), optimizer="adamw-8bit", precision="fp32")
    assert memory["optimizer_state"] == adam8bit_state_bytes([(4096, 4096), (4096,)])


def test_freeze_trains_only_the_rest():
    """Freezing the body leaves the head's gradients and state."""
    net = Network([Input((64,), batch=4), Dense(32, name="body"), Dense(10, name="head")])
    memory = finetune_memory(freeze(net, "body"), optimizer="adam", precision="fp32")
    assert memory["gradients"] == 4 * (32 * 10 + 10)
    assert memory["frozen_parameters"] == 4 * (64 * 32 + 32)


def test_bad_fine_tuning_input_names_the_fix():
    """Unknown targets, QLoRA without LoRA, a bad rank: errors that say what to do."""
    net = gpt2("small", batch=1, sequence=8)
    with pytest.raises(UnknownNameError, match="all-linear"):
        apply_lora(net, LoRA(4, targets="c_attn"))
    with pytest.raises(UnsupportedError, match="lora=LoRA"):
        finetune_memory(net, quantization="nf4")
    with pytest.raises(InvalidArgumentError, match="positive integer"):
        LoRA(0)
    with pytest.raises(UnsupportedError, match="breakdown"):
        finetune_memory(net, lora=LoRA(4), quantization="nf4", convention="autograd")


def test_qlora_splits_a_grouped_query_projection_into_q_k_v():
    """Grouped-query attention (8 heads, 2 key/value heads): q is 256x256, k and v 64x256."""
    from memtheory.layers import MultiHeadAttention
    from memtheory.symbols import S

    net = Network([Input((S, 256), batch=1), MultiHeadAttention(8, kv_heads=2, bias=False,
                                                                 name="attn")])
    memory = finetune_memory(net, lora=LoRA(4, targets="all-linear"), quantization="nf4")
    matrices = [256 * 256, 64 * 256, 64 * 256, 256 * 256]  # q, k, v, o
    assert memory["frozen_parameters"] == sum(n // 2 for n in matrices)
    assert memory["quantization_constants"] == sum(nf4_bytes(n) - n // 2 for n in matrices)
    assert memory["dequantized_copy"] == 2 * 256 * 256
    assert memory["parameters"] == 2 * 4 * ((256 + 256) + 2 * (256 + 64) + (256 + 256))


def test_fp32_adapters_double_their_bf16_bytes_but_not_8_bit_state():
    """adapter_dtype="fp32" (peft's default) doubles the adapters' bf16 parameters and gradients.

    AdamW's state follows the parameters' dtype and doubles too; 8-bit AdamW's
    state does not follow it and stays as it was.
    """
    from memtheory.finetuning import LoRA, finetune_memory
    from memtheory.models import gpt2

    network = gpt2("small", batch=1, sequence=32, loss=True)
    for optimizer, state_scales in (("adamw", 2), ("adamw-8bit", 1)):
        bf16 = finetune_memory(network, lora=LoRA(4), optimizer=optimizer)
        fp32 = finetune_memory(network, lora=LoRA(4), optimizer=optimizer, adapter_dtype="fp32")
        assert fp32["parameters"] == 2 * bf16["parameters"]
        assert fp32["gradients"] == 2 * bf16["gradients"]
        assert fp32["optimizer_state"] == state_scales * bf16["optimizer_state"]


def test_wider_adapters_plan_peft_casts_only_where_they_are_modelled():
    """apply_lora(wider=) adds peft's input cast; refuses dropout; finetune_memory falls back.

    With dropout (peft drops out the fp32 cast, not modelled) or under the
    breakdown convention, finetune_memory plans no casts and says so.
    """
    from memtheory.finetuning import LoRA, apply_lora, finetune_memory
    from memtheory.finetuning.layers import AdapterInputCast, CastLoRADown, CastLoRAUp

    net = Network([Input((16,)), Dense(32, name="fc1"), Dense(8, name="fc2")])
    tuned = apply_lora(net, LoRA(4, targets="fc1"), wider="fp32")
    kinds = {row.name: type(row.layer) for row in tuned.rows}
    assert kinds["fc1.input_cast"] is AdapterInputCast
    assert kinds["fc1.lora_A"] is CastLoRADown and kinds["fc1.lora_B"] is CastLoRAUp
    assert tuned.parameter_count == apply_lora(net, LoRA(4, targets="fc1")).parameter_count
    with pytest.raises(UnsupportedError, match="dropout=0.0"):
        apply_lora(net, LoRA(4, targets="fc1", dropout=0.1), wider="fp32")
    network = Network([Input((16,)), Dense(32, name="fc1"), Dense(8, name="fc2")])
    for lora, convention in ((LoRA(4, targets="fc1", dropout=0.1), "autograd"),
                             (LoRA(4, targets="fc1"), "breakdown")):
        memory = finetune_memory(network, lora=lora, precision="bf16", convention=convention,
                                 adapter_dtype="fp32")
        assert "not followed" in memory.notes[-1]
    planned = finetune_memory(network, lora=LoRA(4, targets="fc1"), precision="bf16",
                              convention="autograd", adapter_dtype="fp32")
    assert "planned" in planned.notes[-1]


def test_an_adapter_keeps_its_weight_copy_only_for_its_inputs_gradient():
    """CastLoRADown's copy (rank x n_in, compute dtype) is kept only when its input needs a grad."""
    from memtheory.finetuning.layers import CastLoRADown, CastLoRAUp
    from memtheory.symbols import B

    down = CastLoRADown(4, bias=False).autograd(((B, 16),))
    copy = down.saved[-1]
    assert copy.role == "weight copy" and copy.elements == 4 * 16
    assert down.kept((False,)) == ((0,),) and down.kept((True,)) == ((0, 1),)
    up = CastLoRAUp(32, bias=False).autograd(((B, 4),))
    assert up.saved[-1].elements == 32 * 4
    with pytest.raises(UnsupportedError, match="counted twice"):
        CastLoRADown(4, bias=False).autograd(((B, 16),), autocast="bf16")
