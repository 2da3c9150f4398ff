"""The cheat sheet prints the library's formulas; its numbers are re-derived here by hand."""

import sympy as sp

from memtheory import optimizer
from memtheory.cheatsheet import (
    batch_table,
    bytes_per_parameter_table,
    saved_tensors_table,
    transformer_table,
    weights_table,
    zero_table,
)
from memtheory.layers import Dropout, MaxPool2d
from memtheory.symbols import B


def test_bytes_per_parameter_follow_each_precisions_layout():
    """Weights + gradients + states x their bytes (+ a 4-byte master copy in O2), per optimizer."""
    table = bytes_per_parameter_table(
        ["sgd", "sgd+momentum", "adam"],
        {"fp32": "fp32", "O2": "mixed-fp16", "bf16": "bf16", "autocast": "autocast-fp16"},
    )
    for row, name in zip(table.rows, ["sgd", "sgd+momentum", "adam"], strict=True):
        k = optimizer(name).states_per_parameter
        expected = (4 + 4 + 4 * k, 2 + 2 + 4 * k + 4, 2 + 2 + 2 * k, 4 + 4 + 4 * k)
        assert row[1:] == tuple(str(v) for v in expected), name
    eight_bit = bytes_per_parameter_table(["adam"]).column("fp32, 8-bit states")
    assert eight_bit == (str(4 + 4 + 2 * 1),)


def test_saved_tensors_show_masks_and_indices_with_their_own_types():
    """Dropout keeps a one-byte mask; max pooling its input and int64 indices of its output."""
    table = saved_tensors_table([(Dropout(0.5), (B, 10)), (MaxPool2d(2), (B, 3, 8, 8))])
    assert table.rows[0][1].startswith("mask bool") and table.rows[0][2] == f"${sp.latex(10 * B)}$"
    pooled = 4 * 3 * 8 * 8 + 8 * 3 * 4 * 4
    assert table.rows[1][2] == f"${sp.latex(pooled * B)}$" and "indices int64" in table.rows[1][1]


def test_transformer_and_batch_formulas_are_the_papers_and_the_solved_line():
    """Korthikanti et al.'s sbh(34 + 5as/h) and 2 x L x (K and V) fp16; M(B) solved for B."""
    rows = transformer_table().rows
    assert rows[0][1] == "$B S \\left(34 D + 5 S a\\right)$"
    assert rows[2][1] == "$4 B L S a d$"
    batch = batch_table().rows
    assert batch[0][1] == "$8 A B + 4 B I + 16 P$"


def test_zero_table_gives_the_zero_papers_figure_1():
    """Figure 1 of Rajbhandari et al. 2020 (Adam, K = 12): 7.5B parameters on 64 GPUs."""
    p, n = sp.symbols("P N", positive=True, integer=True)
    figure_1_gb = {"0": 120, "1": 31.4, "2": 16.6, "3": 1.9}
    table = zero_table()
    stages, cells = table.column("stage"), table.column("model states per device")
    for stage, cell in zip(stages, cells, strict=True):
        formula = {"0": 16 * p, "1": 4 * p + 12 * p / n, "2": 2 * p + 14 * p / n,
                   "3": 16 * p / n}[stage]
        assert cell == f"${sp.latex(formula)}$"
        assert round(float(formula.subs({p: 7_500_000_000, n: 64})) / 1e9, 1) == figure_1_gb[stage]


def test_weights_table_bytes_are_each_formats_layout():
    """Each format's bytes are its codes plus the constants its library stores.

    AWQ: an fp16 scale and a 4-bit zero per 128; GPTQ adds an int32 g_idx per input
    feature; int8 one fp32 scale per row; NF4 8-bit constants per 64 plus fp32 ones per
    256 of those (QLoRA, Section 3).
    """
    side = 4096
    bits = {
        "bf16 / fp16": 16,
        "int8 (one fp32 scale per row)": 8 + sp.Rational(32, side),
        "GPTQ (groups of 128, g_idx)": 4 + sp.Rational(16 + 4, 128) + sp.Rational(32, side),
        "AWQ (groups of 128)": 4 + sp.Rational(16 + 4, 128),
        "NF4 (QLoRA, double quantized)": 4 + sp.Rational(8, 64) + sp.Rational(32, 64 * 256),
    }
    table = weights_table(side)
    titles, sizes = table.column("format"), table.column(f"bytes ({side} x {side})")
    for title, nbytes in zip(titles, sizes, strict=True):
        assert int(nbytes.replace(",", "")) == bits[title] * side * side / 8
