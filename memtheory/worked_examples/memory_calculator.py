"""Document 004: an online neural-network memory calculator and its two worked examples.

The calculator adds four terms:

* parameters x bytes per parameter,
* parameters x optimizer factor x bytes per parameter (the optimizer state),
* parameters x bytes per gradient,
* batch x sequence length x an "activation factor" (layers x hidden units) x bytes per activation.

Its "MB" are MiB (it divides by 1,048,576). The first three terms are
memtheory's breakdown convention; the fourth is a guess that stands in for an
architecture, and is where the calculator goes wrong.
"""

from __future__ import annotations

import sympy as sp

from memtheory._validation import SizeLike
from memtheory.dtypes import DTypeLike
from memtheory.layers import Conv2d, Input
from memtheory.memory_breakdown import MemoryBreakdown
from memtheory.network import Network
from memtheory.optimizers import OptimizerLike, optimizer
from memtheory.precision import Precision
from memtheory.worked_examples.figures import Figure, WorkedExample

__all__ = ["calculator_estimate", "memory_calculator"]

MEBIBYTE = 2**20


def calculator_estimate(
    *,
    parameters: SizeLike,
    parameter_dtype: DTypeLike,
    batch: SizeLike,
    sequence_length: SizeLike,
    optimizer_name: OptimizerLike,
    gradient_dtype: DTypeLike,
    activation_dtype: DTypeLike,
    activation_factor: SizeLike,
    optimizer_state_dtype: DTypeLike | None = None,
) -> MemoryBreakdown:
    """Compute the calculator's formula as a memtheory breakdown.

    Parameters
    ----------
    parameters : size
    parameter_dtype, gradient_dtype, activation_dtype : dtype name
    batch, sequence_length : size
    optimizer_name : optimizer name
        Its number of state buffers is the calculator's "optimizer factor".
    activation_factor : size
        The calculator's layers x hidden units guess.
    optimizer_state_dtype : dtype name, optional
        The calculator stores optimizer state in the parameter dtype; its
        second example overrides that with fp32.

    Examples
    --------
    >>> memory = calculator_estimate(
    ...     parameters=110_000_000, parameter_dtype="fp32", batch=32, sequence_length=128,
    ...     optimizer_name="adamw", gradient_dtype="fp32", activation_dtype="fp16",
    ...     activation_factor=37_000)
    >>> memory.total
    2063104000
    """
    chosen = optimizer(optimizer_name)
    precision = Precision(
        parameters=parameter_dtype,
        gradients=gradient_dtype,
        optimizer_state=optimizer_state_dtype or parameter_dtype,
        activations=activation_dtype,
    )
    count = sp.sympify(parameters)
    components = {
        "parameters": count * precision.parameters.bytes,
        "optimizer_state": count * chosen.states_per_parameter * precision.optimizer_state.bytes,
        "gradients": count * precision.gradients.bytes,
        "activations": sp.sympify(batch)
        * sequence_length
        * activation_factor
        * precision.activations.bytes,
    }
    notes = ("activations guessed as batch x sequence x (layers x hidden units), one value each",)
    return MemoryBreakdown(components, "training", "calculator", precision, chosen, notes)


def _r(text: str) -> sp.Rational:
    return sp.Rational(text)


