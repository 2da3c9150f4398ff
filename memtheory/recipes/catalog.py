"""The setups real training stacks use by default, each read from the library's source.

Every recipe cites the library, version and file its defaults were read
from. Where a default is decided by the library at run time (the dtype
``from_pretrained`` loads, the optimizer implementation ``torch.optim``
picks), the recipe states the rule, and :class:`~memtheory.recipes.Setup`
applies it to the model and device at hand.

==================  ===========================================================
recipe              what it is
==================  ===========================================================
pytorch-amp         a plain PyTorch loop under ``torch.autocast(bfloat16)``
pytorch-fp32        a plain PyTorch loop in fp32 (the textbook step)
hf-trainer          transformers' ``Trainer`` with ``bf16=True``
peft-lora           ``Trainer`` with a peft LoRA model (fp32 adapters)
qlora               peft LoRA on a bitsandbytes NF4 base, every linear layer
deepspeed-zero3     DeepSpeed ZeRO-3 in bf16 (fp32 master weights and Adam)
fsdp2-bf16          FSDP2 ``MixedPrecisionPolicy(param_dtype=bfloat16)``
lightning-bf16      PyTorch Lightning ``Trainer(precision="bf16-mixed")``
==================  ===========================================================

Two stacks are answered by a step function of their own, not by a
:class:`~memtheory.recipes.Setup` (:data:`TRL_RECIPES`): ``trl-dpo`` (TRL's
``DPOTrainer``, :func:`memtheory.finetuning.dpo_step_memory`) and ``trl-sft``
(TRL's ``SFTTrainer``, :func:`memtheory.finetuning.sft_step_memory`), whose
fused, chunked LM head the autograd convention does not model.
``memtheory estimate --recipe trl-dpo`` answers them through those functions;
``Setup.recipe("trl-dpo")`` says so.

Examples
--------
>>> sorted(RECIPES)[:3]
['deepspeed-zero3', 'fsdp2-bf16', 'hf-trainer']
>>> recipe("HF Trainer").setup.keeps_logits
False
>>> default_recipe(kind="sequence", lora=True, qlora=False)
'peft-lora'
>>> trl_recipe_name("DPO"), trl_recipe_name("hf-trainer")
('trl-dpo', None)
>>> recipe("trl-dpo")
Traceback (most recent call last):
...
memtheory.errors.UnsupportedError: TRL's DPOTrainer is not one Setup: ...
"""

from __future__ import annotations

from dataclasses import dataclass

from memtheory.errors import UnsupportedError
from memtheory.recipes.setup import AS_LOADED, Setup, use_catalog
from memtheory.registry import Registry, normalize_name

__all__ = [
    "RECIPES",
    "RECIPE_REGISTRY",
    "REFUSED_RECIPES",
    "TRL_RECIPES",
    "Recipe",
    "TRLRecipe",
    "default_recipe",
    "recipe",
    "trl_recipe_name",
]


@dataclass(frozen=True)
class Recipe:
    """A named setup and where its defaults come from.

    Attributes
    ----------
    name : str
    setup : Setup
    sources : tuple of str
        Library, version and file for each default.
    verified : str
        How the recipe is checked: on CPU against the real library (the test
        that does it), or modelled from the source only.

    Examples
    --------
    >>> zero3 = recipe("zero3")
    >>> zero3.name, zero3.setup.zero
    ('deepspeed-zero3', 3)
    """

    name: str
    setup: Setup
    sources: tuple[str, ...]
    verified: str


