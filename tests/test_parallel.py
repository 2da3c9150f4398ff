"""Memory per device on several GPUs: ZeRO's published figures, DDP buckets, 1F1B, tensor parallel.

Sources: Rajbhandari et al., "ZeRO" (SC 2020), Figure 1; Korthikanti et al.,
"Reducing Activation Recomputation in Large Transformer Models" (2022),
Table 2 and Section 4.2.3; PyTorch's DistributedDataParallel documentation
(``gradient_as_bucket_view``); DeepSpeed's ``estimate_zero3_model_states_mem_needs``
(``deepspeed/runtime/zero/stage3.py``) for the largest-layer term.
"""

from __future__ import annotations

import pytest
import sympy as sp

from memtheory import ModelCounts, training_memory
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.finetuning import LoRA, finetune_memory
from memtheory.models import gpt2
from memtheory.techniques import parallel_memory, tensor_parallel_activation_ratio
from memtheory.transformer_activations import paper_activation_bytes


def _states(parameters: int):
    counts = ModelCounts(parameters=parameters, activations=0, input_elements=0)
    return training_memory(counts, optimizer="adam", precision="mixed-fp16")


@pytest.mark.parametrize(("stage", "gb"), [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_figure_1_per_device(stage, gb):
    """ZeRO paper, Figure 1: 7.5B parameters on 64 devices, Adam in mixed precision (K = 12)."""
    memory = parallel_memory(_states(7_500_000_000), data=64, zero=stage, reduce_bucket_size=0,
                             bucket_view=True)
    assert round(float(memory.total) / 1e9, 1) == gb


def test_ddp_buckets_copy_the_gradients_unless_they_are_views():
    """DDP docs: gradient_as_bucket_view=True saves 'the total gradients size'."""
    memory = _states(10**6)
    plain = parallel_memory(memory, data=4)
    viewed = parallel_memory(memory, data=4, bucket_view=True)
    assert plain["gradient_buckets"] == memory["gradients"]
    assert plain.total - viewed.total == memory["gradients"]


def test_zero3_gathers_the_largest_layer_and_offloads_to_host():
    """ZeRO-3 with parameter offload keeps the gathered layer on the GPU, the rest in host RAM."""
    net = gpt2("small", batch=1, sequence=128)
    memory = training_memory(net, optimizer="adam", precision="mixed-bf16")
    result = parallel_memory(memory, data=8, zero=3, offload="optimizer+parameters", network=net,
                             gpus_per_node=8)
    largest = max(row.parameters for row in net.rows)
    assert largest == 50257 * 768  # the token embedding, as DeepSpeed's largest_layer_params
    assert result["gathered_parameters"] == 2 * largest
    assert "parameters" not in result.components
    assert result.host is not None
    per_parameter = sp.Rational(2 + 2 + 4 + 8, 8)  # bf16 weights + grads, fp32 master + 2 moments
    assert result.host.total == per_parameter * net.parameter_count
    assert result.host_per_node() == 8 * result.host.total


def test_pipeline_stage_i_keeps_p_minus_i_micro_batches():
    """1F1B (Korthikanti Section 4.2.3): stage 0 keeps p micro-batches of its 1/p of the layers."""
    net = gpt2("small", batch=2, sequence=64)
    memory = training_memory(net, optimizer="adam", precision="mixed-bf16")
    result = parallel_memory(memory, pipeline=4)
    activations = [stage["activations"] for stage in result.stages]
    assert activations[0] == memory["activations"]
    assert activations == [memory["activations"] * sp.Rational(4 - i, 4) for i in range(4)]
    assert result.stages[0]["parameters"] == memory["parameters"] / 4
    fewer = parallel_memory(memory, pipeline=4, micro_batches=2)
    assert fewer.stages[0]["activations"] == memory["activations"] / 2


@pytest.mark.parametrize(("t", "sequence_parallel"), [(2, False), (8, False), (4, True)])
def test_tensor_parallel_ratio_is_korthikanti_table_2(t, sequence_parallel):
    """Korthikanti Table 2: sbh(10 + 24/t + 5as/(ht)), sbh/t (34 + 5as/h), over sbh(34 + 5as/h)."""
    net = gpt2("medium", sequence=512)
    ratio = tensor_parallel_activation_ratio(net, t, sequence_parallel=sequence_parallel)
    shape = {"sequence": 512, "batch": 1, "hidden": 1024, "heads": 16}
    expected = paper_activation_bytes(
        **shape, tensor_parallel=t, sequence_parallel=sequence_parallel
    ) / paper_activation_bytes(**shape)
    assert ratio == sp.nsimplify(expected)


def test_lora_with_zero3_shards_the_frozen_base():
    """A fine-tuned model's frozen base is sharded by ZeRO-3 (it is a parameter)."""
    net = gpt2("small", batch=1, sequence=32)
    memory = finetune_memory(net, lora=LoRA(8))
    sharded = parallel_memory(memory, data=4, zero=3)
    assert sharded["frozen_parameters"] == memory["frozen_parameters"] / 4


def test_bad_parallel_input_names_the_fix():
    """Parameter offload without ZeRO-3, tensor parallelism without the network, zero devices."""
    memory = _states(10**6)
    with pytest.raises(InvalidArgumentError, match="zero=3"):
        parallel_memory(memory, data=2, zero=2, offload="optimizer+parameters")
    with pytest.raises(InvalidArgumentError, match="network="):
        parallel_memory(memory, tensor=2)
    with pytest.raises(InvalidArgumentError, match="positive"):
        parallel_memory(memory, data=0)
    from memtheory import Dense, Input, Network

    mlp = Network([Input((4,)), Dense(2)])
    with pytest.raises(UnsupportedError, match="MultiHeadAttention"):
        tensor_parallel_activation_ratio(mlp, 2)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_autocast_copies_are_dropped_only_under_zero3(zero):
    """Weights gathered in 16 bits (DeepSpeed bf16, accelerate FSDP) keep no autocast copies."""
    net = gpt2("small", batch=1, sequence=128)
    memory = training_memory(net, optimizer="adamw", precision="autocast-bf16",
                             convention="autograd")
    copies = sp.sympify(memory.components["weight_copies"])
    assert copies > 0
    kept = parallel_memory(memory, data=4, zero=zero, network=net)
    dropped = parallel_memory(memory, data=4, zero=zero, network=net, autocast_copies=False)
    removed = sp.sympify(kept.stages[0].total) - sp.sympify(dropped.stages[0].total)
    assert removed == (copies if zero == 3 else 0)
    assert ("weight_copies" in dropped.stages[0].components) == (zero != 3)


def test_pipeline_device_adds_one_replicas_working_memory():
    """Under 1F1B the device's estimate adds the replica's activation gradients and temporaries.

    The working memory is read off the replica's own timeline here: at each
    moment, the live bytes less the components held throughout and the
    coming-and-going ones alive then.
    """
    net = gpt2("small", batch=1, sequence=32)
    memory = training_memory(net, optimizer="adamw", precision="fp32", convention="autograd")
    assert "activation_gradients" not in memory.components
    coming = ("gradients", "saved_activations", "weight_copies", "master_gradients")
    held = sum(v for k, v in memory.components.items() if k not in coming)
    working = max(0, *(value - held - sum(memory.timeline_parts[moment].values())
                       for moment, value in memory.timeline.items()
                       if moment in memory.timeline_parts))
    assert working > 0
    result = parallel_memory(memory, pipeline=2)
    for stage in result.stages:
        assert stage["activation_gradients"] == working
    assert any("an estimate of its peak" in note for note in result.notes)
    assert not any("not a bound" in note for note in result.notes)
    plain = parallel_memory(memory, data=2)  # data parallel: the timeline is followed instead
    assert "activation_gradients" not in plain.stages[0].components
    assert not any("not a bound" in note for note in plain.notes)  # it is the followed peak
    split = parallel_memory(memory, tensor=2, network=net)  # Korthikanti's ratio, as the kept
    ratio = tensor_parallel_activation_ratio(net, 2)
    assert split.stages[0]["activation_gradients"] == working * ratio


def test_each_replica_change_is_made_once_and_splits_are_as_made_afresh(monkeypatch):
    """Splitting one replica at several sizes drops its weight copies once (``_per_replica``).

    Each split equals the one made with the change made afresh for it, moment by
    moment; a second replica gets its own change, not the first one's.
    """
    import memtheory.techniques.parallel as parallel

    net = gpt2("small", batch=1, sequence=64)
    memory = training_memory(net, optimizer="adamw", precision="autocast-bf16",
                             convention="autograd")
    made = []
    change = parallel._without_weight_copies

    def counted(replica):
        made.append(replica)
        return change(replica)

    counted.__qualname__ = change.__qualname__
    monkeypatch.setattr(parallel, "_without_weight_copies", counted)
    monkeypatch.setattr(parallel, "_per_replica", parallel._LastReplica())
    splits = [parallel_memory(memory, data=n, zero=3, network=net, autocast_copies=False)
              for n in (1, 2, 4)]
    assert len(made) == 1
    monkeypatch.setattr(parallel, "_per_replica", lambda change, replica: change(replica))
    for n, split in zip((1, 2, 4), splits, strict=True):
        fresh = parallel_memory(memory, data=n, zero=3, network=net, autocast_copies=False)
        assert dict(split.device.timeline) == dict(fresh.device.timeline)
        assert split.device.components == fresh.device.components
    other = training_memory(gpt2("small", batch=1, sequence=32), optimizer="adamw",
                            precision="autocast-bf16", convention="autograd")
    monkeypatch.setattr(parallel, "_per_replica", parallel._LastReplica())
    first = parallel_memory(memory, data=2, zero=3, network=net, autocast_copies=False)
    second = parallel_memory(other, data=2, zero=3, network=net, autocast_copies=False)
    assert first.device.peak != second.device.peak
    assert second.device.peak == parallel_memory(
        other, data=2, zero=3, network=net, autocast_copies=False).device.peak
