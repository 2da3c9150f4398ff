"""memtheory.torch.trace: traced formulas, evaluated at sizes never traced, equal measure().

Every expected number here is measured with :func:`memtheory.torch.measure` on
the same module at the same sizes (CPU tensor storages), never written down.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import sympy as sp  # noqa: E402
import torch.nn.functional as F  # noqa: E402, N812 (PyTorch's convention)
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402
from torch_strategies import sequence_models  # noqa: E402

import memtheory as mt  # noqa: E402
from memtheory.symbols import B, H  # noqa: E402
from memtheory.torch import TracedMemory, measure, torch_optimizer, trace  # noqa: E402
from memtheory.whatif import max_batch  # noqa: E402


def _measured(module, x, y, loss, optimizer="adam"):
    torch.manual_seed(0)
    return measure(module, x, loss, torch_optimizer(optimizer, module.parameters()), target=y)


def assert_agrees(memory: TracedMemory, measured, **values):
    """The traced result at ``values`` equals the measurement: every component, both peaks."""
    at = memory.evaluate(**values)
    assert {k: int(v) for k, v in at.components.items() if v} == measured.components
    assert at.peak == measured.peak
    assert at.inference_peak == measured.inference_peak


class ResidualCNN(nn.Module):
    """A small residual CNN with batch norm, a strided convolution and global pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        """Stem, one residual convolution, a strided one, pooling and the classifier."""
        x = F.relu(self.bn(self.stem(x)))
        x = x + F.relu(self.conv(x))
        x = self.pool(F.relu(self.down(x)))
        return self.fc(x.mean((2, 3)))


def _images(batch, side, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, side, side, generator=generator), torch.randint(
        0, 10, (batch,), generator=generator
    )


@pytest.fixture(scope="module")
def cnn_trace():
    """The residual CNN and its trace at B=5, H=20 (Adam)."""
    module = ResidualCNN().train()
    x, y = _images(5, 20)
    memory = trace(module, x, {"B": 5, "H": 20}, loss=nn.CrossEntropyLoss(), target=y,
                   optimizer="adam")
    return module, memory


def test_residual_cnn_is_exact_at_sizes_never_traced(cnn_trace):
    """A residual CNN traced at B=5, H=20 equals measure at three other (B, H), to the byte."""
    module, memory = cnn_trace
    assert memory.method == "symbolic" and memory.free_symbols == {B, H}
    for batch, side in ((2, 9), (7, 17), (4, 32)):
        x, y = _images(batch, side, seed=side)
        assert_agrees(memory, _measured(module, x, y, nn.CrossEntropyLoss()), B=batch, H=side)


def test_guards_become_conditions_in_words(cnn_trace):
    """PyTorch's CPU convolution picks its kernel by batch: the trace says where it holds.

    Traced beyond them, ``B < 16`` and ``B >= 2`` change no byte, so they are
    marked harmless and do not block B=16 or B=1; ``H >= 3`` still does.
    """
    _, memory = cnn_trace
    assert any(c.startswith("B < 16: harmless") for c in memory.conditions)
    assert any(c.startswith("B >= 2: harmless") for c in memory.conditions)
    assert memory.evaluate(B=16, H=20).peak > memory.evaluate(B=1, H=20).peak > 0
    with pytest.raises(mt.errors.EvaluationError, match="H >= 3"):  # size 1 or 2 runs other code
        memory.evaluate(B=4, H=2)


def test_module_table_adds_up_to_the_saved_activations(cnn_trace):
    """Per-module saved bytes sum to the saved activations; output shapes are formulas."""
    _, memory = cnn_trace
    rows = {row.path: row for row in memory.modules}
    assert sp.expand(sum(r.saved for r in memory.modules) - memory["saved_activations"]) == 0
    assert rows["fc"].output_shape == (B, 10)
    assert rows["stem"].parameters == 3 * 8 * 9 + 8
    assert rows["down"].output_shape[2].subs(H, 20) == 10
    text = str(memory.evaluate(B=4, H=16).module_table("KiB"))
    assert "saved (KiB)" in text and "BatchNorm2d" in text


def test_traced_result_works_with_max_batch(cnn_trace):
    """max_batch on a traced result is the largest B whose traced peak fits."""
    _, memory = cnn_trace
    limit = memory.evaluate(B=11, H=12).peak + 1
    assert max_batch(memory, limit, H=12) == 11