_TORCH = "PyTorch 2.13"
_OPTIM_DEFAULT = (
    f"{_TORCH} torch/optim/optimizer.py _default_to_fused_or_foreach: foreach on CUDA "
    "when neither foreach nor fused is given (for-loop on CPU)"
)
_TRANSFORMERS = "transformers 5.24"
_LOADED = (
    f"{_TRANSFORMERS} modeling_utils.py PreTrainedModel.from_pretrained: dtype defaults to "
    '"auto", the checkpoint\'s torch_dtype'
)
_FUSED = (
    f"{_TRANSFORMERS} training_args.py TrainingArguments.optim: \"adamw_torch_fused\" for "
    "torch >= 2.8"
)
_SDPA = (
    f"{_TRANSFORMERS} modeling_utils.py _check_and_adjust_attn_implementation: sdpa when "
    "attn_implementation is not given"
)
_LOSS_ONLY = (
    f"{_TRANSFORMERS} trainer.py Trainer.training_step: compute_loss returns the loss alone, "
    "so the outputs (logits) are not held through backward"
)
_BOOKKEEPING = (
    f"{_TRANSFORMERS} trainer.py:1647, 1881, 1917, 1939-1940, 2128, 2363 and accelerate 1.15 "
    "accelerator.py:2851: the Trainer's running loss, label-token count, gradient norm, "
    "previous loss and accelerate's scaled loss, 0-dim tensors kept across the step"
)
_ACCELERATE_FSDP = (
    "accelerate 1.15 utils/dataclasses.py FullyShardedDataParallelPlugin: with bf16 mixed "
    "precision the weights are gathered in bf16 (MixedPrecision(param_dtype=bfloat16)), so "
    "autocast keeps no copies under ZeRO-3/FSDP"
)


