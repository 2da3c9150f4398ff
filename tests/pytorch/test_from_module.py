"""from_module: memtheory's shapes and parameter counts equal PyTorch's, layer by layer.

PyTorch is the reference here: each module's output shape is read with a forward
hook and its parameter count from ``module.parameters()``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from torch import nn  # noqa: E402
from torch_strategies import stacks  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.symbols import B, H  # noqa: E402
from memtheory.torch import from_module  # noqa: E402
from memtheory.validation import ZOO  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def torch_shapes(module: nn.Sequential, input_shape) -> list[tuple[int, ...]]:
    """Run ``module`` on zeros and return every layer's output shape, in order."""
    shapes = []
    hooks = [
        layer.register_forward_hook(lambda _m, _i, out: shapes.append(tuple(out.shape)))
        for layer in module
    ]
    with torch.no_grad():
        module.eval()(torch.zeros(input_shape))
    for hook in hooks:
        hook.remove()
    return shapes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks())
def test_random_stacks_have_pytorchs_shapes_and_parameter_counts(stack):
    """For random conv/pool/activation stacks with a dense head, every shape and count agrees."""
    net = from_module(stack.module, stack.input_shape)
    assert [row.output_shape for row in net.rows[1:]] == torch_shapes(
        stack.module, stack.input_shape
    )
    for row, layer in zip(net.rows[1:], stack.module, strict=True):
        assert row.parameters == sum(p.numel() for p in layer.parameters()), row.name
        assert sum(spec.elements for spec in row.buffers) == sum(
            b.numel() for b in layer.buffers()
        ), row.name
    assert net.parameter_count == sum(p.numel() for p in stack.module.parameters())


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_modules_convert_to_their_memtheory_networks(name):
    """Each zoo module converts to the Network built without PyTorch (seed modules included)."""
    entry = ZOO[name]
    converted = from_module(entry.module(), entry.input_shape, loss=nn.CrossEntropyLoss())
    built = entry.network()
    assert [r.layer.kind for r in converted.rows] == [r.layer.kind for r in built.rows]
    assert [r.output_shape for r in converted.rows] == [r.output_shape for r in built.rows]
    assert [r.saved for r in converted.rows] == [r.saved for r in built.rows]
    assert converted.parameter_count == built.parameter_count


def test_symbolic_input_shape_keeps_the_symbols():
    """Batch and image size may be memtheory symbols: the network stays symbolic."""
    module = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.MaxPool2d(2), nn.Flatten())
    net = from_module(module, (B, 3, H, H))
    assert net.output_shape[0] == B and net.free_symbols == {B, H}
    assert net.summary(B=2, H=10).rows[-1].output_shape == (2, 8 * 5 * 5)


def test_nested_sequentials_and_identity_are_flattened():
    """Nested nn.Sequential stacks are read in order; nn.Identity adds no layer."""
    module = nn.Sequential(nn.Sequential(nn.Linear(4, 5), nn.Identity()), nn.ReLU())
    net = from_module(module, (2, 4))
    assert [row.layer.kind for row in net.rows] == ["Input", "Dense", "ReLU"]


def test_unsupported_module_is_named_with_its_path():
    """A module memtheory does not model is refused, naming its path and type."""
    module = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.LayerNorm(4)))
    with pytest.raises(mt.UnsupportedError, match=r"module '1\.1' is nn\.LayerNorm"):
        from_module(module, (2, 4))


class _Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x) * 2


def test_custom_forward_is_traced():
    """A module with its own forward() is traced: a TracedMemory symbolic in the shape's symbols."""
    from memtheory.torch.tracing import TracedMemory

    memory = from_module(_Twice(), (B, 4), loss=nn.CrossEntropyLoss(), optimizer="sgd")
    assert isinstance(memory, TracedMemory) and memory.free_symbols == {B}
    assert memory["parameters"] == 4 * sum(p.numel() for p in _Twice().parameters())


def test_custom_forward_inside_a_stack_is_refused():
    """Inside an nn.Sequential a module with its own forward() is named, and trace suggested."""
    with pytest.raises(mt.UnsupportedError, match="its own forward.*memtheory.torch.trace"):
        from_module(nn.Sequential(_Twice()), (2, 4))


def test_declared_sizes_must_match_the_incoming_shape():
    """A Linear whose in_features differ from the features reaching it is a ShapeError."""
    with pytest.raises(mt.ShapeError, match="in_features = 5"):
        from_module(nn.Sequential(nn.Linear(5, 2)), (2, 4))
    with pytest.raises(mt.ShapeError, match="in_channels = 1"):
        from_module(nn.Sequential(nn.Conv2d(1, 2, 3)), (2, 3, 8, 8))


def test_options_that_change_what_is_kept_are_refused():
    """Reflect padding, return_indices and a summed loss change the saved tensors: refused."""
    with pytest.raises(mt.UnsupportedError, match="padding_mode"):
        from_module(nn.Sequential(nn.Conv2d(3, 2, 3, padding_mode="reflect")), (1, 3, 8, 8))
    with pytest.raises(mt.UnsupportedError, match="return_indices"):
        from_module(nn.Sequential(nn.MaxPool2d(2, return_indices=True)), (1, 3, 8, 8))
    with pytest.raises(mt.UnsupportedError, match="reduction"):
        from_module(nn.Sequential(nn.Linear(4, 2)), (2, 4), loss=nn.MSELoss(reduction="sum"))
    with pytest.raises(mt.UnsupportedError, match="CrossEntropyLoss"):
        from_module(nn.Sequential(nn.Linear(4, 2)), (2, 4), loss=nn.HuberLoss())


def test_dropout_device_follows_the_parameters():
    """On CPU a converted dropout keeps its mask in the activation dtype; on CUDA a bool mask."""
    module = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    assert from_module(module, (2, 4))["dropout_1"].layer.mask_dtype is None
    cuda = from_module(module, (2, 4), device="cuda")["dropout_1"].layer.mask_dtype
    assert cuda == mt.dtype("bool")
