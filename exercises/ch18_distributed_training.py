"""Chapter 18, distributed training: DDP, ZeRO and FSDP, offload, tensor and pipeline parallel."""

from functools import cache

from memtheory.exercises import Choice, Exercise, ExerciseSet, Integer, Quantity
from memtheory.exercises.derivation import note, quantity_text, shown
from memtheory.exercises.shared import parameters_only
from memtheory.exercises.step_log import took
from memtheory.exercises.steps_scaling import host_ram, in_flight, per_device
from memtheory.exercises.technique_steps import layer_activations, zero_states
from memtheory.models import preset


@cache
def _llama_3_8b() -> int:
    """Llama-3-8B's parameters, from its published config.json (memtheory.models.preset)."""
    return int(preset("llama-3-8b").parameter_count)


def _billions(p):
    return int(round(p.billions * 10**9))


def _states(how, parameters, devices, stage):
    return zero_states(
        how, parameters, devices, stage, optimizer="adamw", precision="mixed-bf16"
    ).total


def _fewest_gpus(p, how):
    """Return the fewest data-parallel GPUs that hold ZeRO-3's model states and the activations."""
    card = how.to_bytes(p.card, "GB")
    activations = how.to_bytes(p.activations, "GB")
    for devices in range(1, 4097):
        if _states(how, _billions(p), devices, 3) + activations <= card:
            return shown(
                f"The fewest devices whose states + {quantity_text(activations)} bytes of "
                "activations fit "
                f"{quantity_text(card)} bytes",
                devices,
            )
    return -1  # not even 4,096 GPUs: only a mistaken reasoning gets here


def _adamw(p, how):
    return how.training_memory(
        parameters_only(_billions(p)), optimizer="adamw", precision="mixed-bf16"
    )


def _activations_stay():
    took("zero_not_sharded")
    note(
        "ZeRO shards the model states (optimizer state from stage 1, gradients from 2, the "
        "16-bit weights from 3) across the data-parallel devices; each device still runs the "
        "whole model on its own micro-batch, so it keeps that micro-batch's activations whole"
    )
    return _NOT_SHARDED[3]


_NOT_SHARDED = (
    "the optimizer state",
    "the gradients",
    "the 16-bit weights",
    "the activations of the device's own micro-batch",
)

