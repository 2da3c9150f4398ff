"""Name lookups: every registry folds spellings, resolves aliases and suggests the closest name."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memtheory as mt
from memtheory.conventions import CONVENTION_REGISTRY, CONVENTIONS, BreakdownConvention, convention
from memtheory.dtypes import DTYPE_REGISTRY, dtype
from memtheory.optimizers import OPTIMIZER_REGISTRY, OPTIMIZERS, optimizer
from memtheory.precision import PRECISION_REGISTRY, Precision, precision
from memtheory.registry import Registry
from memtheory.techniques.mixed_precision import bytes_per_parameter
from memtheory.units import UNIT_REGISTRY, UNITS, unit_bytes
from tests.strategies import respellings

# Each registry, the lookup function users call, and the error an unknown name raises.
REGISTRIES = {
    "optimizer": (OPTIMIZER_REGISTRY, optimizer, mt.errors.UnknownOptimizerError),
    "dtype": (DTYPE_REGISTRY, dtype, mt.errors.UnknownDTypeError),
    "precision": (PRECISION_REGISTRY, precision, mt.errors.UnknownPrecisionError),
    "unit": (UNIT_REGISTRY, unit_bytes, mt.errors.UnknownUnitError),
    "convention": (CONVENTION_REGISTRY, convention, mt.errors.UnknownConventionError),
}

# Every (registry, spelling, canonical name) the registries define.
SPELLINGS = [
    (kind, spelling, target)
    for kind, (registry, _, _) in REGISTRIES.items()
    for spelling, target in [*((n, n) for n in registry), *registry.aliases.items()]
]


# -- canonical names and aliases ----------------------------------------------------------
@pytest.mark.parametrize(("kind", "spelling", "target"), SPELLINGS)
def test_every_spelling_resolves_to_its_entry(kind, spelling, target):
    """Each canonical name and alias resolves to its own entry: no two spellings collide."""
    registry, lookup, _ = REGISTRIES[kind]
    assert target in registry
    assert registry.canonical(spelling) == target
    assert registry[spelling] is registry[target]
    assert lookup(spelling) == lookup(target)


@pytest.mark.parametrize("kind", REGISTRIES)
def test_lookup_functions_return_the_registry_entry(kind):
    """The public lookup (optimizer(), dtype(), ...) returns the registry's very object."""
    registry, lookup, _ = REGISTRIES[kind]
    for name in registry:
        assert lookup(name) is registry[name]


@given(
    st.sampled_from([s for s in SPELLINGS if s[0] != "unit"]).flatmap(
        lambda s: st.tuples(st.just(s), respellings(s[1]))
    )
)
def test_case_and_separators_do_not_matter(case):
    """Optimizers, dtypes, precisions and conventions ignore case, padding, ' ', _, - and +."""
    (kind, _, target), typed = case
    registry, lookup, _ = REGISTRIES[kind]
    assert registry.canonical(typed) == target
    assert lookup(typed) is registry[target]


@given(
    st.sampled_from([s for s in SPELLINGS if s[0] == "unit"]).flatmap(
        lambda s: st.tuples(st.just(s), respellings(s[1], separators=False))
    )
)
def test_units_ignore_case_only_and_the_i_decides(case):
    """A unit in any case is the same unit: 'mb' is MB (10^6), 'mib' MiB (2^20), never the other."""
    (_, _, target), typed = case
    assert UNIT_REGISTRY.canonical(typed) == target
    assert unit_bytes(typed) == UNITS[target]


def test_unit_separators_are_not_ignored():
    """Units keep their exact letters: 'M iB' is not MiB."""
    with pytest.raises(mt.errors.UnknownUnitError):
        unit_bytes("M iB")


# -- aliases people type ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("typed", "name"),
    [
        ("adamw_torch", "adamw"),  # Hugging Face TrainingArguments(optim="adamw_torch")
        ("adamw_torch_fused", "adamw"),
        ("torch.optim.AdamW", "adamw"),
        ("torch.optim.SGD", "sgd"),
        ("SGD momentum", "sgd+momentum"),
        ("sgd_momentum", "sgd+momentum"),
        ("RMSprop centered", "rmsprop-centered"),
    ],
)
def test_optimizer_aliases(typed, name):
    """Hugging Face's and torch.optim's names reach the optimizer with the same state."""
    assert optimizer(typed) is OPTIMIZERS[name]


