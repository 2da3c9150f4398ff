"""Kernel plans: how PyTorch runs a layer is found by the layer's type, apart from the layer."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from memtheory.conventions.autograd.kernels import autograd_of
from memtheory.conventions.autograd.kernels.torch_2_13 import attention
from memtheory.errors import UnsupportedError
from memtheory.layers import (
    BatchNorm2d,
    CrossEntropyLoss,
    Dense,
    GroupedQueryAttention,
    LayerNorm,
    MultiHeadAttention,
    ReLU,
    RMSNorm,
)
from memtheory.layers.kernel_plans import _PLANS, plan_for, planned_autograd
from memtheory.layers.softcap import SoftCappedAttention
from memtheory.symbols import B, S

_CASES = [
    (MultiHeadAttention(4), ((B, S, 32),)),
    (MultiHeadAttention(4, dropout=0.1, implementation="torch"), ((B, S, 32),)),
    (MultiHeadAttention(4, flash=True), ((B, S, 32),)),
    (GroupedQueryAttention(4, kv_heads=2, head_dim=8), ((B, S, 32), (B, S, 16), (B, S, 16))),
    (SoftCappedAttention(4, kv_heads=2, head_dim=8), ((B, S, 32), (B, S, 16), (B, S, 16))),
    (RMSNorm(), ((B, S, 32),)),
    (LayerNorm(), ((B, S, 32),)),
    (BatchNorm2d(), ((B, 8, 4, 4),)),
    (CrossEntropyLoss(), ((B, 10),)),
]


@pytest.mark.parametrize("layer, shapes", _CASES, ids=lambda case: getattr(case, "label", ""))
@pytest.mark.parametrize("dtype, autocast", [(None, None), ("bf16", None), ("fp32", "bf16")])
def test_a_layer_answers_with_its_plan(layer, shapes, dtype, autocast):
    """A planned layer's own autograd() is its plan's answer, for every dtype and mode."""
    for training in (True, False):
        own = layer.autograd(shapes, training=training, input_dtype=dtype, autocast=autocast)
        plan = plan_for(layer)
        assert plan is not None
        expected = plan(layer, shapes, training=training, input_dtype=dtype, autocast=autocast)
        assert own == expected
        assert autograd_of(layer, shapes, training=training, input_dtype=dtype,
                           autocast=autocast) == expected


def test_every_plan_lives_in_a_versioned_module():
    """Each registered plan is a function of a kernels.torch_<release> module."""
    assert _PLANS
    for plan in _PLANS.values():
        assert plan.__module__.startswith("memtheory.conventions.autograd.kernels.torch_2_13.")


def test_a_layer_without_kernel_choices_answers_itself():
    """The convention asks a layer without a plan directly."""
    for layer, shapes in ((Dense(3), ((B, 8),)), (ReLU(), ((B, 8),))):
        assert plan_for(layer) is None
        assert autograd_of(layer, shapes) == layer.autograd(shapes)


def test_a_subclass_inherits_its_parents_plan():
    """The lookup walks the class hierarchy, as sympy's printers find _print_<Class>."""

    @dataclass(frozen=True)
    class Renamed(MultiHeadAttention):
        kind = "Renamed"

    assert plan_for(Renamed(4)) is plan_for(MultiHeadAttention(4))


def test_no_plan_is_a_clear_refusal():
    """Asking for a plan that no module registered names the module that registers them."""
    with pytest.raises(UnsupportedError, match="memtheory.conventions.autograd.kernels"):
        planned_autograd(Dense(3), ((B, 8),))


def test_one_flash_rule_for_every_attention_layer():
    """MultiHeadAttention and GroupedQueryAttention with flash keep what cuda_flash says."""
    heads, width = 4, 8
    mha = MultiHeadAttention(heads, flash=True).autograd(((B, S, heads * width),)).saved
    gqa = GroupedQueryAttention(heads, head_dim=width, flash=True).autograd(
        ((B, S, heads * width),) * 3
    ).saved
    rows = (B, heads, S)  # one log-sum-exp per row of every head
    assert mha[-1] == gqa[-1] == attention.cuda_flash(mha[1], mha[2], mha[3], mha[4], rows)[-1]
    assert mha[-1].shape == rows
    assert [t.role for t in gqa] == ["input", "input", "input", "output", "statistics"]


def test_importing_a_layer_alone_loads_the_plans():
    """A fresh interpreter that imports only a layer's module finds its plan.

    Importing memtheory registers the plans; a lazier package import must keep doing so.
    """
    code = (
        "from memtheory.layers.attention import MultiHeadAttention\n"
        "from memtheory.symbols import B, S\n"
        "print(len(MultiHeadAttention(4).autograd(((B, S, 8),)).saved))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    expected = len(attention.multi_head_attention(MultiHeadAttention(4), ((B, S, 8),)).saved)
    assert done.stdout.strip() == str(expected)
