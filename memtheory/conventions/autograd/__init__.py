"""The autograd convention: the tensors PyTorch really keeps, and the peak of a training step.

The rule of thumb counts every activation twice and the parameters three
times. PyTorch keeps something else: each operation saves exactly the tensors
its derivative formula reads (``tools/autograd/derivatives.yaml``), a tensor
saved by two operations is stored once, and the gradients, the optimizer's
temporaries and the activations' gradients come and go during the step. This
convention follows a training step tensor by tensor:

* **saved activations**: every layer's saved tensors
  (:meth:`~memtheory.layers.Layer.autograd`, which
  :meth:`~memtheory.network.Network.saved_tensors` reads too), counted once
  per storage. A layer's ``"input"`` is the storage of the layer before it (a view
  such as Flatten, and an in-place layer, share their input's storage), so a
  ReLU's output that the next Dense layer also keeps counts once. The input
  batch and the targets are the caller's, not the graph's, and are counted as
  ``input`` and ``targets``, two storages of their own; parameters a layer
  saves are not counted again. A loop that passes the input tensor itself as
  the targets (``loss(model(ids), ids)``, a causal LM's ``labels=input_ids``)
  holds one storage, and PyTorch's peak is lower by the targets' size (one
  int64 per token); pass a separate tensor (``ids.clone()``, as Hugging
  Face's collators do) to match this convention.
* **the peak**: a timeline of live bytes through one steady-state step,
  ``zero_grad(set_to_none=True)``, forward, loss, backward, ``optimizer.step()``
  (see :class:`AutogradConvention` for the rules), carried by the
  :class:`~memtheory.memory_breakdown.MemoryBreakdown` as ``timeline`` and ``peak``.

Every rule was checked against PyTorch 2.13 on CPU with
:func:`memtheory.torch.measure`, which tracks tensor storages op by op. Derived
in the book's chapter "Theory vs measurement".

The package has one module per job:

* :mod:`~memtheory.conventions.autograd.kernels`: how a PyTorch release's
  kernels keep each layer type's storages (attention, losses, norms) and the
  optimizer step's temporaries, one module per release
  (``kernels/torch_2_13/``), found by layer type.
* :mod:`~memtheory.conventions.autograd.storage_plan`: which tensors each layer
  allocates, aliases and saves, one entry per storage (:func:`forward_storages`,
  :func:`autocast_precision`).
* :mod:`~memtheory.conventions.autograd.timeline`: the live tensors of a
  training step's forward and of inference, moment by moment;
  :mod:`~memtheory.conventions.autograd.backward` the backward pass (its
  graph of autograd nodes and the engine's order);
  :mod:`~memtheory.conventions.autograd.live_bytes` the live total they keep.
* :mod:`~memtheory.conventions.autograd.loops`: what the training loop holds
  besides the step (transformers' ``Trainer``'s bookkeeping scalars and its
  gradient clipping).
* :mod:`~memtheory.conventions.autograd.convention`: :class:`AutogradConvention`,
  which turns both into a :class:`~memtheory.memory_breakdown.MemoryBreakdown`.

Examples
--------
>>> from memtheory import Conv2d, CrossEntropyLoss, Dense, Flatten, Input, MaxPool2d, ReLU
>>> from memtheory import Network, training_memory
>>> net = Network([Input((3, 32, 32), batch=8), Conv2d(8, 3, padding=1), ReLU(),
...                MaxPool2d(2), Flatten(), Dense(10), CrossEntropyLoss()])
>>> memory = training_memory(net, optimizer="adam", convention="autograd")
>>> memory["saved_activations"]  # ReLU output (the pool keeps it too), indices, pool output, loss
459076
>>> memory.peak, memory.peak_moment
(1215672, 'backward relu_1')
"""

from __future__ import annotations

from memtheory.conventions.autograd.convention import (
    IMPLEMENTATIONS,
    AutogradConvention,
    Implementation,
)
from memtheory.conventions.autograd.storage_plan import (
    ForwardStorage,
    autocast_precision,
    forward_storages,
)

__all__ = [
    "IMPLEMENTATIONS",
    "AutogradConvention",
    "ForwardStorage",
    "Implementation",
    "autocast_precision",
    "forward_storages",
]