@pytest.mark.parametrize(
    ("spec", "switches", "name"),
    [
        ("sgd", {"momentum": 0.9}, "sgd+momentum"),
        ("SGD", {"momentum": 0.9, "nesterov": True}, "nesterov"),
        ("sgd", {"momentum": 0}, "sgd"),
        ("sgd+momentum", {"momentum": 0.0}, "sgd"),
        ("nesterov", {"nesterov": False}, "sgd+momentum"),
        ("rmsprop", {"momentum": 0.5}, "rmsprop+momentum"),
        ("rmsprop", {"centered": True}, "rmsprop-centered"),
        ("rmsprop", {"momentum": 0, "centered": False}, "rmsprop"),
    ],
)
def test_torch_switches_pick_the_optimizer_with_that_state(spec, switches, name):
    """torch.optim.SGD and RMSprop keep a momentum buffer iff momentum != 0 (their docs)."""
    assert optimizer(spec, **switches) is OPTIMIZERS[name]


@pytest.mark.parametrize(
    ("spec", "switches"),
    [
        ("sgd", {"nesterov": True}),  # torch.optim.SGD refuses Nesterov without momentum
        ("sgd", {"centered": True}),
        ("adam", {"momentum": 0.9}),
        ("rmsprop", {"momentum": 0.9, "centered": True}),  # not an optimizer memtheory lists
    ],
)
def test_switches_no_known_optimizer_has_are_refused(spec, switches):
    """A combination of switches that names no known optimizer raises UnknownOptimizerError."""
    with pytest.raises(mt.errors.UnknownOptimizerError, match="switches"):
        optimizer(spec, **switches)


@pytest.mark.parametrize("momentum", [-0.1, float("nan"), "0.9", True])
def test_momentum_must_be_a_number_at_least_zero(momentum):
    """A negative, NaN or non-numeric momentum is an InvalidSizeError, as torch refuses it."""
    with pytest.raises(mt.errors.InvalidSizeError, match="momentum"):
        optimizer("sgd", momentum=momentum)


@pytest.mark.parametrize(
    ("typed", "name"),
    [
        ("half", "fp16"),
        ("float16", "fp16"),
        ("torch.float16", "fp16"),
        ("bfloat16", "bf16"),
        ("torch.bfloat16", "bf16"),
        ("np.float32", "fp32"),
        ("float", "fp32"),
        ("double", "fp64"),
        ("float8_e4m3fn", "fp8_e4m3"),
    ],
)
def test_dtype_aliases(typed, name):
    """NumPy's and PyTorch's dtype names reach memtheory's dtype."""
    assert dtype(typed) is mt.dtypes.DTYPES[name]


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("16-mixed", Precision.autocast("fp16")),  # Lightning: torch.autocast, fp32 weights
        ("bf16-mixed", Precision.autocast("bf16")),
        ("16-true", Precision.uniform("fp16")),  # Lightning: the model in fp16
        ("bf16-true", Precision.uniform("bf16")),
        ("32-true", Precision.uniform("fp32")),
        ("32", Precision.uniform("fp32")),
        ("64-true", Precision.uniform("fp64")),
        ("half", Precision.uniform("fp16")),
        ("torch.bfloat16", Precision.uniform("bf16")),
        ("mixed", Precision.mixed("fp16")),
        ("mixed-float16", Precision.mixed("fp16")),
        ("Mixed BF16", Precision.mixed("bf16")),
        ("autocast-half", Precision.autocast("fp16")),
    ],
)
def test_precision_aliases(typed, expected):
    """PyTorch Lightning's precision names and dtype spellings give the precision they mean.

    Lightning's docs (lightning.fabric.plugins.precision.MixedPrecision): "16-mixed" and
    "bf16-mixed" are torch.autocast; "-true" casts the whole model.
    """
    assert precision(typed) == expected


def test_autocast_is_the_one_autocast_precision():
    """Precision.autocast is what the autograd convention and the techniques module build."""
    from memtheory.conventions.autograd import autocast_precision
    from memtheory.techniques.mixed_precision import autocast

    assert autocast_precision("bf16") == autocast("bf16") == Precision.autocast("bf16")


@pytest.mark.parametrize("low", ["fp16", "bf16"])
def test_lightning_mixed_and_memtheory_mixed_cost_the_same_per_parameter(low):
    """Autocast 4 + 4 and mixed 2 + 2 + 4 agree: Adam's 16 B/parameter (ZeRO paper, sec. 3.1)."""
    lightning = {"fp16": "16-mixed", "bf16": "bf16-mixed"}[low]
    assert bytes_per_parameter(optimizer="adam", precision=lightning) == bytes_per_parameter(
        optimizer="adam", precision=f"mixed-{low}"
    )
    assert bytes_per_parameter(optimizer="adam", precision=lightning) == 16
    assert precision(lightning).master_weights is None


