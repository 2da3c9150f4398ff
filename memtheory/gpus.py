r"""Named GPUs and their memory, with a reserve for the CUDA context and the allocator.

NVIDIA cards, AMD Instinct (MI210 to MI325X) and Intel Gaudi 2 and 3.

Each card's memory is the capacity its vendor's datasheet states. NVIDIA
writes "GB", but GPU memory is built from binary-sized chips: an "80 GB" A100
holds 80 GiB (:math:`80 \cdot 2^{30}` bytes, 85.9 GB in decimal units). So
memtheory reads the vendor's number as **GiB**, and every answer shows both
units. What a program can allocate is less:

* the driver keeps some memory for itself (and ECC, where enabled, takes a
  share): ``nvidia-smi`` reports a "16GB" V100 as 16160 MiB in total
  (Hugging Face, "Model training anatomy", transformers documentation);
* the CUDA context and PyTorch's kernels take memory as soon as the first
  tensor reaches the GPU: the same page measures 1343 MiB ("the kernels alone
  take up 1.3GB", and "1-2GB" in general) on that V100;
* PyTorch's caching allocator rounds each block up and keeps freed blocks
  for reuse, so the memory reserved from the driver exceeds what tensors use.

:data:`DEFAULT_RESERVE` sets 1.5 GiB aside for all three: the measured
1343 MiB context, rounded up by some 190 MiB for the driver's share and the
allocator's rounding. It is a parameter of every answer (``reserve=``), shown
with it; none of it is measured by memtheory, which measures on CPU.

Examples
--------
>>> card = gpu("RTX 4090")
>>> card.name, card.format()
('RTX 4090', '24 GiB (25.77 GB)')
>>> usable_memory("A100-80GB").format("GiB")
'78.50 GiB'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import sympy as sp

from memtheory._shown import shown
from memtheory.errors import InvalidArgumentError
from memtheory.registry import Registry
from memtheory.units import format_bytes, parse_bytes

__all__ = [
    "DEFAULT_RESERVE",
    "GPU",
    "GPUS",
    "GPU_REGISTRY",
    "Budget",
    "ReserveLike",
    "AMBIGUOUS",
    "gpu",
    "usable_memory",
]

GIB = 2**30

DEFAULT_RESERVE = sp.Rational(3, 2) * GIB
"""Bytes set aside for the CUDA context, the driver and the allocator: 1.5 GiB (see above)."""

ReserveLike: TypeAlias = str | int | sp.Expr


@dataclass(frozen=True)
class GPU:
    """A graphics card: its name, memory in bytes, and where the figure comes from.

    Attributes
    ----------
    name : str
    memory : int
        Bytes: the vendor's "GB" read as GiB.
    stated : str
        The capacity as the vendor writes it (``"24 GB GDDR6X"``).
    source : str
        The datasheet or product page.
    """

    name: str
    memory: int
    stated: str
    source: str

    def format(self) -> str:
        """Show the memory in GiB and in decimal GB.

        Examples
        --------
        >>> gpu("T4").format()
        '16 GiB (17.18 GB)'
        """
        return f"{self.memory // GIB} GiB ({format_bytes(self.memory, 'GB')})"


def _card(name: str, gib: int, kind: str, source: str) -> GPU:
    return GPU(name, gib * GIB, f"{gib} GB {kind}", source)


_NVIDIA = "https://www.nvidia.com/en-us"
_GEFORCE = f"{_NVIDIA}/geforce/graphics-cards"
_DC = f"{_NVIDIA}/data-center"
_AMD = "https://www.amd.com/en/products/accelerators/instinct"
GPUS: dict[str, GPU] = {
    card.name: card
    for card in (
        _card("RTX 3060", 12, "GDDR6", f"{_GEFORCE}/30-series/rtx-3060-3060ti/"),
        _card("RTX 3080", 10, "GDDR6X", f"{_GEFORCE}/30-series/rtx-3080-3080ti/"),
        _card("RTX 3090", 24, "GDDR6X", f"{_GEFORCE}/30-series/rtx-3090-3090ti/"),
        _card("RTX 4060 Ti 16GB", 16, "GDDR6", f"{_GEFORCE}/40-series/rtx-4060-4060ti/"),
        _card("RTX 4070", 12, "GDDR6X", f"{_GEFORCE}/40-series/rtx-4070-family/"),
        _card("RTX 4080", 16, "GDDR6X", f"{_GEFORCE}/40-series/rtx-4080-family/"),
        _card("RTX 4090", 24, "GDDR6X", f"{_GEFORCE}/40-series/rtx-4090/"),
        _card("RTX 5090", 32, "GDDR7", f"{_GEFORCE}/50-series/rtx-5090/"),
        _card("RTX A6000", 48, "GDDR6 with ECC", f"{_NVIDIA}/design-visualization/rtx-a6000/"),
        _card("RTX 6000 Ada", 48, "GDDR6 with ECC", f"{_NVIDIA}/design-visualization/rtx-6000/"),
        _card("T4", 16, "GDDR6", f"{_DC}/tesla-t4/"),
        _card("V100-16GB", 16, "HBM2", f"{_DC}/v100/"),
        _card("V100-32GB", 32, "HBM2", f"{_DC}/v100/"),
        _card("A10", 24, "GDDR6", f"{_DC}/products/a10-gpu/"),
        _card("A10G", 24, "GDDR6", "https://aws.amazon.com/ec2/instance-types/g5/"),
        _card("L4", 24, "GDDR6", f"{_DC}/l4/"),
        _card("L40S", 48, "GDDR6 with ECC", f"{_DC}/l40s/"),
        _card("A40", 48, "GDDR6 with ECC", f"{_DC}/a40/"),
        _card("A100-40GB", 40, "HBM2", f"{_DC}/a100/"),
        _card("A100-80GB", 80, "HBM2e", f"{_DC}/a100/"),
        _card("H100-80GB", 80, "HBM3 (SXM) / HBM2e (PCIe)", f"{_DC}/h100/"),
        _card("H100 NVL", 94, "HBM3", f"{_DC}/h100/"),
        _card("H200", 141, "HBM3e", f"{_DC}/h200/"),
        _card("B200", 180, "HBM3e", f"{_DC}/dgx-b200/"),
        _card("MI210", 64, "HBM2e", f"{_AMD}/mi200/mi210.html"),
        _card("MI250", 128, "HBM2e", f"{_AMD}/mi200/mi250.html"),
        _card("MI250X", 128, "HBM2e", f"{_AMD}/mi200/mi250x.html"),
        _card("MI300X", 192, "HBM3", f"{_AMD}/mi300/mi300x.html"),
        _card("MI325X", 256, "HBM3E", f"{_AMD}/mi300/mi325x.html"),
        _card("Gaudi 2", 96, "HBM2E", "https://habana.ai/products/gaudi2/"),
        _card("Gaudi 3", 128, "HBM2e", "https://www.intel.com/content/www/us/en/products/"
              "details/processors/ai-accelerators/gaudi.html"),
    )
}
"""The cards memtheory knows, by canonical name."""

GPU_REGISTRY: Registry[GPU] = Registry(
    "GPU",
    GPUS,
    aliases={
        "4090": "RTX 4090",
        "3090": "RTX 3090",
        "geforce rtx 4090": "RTX 4090",
        "geforce rtx 3090": "RTX 3090",
        "a100-80g": "A100-80GB",
        "a100-40g": "A100-40GB",
        "a100 sxm4 80gb": "A100-80GB",
        "h100": "H100-80GB",
        "h100 sxm": "H100-80GB",
        "h100 pcie": "H100-80GB",
        "h100-80g": "H100-80GB",
        "h200 sxm": "H200",
        "tesla t4": "T4",
        "instinct mi300x": "MI300X",
        "instinct mi250": "MI250",
        "instinct mi250x": "MI250X",
        "gaudi2": "Gaudi 2",
        "gaudi3": "Gaudi 3",
        "rtx a6000": "RTX A6000",
        "a6000": "RTX A6000",
    },
    prefixes=("nvidia ", "amd ", "intel "),
    hint="(or give the memory instead: --limit '24 GB')",
)
"""The cards by any spelling: case, spaces, ``-`` and ``_`` do not matter; "NVIDIA " is dropped.

