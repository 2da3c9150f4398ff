"""Fine-tuning: frozen layers, LoRA and QLoRA adapters, 4-bit weights, 8-bit optimizer state.

==================  ==================================================================
module              what it models
==================  ==================================================================
layers              :class:`Frozen`, :class:`ConstantScale`, :class:`LoRAAttention`
lora                :class:`LoRA`, :func:`apply_lora`, :func:`freeze`, target matching,
                    peft's default targets by family (:func:`default_targets`)
nf4                 NF4 codes and double-quantized constants (QLoRA Section 3)
optimizer8bit       bitsandbytes' block-wise 8-bit Adam state
memory              :func:`finetune_memory`: the step's footprint by component
trl_head            TRL's fused, chunked LM head: :func:`fused_head_backward_bytes`,
                    and the step beneath it: :func:`trainer_step_beneath`
trl_plan            what that step reads from the recipe's storage plan: autocast's
                    cache at the norm, the first decoder layer's shortfall
preference          :func:`dpo_step_memory`: TRL's DPO step with a frozen reference model
sft                 :func:`sft_step_memory`: TRL's SFT step
==================  ==================================================================

Examples
--------
>>> from memtheory.models import gpt2
>>> memory = finetune_memory(gpt2("small", batch=4, sequence=256), lora=LoRA(8))
>>> memory.format("MiB", name="parameters")
'0.56 MiB'
"""

from memtheory.finetuning.layers import (
    ATTENTION_PROJECTIONS,
    ConstantScale,
    Frozen,
    LoRAAttention,
    LoRAUp,
)
from memtheory.finetuning.lora import (
    PEFT_DEFAULT_TARGETS,
    PEFT_STAND_INS,
    LoRA,
    apply_lora,
    default_targets,
    freeze,
    linear_maps,
    match_targets,
)
from memtheory.finetuning.memory import (
    EIGHT_BIT_OPTIMIZERS,
    QUANTIZATIONS,
    finetune_memory,
    trainable_shapes,
)
from memtheory.finetuning.nf4 import (
    NF4_BLOCK,
    NF4_SECOND_BLOCK,
    constant_bits_per_parameter,
    dequantized_copy_bytes,
    nf4_bits_per_parameter,
    nf4_bytes,
    nf4_constant_bytes,
)
from memtheory.finetuning.optimizer8bit import (
    EIGHT_BIT_BLOCK,
    MIN_8BIT_SIZE,
    adam8bit_state_bytes,
)
from memtheory.finetuning.preference import (
    DPO_UNSUPPORTED,
    dpo_head_bytes,
    dpo_step_memory,
)
from memtheory.finetuning.sft import SFT_UNSUPPORTED, sft_head_bytes, sft_step_memory
from memtheory.finetuning.trl_head import (
    TRL_TOKEN_CHUNK,
    TRL_VOCAB_CHUNK,
    TrainerBeneath,
    TRLStepEstimate,
    fused_head_backward_bytes,
    trainer_step_beneath,
)

__all__ = [
    "ATTENTION_PROJECTIONS",
    "DPO_UNSUPPORTED",
    "EIGHT_BIT_BLOCK",
    "EIGHT_BIT_OPTIMIZERS",
    "MIN_8BIT_SIZE",
    "NF4_BLOCK",
    "NF4_SECOND_BLOCK",
    "PEFT_DEFAULT_TARGETS",
    "PEFT_STAND_INS",
    "QUANTIZATIONS",
    "SFT_UNSUPPORTED",
    "TRL_TOKEN_CHUNK",
    "TRL_VOCAB_CHUNK",
    "Frozen",
    "LoRA",
    "LoRAAttention",
    "LoRAUp",
    "TRLStepEstimate",
    "TrainerBeneath",
    "ConstantScale",
    "adam8bit_state_bytes",
    "apply_lora",
    "constant_bits_per_parameter",
    "default_targets",
    "dequantized_copy_bytes",
    "dpo_head_bytes",
    "dpo_step_memory",
    "finetune_memory",
    "freeze",
    "fused_head_backward_bytes",
    "linear_maps",
    "match_targets",
    "nf4_bits_per_parameter",
    "nf4_bytes",
    "nf4_constant_bytes",
    "sft_head_bytes",
    "sft_step_memory",
    "trainable_shapes",
    "trainer_step_beneath",
]
