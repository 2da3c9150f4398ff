"""memtheory and PyTorch: convert a module, and measure what a training step really keeps.

Needs PyTorch (the ``torch`` extra: ``pip install "memtheory[torch]"``);
``import memtheory`` itself never imports it, and this package imports it only
when one of its functions is first used.

* :func:`trace` traces a training step of any module on fake tensors into
  exact formulas in its sizes (:class:`TracedMemory`), without running it or
  allocating its weights; :func:`from_module` builds a memtheory Network from
  an ``nn.Sequential`` and traces any other module.
* :func:`track` follows the live tensor storages of any code run inside it (a
  custom loop, gradient accumulation, a Hugging Face ``Trainer`` step), to the
  byte on CPU, and sorts what is alive at the peak by category, phase and module
  (a :class:`TrackedMemory`); its :class:`Tracker` reads the peak.
* :func:`measure` measures a training step on CPU or a CUDA device, to the
  byte (called as :func:`trace` is; a :class:`Loop` says which loop: outputs
  kept through backward or not, loss inside the model or not), running the
  standard step inside :func:`track`, in the categories of memtheory's memory
  breakdowns (on CUDA with the
  caching allocator's statistics per phase, an :class:`AllocatorReport`);
  :func:`check_against_allocator` counts the same step again with the CPU
  allocator's own events (PyTorch's profiler, no dispatch mode);
  :func:`phase_peaks` splits a measured step's timeline into phases, and
  :func:`measured_saved_tensors` lists what autograd saved, layer by layer;
  :func:`torch_optimizer` builds the ``torch.optim`` optimizer a memtheory
  optimizer describes, options included.
* ``trace``, ``measure`` and ``track`` take ``setup=`` (a
  :class:`~memtheory.recipes.Setup` or a recipe's name):
  :func:`~memtheory.torch.setup_step.setup_step` maps it onto their keywords,
  checks the model against it and refuses what one CPU process cannot run.
* :func:`~memtheory.torch.hf_losses.causal_lm_loss` and
  :func:`~memtheory.torch.hf_losses.masked_lm_loss` are Hugging Face's losses.

The models the predictions are checked on (the zoo, the reference pairs) and the
tables that put predictions beside measurements live in :mod:`memtheory.validation`.

Examples
--------
>>> from torch import nn
>>> from memtheory import training_memory
>>> from memtheory.torch import from_module
>>> module = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
>>> net = from_module(module, (64, 784), loss=nn.CrossEntropyLoss())
>>> training_memory(net, optimizer="sgd", convention="autograd")["saved_activations"]
35332

Any training code, tracked:

>>> import torch
>>> from memtheory.torch import track
>>> sgd = torch.optim.SGD(module.parameters(), lr=0.1)
>>> x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))
>>> with track(module, sgd, inputs=(x, y)) as tracker:
...     for half in (slice(0, 32), slice(32, 64)):  # gradient accumulation, 2 micro-batches
...         nn.functional.cross_entropy(module(x[half]), y[half]).backward()
...     sgd.step()
>>> tracker.footprint.total == tracker.peak
True
>>> list(tracker.footprint.timeline)  # "other": slicing, the loss (outside any module)
['start', 'other', 'forward', 'backward', 'forward (2)', 'backward (2)', 'optimizer step']

PyTorch :data:`~memtheory.torch.versions.CHECKED_TORCH_VERSION` is the release
the exact figures were checked against; on another, :func:`trace`,
:func:`track` and :func:`measure` warn once (:class:`TorchVersionWarning`).
"""


from typing import Any

from memtheory._lazy import lazy_attribute

__all__ = [
    "SUPPORTED_MODULES",
    "AllocatorCheck",
    "AllocatorCounters",
    "AllocatorReport",
    "AllocatorTrace",
    "CudaCounters",
    "CHECKED_TORCH_VERSION",
    "Loop",
    "Measurement",
    "PhasePeak",
    "MeasuredSavedTensor",
    "StorageTracker",
    "TorchVersionWarning",
    "TracedMemory",
    "TrackedMemory",
    "Tracker",
    "check_against_allocator",
    "distinct_bytes",
    "from_module",
    "measure",
    "optimizer_implementation",
    "phase_peaks",
    "measured_saved_tensors",
    "torch_optimizer",
    "trace",
    "trace_allocator",
    "track",
]

_HOMES = {
    "AllocatorCheck": "memtheory.torch.allocator_trace",
    "AllocatorTrace": "memtheory.torch.allocator_trace",
    "check_against_allocator": "memtheory.torch.allocator_trace",
    "trace_allocator": "memtheory.torch.allocator_trace",
    "AllocatorCounters": "memtheory.torch.allocator_counters",
    "AllocatorReport": "memtheory.torch.allocator_counters",
    "CudaCounters": "memtheory.torch.allocator_counters",
    "SUPPORTED_MODULES": "memtheory.torch.convert",
    "from_module": "memtheory.torch.convert",
    "Loop": "memtheory.torch.loop",
    "Measurement": "memtheory.torch.measurement",
    "StorageTracker": "memtheory.torch.storages",
    "measure": "memtheory.torch.measurement",
    "optimizer_implementation": "memtheory.torch.measurement",
    "PhasePeak": "memtheory.torch.phases",
    "phase_peaks": "memtheory.torch.phases",
    "MeasuredSavedTensor": "memtheory.torch.saved",
    "distinct_bytes": "memtheory.torch.saved",
    "measured_saved_tensors": "memtheory.torch.saved",
    "torch_optimizer": "memtheory.torch.optimizers",
    "TrackedMemory": "memtheory.torch.tracker",
    "Tracker": "memtheory.torch.tracker",
    "track": "memtheory.torch.tracker",
    "CHECKED_TORCH_VERSION": "memtheory.torch.versions",
    "TorchVersionWarning": "memtheory.torch.versions",
    "trace": "memtheory.torch.tracing",
    "TracedMemory": "memtheory.torch.tracing",
}


def __getattr__(name: str) -> Any:
    """Import the public names on first use, so that this package imports without PyTorch."""
    return lazy_attribute('memtheory.torch', _HOMES, name)


def __dir__() -> list[str]:
    return sorted(__all__)