def test_max_batch_stops_where_the_traced_formula_stops_holding(cnn_trace):
    """A limit that still fits at the last B where the formula holds is refused, not capped."""
    module, _ = cnn_trace
    x, y = _images(5, 20)
    memory = trace(module, x, {"B": 5, "H": 20}, loss=nn.CrossEntropyLoss(), target=y,
                   optimizer="adam", check_conditions=False)
    # PyTorch 2.13's CPU convolution picks its kernel by batch: the trace records B < 16.
    assert any("B < 16" in condition for condition in memory.conditions)
    with pytest.raises(mt.errors.EvaluationError, match="where the formula holds"):
        max_batch(memory, "1 TiB", H=12)


def test_peak_moment_names_phase_module_and_operator():
    """The peak's moment names where it happens: phase, module path and aten operator."""
    module = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).train()
    x, y = torch.randn(6, 16), torch.randint(0, 4, (6,))
    memory = trace(module, x, {"B": 6}, loss=nn.CrossEntropyLoss(), target=y, optimizer="adam")
    measured = _measured(module, torch.randn(40, 16), torch.randint(0, 4, (40,)),
                         nn.CrossEntropyLoss())
    at = memory.evaluate(B=40)
    assert at.peak == measured.peak
    phase, op = measured.peak_moment.split(": ")
    assert at.peak_moment.startswith(phase) and at.peak_moment.endswith(op)
    assert "Sequential.1" in at.peak_moment


@pytest.mark.slow
@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking retraces: minutes
)
@given(sequence_models(), st.sampled_from(("adam", "sgd+momentum", "adamw")), st.data())
def test_random_residual_attention_models_are_exact(model, optimizer, data):
    """Random residual attention/MLP models with norms and several losses: exact at new sizes."""
    x, y = model.batch(5, 7)
    memory = trace(model.module, x, {"B": 5, "S": 7}, loss=model.loss_function, target=y,
                   optimizer=optimizer)
    assert memory.method == "symbolic"
    batch = data.draw(st.integers(2, 9), label="B")
    sequence = data.draw(st.integers(2, 12), label="S")
    xs, ys = model.batch(batch, sequence, seed=1)
    measured = _measured(model.module, xs, ys, model.loss_function, optimizer)
    assert_agrees(memory, measured, B=batch, S=sequence)


@pytest.mark.parametrize(
    "loss",
    [F.mse_loss, F.smooth_l1_loss, F.l1_loss, F.huber_loss, F.soft_margin_loss,
     lambda out, y: F.binary_cross_entropy(out.sigmoid(), y.sigmoid())],
    ids=["mse", "smooth_l1", "l1", "huber", "soft_margin", "bce"],
)
def test_losses_whose_cpu_kernel_keeps_a_big_storage(loss):
    """Some reduced CPU losses keep an input-sized storage (memtheory.torch.tracing.kernels)."""
    module = nn.Linear(6, 3).train()
    memory = trace(module, torch.randn(5, 6), {"B": 5}, loss=loss, target=torch.randn(5, 3),
                   optimizer="sgd")
    measured = _measured(module, torch.randn(11, 6), torch.randn(11, 3), loss, "sgd")
    assert_agrees(memory, measured, B=11)


def test_model_on_the_meta_device_is_traced_without_weights():
    """A model built on the meta device traces to the CPU model's formulas; nothing is allocated."""
    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 3))

    with torch.device("meta"):
        meta = build()
    cpu = build()
    x, y = torch.randn(5, 12), torch.randint(0, 3, (5,))
    options = dict(loss=nn.CrossEntropyLoss(), target=y, optimizer="adam")
    on_meta = trace(meta, x.to("meta"), {"B": 5}, **options)
    on_cpu = trace(cpu, x, {"B": 5}, **options)
    assert on_meta.components == on_cpu.components and on_meta.peak == on_cpu.peak
    assert all(p.is_meta for p in meta.parameters())
    assert all(p.grad is None for p in cpu.parameters())


