"""Optimizer options and the optimizer step's temporaries, without PyTorch.

The state formulas and the step's temporaries are derived here by hand from
``torch/optim`` (2.13) source; tests/pytorch/test_optimizer_step.py measures them.
"""

from __future__ import annotations

import pytest
import sympy as sp

import memtheory as mt
from memtheory.conventions.autograd import AutogradConvention
from memtheory.conventions.autograd.kernels.torch_2_13.optimizers import step_temporaries, step_text
from memtheory.errors import InvalidArgumentError, InvalidSizeError, UnsupportedError
from memtheory.optimizers import OPTIMIZERS, optimizer

a, b, c = sp.symbols("a b c", positive=True)


def test_no_option_returns_the_registered_optimizer():
    """Options equal to the defaults give back the very same registered object."""
    assert optimizer("adam", amsgrad=False, maximize=False, weight_decay=0) is OPTIMIZERS["adam"]
    assert optimizer("adamw", weight_decay=0.01) is OPTIMIZERS["adamw"]  # torch's default


def test_amsgrad_adds_max_exp_avg_sq_and_can_be_switched_off_again():
    """AMSGrad's third buffer; passing amsgrad=False to an AMSGrad optimizer removes it."""
    ams = optimizer("adamw", amsgrad=True)
    assert ams.state_names == ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    assert ams.states_per_parameter == 3
    assert optimizer(ams, amsgrad=False) is OPTIMIZERS["adamw"]


def test_switches_keep_the_options():
    """momentum= turns SGD with weight decay into momentum SGD with the same weight decay."""
    decayed = optimizer(optimizer("sgd", weight_decay=5e-4, maximize=True), momentum=0.9)
    assert (decayed.name, decayed.weight_decay, decayed.maximize) == ("sgd+momentum", 5e-4, True)
    assert str(decayed) == "SGD with momentum (weight_decay=0.0005, maximize)"


@pytest.mark.parametrize(
    ("spec", "options", "error", "words"),
    [
        ("sgd", {"amsgrad": True}, InvalidArgumentError, ["amsgrad", "Adam", "SGD"]),
        ("nadam", {"amsgrad": True}, InvalidArgumentError, ["amsgrad", "NAdam"]),
        ("lion", {"weight_decay": 0.1}, InvalidArgumentError, ["Lion", "torch.optim"]),
        ("adam", {"weight_decay": -1}, InvalidSizeError, ["weight_decay", "-1"]),
        ("adam", {"maximize": 1}, InvalidArgumentError, ["maximize", "True or False"]),
    ],
)
def test_options_an_optimizer_lacks_are_refused(spec, options, error, words):
    """Each refusal names the option and what to do."""
    with pytest.raises(error) as caught:
        optimizer(spec, **options)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ((a,), a),  # 1-D: a full variance
        ((a, b), a + b),  # rows (a x 1) and columns (1 x b)
        ((c, a, b), c * a + c * b),  # leading dimensions kept in both factors
    ],
)
def test_adafactor_state_elements(shape, expected):
    """torch.optim.Adafactor: row_var has shape[-1] -> 1, col_var has shape[-2] -> 1."""
    assert sp.expand(optimizer("adafactor").state_elements(shape) - expected) == 0


def test_adam_for_loop_temporaries_with_and_without_weight_decay():
    """for-loop Adam, tensors of a then b bytes.

    Without decay: sqrt and quotient of a (2a); then a's denom with b's sqrt and quotient.
    With decay, grad + wd * param is bound to ``grad`` too: one more of each tensor.
    """
    assert step_temporaries(optimizer("adam"), "for-loop", [a, b]) == sp.Max(2 * a, a + 2 * b)
    decayed = step_temporaries(optimizer("adam", weight_decay=0.1), "for-loop", [a, b])
    assert decayed == sp.Max(3 * a, a + 3 * b)
    # AdamW decays the parameter in place: no extra tensor.
    assert step_temporaries(optimizer("adamw", weight_decay=0.1), "for-loop", [a, b]) == (
        sp.Max(2 * a, a + 2 * b)
    )