def _entries() -> tuple[Recipe, ...]:
    hf = Setup(
        precision=AS_LOADED, optimizer="adamw", optimizer_implementation="fused",
        attention="sdpa", keeps_logits=False, loop="hf-trainer", sharded_autocast_copies=False,
        name="hf-trainer",
        source="transformers 5 Trainer defaults (bf16=True, adamw_torch_fused, sdpa, "
        "weights in the checkpoint's dtype, loss-only loop)",
    )
    return (
        Recipe(
            "pytorch-amp",
            Setup(precision="autocast-bf16", optimizer="adamw", attention="sdpa",
                  keeps_logits=True, name="pytorch-amp",
                  source="a plain PyTorch loop under torch.autocast(bfloat16) over fp32 "
                  "weights, torch.optim.AdamW with PyTorch's default implementation"),
            (_OPTIM_DEFAULT,
             f"{_TORCH} torch/amp/autocast_mode.py: fp32 weights, bf16 copies per op",
             _SDPA),
            "exact on CPU: tests/pytorch/test_recipe_steps.py",
        ),
        Recipe(
            "pytorch-fp32",
            Setup(precision="fp32", optimizer="adamw", attention="sdpa", keeps_logits=True,
                  name="pytorch-fp32",
                  source="a plain PyTorch loop in fp32, torch.optim.AdamW with PyTorch's "
                  "default implementation"),
            (_OPTIM_DEFAULT, _SDPA),
            "exact on CPU: tests/pytorch/test_recipe_steps.py",
        ),
        Recipe(
            "hf-trainer", hf,
            (_LOADED, _FUSED, _SDPA, _LOSS_ONLY, _BOOKKEEPING, _ACCELERATE_FSDP),
            "exact on CPU: the real transformers Trainer under track() is 0 bytes off, in "
            "fp32, bf16 and bf16=True autocast, with and without clipping, logging and "
            "gradient accumulation (tests/pytorch/test_trainer_recipe.py); its bookkeeping "
            "scalars (loop=\"hf-trainer\", conventions/autograd/loops.py) sized from the "
            "source; the step itself also in tests/pytorch/test_recipe_steps.py",
        ),
        Recipe(
            "peft-lora",
            hf.changed(adapter_dtype="fp32", name="peft-lora",
                       source="transformers 5 Trainer defaults with a peft LoRA model "
                       "(adapters upcast to fp32)"),
            (_LOADED, _FUSED, _SDPA, _LOSS_ONLY, _BOOKKEEPING,
             "peft 0.21 tuners/tuners_utils.py: get_peft_model(autocast_adapter_dtype=True) "
             "casts bf16/fp16 adapter weights to fp32",
             "peft 0.21 utils/constants.py: LoRA's default target_modules by model_type "
             "(memtheory.finetuning.PEFT_DEFAULT_TARGETS): q_proj and v_proj for Llama, "
             "Gemma, Mistral and Qwen2, query_key_value for Falcon"),
            "exact on CPU: the real peft model under the real Trainer, tracked, is 0 bytes "
            "off on two Llamas with q/v and all-linear adapters, peft 0.21 "
            "tuners/lora/layer.py's input casts (_cast_input_dtype) and autocast's copies "
            "of the fp32 adapter weights modelled (tests/pytorch/test_peft_recipe.py)",
        ),
        Recipe(
            "qlora",
            hf.changed(adapter_dtype="fp32", quantization="nf4",
                       optimizer_implementation="fused", name="qlora",
                       source="peft LoRA on a bitsandbytes NF4 base (double quantization, "
                       "bf16 compute; every nn.Linear quantized), Trainer defaults"),
            ("QLoRA (Dettmers et al., 2023) Section 3: NF4 with double quantization",
             "bitsandbytes 0.50 nn/modules.py Linear4bit: blocks of 64 weights",
             f"{_TRANSFORMERS} integrations/bitsandbytes.py replace_with_bnb_linear: only "
             "nn.Linear and Conv1D become Linear4bit; a mixture-of-experts model's fused "
             "experts (MixtralExperts: 3-D gate_up_proj and down_proj) stay in bf16, and "
             "peft's all-linear does not adapt them",
             _LOADED, _FUSED, _SDPA, _LOSS_ONLY, _BOOKKEEPING),
            "modelled from the source: bitsandbytes' 4-bit kernels run on CUDA only",
        ),
        Recipe(
            "deepspeed-zero3",
            Setup(precision="mixed-bf16", optimizer="adamw", optimizer_implementation="fused",
                  attention="sdpa", keeps_logits=False, zero=3, sharded_autocast_copies=False,
                  name="deepspeed-zero3",
                  source="DeepSpeed ZeRO-3 in bf16: bf16 weights and gradients, fp32 master "
                  "weights and Adam state, all sharded"),
            ("DeepSpeed 0.19.6 runtime/zero/stage3.py: bf16 parameters partitioned, fp32 "
             "optimizer partitions (16 bytes per parameter over the data-parallel group)",
             "DeepSpeed 0.19.6 runtime/zero/stage3.py:2401-2402, 2452: the step casts each "
             "sub-group's flat bf16 gradient to fp32 and frees it after the optimizer step "
             "(conventions/autograd/master_weights.py); engine.py:1492-1493: gradients "
             "accumulated in the model's dtype, bf16",
             _SDPA, _LOSS_ONLY),
            "modelled from DeepSpeed's source: the fp32 master copy, its optimizer state and "
            "the step's fp32 gradient, and the sharding (which needs several GPUs); the bf16 "
            "model's forward and backward beside them exact on CPU under the autograd "
            "convention (tests/pytorch/test_master_weights_step.py)",
        ),
        Recipe(
            "fsdp2-bf16",
            Setup(precision="autocast-bf16", optimizer="adamw", attention="sdpa",
                  keeps_logits=False, zero=3, sharded_autocast_copies=False,
                  name="fsdp2-bf16",
                  source="FSDP2 fully_shard with MixedPrecisionPolicy(param_dtype=bfloat16, "
                  "reduce_dtype=float32): fp32 sharded weights, gradients and AdamW state"),
            (f"{_TORCH} torch/distributed/fsdp/_fully_shard/_fsdp_api.py MixedPrecisionPolicy: "
             "weights all-gathered in param_dtype, freed after each layer",
             f"{_TORCH} _fully_shard/_fsdp_param.py:304-318: each parameter's shard padded "
             "to ceil(dim0 / world) rows, the DTensor a view of the rank's own rows (AdamW's "
             "state, zeros_like, unpadded); :1066-1074 gathered parameters freed and refilled "
             "by storage resize_ (memtheory.techniques.fsdp2)",
             f"{_TORCH} _fully_shard/_fsdp_state.py:207: the root (embeddings, final norm, "
             "head) is not resharded after forward; _fsdp_param_group.py:112, 648-658, "
             "717-718: the previous layer's fp32 reduce-scatter input is kept until the next "
             "layer's post-backward; :462-487 and _fsdp_collectives.py "
             "foreach_all_gather_copy_out: each layer's flat bf16 all-gather output is copied "
             "into its parameters' own and freed after the copy (in forward, at the next "
             "all-gather)",
             _OPTIM_DEFAULT, _SDPA, _LOSS_ONLY),
            "modelled from the source (memtheory.techniques.fsdp2: padded shards, a bf16 "
            "model's step with the root's gathered weights kept through backward, each "
            "layer's all-gather output beside its parameters' own, the layers' fp32 gradient "
            "shards and the last one's fp32 reduce-scatter input) and measured on CPU: the "
            "real fully_shard step on 2 and 4 gloo ranks under track() has the predicted "
            "peak on every rank to the byte, at the tiny Llama and at a size whose dims do "
            "not divide (tests/pytorch/test_fsdp_cpu.py); the forward is 1,584 B below the "
            "tracked one and the optimizer step 4 B above, both below the peak",
        ),
        Recipe(
            "lightning-bf16",
            Setup(precision="autocast-bf16", optimizer="adamw", attention="sdpa",
                  keeps_logits=False, loop="lightning", sharded_autocast_copies=False,
                  name="lightning-bf16",
                  source='PyTorch Lightning Trainer(precision="bf16-mixed"): torch.autocast '
                  "over fp32 weights; training_step returns the loss; zero_grad after it"),
            ("Lightning 2.6.6 plugins/precision/amp.py:113-114 MixedPrecision: "
             "torch.autocast(bfloat16, cache_enabled=False): no cache of weight casts",
             "Lightning 2.6.6 loops/optimization/automatic.py:130-142: training_step, then "
             "zero_grad (set_to_none), then backward on the loss it returned: the previous "
             "gradients live through the forward (loop=\"lightning\", "
             "conventions/autograd/loops.py)",
             _OPTIM_DEFAULT, _SDPA),
            "modelled from the source, and checked against the real Trainer on CPU "
            "(tests/pytorch/test_lightning_recipe.py): exact on plain nn.Sequential "
            "classifiers; on a Hugging Face model exact after the forward, and in the "
            "forward below it by what the model still holds while its loss "
            "runs (the last hidden state, B x S x hidden fp32, and the loss's padded "
            "labels, B x (S+1) int64)",
        ),
    )


