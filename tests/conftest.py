"""Test-wide settings.

Hypothesis's default 200 ms deadline per example is a timing assertion, and these
machines are shared and noisy: sympy-heavy examples must not fail for being slow.
Performance targets live in benchmarks/, never in tests.

``memtheory estimate`` keeps what it derives in a user cache directory: the tests keep
nothing there (``MEMTHEORY_CACHE=off``), except those that point it at a temporary one.
"""

import os

from hypothesis import settings

os.environ.setdefault("MEMTHEORY_CACHE", "off")

settings.register_profile("memtheory", deadline=None)
settings.load_profile("memtheory")


def pytest_addoption(parser):
    """Add --regen-golden: rewrite the golden table files instead of comparing with them."""
    parser.addoption(
        "--regen-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/* from the current output (review the diff before committing)",
    )
