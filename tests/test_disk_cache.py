"""tests/disk_cache.py: a slow fixture's results are reused until the code behind them changes."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests import disk_cache


class DictCache:
    """pytest's config.cache, in memory: get and set of JSON data."""

    def __init__(self) -> None:
        self.entries: dict[str, Any] = {}

    def get(self, key: str, default: Any) -> Any:
        """The stored value, or ``default``."""
        return self.entries.get(key, default)

    def set(self, key: str, value: Any) -> None:
        """Store ``value``."""
        self.entries[key] = value


@pytest.fixture
def setting(tmp_path, monkeypatch):
    """A fake package with one loaded module, a fake test module, and an empty cache."""
    package = tmp_path / "memtheory"
    package.mkdir()
    source = package / "formula.py"
    source.write_text("BYTES = 4\n")
    module = types.ModuleType("fake_memtheory_formula")
    module.__file__ = str(source)
    monkeypatch.setitem(sys.modules, "fake_memtheory_formula", module)
    monkeypatch.setattr(disk_cache, "_package_dir", lambda: package.resolve())
    test_module = tmp_path / "test_fake.py"
    test_module.write_text("# measures\n")
    config = types.SimpleNamespace(cache=DictCache())
    request = types.SimpleNamespace(config=config, path=test_module)
    return request, source, test_module


def counting(value: Any) -> tuple[list[int], Any]:
    """A compute function that records each call."""
    calls: list[int] = []

    def compute() -> Any:
        calls.append(1)
        return value

    return calls, compute


def test_a_second_run_reuses_the_result(setting):
    """The same code and key: compute runs once, and both runs get the same JSON data."""
    request, _, _ = setting
    calls, compute = counting({"peak": 123, "pair": (1, 2), "error": float("inf")})
    first = disk_cache.cached_on_disk(request, "x", compute, key={"torch": "1"})
    second = disk_cache.cached_on_disk(request, "x", compute, key={"torch": "1"})
    assert len(calls) == 1
    assert first == second == {"peak": 123, "pair": [1, 2], "error": float("inf")}


@pytest.mark.parametrize("which", ["package source", "test module"])
def test_a_code_change_recomputes(setting, which):
    """Editing a loaded memtheory module, or the module that measures, measures again."""
    request, source, test_module = setting
    calls, compute = counting([1])
    disk_cache.cached_on_disk(request, "x", compute, key={})
    changed = source if which == "package source" else test_module
    changed.write_text(changed.read_text() + "# edited\n")
    disk_cache.cached_on_disk(request, "x", compute, key={})
    disk_cache.cached_on_disk(request, "x", compute, key={})
    assert len(calls) == 2


def test_a_deleted_source_or_another_key_recomputes(setting):
    """A recorded file that is gone, or another version in the key, is a miss."""
    request, source, _ = setting
    calls, compute = counting([1])
    disk_cache.cached_on_disk(request, "x", compute, key={"torch": "1"})
    disk_cache.cached_on_disk(request, "x", compute, key={"torch": "2"})
    assert len(calls) == 2
    Path(source).unlink()
    disk_cache.cached_on_disk(request, "x", compute, key={"torch": "2"})
    assert len(calls) == 3


def test_without_a_cache_it_always_computes(setting):
    """-p no:cacheprovider (no config.cache): nothing is read or written."""
    request, _, _ = setting
    request.config = types.SimpleNamespace()
    calls, compute = counting([1])
    disk_cache.cached_on_disk(request, "x", compute, key={})
    disk_cache.cached_on_disk(request, "x", compute, key={})
    assert len(calls) == 2
