"""The GPU catalog: vendor capacities read as GiB, aliases, the reserve shown and overridable.

Capacities are the vendors' datasheet figures (each card names its page); the
default reserve comes from Hugging Face's "Model training anatomy" page, which
measured 1343 MiB of CUDA context and kernels on a V100.
"""

from __future__ import annotations

import pytest

from memtheory.errors import InvalidArgumentError, UnknownNameError
from memtheory.gpus import DEFAULT_RESERVE, GPUS, gpu, usable_memory


def test_every_card_states_its_capacity_and_source():
    """Memory is the stated "N GB" read as N GiB, and every card cites a vendor page."""
    for card in GPUS.values():
        stated = int(card.stated.split()[0])
        assert card.memory == stated * 2**30
        assert card.source.startswith("https://")


@pytest.mark.parametrize(
    ("name", "canonical", "gib"),
    [("rtx 4090", "RTX 4090", 24), ("NVIDIA A100 80GB", "A100-80GB", 80),
     ("h100", "H100-80GB", 80), ("Tesla T4", "T4", 16), ("l4", "L4", 24), ("H200", "H200", 141),
     ("a10g", "A10G", 24), ("A100-40GB", "A100-40GB", 40), ("3090", "RTX 3090", 24)],
)
def test_cards_by_any_spelling(name, canonical, gib):
    """Case, separators and an 'NVIDIA ' prefix do not matter."""
    card = gpu(name)
    assert (card.name, card.memory) == (canonical, gib * 2**30)


def test_reserve_covers_the_measured_cuda_context():
    """1.5 GiB default: more than the 1343 MiB Hugging Face measured for context and kernels."""
    assert DEFAULT_RESERVE == 1536 * 2**20
    assert DEFAULT_RESERVE > 1343 * 2**20
    budget = usable_memory("RTX 4090")
    assert budget.usable == 24 * 2**30 - DEFAULT_RESERVE
    assert "1.50 GiB reserve" in budget.describe()
    assert usable_memory("RTX 4090", reserve="0 B").usable == 24 * 2**30
    assert usable_memory(limit="24 GB", reserve="1 GB").usable == 23 * 10**9


def test_bad_cards_and_reserves_name_the_fix():
    """An unknown card suggests the closest; a reserve must leave something."""
    with pytest.raises(UnknownNameError, match="Did you mean 'RTX 4090'"):
        gpu("RTX 4090 Ti")
    with pytest.raises(InvalidArgumentError, match="smaller reserve"):
        usable_memory("T4", reserve="20 GiB")
    with pytest.raises(InvalidArgumentError, match="one of the two"):
        usable_memory("T4", limit="16 GB")


def test_headroom_keeps_a_share_of_what_the_reserve_leaves():
    """Chapter 6's rule: 1 GiB for the context, then 90% of the rest, exactly."""
    import sympy as sp

    budget = usable_memory(limit="16 GiB", reserve="1 GiB", headroom=sp.Rational(1, 10))
    assert budget.usable == sp.Rational(9, 10) * (16 * 2**30 - 2**30)
    assert "less 10% headroom" in budget.describe()
    assert usable_memory("T4").headroom == 0
    assert usable_memory("T4", headroom=0).usable == usable_memory("T4").usable


@pytest.mark.parametrize("share", [1, -1, 0.1, True, "1/10", 2])
def test_a_headroom_that_is_no_exact_share_is_refused(share):
    """A float, a string, a bool, or a share outside [0, 1) is named with an example."""
    with pytest.raises(InvalidArgumentError, match="headroom must be an exact share"):
        usable_memory("T4", headroom=share)
