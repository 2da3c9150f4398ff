"""tests/disk_cache.py: a slow fixture's results are reused until the code behind them changes."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests import disk_cache


class DirCache:
    """pytest's config.cache, reduced to ``mkdir``: a named directory under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def mkdir(self, name: str) -> Path:
        """The directory ``name`` under the root, created if missing."""
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder


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
    config = types.SimpleNamespace(cache=DirCache(tmp_path / "cache"))
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


def test_a_torn_or_failed_write_leaves_a_whole_entry_or_a_miss(setting, monkeypatch):
    """Workers share the cache: a write that dies midway keeps the old entry and no temp file."""
    request, _, _ = setting
    calls, compute = counting({"peak": 7})
    disk_cache.cached_on_disk(request, "x", compute, key={"torch": "1"})
    folder = request.config.cache.mkdir("memtheory")
    before = (folder / "x.json").read_text()

    def dies(data: Any, stream: Any) -> None:
        stream.write(json.dumps(data)[:10])
        raise KeyboardInterrupt

    monkeypatch.setattr(disk_cache.json, "dump", dies)
    with pytest.raises(KeyboardInterrupt):
        disk_cache.cached_on_disk(request, "x", compute, key={"torch": "2"})
    monkeypatch.undo()
    assert sorted(p.name for p in folder.iterdir()) == ["x.json"]
    assert (folder / "x.json").read_text() == before
    (folder / "x.json").write_text(before[: len(before) // 2])
    assert disk_cache.cached_on_disk(request, "x", compute, key={"torch": "1"}) == {"peak": 7}
    assert len(calls) == 3