def test_sgd_momentum_weight_decay_and_maximize():
    """for-loop SGD with momentum: -grad, then grad + wd * param while -grad is alive.

    ``grad = buf`` then frees both, so tensors never overlap: max(2a, 2b).
    """
    chosen = optimizer("sgd+momentum", weight_decay=0.1, maximize=True)
    assert step_temporaries(chosen, "for-loop", [a, b]) == sp.Max(2 * a, 2 * b)
    assert step_temporaries(chosen, "foreach", [a, b]) == a + b  # -grads, decayed in place
    assert step_temporaries(chosen, "fused", [a, b]) == 0


def test_foreach_adam_counts_the_float32_one():
    """The foreach Adam with maximize: -grads of all tensors, and torch.tensor(1.0) beside."""
    assert step_temporaries(optimizer("adam", maximize=True), "foreach", [a, b]) == (
        sp.Max(a + b + 4, a + b)
    )


def test_step_text_names_the_temporaries():
    """The note says what the step allocates."""
    text = step_text(optimizer("adam", weight_decay=0.1), "for-loop")
    assert "grad + weight_decay * param" in text and "denom" in text
    assert step_text(optimizer("adam"), "fused") == "no temporaries"


def test_adafactor_for_loop_temporaries_of_two_vectors():
    """fp32 vectors of 10 and 3 values (40 and 12 bytes).

    For each: param.norm(2) (a 4-byte scalar), grad * grad, variance.clone() (the update), and
    update.norm(2). The first's grad_squared and update are still bound when the second's
    grad * grad is made: 40 + 40 + 12 = 92, more than 40 + 40 + 4 = 84.
    """
    chosen = optimizer("adafactor")
    assert step_temporaries(chosen, "for-loop", [40, 12], [(10,), (3,)]) == 92


def test_what_the_step_does_not_model_is_refused():
    """Lion is not in torch.optim, Adamax has no fused kernel."""
    net = mt.Network([mt.Input((8,), batch=2), mt.Dense(4)])
    with pytest.raises(UnsupportedError, match="Lion"):
        mt.training_memory(net, optimizer="lion", convention="autograd")
    with pytest.raises(UnsupportedError, match="fused"):
        mt.training_memory(net, optimizer="adamax", convention=AutogradConvention("fused"))


def test_amsgrad_state_in_every_convention():
    """Three buffers per parameter: 3 x (8 x 4 + 4) x 4 bytes in fp32."""
    net = mt.Network([mt.Input((8,), batch=2), mt.Dense(4)])
    ams = optimizer("adam", amsgrad=True)
    for convention in ("breakdown", "autograd"):
        memory = mt.training_memory(net, optimizer=ams, convention=convention)
        assert memory["optimizer_state"] == 3 * (8 * 4 + 4) * 4


def test_breakdown_counts_adafactor_factored_state_and_typed_buffers():
    """Adafactor: a row and a column per matrix, as the autograd convention; int64 buffers too.

    Dense(256) on 784 features: Adafactor keeps 256 + 784 values for the matrix
    and 256 for the bias (``optimizer.state_elements``); an id buffer of 16
    positions is 16 int64 values whatever the precision.
    """
    import memtheory.layers as ml

    net = mt.Network([mt.Input((784,), batch=64), ml.Dense(256)])
    breakdown = mt.training_memory(net, optimizer="adafactor", convention="breakdown")
    autograd = mt.training_memory(net, optimizer="adafactor", convention="autograd")
    assert breakdown["optimizer_state"] == autograd["optimizer_state"] == (256 + 784 + 256) * 4
    with pytest.raises(UnsupportedError, match="Pass a Network"):
        mt.training_memory(net.counts(), optimizer="adafactor", convention="breakdown")
    ids = mt.Network([mt.Input((4, 8), batch=2), ml.TokenTypeEmbedding(2, ids_buffer=16)])
    for precision in ("fp32", "bf16"):
        memory = mt.training_memory(ids, optimizer="sgd", precision=precision,
                                    convention="breakdown")
        assert memory["buffers"] == 16 * 8
