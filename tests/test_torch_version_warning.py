"""The autograd convention warns when the installed PyTorch is not the release it was checked on.

It reads the version from the package metadata, so the warning needs no
PyTorch import; the release is compared by major and minor.
"""

from __future__ import annotations

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