RECIPES: dict[str, Recipe] = {entry.name: entry for entry in _entries()}
"""The named recipes, by canonical name."""

RECIPE_REGISTRY: Registry[Recipe] = Registry(
    "recipe",
    RECIPES,
    aliases={
        "trainer": "hf-trainer",
        "hugging-face": "hf-trainer",
        "transformers": "hf-trainer",
        "lora": "peft-lora",
        "peft": "peft-lora",
        "zero3": "deepspeed-zero3",
        "deepspeed": "deepspeed-zero3",
        "fsdp": "fsdp2-bf16",
        "fsdp2": "fsdp2-bf16",
        "lightning": "lightning-bf16",
        "bf16-mixed": "lightning-bf16",
        "amp": "pytorch-amp",
        "pytorch": "pytorch-amp",
        "fp32": "pytorch-fp32",
    },
    hint='(or build a memtheory.Setup(...) yourself, or "auto")',
)
"""The recipes by any spelling."""


@dataclass(frozen=True)
class TRLRecipe:
    """A TRL trainer answered by a step function of its own, not by a :class:`Setup`.

    Attributes
    ----------
    name : str
    trainer : str
        The TRL class (``"DPOTrainer"``).
    function : str
        The step function that answers it (``"dpo_step_memory"``, in
        :mod:`memtheory.finetuning`).
    sources : tuple of str
        Library, version and file for each default.
    verified : str
        How the step is checked.

    Examples
    --------
    >>> TRL_RECIPES["trl-sft"].function
    'sft_step_memory'
    """

    name: str
    trainer: str
    function: str
    sources: tuple[str, ...]
    verified: str

    @property
    def why_no_setup(self) -> str:
        """Why :meth:`Setup.recipe` refuses the name, and what answers it instead."""
        return (
            f"TRL's {self.trainer} is not one Setup: it scores tokens with a fused, chunked LM "
            "head (trl 1.16 kernels/chunked_logprob.py) that the autograd convention does not "
            "model, and turns gradient checkpointing on by default. memtheory estimate MODEL "
            f"--recipe {self.name} (memtheory.estimate.estimate(model, setup={self.name!r})) "
            f"answers it, through memtheory.finetuning.{self.function}(config, ...): built from "
            "the hf-trainer (peft-lora) recipe's pieces, exact on CPU over fp32 weights "
            f"(tests/pytorch/{self.verified}), an estimate elsewhere."
        )


