"""What ships in the package: only the library, no test configuration."""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "memtheory"


def test_no_conftest_inside_the_package():
    """No conftest.py lives under memtheory/, so none ends up in the wheel."""
    assert PACKAGE.is_dir()
    assert sorted(PACKAGE.rglob("conftest.py")) == []
