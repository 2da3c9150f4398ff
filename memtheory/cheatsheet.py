r"""The book's one-page cheat sheet: every formula on it printed from the library's own expressions.

Nothing here is typed in. Each table asks the module that derives a quantity
for it and prints the result (sympy's LaTeX, or a number):

* :func:`bytes_per_parameter_table`: bytes per parameter of the model states
  (weights, gradients, optimizer state, master copy) by optimizer and
  precision, from :func:`memtheory.techniques.mixed_precision.parameter_bytes`;
* :func:`saved_tensors_table`: what each kind of layer keeps for its backward
  pass, from :meth:`Layer.saved_for_backward <memtheory.layers.Layer.saved_for_backward>`;
* :func:`transformer_table`: the activation bytes of one transformer layer
  (:func:`memtheory.transformer_activations.activation_bytes`) and the
  key/value cache (:func:`memtheory.techniques.kv_cache_formula`);
* :func:`batch_table`: memory against the batch and the largest batch that
  fits, solved by sympy from the breakdown convention;
* :func:`zero_table`: the model states per device under each ZeRO stage
  (:func:`memtheory.techniques.zero.zero_model_states`);
* :func:`weights_table`: the bytes of one weight matrix in each format a
  model is fine-tuned or served in
  (:func:`memtheory.techniques.quantization.quantization`, :func:`memtheory.finetuning.nf4_bytes`).

Every table renders as Markdown with inline math (``Table.markdown()``), so
the book pastes it as it is.

Examples
--------
>>> table = bytes_per_parameter_table(optimizers=("sgd", "adam"), precisions=("fp32", "bf16"))
>>> print(table.text())
optimizer  fp32  bf16
---------  ----  ----
SGD           8     4
Adam         16     8
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy as sp

from memtheory import layers
from memtheory.counts import ModelCounts
from memtheory.dtypes import dtype
from memtheory.finetuning import nf4_bytes
from memtheory.layers.base import Layer, Shape
from memtheory.memory import training_memory
from memtheory.optimizers import optimizer as get_optimizer
from memtheory.precision import Precision, PrecisionLike
from memtheory.symbols import B, L, P, S, size_symbol
from memtheory.tables import Column, Table
from memtheory.techniques import kv_cache_formula
from memtheory.techniques.mixed_precision import bytes_per_parameter
from memtheory.techniques.quantization import quantization
from memtheory.techniques.zero import ZERO_STAGES, zero_model_states
from memtheory.transformer_activations import HEADS, activation_bytes

__all__ = [
    "EIGHT_BIT_STATES",
    "PRECISIONS",
    "batch_table",
    "bytes_per_parameter_table",
    "layer_examples",
    "saved_tensors_table",
    "transformer_table",
    "weights_table",
    "zero_table",
]

EIGHT_BIT_STATES = Precision(parameters="fp32", optimizer_state="int8")
"""fp32 weights and gradients with one-byte optimizer state (8-bit Adam's layout, before the
quantisation's per-block scales)."""

PRECISIONS: dict[str, PrecisionLike] = {
    "fp32": "fp32",
    "autocast (fp32 states)": "autocast-bf16",
    "fp16 + fp32 master (O2)": "mixed-fp16",
    "pure bf16": "bf16",
    "fp32, 8-bit states": EIGHT_BIT_STATES,
}
"""The precisions the cheat sheet compares, by the name it shows."""


def _latex(expression: object) -> str:
    return f"${sp.latex(sp.sympify(expression))}$"


def bytes_per_parameter_table(
    optimizers: Sequence[str] = ("sgd", "sgd+momentum", "rmsprop", "adam"),
    precisions: Sequence[str] | dict[str, PrecisionLike] | None = None,
) -> Table:
    """Bytes per parameter of the model states, one row per optimizer, one column per precision.

    Parameters
    ----------
    optimizers : sequence of str
        Optimizer names (:func:`memtheory.optimizer`).
    precisions : sequence of str or dict of str to precision, optional
        Precision names, or column titles mapped to precisions; :data:`PRECISIONS`
        by default.

    Examples
    --------
    >>> bytes_per_parameter_table(["adam"], {"O2": "mixed-fp16"}).rows
    (('Adam', '16'),)
    """
    chosen = PRECISIONS if precisions is None else precisions
    columns = dict(chosen) if isinstance(chosen, dict) else {name: name for name in chosen}
    rows = [
        (
            get_optimizer(name).title,
            *(str(bytes_per_parameter(optimizer=name, precision=p)) for p in columns.values()),
        )
        for name in optimizers
    ]
    return Table(["optimizer", *(Column(title, "right") for title in columns)], rows)


def layer_examples() -> list[tuple[Layer, Shape]]:
    """Return one layer of each common kind with a symbolic input shape, for the cheat sheet.

    Examples
    --------
    >>> [layer.label for layer, _ in layer_examples()][:3]
    ['Dense', 'Conv2d', 'ReLU']
    """
    n, c, k, d, h = (size_symbol(name) for name in ("N", "C", "K", "D", "H"))
    image = (B, c, h, h)
    return [
        (layers.Dense(n), (B, d)),
        (layers.Conv2d(k, 3, padding=1), image),
        (layers.ReLU(), (B, d)),
        (layers.GELU(), (B, d)),
        (layers.Dropout(0.1), (B, d)),
        (layers.MaxPool2d(2), image),
        (layers.BatchNorm2d(), image),
        (layers.LayerNorm(), (B, S, d)),
        (layers.MultiHeadAttention(size_symbol("a"), dropout=0.1), (B, S, d)),
    ]


def saved_tensors_table(examples: Sequence[tuple[Layer, Shape]] | None = None) -> Table:
    """List what each layer keeps for its backward pass, and its bytes with fp32 activations.

    A tensor whose type is not fixed by the layer takes the activations' type
    (4 bytes in fp32, 2 in 16 bits); masks and indices say their own.

    Examples
    --------
    >>> from memtheory.layers import ReLU
    >>> print(saved_tensors_table([(ReLU(), (B, 10))]).markdown())
    | layer | kept for the backward pass | bytes (fp32 activations) |
    |:--|:--|:--|
    | ReLU | output $(B, 10)$ | $40 B$ |
    """
    fp32 = dtype("fp32")
    rows = []
    for layer, shape in layer_examples() if examples is None else examples:
        kept = []
        for spec in layer.saved_for_backward(shape):
            name = spec.label or spec.role
            kind = f" {spec.dtype.name}" if spec.dtype is not None else ""
            shape_text = ", ".join(sp.latex(size) for size in spec.shape)
            kept.append(f"{name}{kind} $({shape_text})$")
        total = sp.factor(sum(spec.nbytes(fp32) for spec in layer.saved_for_backward(shape)))
        rows.append((layer.label, "; ".join(kept) or "nothing", _latex(total)))
    return Table(["layer", "kept for the backward pass", "bytes (fp32 activations)"], rows)


def transformer_table() -> Table:
    r"""Give a transformer layer's activation bytes (Korthikanti et al.) and its KV cache.

    :math:`S` positions, batch :math:`B`, width :math:`D`, :math:`a` heads of
    width :math:`d`, :math:`L` layers, 16-bit activations and one-byte masks.

    Examples
    --------
    >>> table = transformer_table()
    >>> table.column("quantity")[0]
    'activations kept by one layer for the backward pass'
    """
    d = size_symbol("d")
    rows = [
        ("activations kept by one layer for the backward pass", _latex(sp.factor(
            activation_bytes()))),
        ("the same with flash attention (no $S^2$ tensors)", _latex(sp.factor(
            activation_bytes(recompute="selective")))),
        ("key/value cache of $L$ layers, fp16", _latex(kv_cache_formula(
            layers=L, heads=HEADS, head_dim=d))),
    ]
    return Table(["quantity", "bytes"], rows)


def batch_table() -> Table:
    r"""Memory against the batch, and the largest batch that fits in :math:`M` bytes.

    A model of :math:`P` parameters whose samples each keep :math:`A`
    activations and :math:`I` input values, trained with Adam in fp32 under
    the breakdown convention.

    Examples
    --------
    >>> batch_table().column("quantity")
    ('training memory, Adam, fp32', 'largest batch in $M$ bytes')
    """
    a, i = size_symbol("A"), size_symbol("I")
    m = sp.Symbol("M", positive=True)
    counts = ModelCounts.per_sample(parameters=P, activations=a, input_elements=i)
    total = training_memory(counts, optimizer="adam").total
    (solved,) = sp.solve(sp.Eq(total, m), B)
    rows = [
        ("training memory, Adam, fp32", _latex(total)),
        ("largest batch in $M$ bytes", _latex(sp.floor(sp.factor(solved)))),
    ]
    return Table(["quantity", "bytes"], rows)


def zero_table(optimizer: str = "adam", precision: PrecisionLike = "mixed-fp16") -> Table:
    r"""Model states per device under each ZeRO stage: :math:`P` parameters over :math:`N` GPUs.

    Stage 1 partitions the optimizer state (and the master copy), stage 2 the
    gradients too, stage 3 the parameters too (Rajbhandari et al. 2020);
    activations are not partitioned and come on top.

    Examples
    --------
    >>> print(zero_table().text())
    stage  partitioned                         model states per device
    -----  ----------------------------------  -----------------------
    0      nothing (plain data parallel)       $16 P$
    1      optimizer state                     $4 P + \frac{12 P}{N}$
    2      optimizer state, gradients          $2 P + \frac{14 P}{N}$
    3      optimizer state, gradients, params  $\frac{16 P}{N}$
    """
    n = size_symbol("N")
    what = {0: "nothing (plain data parallel)", 1: "optimizer state",
            2: "optimizer state, gradients", 3: "optimizer state, gradients, params"}
    rows = [
        (str(stage), what[stage],
         _latex(zero_model_states(P, n, stage, optimizer=optimizer, precision=precision).total))
        for stage in ZERO_STAGES
    ]
    return Table(["stage", "partitioned", "model states per device"], rows)


WEIGHT_FORMATS: dict[str, str] = {
    "bf16 / fp16": "bf16",
    "int8 (one fp32 scale per row)": "int8",
    "GPTQ (groups of 128, g_idx)": "gptq",
    "AWQ (groups of 128)": "awq",
    "NF4 (QLoRA, double quantized)": "nf4",
}
"""The formats :func:`weights_table` compares, by the name it shows."""


def weights_table(side: int = 4096) -> Table:
    """Bytes of one ``side x side`` weight matrix in each format, and bits per weight.

    Constants (scales, zeros, group indices) included, as each library stores
    them; 16-bit weights are two bytes each.

    Examples
    --------
    >>> table = weights_table()
    >>> dict(zip(table.column("format"), table.column("bits per weight")))["AWQ (groups of 128)"]
    '4.156'
    """
    rows = []
    for title, name in WEIGHT_FORMATS.items():
        if name == "bf16":
            nbytes = sp.Integer(2 * side * side)
        elif name == "nf4":
            nbytes = sp.sympify(nf4_bytes(side * side))
        else:
            nbytes = sp.sympify(quantization(name).matrix_bytes(side, side))
        bits = sp.Rational(8 * nbytes, side * side)
        rows.append((title, f"{int(nbytes):,}", f"{float(bits):.{_digits(bits)}f}"))
    return Table(["format", Column(f"bytes ({side} x {side})", "right"),
                  Column("bits per weight", "right")], rows)


def _digits(value: sp.Rational) -> int:
    """Decimals that show ``value`` without rounding it away (at most 3)."""
    for digits in range(4):
        if sp.Rational(round(float(value) * 10**digits), 10**digits) == value:
            return digits
    return 3