_TRL = "TRL 1.16"
_TRL_SHARED = (
    f"{_TRL} trainer/base_config.py: gradient_checkpointing=True, bf16=True unless fp16 "
    "(torch.autocast over the weights)",
    f"{_TRL} trainer/utils.py:1332 create_model_from_path: dtype defaults to float32 "
    "(fp32 weights)",
    f"{_TRL} trainer/utils.py:1548-1700 add_fused_lm_head and kernels/chunked_logprob.py: "
    "no logits; tiles of 4096 tokens x 32768 vocabulary columns",
    _FUSED, _SDPA,
)

TRL_RECIPES: dict[str, TRLRecipe] = {
    "trl-dpo": TRLRecipe(
        "trl-dpo", "DPOTrainer", "dpo_step_memory",
        (f"{_TRL} trainer/dpo_trainer.py:146-190 DataCollatorForPreference: chosen and "
         "rejected in one batch of 2B rows",
         f"{_TRL} trainer/dpo_trainer.py:908-929: a frozen copy of the model as the "
         "reference, none under peft (adapters disabled, :1328-1336) or with "
         "precompute_ref_log_probs",
         f"{_TRL} trainer/dpo_config.py:195-201: max_length=1024 (prompt and completion "
         "together; no max_prompt_length), :227 precompute_ref_log_probs=False",
         *_TRL_SHARED),
        "test_dpo_recipe.py",
    ),
    "trl-sft": TRLRecipe(
        "trl-sft", "SFTTrainer", "sft_step_memory",
        (f"{_TRL} trainer/sft_trainer.py:168-227 DataCollatorForLanguageModeling",
         f"{_TRL} trainer/sft_config.py:202-205: max_length=1024",
         *_TRL_SHARED),
        "test_trl_recipe.py",
    ),
}
"""TRL's trainers, answered by their step functions (``memtheory estimate --recipe``)."""

REFUSED_RECIPES: dict[str, str] = {}
"""Stacks asked for by name that neither a Setup nor a step function answers, with the reason.

Empty since ``trl-dpo`` and ``trl-sft`` are answered (:data:`TRL_RECIPES`).
"""

_TRL_NAMES = {normalize_name(alias): name
              for name, aliases in {"trl-dpo": ("trl-dpo", "dpo", "dpo-trainer"),
                                    "trl-sft": ("trl-sft", "sft", "sft-trainer")}.items()
              for alias in aliases}


def trl_recipe_name(name: object) -> str | None:
    """Return ``"trl-dpo"`` or ``"trl-sft"`` for any spelling of them, else None.

    Examples
    --------
    >>> trl_recipe_name("SFT trainer"), trl_recipe_name(None)
    ('trl-sft', None)
    """
    if not isinstance(name, str):
        return None
    return _TRL_NAMES.get(normalize_name(name))


def recipe(name: str) -> Recipe:
    """Return the recipe ``name`` (any spelling the registry accepts).

    Raises
    ------
    UnsupportedError
        ``name`` is one of :data:`TRL_RECIPES`, answered by a step function and not
        a Setup: the message says which.

    Examples
    --------
    >>> recipe("zero3").setup.zero
    3
    """
    trl = trl_recipe_name(name)
    if trl is not None:
        raise UnsupportedError(TRL_RECIPES[trl].why_no_setup)
    return RECIPE_REGISTRY[name]


use_catalog(lambda name: recipe(name).setup)


def default_recipe(*, kind: str, lora: bool, qlora: bool) -> str:
    """Return the recipe a user most likely runs on a GPU for this question.

    A language model is most often trained with Hugging Face's ``Trainer``
    (peft for LoRA, peft on bitsandbytes for QLoRA); a vision model with a
    plain PyTorch loop under ``torch.autocast``.

    Examples
    --------
    >>> default_recipe(kind="image", lora=False, qlora=False)
    'pytorch-amp'
    """
    if qlora:
        return "qlora"
    if lora:
        return "peft-lora"
    return "hf-trainer" if kind == "sequence" else "pytorch-amp"