class _SizedByInt(nn.Module):
    """Builds a tensor from ``int(x.shape[0])``: PyTorch can no longer keep the batch symbolic."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        scale = torch.ones(int(x.shape[0]), 1) * 2
        return self.fc(x) * scale


def test_code_that_fixes_a_size_is_reported_with_its_line():
    """With fit=False, a size the code fixed is an error naming the size and the line."""
    x, y = torch.randn(5, 6), torch.randint(0, 4, (5,))
    with pytest.raises(mt.UnsupportedError, match=r"B was fixed to 5 by .*test_trace\.py"):
        trace(_SizedByInt(), x, {"B": 5}, loss=nn.CrossEntropyLoss(), target=y, fit=False)


def test_code_that_fixes_a_size_is_fitted_exactly():
    """By default such a model is traced at several fixed sizes, fitted, confirmed: exact."""
    module = _SizedByInt().train()
    x, y = torch.randn(5, 6), torch.randint(0, 4, (5,))
    memory = trace(module, x, {"B": 5}, loss=nn.CrossEntropyLoss(), target=y, optimizer="adam")
    assert memory.method == "fitted" and memory.free_symbols == {B}
    assert any("confirmed to the byte" in c for c in memory.conditions)
    for batch in (2, 23):
        xs, ys = torch.randn(batch, 6), torch.randint(0, 4, (batch,))
        assert_agrees(memory, _measured(module, xs, ys, nn.CrossEntropyLoss()), B=batch)


class _Positions(nn.Module):
    """Adds rows of a 16-row position table: the sequence may not exceed 16."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(16, 8))
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(x + self.table[: x.shape[1]])


def test_a_size_limit_in_the_code_is_a_condition():
    """Slicing a 16-row table gives 'S <= 16'; evaluating beyond it is refused."""
    x = torch.randn(5, 7, 8)
    memory = trace(_Positions(), x, {"B": 5, "S": 7}, loss=lambda out: out.square().mean())
    assert "S <= 16" in memory.conditions
    memory.evaluate(B=2, S=16)
    with pytest.raises(mt.errors.EvaluationError, match="S <= 16"):
        memory.evaluate(B=2, S=17)


class _Nonzero(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        return self.head(x[x.sum(1) > 0])


def test_data_dependent_shape_names_the_op_and_the_module():
    """Boolean-mask indexing has a data-dependent shape: the error names operator and module."""
    expected = r"aten\.index\.Tensor in forward _Nonzero .*data-dependent"
    with pytest.raises(mt.errors.UntraceableError, match=expected):
        trace(_Nonzero(), torch.randn(5, 4), {"B": 5}, loss=lambda out: out.sum())


class _Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        return y * 2 if y.mean() > 0 else y


def test_branch_on_values_names_the_module():
    """Code that branches on a tensor's value cannot be traced: the message says so."""
    with pytest.raises(
        mt.errors.UntraceableError, match=r"in forward _Branchy reads a tensor's values"
    ):
        trace(_Branchy(), torch.randn(5, 4), {"B": 5}, loss=lambda out: out.sum())


def test_bad_dims_are_refused_with_the_fix():
    """The dims must name distinct example sizes of at least 2 that the inputs have."""
    module, x = nn.Linear(4, 2), torch.randn(5, 4)
    with pytest.raises(mt.errors.InvalidSizeError, match="at least 2"):
        trace(module, x, {"B": 1}, loss=lambda out: out.sum())
    with pytest.raises(mt.InvalidArgumentError, match="share the example size 5"):
        trace(module, x, {"B": 5, "S": 5}, loss=lambda out: out.sum())
    with pytest.raises(mt.InvalidArgumentError, match="no example input has a size"):
        trace(module, x, {"B": 6}, loss=lambda out: out.sum())
    with pytest.raises(mt.errors.MissingArgumentError, match="not a loss"):
        trace(module, x, {"B": 5})


def test_autocast_and_a_cast_model_are_exact():
    """Autocast's bf16 weight copies and a model cast to bf16 trace as measure sees them."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 3)).train()
    x, y = torch.randn(5, 12), torch.randint(0, 3, (5,))
    xs, ys = torch.randn(9, 12), torch.randint(0, 3, (9,))
    options = dict(loss=nn.CrossEntropyLoss(), target=y, optimizer="adam")
    mixed = trace(module, x, {"B": 5}, autocast=torch.bfloat16, **options)
    # saved bf16 copies: the second weight only (the first is needed for no input gradient)
    assert mixed["weight_copies"] == 2 * module[2].weight.numel()
    measured = measure(module, xs, nn.CrossEntropyLoss(),
                       torch_optimizer("adam", module.parameters()), target=ys,
                       autocast=torch.bfloat16)
    assert_agrees(mixed, measured, B=9)
    halved = trace(module, x, {"B": 5}, dtype=torch.bfloat16, **options)
    cast = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 3)).to(torch.bfloat16)
    measured = _measured(cast.train(), xs.to(torch.bfloat16), ys, nn.CrossEntropyLoss())
    assert_agrees(halved, measured, B=9)
    assert next(module.parameters()).dtype == torch.float32  # the model itself is untouched