A name that two cards share (``"A100"``: 40 or 80 GB; ``"V100"``: 16 or 32 GB)
is refused, listing both (:data:`AMBIGUOUS`).
"""

AMBIGUOUS: dict[str, tuple[str, ...]] = {
    "a100": ("A100-40GB", "A100-80GB"),
    "v100": ("V100-16GB", "V100-32GB"),
}
"""Names of more than one card (folded as the registry folds them), and the cards they name."""


def gpu(name: str | GPU) -> GPU:
    """Look a card up by name.

    Raises
    ------
    UnknownNameError
        Listing the known cards and the closest.

    Examples
    --------
    >>> gpu("nvidia a100 80gb").name
    'A100-80GB'
    >>> gpu("RTX 4090 Ti")
    Traceback (most recent call last):
    ...
    memtheory.errors.UnknownNameError: unknown GPU 'RTX 4090 Ti'. Did you mean 'RTX 4090'? ...
    >>> gpu("a100")
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: 'a100' names more than one card: A100-40GB and ...
    """
    if isinstance(name, GPU):
        return name
    if isinstance(name, str) and len(name) < 100:
        cards = AMBIGUOUS.get(GPU_REGISTRY.normalize(name))
        if cards:
            raise InvalidArgumentError(
                f"{name!r} names more than one card: {' and '.join(cards)}, with different "
                f"memory. Name one (--gpu {cards[-1]})."
            )
    return GPU_REGISTRY[name]


@dataclass(frozen=True)
class Budget:
    """The memory an answer may use: the device's, less the reserve, less a share for headroom.

    Attributes
    ----------
    device : str
        The card's name, or the limit as given.
    memory, reserve : sympy.Rational
        Bytes.
    headroom : sympy.Rational
        The share of what the reserve leaves that is also kept free (workspaces
        and fragmentation that grow with the model); 0 by default.
    """

    device: str
    memory: sp.Rational
    reserve: sp.Rational
    headroom: sp.Rational = sp.Integer(0)

    @property
    def usable(self) -> sp.Rational:
        """Bytes left for the step: ``(memory - reserve) * (1 - headroom)``."""
        return (self.memory - self.reserve) * (1 - self.headroom)

    def format(self, unit: str = "GiB") -> str:
        """Show the usable bytes, e.g. ``"22.50 GiB"``."""
        return format_bytes(self.usable, unit)

    def describe(self) -> str:
        """One line: device, memory, reserve, usable, in GiB and GB.

        Examples
        --------
        >>> print(usable_memory("RTX 4090").describe())
        RTX 4090: 24.00 GiB (25.77 GB), less 1.50 GiB reserve (CUDA context, allocator) = 22.50 GiB (24.16 GB) usable
        """  # noqa: E501
        share = f", less {float(self.headroom):.0%} headroom" if self.headroom else ""
        return (
            f"{self.device}: {format_bytes(self.memory, 'GiB')} "
            f"({format_bytes(self.memory, 'GB')}), less {format_bytes(self.reserve, 'GiB')} "
            f"reserve (CUDA context, allocator){share} = {format_bytes(self.usable, 'GiB')} "
            f"({format_bytes(self.usable, 'GB')}) usable"
        )


def _bytes(value: ReserveLike, what: str) -> sp.Rational:
    if isinstance(value, str) and _bare_number(value):
        raise InvalidArgumentError(
            f"{what} {shown(value)} has no unit: say which, e.g. '{value.strip()} GB' "
            f"(10^9 bytes) or '{value.strip()} GiB' (2^30 bytes)."
        )
    if isinstance(value, bool) or not isinstance(value, str | int | float | sp.Expr):
        raise InvalidArgumentError(
            f"{what} must be a number of bytes or a size such as '24 GB', got "
            f"{type(value).__name__}."
        )
    amount = parse_bytes(value) if isinstance(value, str) else sp.sympify(value)
    if not amount.is_number or not amount.is_finite or amount < 0:
        raise InvalidArgumentError(
            f"{what} must be a non-negative number of bytes or a size such as '1.5 GiB', "
            f"got {shown(value)}."
        )
    return sp.Rational(amount)


def usable_memory(
    device: str | GPU | None = None,
    *,
    limit: ReserveLike | None = None,
    reserve: ReserveLike = DEFAULT_RESERVE,
    headroom: int | sp.Expr = 0,
) -> Budget:
    """Return the memory a step may use on ``device`` (a card name) or under ``limit``.

    Parameters
    ----------
    device : str or GPU, optional
        A card from :data:`GPUS` (``"RTX 4090"``).
    limit : bytes or str, optional
        Instead of a card: the device memory (``"24 GB"``).
    reserve : bytes or str, default :data:`DEFAULT_RESERVE` (1.5 GiB)
        Set aside for the CUDA context, the driver and the allocator.
    headroom : rational in [0, 1), default 0
        A share of what the reserve leaves, also set aside: a planning margin
        for workspaces and fragmentation, which grow with the model
        (``sympy.Rational(1, 10)`` keeps 10%).

    Examples
    --------
    >>> usable_memory(limit="24 GB", reserve=0).usable
    24000000000

    The book plans with one rule, the card less the default reserve; a margin for large
    models' workspaces, 10% of what the reserve leaves, is a choice a planner may add:

    >>> usable_memory("V100-16GB").format()
    '14.50 GiB'
    >>> usable_memory("V100-16GB", headroom=sp.Rational(1, 10)).format()
    '13.05 GiB'
    """
    if (device is None) == (limit is None):
        raise InvalidArgumentError(
            "give a card (device='RTX 4090') or a limit (limit='24 GB'), one of the two."
        )
    spare = _bytes(reserve, "reserve")
    share = _headroom(headroom)
    if device is not None:
        card = gpu(device)
        memory, label = sp.Rational(card.memory), card.name
    else:
        memory, label = _bytes(limit, "limit"), str(limit)
    if spare >= memory:
        raise InvalidArgumentError(
            f"the reserve ({format_bytes(spare, 'GiB')}) leaves nothing of {label}'s "
            f"{format_bytes(memory, 'GiB')}: pass a smaller reserve."
        )
    return Budget(label, memory, spare, share)


def _bare_number(text: str) -> bool:
    """Whether ``text`` is a number without a unit (``"24"``, ``"1e9"``)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _headroom(value: int | sp.Expr) -> sp.Rational:
    """Return ``value`` as an exact share in [0, 1), or say what a share must be."""
    share = None if isinstance(value, bool | float | str) else sp.sympify(value)
    if share is None or not share.is_Rational or not 0 <= share < 1:
        raise InvalidArgumentError(
            f"headroom must be an exact share from 0 up to (not including) 1, such as "
            f"sympy.Rational(1, 10), got {value!r}."
        )
    return sp.Rational(share)
