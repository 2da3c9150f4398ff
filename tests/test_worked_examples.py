"""The source documents' worked examples: printed numbers reproduced, differences explained.

Every expected value here is either printed in the named source document under
``../shared/seeds`` (checked against the file's text when it is present) or
derived in the test from the inputs the document states.
"""

from pathlib import Path

import pytest
import sympy as sp

from memtheory.worked_examples import WORKED_EXAMPLES, worked_example

SOURCES = Path(__file__).resolve().parents[2] / "shared" / "seeds"


def document_text(filename: str) -> str:
    """Return the source document's text, skipping when ../shared/seeds is absent."""
    path = SOURCES / filename
    if not path.exists():
        pytest.skip(f"source documents not found at {SOURCES} (CI has ../shared beside the clone)")
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("document", sorted(WORKED_EXAMPLES))
def test_every_printed_figure_appears_in_its_source_document(document):
    """Each printed figure is quoted digit for digit from the source document it cites."""
    example = worked_example(document)
    text = document_text(example.filename)
    for figure in example.figures:
        if figure.printed is not None:
            assert figure.printed in text, (document, figure.label, figure.printed)


@pytest.mark.parametrize("document", sorted(WORKED_EXAMPLES))
def test_every_figure_agrees_or_is_explained(document):
    """No figure differs from memtheory without an explanation."""
    for figure in worked_example(document).figures:
        assert figure.verdict != "differs", (document, figure.label)
        if figure.verdict in ("slip explained", "assumed", "memtheory only"):
            assert figure.explanation or figure.verdict == "memtheory only", figure.label


@pytest.mark.parametrize("document", sorted(WORKED_EXAMPLES))
def test_document_arithmetic_reproduces_each_slip(document):
    """Where a document's own steps are redone, they give exactly the digits it printed."""
    for figure in worked_example(document).figures:
        if figure.document_arithmetic is not None:
            assert figure.document_matches_printed, (document, figure.label)


def values(document: str) -> dict[str, sp.Expr]:
    """Map each figure label of a document's example to memtheory's exact value."""
    return {f.label: f.exact for f in worked_example(document).figures}


# -- 000, a training-memory question: 19,072,984 parameters, 532,752 activations,
# 180x50x1 input, batch 128, fp32 -----------------------------------------------------------------
P0, A0, I0, B0 = 19_072_984, 532_752, 180 * 50 * 1, 128


def test_training_question_rule_of_thumb_terms():
    """Question and answer terms equal the rule's formulas on the stated inputs."""
    v = values("000")
    assert v["question: activations"] == A0 * 4
    assert v["question: parameters x 3"] == P0 * 4 * 3
    assert v["question: miscellaneous (input batch)"] == B0 * I0 * 4
    assert v["question: per-image gradients"] == A0 * B0 * 4
    assert v["answer: activations x 2 per image"] == A0 * 2 * 4


def test_training_question_answer_total_recomputed_exactly():
    """The answer's total is (3P + 2AB + IB) x 4 bytes = 742.93 MiB, not the printed 742.34."""
    figure = worked_example("000").figure("answer: total")
    assert figure.exact == (3 * P0 + 2 * A0 * B0 + I0 * B0) * 4
    assert str(figure.memtheory_value) == "742.93"
    assert figure.document_arithmetic == sp.Rational("4.06") * 128 + sp.Rational(
        "218.27"
    ) + sp.Rational("4.39")


def test_training_question_question_total_is_a_sum_of_rounded_parts():
    """The question's 224.69 is 2.03 + 218.27 + 4.39; exactly it is 224.70 MiB."""
    figure = worked_example("000").figure("question: total")
    assert figure.exact == (A0 + 3 * P0 + I0 * B0) * 4
    assert str(figure.memtheory_value) == "224.70"


# -- 001, a small CNN question: the 50x50x3 CNN at batch 64 ---------------------------------------
def test_small_cnn_per_layer_activations():
    """Per-image outputs follow from the layer shapes: 50x50 convs padded, 2x2/2 pools floor."""
    v = values("001")
    side_after_p2 = (25 - 2) // 2 + 1
    expected = {
        "Input": 50 * 50 * 3,
        "C1": 50 * 50 * 32,
        "P1": 25 * 25 * 32,
        "C2": 25 * 25 * 64,
        "P2": side_after_p2 * side_after_p2 * 64,
        "FC": 500,
        "Output": 10,
    }
    for label, count in expected.items():
        assert v[f"{label} activations per image"] == count
        assert v[f"{label} activations, batch 64"] == 64 * count


