"""The reference pairs in the accuracy comparison: graphs exact, refusals reported, not raised.

Measured with PyTorch 2.13 on CPU (memtheory.torch.measure) against each builder's network.
"""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")

from memtheory.errors import UnknownNameError, UnsupportedError  # noqa: E402
from memtheory.validation import accuracy_table, compare_with_measurement  # noqa: E402
from memtheory.validation.reference_models import PAIRS  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TRAINING = ("weights", "gradients", "optimizer state", "saved activations", "peak")
GRAPHS = ["ResNet-18-style", "ResNet-50-style", "MobileNetV2-style"]


@pytest.mark.parametrize(
    ("name", "precision", "optimizer"),
    [
        ("ResNet-18-style", "bf16", "sgd+momentum"),
        ("ResNet-50-style", "fp32", "adam"),
        ("MobileNetV2-style", "autocast-bf16", "adam"),
    ],
)
def test_autograd_convention_is_exact_on_residual_graphs(name, precision, optimizer):
    """Every training category of a residual graph equals the measured bytes."""
    c = compare_with_measurement(name, precision=precision, optimizer=optimizer)
    assert not c.refused
    assert {k: c.predicted("autograd", k) for k in TRAINING} == {k: c.measured(k) for k in TRAINING}


@pytest.mark.parametrize("name", ["ResNet-18-style", "ResNet-50-style"])
def test_inference_peak_of_residual_networks(name):
    """Eval + no_grad: the autograd convention's inference peak is the measured one."""
    c = compare_with_measurement(name, precision="fp32", optimizer="sgd")
    assert c.predicted("autograd", "inference peak") == c.measured("inference peak")


@pytest.mark.parametrize("precision", ["fp32", "autocast-bf16"])
def test_inference_peak_of_mobilenet_v2(precision):
    """MobileNetV2's nested nn.Sequential stages hold their inputs until they return.

    The builder declares torchvision's module calls (``Network.calls``): the
    output of ``features.5`` lives through ``features.6.0`` and ``.1``.
    """
    c = compare_with_measurement("MobileNetV2-style", precision=precision, optimizer="sgd")
    assert c.predicted("autograd", "inference peak") == c.measured("inference peak")


@pytest.mark.parametrize(
    ("name", "precision"),
    [("ViT-style", "fp32"), ("BERT-MLM-style", "bf16"), ("GPT-2-style", "autocast-bf16")],
)
def test_inference_peak_of_transformers(name, precision):
    """Eval + no_grad: attention's fast path, and the variables the real forward keeps."""
    c = compare_with_measurement(name, precision=precision, optimizer="sgd")
    assert c.predicted("autograd", "inference peak") == c.measured("inference peak")


@pytest.mark.parametrize("name", ["ViT-style", "BERT-MLM-style", "GPT-2-style"])
def test_transformers_are_refused_with_a_reason_or_exact(name):
    """A convention that refuses records why; once it models the network, it must be exact."""
    c = compare_with_measurement(name, precision="fp32", optimizer="adam")
    assert set(c.predictions) >= {"rule_of_thumb", "breakdown"}
    assert c.conventions == ("rule_of_thumb", "breakdown", "autograd")
    if "autograd" in c.refused:
        assert "autograd convention does not model" in c.refused["autograd"]
        with pytest.raises(UnsupportedError, match="autograd refused"):
            c.predicted("autograd", "peak")
    else:
        assert c.predicted("autograd", "peak") == c.measured("peak")


def test_table_shows_a_refusal_with_its_reason():
    """A refused convention's row says 'refused' and gives the reason in the note column."""
    c = compare_with_measurement("ResNet-18-style", precision="fp32", optimizer="sgd")
    reason = "the autograd convention does not model Thing 'x' (layer 1 of 'N') yet: because"
    refused = dataclasses.replace(
        c,
        predictions={k: v for k, v in c.predictions.items() if k != "autograd"},
        refused={"autograd": reason},
    )
    table = accuracy_table([c, refused])
    assert table.titles[-1] == "note"
    last = table.rows[-1]
    assert last[3] == "autograd" and last[4] == "refused"
    assert last[-1] == "refused: does not model Thing 'x' (layer 1 of 'N') yet"
    assert table.rows[2][-1] == ""  # c's autograd row: a number, no note
    assert "note" not in accuracy_table([c]).titles


def test_unknown_model_names_the_known_ones():
    """A name neither in the zoo nor among the pairs is an UnknownNameError listing both."""
    with pytest.raises(UnknownNameError, match="GPT-2-style"):
        compare_with_measurement("GPT-3")
    assert set(PAIRS) >= set(GRAPHS)
