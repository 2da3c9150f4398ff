"""The autograd convention warns when the installed PyTorch is not the release it was checked on.

It reads the version from ``torch/version.py`` (the package metadata where that file is
missing), so the warning needs no PyTorch import; the release is compared by major and minor.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import subprocess
import sys
import warnings

import pytest

import memtheory.conventions.autograd.convention as convention_module
from memtheory import Dense, Input, Network, training_memory
from memtheory.conventions.autograd import torch_version
from memtheory.conventions.autograd.torch_version import CHECKED_TORCH_VERSION, TorchVersionWarning


def _step() -> None:
    net = Network([Input((8,), batch=2), Dense(4)])
    training_memory(net, optimizer="sgd", convention="autograd")


def test_another_release_warns_once(monkeypatch):
    """A different major.minor warns once per version, naming both releases."""
    monkeypatch.setattr(convention_module, "installed_torch_version", lambda: "2.12.1")
    monkeypatch.setattr(torch_version, "_warned", set())
    with pytest.warns(TorchVersionWarning, match=f"2.12.1.*{CHECKED_TORCH_VERSION}"):
        _step()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchVersionWarning)
        _step()


@pytest.mark.parametrize("installed", [None, "2.13.4+cpu"])
def test_no_torch_or_the_same_release_is_silent(monkeypatch, installed):
    """Without PyTorch, or with a patch release of the checked one, nothing is said."""
    monkeypatch.setattr(convention_module, "installed_torch_version", lambda: installed)
    monkeypatch.setattr(torch_version, "_warned", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchVersionWarning)
        _step()


def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the version read so far and any imported PyTorch, for this test only."""
    torch_version.installed_torch_version.cache_clear()
    monkeypatch.delitem(sys.modules, "torch", raising=False)


def test_the_version_is_what_the_metadata_says_without_importing_torch():
    """``torch/version.py`` gives the metadata's version, and PyTorch stays unimported."""
    code = (
        "import sys; from memtheory.conventions.autograd.torch_version import "
        "installed_torch_version as v; print(v()); print('torch' in sys.modules)"
    )
    read, imported = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    try:
        expected = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        expected = "None"
    assert (read, imported) == (expected, "False")


def test_a_built_version_file_is_read(monkeypatch, tmp_path):
    """A package whose ``version.py`` says another release: that release, not the metadata's."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.99.1+cu130'\ndebug = False\n"
    )
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path / "torch")]
    _fresh(monkeypatch)
    monkeypatch.setattr(torch_version, "find_spec", lambda name: spec)
    assert torch_version.installed_torch_version() == "2.99.1+cu130"
    torch_version.installed_torch_version.cache_clear()


def test_no_version_file_falls_back_to_the_metadata(monkeypatch, tmp_path):
    """Without ``version.py`` the metadata answers; without PyTorch at all, None."""
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    _fresh(monkeypatch)
    monkeypatch.setattr(torch_version, "find_spec", lambda name: spec)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: f"{name} 7.0")
    assert torch_version.installed_torch_version() == "torch 7.0"
    torch_version.installed_torch_version.cache_clear()
    monkeypatch.setattr(torch_version, "find_spec", lambda name: None)
    assert torch_version.installed_torch_version() is None
    torch_version.installed_torch_version.cache_clear()