def memory_calculator() -> WorkedExample:
    """Rebuild both of the calculator's examples, with its rounding, and what its activations miss.

    Examples
    --------
    >>> example = memory_calculator()
    >>> total = example.figure("BERT-base: total")
    >>> total.printed, total.memtheory_value
    ('1967.1', Decimal('1967.5'))
    """
    bert = calculator_estimate(
        parameters=110_000_000,
        parameter_dtype="fp32",
        batch=32,
        sequence_length=128,
        optimizer_name="adamw",
        gradient_dtype="fp32",
        activation_dtype="fp16",
        activation_factor=37_000,
    )
    resnet = calculator_estimate(
        parameters=25_000_000,
        parameter_dtype="fp16",
        batch=64,
        sequence_length=1,
        optimizer_name="adam",
        gradient_dtype="fp16",
        activation_dtype="fp16",
        activation_factor=1_000,
        optimizer_state_dtype="fp32",
    )
    assumed_50 = 50 * MEBIBYTE
    assumed_1024 = 1024 * MEBIBYTE
    resnet_parameter_side = resnet["parameters"] + resnet["optimizer_state"] + resnet["gradients"]
    stem = Network(
        [Input((3, 224, 224), batch=64), Conv2d(64, 7, stride=2, padding=3)], name="ResNet-50 stem"
    )
    stem_row = stem.summary().rows[1]
    truncated = "The page truncates instead of rounding: "
    mib, written = "MiB", "MB"
    figures = (
        Figure(
            "BERT-base: activation factor",
            12 * 768 * 4,
            "elements",
            "37000",
            significant=2,
            explanation="12 layers x 768 hidden units x 4 = 36,864, rounded up to 37,000.",
        ),
        Figure(
            "BERT-base: parameters",
            bert["parameters"],
            mib,
            "419.5",
            written_unit=written,
            explanation="440,000,000 bytes are 419.62 MiB; 419.5 is a slip (neither rounded nor "
            "truncated), repeated in the gradients and, doubled, in the optimizer state.",
        ),
        Figure(
            "BERT-base: optimizer state",
            bert["optimizer_state"],
            mib,
            "839.1",
            written_unit=written,
            explanation="880,000,000 bytes are 839.23 MiB; the page doubles its slipped 419.55.",
        ),
        Figure(
            "BERT-base: gradients",
            bert["gradients"],
            mib,
            "419.5",
            written_unit=written,
            explanation="Same slip as the parameters: 419.62 MiB.",
        ),
        Figure(
            "BERT-base: activation bytes", bert["activations"], "B", "303,000,000", significant=3
        ),
        Figure("BERT-base: activations", bert["activations"], mib, "289", written_unit=written),
        Figure(
            "BERT-base: total",
            bert.total,
            mib,
            "1967.1",
            written_unit=written,
            document_arithmetic=_r("419.5") + _r("839.1") + _r("419.5") + 289,
            explanation="The page adds its slipped, rounded terms; exactly, 2,063,104,000 bytes "
            "are 1967.53 MiB.",
        ),
        Figure(
            "BERT-base: total in GB",
            bert.total,
            "GiB",
            "1.94",
            written_unit="GB",
            explanation="No reading gives 1.94: 1967.1 MiB is 1.92 GiB, and 2,063,104,000 bytes "
            "are 2.06 GB. A slip.",
        ),
        Figure("BERT-base: parameter share", 100 * bert["parameters"] / bert.total, "%", "21"),
        Figure(
            "ResNet-50: parameters",
            resnet["parameters"],
            mib,
            "47.6",
            written_unit=written,
            document_arithmetic=sp.floor(sp.Rational(resnet["parameters"], MEBIBYTE) * 10) / 10,
            explanation=truncated + "50,000,000 bytes are 47.68 MiB.",
        ),
        Figure(
            "ResNet-50: optimizer state (fp32)",
            resnet["optimizer_state"],
            mib,
            "190.7",
            written_unit=written,
        ),
        Figure(
            "ResNet-50: gradients",
            resnet["gradients"],
            mib,
            "47.6",
            written_unit=written,
            document_arithmetic=sp.floor(sp.Rational(resnet["gradients"], MEBIBYTE) * 10) / 10,
            explanation=truncated + "47.68 MiB.",
        ),
        Figure("ResNet-50: activation bytes", resnet["activations"], "B", "128,000"),
        Figure(
            "ResNet-50: activations",
            resnet["activations"],
            mib,
            "0.12",
            written_unit=written,
            explanation="64 x 1 x 1000 x 2 bytes: the formula's guess for a whole CNN.",
        ),
        Figure(
            "ResNet-50: activations, first replacement",
            None,
            mib,
            "50",
            written_unit=written,
            explanation="Assumed by the page ('comparable to the parameters'), not computed.",
        ),
        Figure(
            "ResNet-50: total",
            resnet_parameter_side + assumed_50,
            mib,
            "335.9",
            written_unit=written,
            document_arithmetic=_r("47.6") + _r("190.7") + _r("47.6") + 50,
            explanation="With the assumed 50 MiB of activations the exact sum is 336.09 MiB; the "
            "page adds its truncated terms.",
        ),
        Figure(
            "ResNet-50: activations, second replacement",
            None,
            mib,
            "1024",
            written_unit=written,
            explanation="Assumed by the page ('closer to 1 GB'), not computed.",
        ),
        Figure(
            "ResNet-50: revised total",
            resnet_parameter_side + assumed_1024,
            mib,
            "1310",
            written_unit=written,
            significant=4,
            document_arithmetic=_r("47.6") + _r("190.7") + _r("47.6") + 1024,
        ),
        Figure(
            "ResNet-50: revised total in GB",
            resnet_parameter_side + assumed_1024,
            "GiB",
            "1.28",
            written_unit="GB",
        ),
        Figure(
            "ResNet-50: stem convolution output, per image",
            sp.Mul(*stem_row.output_shape) / 64,
            "elements",
            explanation="ResNet-50's first layer alone (64 filters, 7x7, stride 2 on 224x224) "
            "outputs 802,816 values per image, 800 times the calculator's 1000 for the whole "
            "network.",
        ),
        Figure(
            "ResNet-50: stem convolution output, batch 64, fp16",
            sp.Mul(*stem_row.output_shape) * 2,
            mib,
            explanation="98 MiB for one layer's output: more than the calculator's first "
            "replacement "
            "guess for all fifty layers.",
        ),
    )
    return WorkedExample(
        document="004",
        filename="004_ffcfa97ef7287484.txt",
        source="an online neural-network memory calculator page and its worked examples",
        title="BERT-base with AdamW, and ResNet-50 in fp16 with fp32 Adam state",
        inputs={
            "BERT-base": "110M parameters fp32, AdamW, batch 32, sequence 128, fp32 gradients, "
            "fp16 activations, activation factor ~37000",
            "ResNet-50": "25M parameters fp16, Adam with fp32 state, batch 64, fp16 gradients and "
            "activations, activation factor 1000",
        },
        figures=figures,
        summary=(
            "The parameter, gradient and optimizer terms are the breakdown convention and come out "
            "right up to the page's rounding slips. The activation term is a guess: batch x "
            "sequence x layers x width misses attention's sequence-squared scores and the wider "
            "feed-forward tensors of a transformer, and for a CNN it misses the feature maps "
            "entirely, so the page replaces its own result by assumptions."
        ),
        breakdowns={"BERT-base": bert, "ResNet-50 (as computed)": resnet},
    )
