"""``memtheory estimate --precision fp8``: FP8 training refused with what is known of it.

Issue 25 ("--precision fp8 today suggests fp8_e4m3, which casts everything"):
FP8 training as torchao's Float8Linear does it keeps high-precision weights,
gradients and optimizer state and saves the high-precision matmul inputs
(torchao/float8/float8_linear.py, ``ctx.save_for_backward(input_hp,
weight_hp_t)``); its float8 copies are transients whose size depends on
torch.compile, so the step is not modelled and the refusal says so.
"""

from __future__ import annotations

import pytest

from memtheory.cli import main
from memtheory.errors import InvalidArgumentError
from memtheory.estimate import estimate


@pytest.mark.parametrize("word", ["fp8", "FP8", "float8", "fp8-training", " fp8 "])
def test_fp8_training_by_name_is_refused_with_the_source_facts(capsys, word):
    """--precision fp8 no longer suggests fp8_e4m3: it says what torchao keeps and saves."""
    assert main(["estimate", "llama-3-8b", "--precision", word]) == 2
    err = capsys.readouterr().err
    assert "FP8 training is not modelled yet" in err
    assert "save_for_backward(input_hp, weight_hp_t)" in err
    assert "--precision bf16" in err
    assert "fp8_e4m3" not in err


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
def test_an_8_bit_element_type_for_every_tensor_is_refused_too(name):
    """fp8_e4m3 as the training precision (everything in fp8) is refused, with the same facts."""
    with pytest.raises(InvalidArgumentError, match="no training stack does"):
        estimate("gpt2", precision=name)


def test_the_nearest_question_the_refusal_names_is_answered():
    """--precision bf16, which the refusal names for torchao's states and saved tensors, answers."""
    answer = estimate("gpt2", sequence=128, precision="bf16")
    assert answer.settings["precision"] == "bf16"