def test_small_cnn_parameters_per_layer():
    """Conv: k*k*c_in*c_out + c_out; dense: n_in*n_out + n_out (the third answer's formulas)."""
    v = values("001")
    c1 = 3 * 3 * 3 * 32 + 32
    c2 = 3 * 3 * 32 * 64 + 64
    fc = 12 * 12 * 64 * 500 + 500
    out = 500 * 10 + 10
    assert (v["C1 parameters"], v["C2 parameters"], v["FC parameters"], v["Output parameters"]) == (
        c1,
        c2,
        fc,
        out,
    )
    assert v["total parameters"] == c1 + c2 + fc + out
    assert v["parameters x 3 x 4 bytes"] == (c1 + c2 + fc + out) * 3 * 4


def test_small_cnn_totals():
    """157.2K per image and ~40 MB for the batch, with the answer's rounding made explicit."""
    v = values("001")
    per_image = 7_500 + 80_000 + 20_000 + 40_000 + 9_216 + 500
    assert v["per-image total"] == per_image
    assert v["per-image total in bytes"] == per_image * 4
    assert v["batch 64 total in bytes"] == 64 * (per_image + 10) * 4


# -- 002, a forum thread: 240k -> 1024 -> 512 -> 240k, Adam, batch 128, fp32 ----------------------
def test_fc_adam_forum_observed_six_gigabytes_explained():
    """Weights, gradients, two Adam moments, activations x 2 and the input add to ~6 GB."""
    parameters = (240_000 * 1024 + 1024) + (1024 * 512 + 512) + (512 * 240_000 + 240_000)
    activations = 128 * (1024 + 512 + 240_000)
    input_batch = 128 * 240_000
    expected = parameters * 4 * 4 + activations * 4 * 2 + input_batch * 4
    figure = worked_example("002").figure("observed memory")
    assert figure.exact == expected
    assert figure.memtheory_value == 6


def test_fc_adam_forum_adam_miscount():
    """The reply's 4.5 GB is (1 + 0.5) x 3; weights and two moments are 4.43 GB, x 4 is 5.91 GB."""
    parameters = (240_000 * 1024 + 1024) + (1024 * 512 + 512) + (512 * 240_000 + 240_000)
    figure = worked_example("002").figure("reply: Adam triples the weights")
    assert figure.exact == parameters * 4 * 3
    assert figure.document_arithmetic == sp.Rational(9, 2)


# -- 003, a blog formula: 2M parameters, 8M input elements ----------------------------------------
def test_blog_formula_blog_formula():
    """Parameters x 4 + input x 4 = 8 MB + 32 MB; training adds gradients and optimizer state."""
    v = values("003")
    assert (v["parameters"], v["input"], v["total"]) == (2_000_000 * 4, 8_000_000 * 4, 40_000_000)
    assert v["training with SGD, activations aside"] == 2_000_000 * 4 * 2 + 8_000_000 * 4
    assert v["training with Adam, activations aside"] == 2_000_000 * 4 * 4 + 8_000_000 * 4


# -- 004, an online calculator: the calculator's two examples -------------------------------------
def test_memory_calculator_bert_terms():
    """110M fp32 parameters, AdamW factor 2, fp32 gradients, 32 x 128 x 37000 fp16 activations."""
    v = values("004")
    assert v["BERT-base: parameters"] == 110_000_000 * 4
    assert v["BERT-base: optimizer state"] == 110_000_000 * 2 * 4
    assert v["BERT-base: gradients"] == 110_000_000 * 4
    assert v["BERT-base: activations"] == 32 * 128 * 37_000 * 2
    assert v["BERT-base: total"] == 110_000_000 * 16 + 32 * 128 * 37_000 * 2


def test_memory_calculator_resnet_terms():
    """25M fp16 parameters and gradients, fp32 Adam state, and the page's assumed activations."""
    v = values("004")
    parameter_side = 25_000_000 * 2 + 25_000_000 * 2 * 4 + 25_000_000 * 2
    assert v["ResNet-50: total"] == parameter_side + 50 * 2**20
    assert v["ResNet-50: revised total"] == parameter_side + 1024 * 2**20
    assert v["ResNet-50: activations"] == 64 * 1 * 1000 * 2


def test_memory_calculator_stem_convolution_dwarfs_the_activation_guess():
    """ResNet-50's 7x7/2 stem on 224x224 outputs 64 x 112 x 112 values per image."""
    v = values("004")
    side = (224 + 2 * 3 - 7) // 2 + 1
    assert v["ResNet-50: stem convolution output, per image"] == 64 * side * side
    assert v["ResNet-50: stem convolution output, per image"] > 800 * 1000


def test_unknown_document_is_a_clear_error():
    """Asking for a document that does not exist names the ones that do."""
    with pytest.raises(KeyError, match="000, 001"):
        worked_example("007")
