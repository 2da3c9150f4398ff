"""CUDA SDPA's backend selection, checked condition by condition against its cited source.

Each condition is PyTorch 2.11's ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``
(``can_use_flash_attention``, ``can_use_cudnn_attention``,
``can_use_mem_efficient_attention``, ``select_sdp_backend``) or transformers 5.24's
``integrations/sdpa_attention.py`` (``use_gqa_in_sdpa``), as quoted in
:mod:`memtheory.conventions.autograd.sdpa_backend`.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtheory.conventions.autograd.sdpa_backend import (
    FUSED,
    cuda_sdpa_backend,
    keeps_scores,
    layer_sdpa_backend,
    transformers_enable_gqa,
)
from memtheory.errors import InvalidArgumentError
from memtheory.layers.grouped_attention import GroupedQueryAttention
from memtheory.recipes import Setup

DTYPES = ("fp32", "bf16", "fp16")


def test_flash_takes_16_bits_only():
    """check_dtypes_low_precision: flash accepts at::kHalf and at::kBFloat16, not fp32."""
    assert cuda_sdpa_backend("bf16", heads=8, head_dim=64) == "flash"
    assert cuda_sdpa_backend("fp16", heads=8, head_dim=64) == "flash"
    assert cuda_sdpa_backend("fp32", heads=8, head_dim=64) != "flash"


def test_memory_efficient_takes_fp32_without_grouped_heads():
    """From sm80 the efficient kernel takes fp32; up to 2.11 not enable_gqa (dense <false>)."""
    assert cuda_sdpa_backend("fp32", heads=8, head_dim=64) == "efficient"
    assert cuda_sdpa_backend("fp32", heads=8, kv_heads=2, head_dim=64, enable_gqa=True) == "math"
    assert cuda_sdpa_backend("fp32", heads=8, kv_heads=2, head_dim=64, enable_gqa=True,
                             mem_efficient_gqa=True) == "efficient"


def test_a_mask_rules_out_flash_only():
    """check_for_attn_mask is in flash's list; cuDNN and efficient check only its shape."""
    assert cuda_sdpa_backend("bf16", heads=8, head_dim=64, masked=True) == "efficient"
    assert cuda_sdpa_backend("bf16", heads=8, head_dim=64, masked=True,
                             prefer_cudnn=True) == "cudnn"


def test_head_sizes():
    """Flash: at most 256; cuDNN: a multiple of 8 up to 128; efficient: GEMM alignment."""
    assert cuda_sdpa_backend("bf16", heads=4, head_dim=256) == "flash"
    assert cuda_sdpa_backend("bf16", heads=4, head_dim=264) == "efficient"  # 264 % 8 == 0
    assert cuda_sdpa_backend("bf16", heads=4, head_dim=260) == "math"  # 260 % 8 == 4
    assert cuda_sdpa_backend("fp32", heads=4, head_dim=260) == "efficient"  # 260 % 4 == 0
    assert cuda_sdpa_backend("fp32", heads=4, head_dim=30) == "math"  # 30 % 4 == 2
    assert cuda_sdpa_backend("bf16", heads=4, head_dim=192, masked=True,
                             prefer_cudnn=True) == "efficient"  # cuDNN's limit is 128


def test_cudnn_dropout_in_sixteenths():
    """check_cudnn_dropout: a probability that is not a multiple of 1/16 skips cuDNN."""
    call = {"heads": 8, "head_dim": 64, "masked": True, "prefer_cudnn": True}
    assert cuda_sdpa_backend("bf16", dropout=1 / 16, **call) == "cudnn"
    assert cuda_sdpa_backend("bf16", dropout=0.1, **call) == "efficient"


def test_grouped_heads_need_enable_gqa_and_whole_groups():
    """SDPA refuses unequal head counts without enable_gqa, and groups that do not divide."""
    with pytest.raises(InvalidArgumentError, match="enable_gqa=True"):
        cuda_sdpa_backend("bf16", heads=8, kv_heads=2, head_dim=64)
    with pytest.raises(InvalidArgumentError, match="multiple of the key/value heads"):
        cuda_sdpa_backend("bf16", heads=8, kv_heads=3, head_dim=64, enable_gqa=True)


def test_transformers_asks_for_enable_gqa_only_without_a_mask():
    """use_gqa_in_sdpa: grouped heads, no mask, head size at most 256; else repeat_kv."""
    assert transformers_enable_gqa(8, 2, 64, masked=False)
    assert not transformers_enable_gqa(8, 2, 64, masked=True)
    assert not transformers_enable_gqa(8, 2, 320, masked=False)
    assert not transformers_enable_gqa(8, 8, 64, masked=False)


