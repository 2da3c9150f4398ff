"""Run a real FSDP2 training step on CPU processes (gloo) and track each rank.

:func:`fsdp_step` starts ``world`` processes with ``torch.multiprocessing``,
joins a gloo process group over the loopback interface, builds transformers'
causal language model from a configuration (no download), shards it as
accelerate and transformers do (``fully_shard`` on each decoder layer, then on
the root, ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``),
runs warm-up steps with ``torch.optim.AdamW`` and then one step under
:func:`memtheory.torch.track` on every rank. Each rank's tracked peak,
categories and phase peaks come back as an :class:`FSDPRank`.

Every join has a deadline: a rank that fails fails the call
(:class:`~memtheory.errors.InvalidArgumentError` with the rank's error), and
ranks still running at the deadline are ended by their process ids.
"""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as mp

from memtheory.errors import InvalidArgumentError, UnsupportedError

__all__ = ["FSDPRank", "fsdp_step", "padded_shard_bytes"]


@dataclass(frozen=True)
class FSDPRank:
    """One rank's tracked step.

    Attributes
    ----------
    rank : int
    peak : int
        Most bytes of live CPU storages at once during the tracked step.
    peak_operation : str
    components : dict of str to int
        Bytes alive at the peak by category (:func:`memtheory.torch.track`'s).
    phases : dict of str to int
        The start's live bytes and each phase's most.
    shard_bytes : int
        Bytes of the rank's sharded parameter storages (padded), read from FSDP2.
    modules : dict of str to int
        Bytes made in each module's forward and alive at the peak.
    """

    rank: int
    peak: int
    peak_operation: str
    components: dict[str, int]
    phases: dict[str, int]
    shard_bytes: int
    modules: dict[str, int]


def padded_shard_bytes(shapes: list[tuple[int, ...]], world: int, itemsize: int = 4) -> int:
    """Bytes one rank holds of parameters of ``shapes`` sharded by FSDP2 over ``world`` ranks.

    FSDP2 shards each parameter on dim 0 and pads every rank's shard to
    ``ceil(dim0 / world)`` rows (``_fsdp_param.py`` ``_init_sharded_param``:
    ``padded_sharded_param_size``), so each rank's storage is that size even
    where its own rows are fewer.

    Examples
    --------
    >>> padded_shard_bytes([(96, 32), (5,)], world=2)  # 48 x 32 and 3 (of 5) floats
    6156
    """
    total = 0
    for shape in shapes:
        rows = -(-shape[0] // world)
        rest = 1
        for size in shape[1:]:
            rest *= size
        total += rows * rest * itemsize
    return total


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker(rank: int, world: int, port: int, job: dict[str, Any], queue: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import torch.distributed as dist

    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    except Exception as error:  # noqa: BLE001 - reported to the parent as "cannot start"
        queue.put(("unavailable", rank, f"{type(error).__name__}: {error}"))
        return
    try:
        queue.put(("ok", rank, _tracked_step(rank, world, job)))
    except Exception:
        queue.put(("failed", rank, traceback.format_exc()))
        raise
    finally:
        dist.destroy_process_group()


def _tracked_step(rank: int, world: int, job: dict[str, Any]) -> FSDPRank:
    import transformers
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from memtheory.torch import track
    from memtheory.torch.storages import storage_of

    mesh = init_device_mesh("cpu", (world,))
    config = dict(job["config"])
    values = {k: v for k, v in config.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model(
        config["model_type"], attn_implementation="sdpa", use_cache=False, **values)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf).float().train()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    fused = job["implementation"] == "fused"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=not fused, fused=fused)
    torch.manual_seed(rank)
    ids = torch.randint(0, config["vocab_size"], (job["batch"], job["sequence"]))
    labels = ids.clone()  # a storage of its own, as a data collator's batch has them

    def step() -> None:
        model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    for _ in range(job["warmup"]):
        step()
    with track(model, optimizer, inputs=(ids, labels)) as tracker:
        step()
    footprint = tracker.footprint
    shards = sum(storage_of(p).nbytes() for p in model.parameters())
    return FSDPRank(rank, tracker.peak, tracker.footprint.peak_operation,
                    {k: int(v) for k, v in footprint.components.items()},
                    {k: int(v) for k, v in footprint.timeline.items()}, shards,
                    {k: int(v) for k, v in footprint.modules.items()})


def fsdp_step(
    config: Mapping[str, Any],
    *,
    world: int = 2,
    batch: int = 2,
    sequence: int = 6,
    implementation: str = "foreach",
    warmup: int = 1,
    timeout: float = 240.0,
) -> list[FSDPRank]:
    """Run one tracked FSDP2 training step on ``world`` CPU processes; return every rank's.

    Parameters
    ----------
    config : mapping
        A transformers configuration with ``model_type`` (a decoder with
        ``model.layers``), built with no download.
    world : int, default 2
    batch, sequence : int
    implementation : {"foreach", "fused"}, default "foreach"
        ``torch.optim.AdamW``'s implementation (the recipe's: foreach on CUDA).
    warmup : int, default 1
        Untracked steps first, so the optimizer state and FSDP2's buffers exist.
    timeout : float, default 240
        Seconds for all ranks together; after it, the ranks are ended.

    Raises
    ------
    UnsupportedError
        When the gloo process group cannot start here (no loopback).
    InvalidArgumentError
        When a rank fails (its traceback is in the message) or the deadline passes.
    """
    if implementation not in ("foreach", "fused"):
        raise InvalidArgumentError(
            f"implementation must be 'foreach' or 'fused', got {implementation!r}.")
    job = {"config": dict(config), "batch": batch, "sequence": sequence,
           "implementation": implementation, "warmup": warmup}
    spawn = mp.get_context("spawn")
    queue = spawn.SimpleQueue()
    context = mp.start_processes(_worker, args=(world, _free_port(), job, queue),
                                 nprocs=world, join=False, start_method="spawn")
    results = _gather(context, queue, world, timeout)
    unavailable = [text for status, _, text in results if status == "unavailable"]
    if unavailable:
        raise UnsupportedError(f"the gloo process group cannot start here: {unavailable[0]}")
    return sorted((value for _, _, value in results), key=lambda r: r.rank)


def _gather(context: Any, queue: Any, world: int, timeout: float) -> list[tuple[str, int, Any]]:
    import time

    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=max(0.1, min(5.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise InvalidArgumentError(
                    f"the FSDP2 ranks did not finish within {timeout:.0f} s; they were ended.")
    except mp.ProcessRaisedException as error:
        raise InvalidArgumentError(f"an FSDP2 rank failed:\n{error}") from None
    except mp.ProcessExitedException as error:
        raise InvalidArgumentError(f"an FSDP2 rank exited: {error}") from None
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
                process.join(5)
    results = []
    while not queue.empty():
        results.append(queue.get())
    failed = [text for status, _, text in results if status == "failed"]
    if failed:
        raise InvalidArgumentError(f"an FSDP2 rank failed:\n{failed[0]}")
    if len(results) != world:
        raise InvalidArgumentError(f"{len(results)} of {world} FSDP2 ranks reported back.")
    return results
