"""The cheat sheet prints the library's formulas; its numbers are re-derived here by hand."""

import sympy as sp

from memtheory import optimizer
from memtheory.cheatsheet import (
    batch_table,
    bytes_per_parameter_table,
    saved_tensors_table,
    transformer_table,
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