@given(
    dtype=st.sampled_from(DTYPES),
    kv=st.sampled_from((1, 2, 4, 8)),
    head_dim=st.integers(1, 320),
    masked=st.booleans(),
    dropout=st.sampled_from((0.0, 0.0625, 0.1)),
    prefer_cudnn=st.booleans(),
)
def test_only_math_keeps_scores_and_fp32_with_groups_is_math(
    dtype, kv, head_dim, masked, dropout, prefer_cudnn
):
    """Every call gets a backend; fp32 with enable_gqa is always math (no fused kernel takes it)."""
    gqa = kv != 8
    backend = cuda_sdpa_backend(dtype, heads=8, kv_heads=kv, head_dim=head_dim, masked=masked,
                                dropout=dropout, enable_gqa=gqa, prefer_cudnn=prefer_cudnn)
    assert keeps_scores(backend) == (backend not in FUSED)
    if dtype == "fp32" and gqa:
        assert backend == "math"
    if dtype != "fp32" and not masked and head_dim <= 256:
        assert backend in ("flash", "cudnn")


def test_the_recordings_llamas():
    """The tiny and mid Llama of the H200 recording: fp32 math, 16 bits flash (no mask)."""
    tiny = GroupedQueryAttention(4, kv_heads=2, head_dim=32 // 4)
    mid = GroupedQueryAttention(8, kv_heads=2, head_dim=512 // 8)
    for layer in (tiny, mid):
        assert layer_sdpa_backend(layer, "fp32") == "math"
        assert layer_sdpa_backend(layer, "bf16") == "flash"
    window = GroupedQueryAttention(8, kv_heads=2, head_dim=64, window=16)
    assert layer_sdpa_backend(window, "bf16") == "efficient"  # a mask: K, V repeated, no flash


def test_setup_picks_the_kernel_for_its_device():
    """Setup.attention_kernel: eager as told; CPU SDPA its flash kernel; CUDA the selection."""
    layer = GroupedQueryAttention(4, kv_heads=2, head_dim=8)
    fp32 = Setup.recipe("pytorch-fp32")
    assert fp32.attention_kernel(layer) == "math"
    assert fp32.attention_kernel(layer, device="cpu") == "flash"
    assert fp32.changed(attention="eager").attention_kernel(layer) == "eager"
    assert Setup.recipe("pytorch-amp").attention_kernel(layer) == "flash"
    assert Setup.recipe("hf-trainer").attention_kernel(layer, checkpoint_dtype="fp32") == "flash"
    same = GroupedQueryAttention(4, kv_heads=4, head_dim=8)
    assert fp32.attention_kernel(same) == "efficient"


def test_the_assumed_attention_line_names_the_fp32_math_path_on_cuda():
    """describe(): an fp32 CUDA setup with SDPA says grouped heads run the math path."""
    line = next(x for x in Setup.recipe("pytorch-fp32").describe() if x.startswith("attention"))
    assert "math path" in line
    for setup in (Setup.recipe("pytorch-amp"), Setup.recipe("pytorch-fp32", device="cpu"),
                  Setup.recipe("pytorch-fp32", attention="eager")):
        assert "math path" not in "\n".join(setup.describe())


def test_training_memory_takes_the_math_path_network_only_where_cuda_runs_it():
    """A Llama built without flash is refused under 16-bit SDPA, taken under fp32 CUDA SDPA."""
    from memtheory import training_memory
    from memtheory.models import from_config

    llama = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32,
             "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 4,
             "num_key_value_heads": 2}
    math = from_config(llama, batch=2, sequence=8, loss=True, flash=False)
    fused = from_config(llama, batch=2, sequence=8, loss=True, flash=True)
    fp32 = Setup.recipe("pytorch-fp32")
    assert training_memory(math, setup=fp32).peak == training_memory(
        math, setup=fp32.changed(attention="eager")).peak
    kept = "saved_activations"  # the math path keeps S x S probabilities, a fused kernel none
    assert training_memory(fused, setup=fp32)[kept] < training_memory(math, setup=fp32)[kept]
    with pytest.raises(InvalidArgumentError, match="built with eager"):
        training_memory(math, setup=Setup.recipe("pytorch-amp"))
    with pytest.raises(InvalidArgumentError, match="built with eager"):
        training_memory(math, setup=fp32.changed(device="cpu"))
    with pytest.raises(InvalidArgumentError, match="built with SDPA"):
        training_memory(fused, setup=fp32.changed(attention="eager"))
