r"""8-bit Adam: bitsandbytes' block-wise quantized optimizer state.

Dettmers et al., "8-bit Optimizers via Block-wise Quantization" (ICLR 2022),
as bitsandbytes implements it (``bitsandbytes/optim/optimizer.py``,
``Optimizer2State.init_state``): each of Adam's two moments is stored as one
``uint8`` per parameter, with one fp32 absolute maximum per block of 256
values; a tensor with fewer than ``min_8bit_size = 4096`` elements keeps
32-bit state instead. For a tensor of :math:`n \ge 4096` elements:

.. math:: 2n + 2 \cdot 4 \lceil n / 256 \rceil \text{ bytes}

(against :math:`8n` for fp32 Adam). Not counted: the two shared 256-entry
code books (2 KiB per optimizer) and the step counters. The *paged* variants
(``paged_adamw_8bit``) keep the same bytes in CUDA unified memory, which the
driver may evict to host RAM under pressure: memtheory counts them on the GPU.

Examples
--------
>>> adam8bit_state_bytes([(4096, 4096)])
34078720
>>> adam8bit_state_bytes([(768,)])  # below min_8bit_size: two fp32 moments
6144
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import sympy as sp

from memtheory.layers.base import elements

__all__ = ["EIGHT_BIT_BLOCK", "MIN_8BIT_SIZE", "adam8bit_state_bytes"]

EIGHT_BIT_BLOCK = 256
"""Values per block of bitsandbytes' block-wise 8-bit optimizer state."""

MIN_8BIT_SIZE = 4096
"""bitsandbytes' ``min_8bit_size``: smaller tensors keep 32-bit optimizer state."""


def adam8bit_state_bytes(
    shapes: Iterable[Sequence[sp.Expr | int]], *, min_8bit_size: int = MIN_8BIT_SIZE
) -> sp.Expr:
    """Bytes of 8-bit Adam's two moments for parameter tensors of these shapes.

    A tensor whose size is symbolic is taken to be at least ``min_8bit_size``.

    Examples
    --------
    >>> adam8bit_state_bytes([(1000, 1000), (1000,)])  # 2 bytes each + constants; fp32 bias state
    2039256
    """
    total = sp.S.Zero
    for shape in shapes:
        n = elements(tuple(sp.sympify(s) for s in shape))
        if n.is_number and n < min_8bit_size:
            total += 8 * n
        else:
            total += 2 * n + 8 * sp.ceiling(n / EIGHT_BIT_BLOCK)
    return total
