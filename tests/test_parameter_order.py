"""A network's parameter registration order (``Network(parameter_order=...)``).

torch.optim's for-loop step follows it: checked names, its ancestors rule, what carries it.
"""

from __future__ import annotations

import pytest

from memtheory.conventions.autograd.storage_plan import parameter_tensors, registered_tensors
from memtheory.errors import UnknownNameError, UnsupportedError
from memtheory.finetuning import LoRA
from memtheory.finetuning.lora import apply_lora, freeze
from memtheory.layers import Dense, Input
from memtheory.network import Network


def _net(order: tuple[str, ...] = ()) -> Network:
    return Network([Input((4,)), Dense(3, name="a"), Dense(2, name="b")], parameter_order=order)


def test_a_name_that_is_no_layer_is_refused_with_the_fix():
    """An unknown layer name is a memtheory error that says what to list."""
    with pytest.raises(UnknownNameError, match="'c', which is not one of its layers"):
        _net(("b", "c"))
    with pytest.raises(UnsupportedError, match="parameter_order is a list of layer names"):
        _net("b")  # type: ignore[arg-type]


def test_unset_order_is_the_order_the_layers_run():
    """Without an order the registered tensors are the tensors in the order the layers run."""
    assert list(registered_tensors(_net())) == list(parameter_tensors(_net()))


def test_listed_layers_come_first_and_adapters_take_their_layers_place():
    """Layer b listed before a: b's first; LoRA's a.lora_A and a.lora_B go where a is."""
    net = _net(("b", "a"))
    assert list(registered_tensors(net)) == ["b.weight", "b.bias", "a.weight", "a.bias"]
    tuned = apply_lora(net, LoRA(rank=2, targets=("a", "b")))
    assert list(registered_tensors(tuned)) == [
        "b.lora_A.weight", "b.lora_B.weight", "a.lora_A.weight", "a.lora_B.weight"]
    assert freeze(net, "a").parameter_order == ("b", "a")