def test_lightning_mixed_runs_under_the_autograd_convention():
    """'bf16-mixed' is torch.autocast (no master copy); memtheory's 'mixed-bf16' keeps one."""
    net = mt.Network([mt.Input((4,), batch=2), mt.Dense(3)])
    memory = mt.training_memory(net, optimizer="sgd", precision="bf16-mixed", convention="autograd")
    assert memory.total > 0 and "master_weights" not in memory.components
    mixed = mt.training_memory(net, optimizer="sgd", precision="mixed-bf16", convention="autograd")
    assert mixed["master_weights"] == (4 * 3 + 3) * 4  # the Dense layer's weights and biases, fp32


# -- unknown names ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "typed", "suggested"),
    [
        ("optimizer", "adamm", "adam"),
        ("optimizer", "adamw_torh", "adamw_torch"),
        ("optimizer", "rmsprp", "rmsprop"),
        ("dtype", "fp12", "fp16"),
        ("dtype", "halff", "half"),
        ("precision", "mixd-fp16", "mixed-fp16"),
        ("precision", "bf16-mixd", "bf16-mixed"),
        ("unit", "MiBs", "MiB"),
        ("unit", "kilobites", "kilobytes"),
        ("convention", "rule of thum", "rule_of_thumb"),
        ("convention", "autgrad", "autograd"),
    ],
)
def test_unknown_names_suggest_the_closest(kind, typed, suggested):
    """A typo raises the registry's own error, listing the known names and the closest one."""
    registry, lookup, error = REGISTRIES[kind]
    with pytest.raises(error) as raised:
        lookup(typed)
    message = str(raised.value)
    assert message.startswith(f"unknown {kind} {typed!r}.")
    assert f"Did you mean {suggested!r}?" in message
    assert f"Known {registry.plural}: {', '.join(registry)}" in message
    assert raised.value.suggestions[0] == suggested
    assert raised.value.name == typed
    assert raised.value.known == tuple(registry)


@pytest.mark.parametrize("kind", REGISTRIES)
def test_far_off_names_get_no_suggestion(kind):
    """A name close to nothing gets the list of known names and no guess."""
    _, lookup, error = REGISTRIES[kind]
    with pytest.raises(error) as raised:
        lookup("zzzzzzzz")
    assert "Did you mean" not in str(raised.value)
    assert raised.value.suggestions == ()


@pytest.mark.parametrize("kind", REGISTRIES)
@pytest.mark.parametrize("spec", [None, 32, 1.5, ["adam"]])
def test_names_that_are_not_text_raise_the_registry_error(kind, spec):
    """A non-string name raises the registry's error saying names are strings."""
    _, lookup, error = REGISTRIES[kind]
    with pytest.raises(error, match="given by name"):
        lookup(spec)


def test_unknown_names_are_key_errors_with_a_plain_message():
    """UnknownNameError is a KeyError (a failed lookup) whose text is not quoted as KeyError's."""
    with pytest.raises(KeyError) as raised:
        optimizer("adamm")
    assert isinstance(raised.value, mt.errors.UnknownNameError)
    assert str(raised.value).startswith("unknown optimizer 'adamm'.")


def test_unknown_precision_is_also_an_unknown_dtype():
    """Precision names include every dtype name, so `except UnknownDTypeError` still catches."""
    assert issubclass(mt.errors.UnknownPrecisionError, mt.errors.UnknownDTypeError)


def test_unknown_dtype_inside_a_mixed_precision_names_the_dtype():
    """'mixed-fp12' fails on its dtype: the message names 'fp12' and suggests fp16."""
    with pytest.raises(mt.errors.UnknownDTypeError, match="'fp12'. Did you mean 'fp16'"):
        precision("mixed-fp12")


# -- the Registry itself ------------------------------------------------------------------
def test_registry_reads_its_entries_live(monkeypatch):
    """A convention added to CONVENTIONS later is found by convention(), as documented."""

    class Mine(BreakdownConvention):
        name = "my_convention"

    monkeypatch.setitem(CONVENTIONS, "my_convention", Mine())
    assert convention("My Convention") is CONVENTIONS["my_convention"]


def test_registry_is_a_read_only_mapping_with_alias_aware_membership():
    """`in`, get() and iteration follow the Mapping protocol; aliases count as members."""
    sizes = Registry("size", {"small": 1, "large": 3}, aliases={"big": "large"})
    assert "BIG" in sizes and "huge" not in sizes and 3 not in sizes
    assert sizes.get("Big") == 3 and sizes.get("huge", 0) == 0
    assert list(sizes) == ["small", "large"] and len(sizes) == 2
    assert dict(sizes.items()) == {"small": 1, "large": 3}