SET = ExerciseSet(
    id="ch18",
    title="Distributed training",
    intro="With AdamW in mixed precision (bf16 weights and gradients, fp32 master weights and two "
    "fp32 moments) a parameter costs 2 + 2 + 12 bytes of model states. Plain data parallelism "
    "(DDP) replicates them on every device and adds gradient buckets as large as the gradients; "
    "ZeRO stage 1 divides the optimizer state and master weights by the N devices, stage 2 the "
    "gradients too, stage 3 (FSDP's FULL_SHARD) the weights as well. Offload moves what the "
    "optimizer step touches to host RAM. Tensor parallelism over t devices splits the attention "
    "and feed-forward tensors; 1F1B pipelining keeps min(p - i, m) micro-batches in flight on "
    "stage i of p.",
    exercises=(
        Exercise(
            id="q1",
            title="Llama-3-8B under ZeRO",
            question="Llama-3-8B ({parameters:,} parameters) is fully fine-tuned with AdamW in "
            "mixed precision (bf16 weights and gradients, fp32 master weights and moments) on "
            "{devices} GPUs with ZeRO stage {stage}. How much memory do the model states take "
            "on each GPU?",
            params={"devices": (8, 4, 16, 32), "stage": (3, 2, 1)},
            derive=lambda p: {"parameters": _llama_3_8b()},
            answer=Quantity("GB"),
            solve=lambda p, how: _states(how, _llama_3_8b(), p.devices, p.stage),
            misconceptions=("zero_wrong_stage", "forgot_master_weights", "mib_vs_mb"),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q2",
            title="how many GPUs",
            question="A model of {billions} billion parameters is fully fine-tuned with AdamW in "
            "mixed precision and ZeRO stage 3. Each GPU has {card} GB for the step, and its own "
            "micro-batch's activations take {activations} GB of it. What is the fewest "
            "data-parallel GPUs on which the step fits?",
            params={"billions": (8, 13, 7, 70), "card": (40, 80, 24), "activations": (10, 20, 4)},
            constraint=lambda p: p.activations < p.card,
            answer=Integer(),
            solve=_fewest_gpus,
            misconceptions=("zero_wrong_stage", "forgot_master_weights"),
        ),
        Exercise(
            id="q3",
            title="DDP's extra gradient copy",
            question="A model of {billions} billion parameters is trained with AdamW in mixed "
            "precision under PyTorch's DistributedDataParallel on {devices} GPUs, with the "
            "default gradient buckets (gradient_as_bucket_view=False). How much memory do the "
            "model states and the buckets take on each GPU?",
            params={"billions": (1.5, 0.35, 3, 7), "devices": (8, 4, 16)},
            answer=Quantity("GB"),
            solve=lambda p, how: per_device(how, _adamw(p, how), data=p.devices).total,
            misconceptions=("ddp_forgot_buckets", "forgot_master_weights", "mib_vs_mb"),
        ),
        Exercise(
            id="q4",
            title="a transformer layer split over t devices",
            question="A transformer layer of width {hidden} with {heads} heads keeps its "
            "activations in 16 bits for a micro-batch of one sequence of {sequence} tokens "
            "(Korthikanti et al. 2022's accounting, no recomputation). It runs with tensor "
            "parallelism over {tensor} GPUs{sp_text}. How much activation memory does the layer "
            "keep on each GPU?",
            params={
                "hidden": (12288, 4096, 8192),
                "heads": (96, 32, 64),
                "sequence": (2048, 4096, 1024),
                "tensor": (8, 4, 2),
                "sp": (False, True),
            },
            constraint=lambda p: p.hidden == 128 * p.heads,
            derive=lambda p: {
                "sp_text": " with sequence parallelism"
                if p.sp
                else ", without sequence parallelism"
            },
            answer=Quantity("MiB"),
            solve=lambda p, how: layer_activations(
                how,
                sequence=p.sequence,
                batch=1,
                hidden=p.hidden,
                heads=p.heads,
                tensor_parallel=p.tensor,
                sequence_parallel=p.sp,
            ),
            misconceptions=("tensor_parallel_wrong_split", "attention_one_head"),
        ),
        Exercise(
            id="q5",
            title="micro-batches in flight",
            question="A pipeline of {pipeline} stages runs the 1F1B schedule with {micro} "
            "micro-batches per step. Stage {stage} (counting from 0) keeps the activations of "
            "how many micro-batches at its peak?",
            params={"pipeline": (8, 4, 16), "micro": (32, 16, 6, 3), "stage": (0, 1, 2, 3, 5)},
            constraint=lambda p: p.stage < p.pipeline,
            answer=Integer(),
            solve=lambda p, how: in_flight(how, p.pipeline, p.stage, p.micro),
            misconceptions=("pipeline_wrong_in_flight",),
        ),
        Exercise(
            id="q6",
            title="host RAM for offload",
            question="A model of {billions} billion parameters is fully fine-tuned with AdamW in "
            "mixed precision on {devices} GPUs, 8 per node, with ZeRO stage 3 and the optimizer "
            "offloaded to the CPU (gradients, fp32 master weights and moments in host RAM). How "
            "much host RAM does one node need for them?",
            params={"billions": (8, 13, 70, 7), "devices": (16, 8, 32, 64)},
            answer=Quantity("GB"),
            solve=lambda p, how: host_ram(
                how,
                per_device(
                    how,
                    _adamw(p, how),
                    data=p.devices,
                    zero=3,
                    offload="optimizer",
                    gpus_per_node=8,
                ),
            ),
            misconceptions=("host_ram_one_device", "forgot_master_weights", "mib_vs_mb"),
        ),
        Exercise(
            id="q7",
            title="what ZeRO never shards",
            question="Which of these does ZeRO stage 3 (or FSDP's FULL_SHARD) leave whole on "
            "every data-parallel device?",
            answer=Choice(_NOT_SHARDED),
            solve=lambda p, how: _activations_stay(),
        ),
    ),
)
