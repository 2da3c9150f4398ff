"""What ``estimate`` says of Falcon's attention kernel: the math path on one key/value head.

Falcon calls ``scaled_dot_product_attention`` itself with its boolean causal mask
and without ``enable_gqa`` (transformers 5.24 ``modeling_falcon.py``), so with
fewer key/value heads than query heads only the math path takes the call; the
kernel plan follows it (measured: tests/pytorch/test_family_autograd.py), and the
answer must not print the flash kernel's "no S x S scores kept".
"""

from __future__ import annotations

import pytest

from memtheory.estimate import estimate

FALCON = {"model_type": "falcon", "vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4, "max_position_embeddings": 256, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize(("layout", "math"), [
    ({"multi_query": True}, True),
    ({"new_decoder_architecture": True, "num_kv_heads": 2}, False),
], ids=["7b", "40b"])
def test_falcon_sdpa_kernel_is_said_as_it_runs(layout, math):
    """The 7B layout's answer names the math path in its reason and its attention line."""
    answer = estimate({**FALCON, **layout}, batch=2, sequence=9, setup="hf-trainer")
    attention = [line for line in answer.assumptions if line.startswith("attention:")]
    assert len(attention) == 1
    assert ("math path" in attention[0]) is math
    assert ("math path" in answer.why) is math
    assert ("no S x S scores kept" in attention[0]) is not math
