"""The ``memtheory estimate`` subcommand: will this model train on that card.

Examples
--------
>>> main_estimate(["gpt2", "--batch", "8", "--seq", "1024", "--gpu", "RTX 4090", "--json"])
... # doctest: +ELLIPSIS
{
  "model": "GPT-2 small",
...
0
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from memtheory.errors import InvalidArgumentError, MemtheoryError

__all__ = ["add_estimate_parser", "build_estimate_parser", "main_estimate", "run_estimate"]

_EPILOG = """\
examples:
  memtheory estimate gpt2 --batch 8 --seq 1024 --gpu "RTX 4090"
  memtheory estimate gpt2-xl --lora 16 --seq 1024 --gpu T4 --checkpointing
  memtheory estimate gpt2-large --qlora --optimizer paged-adamw-8bit --limit "12 GB"
  memtheory estimate gpt2-xl --gpus 8 --zero 3 --gpu A100-40GB --json
  memtheory estimate llama-3-8b --lora 16 --seq 4096 --gpu "RTX 4090"
  memtheory estimate llama-3-8b --lora 16 --seq 4096 --activation-offload --gpu "RTX 4090"
  memtheory estimate llama-3-8b --recipe trl-dpo --lora 16 --seq 1024 --gpu H100-80GB
  memtheory estimate llama-3-8b --recipe trl-sft --lora 16 --no-checkpointing --gpu L4
  memtheory estimate llama-3-8b --seq 4096 --flash --gpus auto --zero 3 --gpu H100-80GB
  memtheory estimate llama-3-8b --seq 2048 --tp 2 --sequence-parallel --gpu H100-80GB
  memtheory estimate llama-3.1-8b --seq 65536 --cp 8 --gpu H100-80GB
  memtheory estimate llama-3-8b --lora 16 --sweep seq=1024,2048,4096 --sweep batch=1,2,4 \
      --sweep gpu="RTX 4090",H100-80GB
  memtheory estimate config.json --lora 16 --seq 4096 --gpu "RTX 4090"
  memtheory estimate llama-3-8b --lora 16 --batch 2 --global-batch 64 --gpu MI300X --check
  memtheory estimate my_model.py:build --gpu L4                       (with torch and trace)
  memtheory estimate llama-3.1-70b --serve --context 32768 --gpu H100-80GB --quant awq

Every answer is for one recipe, printed first under "assumed:". By default
it is the one a user most likely runs on a GPU: hf-trainer for a language
model (transformers' Trainer: bf16=True, the checkpoint's dtype, fused AdamW,
SDPA attention, a loop that keeps only the loss), peft-lora with --lora,
qlora with --qlora, pytorch-amp for a vision model. Name another with
--recipe (pytorch-amp, pytorch-fp32, hf-trainer, peft-lora, qlora,
deepspeed-zero3, fsdp2-bf16, lightning-bf16); the other options override
its fields. --recipe trl-dpo and trl-sft (TRL 1.16's DPOTrainer and
SFTTrainer: fp32 weights under bf16 autocast, gradient checkpointing on,
a fused LM head, sequences of 1024 tokens by default) are answered by
memtheory.finetuning's dpo_step_memory and sft_step_memory; --batch is then
preference pairs for DPO, and the options they do not take are refused.

With --serve the question is serving, not training: the command runs as
memtheory serve with the same arguments (vLLM's paged KV cache; see its
--help).

With --check the exit status is the verdict: 0 if the step fits the card,
1 if it does not, 2 for a question memtheory refuses.

Sizes are in GiB (2^30 bytes) with GB (10^9 bytes) beside them. Every answer
subtracts a reserve (default 1.5 GiB) for the CUDA context and the allocator
from the card's memory; change it with --reserve.
"""


def add_estimate_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``estimate`` subcommand to the ``memtheory`` command's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "estimate",
        help="memory of a training step per GPU, and whether it fits a card",
        description=(
            "Estimate one training step's GPU memory, per component and per device: full "
            "training, LoRA or QLoRA fine-tuning, data/ZeRO/tensor/pipeline parallel. Prints "
            "the table, total and peak, the card's usable memory, the largest batch and "
            "sequence that fit, and the formula in the batch B and sequence S."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _arguments(parser)
    parser.set_defaults(run=run_estimate)
    return parser


def build_estimate_parser() -> argparse.ArgumentParser:
    """Return a stand-alone parser of the ``estimate`` arguments (for ``main_estimate``)."""
    parser = argparse.ArgumentParser(
        prog="memtheory estimate", epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _arguments(parser)
    return parser


def _arguments(parser: argparse.ArgumentParser) -> None:
    from memtheory.estimate.resolve import BUILDERS

    parser.add_argument(
        "model",
        metavar="MODEL_OR_CONFIG",
        help=f"a built-in model ({', '.join(BUILDERS)}), a Hugging Face config.json or preset "
        "(needs memtheory.models.from_config), or file.py:factory (needs torch)",
    )
    size = parser.add_argument_group("sizes")
    size.add_argument("--batch", type=int, default=1, help="micro-batch per GPU (default 1)")
    size.add_argument(
        "--seq", type=int, help="tokens per sequence (default 512, or the model's limit)"
    )
    size.add_argument("--image", type=int, default=None,
                      help="image side for vision models (224)")
    size.add_argument(
        "--grad-accum", type=int, default=None, metavar="N",
        help="micro-batches per optimizer step (gradient accumulation; default 1)",
    )
    size.add_argument(
        "--global-batch", type=int, default=None, metavar="N",
        help="samples per optimizer step: --batch x --grad-accum x data-parallel GPUs "
        "(gives --grad-accum)",
    )
    training = parser.add_argument_group("training")
    training.add_argument(
        "--recipe", default="auto", metavar="NAME",
        help="the stack whose defaults the step follows: auto (default: hf-trainer for a "
        "language model, peft-lora with --lora, qlora with --qlora, pytorch-amp for vision), "
        "pytorch-amp, pytorch-fp32, hf-trainer, peft-lora, qlora, deepspeed-zero3, "
        "fsdp2-bf16, lightning-bf16, trl-dpo, trl-sft (TRL's trainers: see below)",
    )
    training.add_argument(
        "--optimizer", default=None,
        help="adamw (every recipe's), adam, sgd, sgd+momentum, adafactor, adamw-8bit, "
        "paged-adamw-8bit, ...",
    )
    training.add_argument(
        "--optimizer-impl", choices=("for-loop", "foreach", "fused"), default=None,
        help="torch.optim implementation (default the recipe's: fused for the Trainer, "
        "PyTorch's foreach on CUDA otherwise)",
    )
    training.add_argument(
        "--precision",
        help="default the recipe's (the Hugging Face recipes keep the checkpoint's dtype: bf16 "
        "for Llama 3, autocast-bf16 over GPT-2's fp32); autocast-bf16 (torch.autocast, fp32 "
        "weights and state, bf16 activations), bf16 (the model cast to bf16), fp32, fp16, "
        "autocast-fp16, mixed-bf16 (fp32 master copy, as DeepSpeed's bf16 mode); fp8 (FP8 "
        "training as torchao / Transformer Engine do it) is refused with what is known of it",
    )
    training.add_argument("--lora", type=int, metavar="RANK", help="LoRA adapters of this rank")
    training.add_argument("--lora-alpha", type=float, metavar="ALPHA", help="default 2 x rank")
    training.add_argument(
        "--lora-targets", metavar="NAMES",
        help="comma-separated linear maps (default q_proj,v_proj; all-linear with --qlora)",
    )
    training.add_argument(
        "--qlora", action="store_true", help="4-bit NF4 base with double quantization (rank 64 "
        "unless --lora)"
    )
    training.add_argument(
        "--checkpointing", action=argparse.BooleanOptionalAction, default=None,
        help="activation checkpointing of every decoder layer, as Hugging Face's "
        "gradient_checkpointing_enable() does (chapter 13's model, in the "
        "breakdown convention); default the recipe's (on for trl-dpo and trl-sft, as TRL's "
        "configs have it: --no-checkpointing turns it off)",
    )
    trl = parser.add_argument_group("TRL recipes (--recipe trl-dpo, trl-sft)")
    trl.add_argument("--prompt", type=int, default=None, metavar="N",
                     help="prompt tokens per sequence (with --completion; the sequence is "
                     "their sum, as TRL 1.16's max_length truncates them together)")
    trl.add_argument("--completion", type=int, default=None, metavar="N",
                     help="completion tokens per sequence (with --prompt)")
    trl.add_argument(
        "--precompute-ref-log-probs", action="store_true", default=None,
        help="trl-dpo: DPOConfig(precompute_ref_log_probs=True): no reference model in the "
        "step (modelled from TRL's source)",
    )
    training.add_argument(
        "--activation-offload", action="store_true",
        help="the activations saved for backward kept in pinned host memory between the "
        "passes, as torchtune's OffloadActivations (the idea of torch's save_on_cpu and "
        "Megatron/NeMo's cpu_offloading); one GPU, autograd convention; prints the host RAM it "
        "needs (modelled, not measured)",
    )
    attention = training.add_mutually_exclusive_group()
    attention.add_argument(
        "--attention", choices=("eager", "sdpa"), default=None,
        help="eager (S x S scores kept) or sdpa (flash/memory-efficient kernel, none kept; "
        "every recipe's default, as transformers')",
    )
    attention.add_argument(
        "--flash", action="store_const", const="sdpa", dest="attention",
        help="the same as --attention sdpa",
    )
    training.add_argument(
        "--logits", choices=("kept", "dropped"), default=None,
        help="whether the loop holds the logits through backward: kept (out = model(x)) or "
        "dropped (the Trainer's and Lightning's loss-only loop; the recipe's default)",
    )
    training.add_argument(
        "--loop", choices=("plain", "hf-trainer", "lightning"), default=None,
        help="the training loop whose own tensors are counted: plain (a for loop), hf-trainer "
        "(transformers' Trainer: its scalars and gradient clipping) or lightning (gradients "
        "cleared after the next forward); default the recipe's",
    )
    training.add_argument(
        "--convention", default="auto", choices=("auto", "autograd", "breakdown"),
        help="auto (default: autograd, exact to the byte on CPU, wherever the layers and options "
        "are checked, else breakdown, saying why), autograd, or breakdown (every activation and "
        "its gradient: an estimate, not a bound)",
    )
    devices = parser.add_argument_group("devices")
    devices.add_argument(
        "--gpus", type=_gpus, default=None, metavar="N|auto",
        help="GPUs in all (default --tp x --pp, i.e. 1); auto: the fewest that fit the card "
        "(needs --gpu or --limit; usually with --zero 3)",
    )
    devices.add_argument(
        "--gpu-counts", choices=("pow2", "any"), default="pow2",
        help="counts --gpus auto tries: pow2 (1, 2, 4, 8, ...; default) or any (1, 2, 3, ...)",
    )
    devices.add_argument("--zero", type=int, default=None, choices=(0, 1, 2, 3),
                         help="ZeRO stage / FSDP (3 = FULL_SHARD); default the recipe's")
    devices.add_argument(
        "--tp", type=int, default=1,
        help="tensor-parallel size (Megatron-style: GPT-2 and Llama-style models; modelled, "
        "not measured)",
    )
    devices.add_argument(
        "--sequence-parallel", action="store_true",
        help="Megatron's sequence parallelism over the --tp devices (norms, residual stream "
        "and the column-parallel maps' inputs split along the sequence)",
    )
    devices.add_argument("--pp", type=int, default=1, help="pipeline stages (1F1B)")
    devices.add_argument(
        "--cp", type=int, default=1, metavar="N",
        help="context parallelism: N GPUs split each sequence, as PyTorch's context_parallel "
        "(ring attention; Megatron's CP): S/N of every activation per GPU, the model states "
        "whole, one layer's keys and values of the whole sequence in flight; Llama-style "
        "models with SDPA, --seq a multiple of 2N, alone (modelled, not measured)",
    )
    devices.add_argument(
        "--offload", default=None, choices=("none", "optimizer", "optimizer+parameters"),
        help="ZeRO CPU offload (default none)",
    )
    card = devices.add_mutually_exclusive_group()
    card.add_argument("--gpu", metavar="CARD", help='a card: "RTX 4090", A100-80GB, H100, L4, T4')
    card.add_argument("--limit", metavar="SIZE", help='device memory instead: "24 GB", "16 GiB"')
    devices.add_argument(
        "--reserve", default=None, metavar="SIZE",
        help="set aside for the CUDA context and allocator (default the recipe's, 1.5 GiB)",
    )
    parser.add_argument(
        "--sweep", action="append", default=[], metavar="NAME=V1,V2,...",
        help="answer every combination: NAME is batch, seq, image, lora, gpus, gpu or limit "
        '(e.g. --sweep seq=512,1024 --sweep gpu="RTX 4090",H100-80GB); one table, or with '
        "--json a list",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.add_argument(
        "--serve", action="store_true",
        help="ask the serving question instead: how many sequences fit with vLLM; takes "
        "memtheory serve's options (--context, --quant or --weights, --kv-cache, --draft, "
        "--batch, --gpu, --tp, ...; see memtheory serve --help)",
    )
    parser.add_argument(
        "--check", action="store_true",
        help="exit status for scripts: 0 if it fits the card (--gpu or --limit), 1 if not",
    )


def run_estimate(args: argparse.Namespace) -> int:
    """Run ``memtheory estimate`` with parsed arguments; return the exit status."""
    from memtheory.estimate.plan import estimate

    try:
        if args.serve:  # the command lines run it as serve (serve_instead); a parsed one cannot
            raise InvalidArgumentError(
                "--serve asks the serving question: run it as a command line "
                "(memtheory estimate MODEL --serve --context L ...) or as memtheory serve."
            )
        keywords = _keywords(args)
        if args.sweep:
            return _run_sweep(args, keywords)
        answer = estimate(args.model, **keywords)
        if args.check and answer.fits is None:
            raise InvalidArgumentError(
                "--check gives the fit verdict an exit status: name the card with --gpu "
                '(or the memory with --limit "24 GB").'
            )
    except MemtheoryError as error:
        print(f"memtheory estimate: {error}", file=sys.stderr)
        return 2
    printed = json.dumps(answer.to_dict(), indent=2) if args.json else answer.report()
    print(printed)
    _keep_for_replay(args, answer, printed)
    return 1 if args.check and not answer.fits else 0


def _keep_for_replay(args: argparse.Namespace, answer: Any, printed: str) -> None:
    """Leave the answer as a replay entry (:mod:`~memtheory.estimate.replay`) where it can be."""
    from memtheory.estimate import replay

    entry = None
    if args.global_batch is None and not args.sweep:
        from memtheory.estimate.replay_entry import replay_entry

        entry = replay_entry(answer, check=args.check, asked_json=args.json, printed=printed)
    replay.record(entry)


def _keywords(args: argparse.Namespace) -> dict[str, Any]:
    """Return :func:`~memtheory.estimate.estimate`'s keywords from the parsed arguments."""
    from memtheory.recipes import Setup, trl_recipe_name

    targets = tuple(t.strip() for t in args.lora_targets.split(",")) if args.lora_targets else None
    setup: Setup | str = args.recipe
    fields = {"optimizer_implementation": args.optimizer_impl,
              "keeps_logits": None if args.logits is None else args.logits == "kept",
              "loop": args.loop}
    fields = {k: v for k, v in fields.items() if v is not None}
    if fields and trl_recipe_name(args.recipe) is not None:
        flags = {"optimizer_implementation": "--optimizer-impl", "keeps_logits": "--logits",
                 "loop": "--loop"}
        raise InvalidArgumentError(
            f"{', '.join(flags[k] for k in fields)} not taken by --recipe {args.recipe}: the "
            "TRL step is the Trainer's (fused AdamW, a loop that keeps only the loss, no "
            "logits at all: TRL's fused head), the only one modelled. Drop it."
        )
    if fields:
        setup = _recipe_with(args.model, args.recipe, args.lora, args.qlora, fields)
    return {
        "batch": args.batch,
        "sequence": args.seq,
        "image": args.image,
        "setup": setup,
        "flash": None if args.attention is None else args.attention == "sdpa",
        "optimizer": args.optimizer,
        "precision": args.precision,
        "lora": args.lora,
        "lora_alpha": args.lora_alpha,
        "lora_targets": targets,
        "qlora": args.qlora,
        "gpus": args.gpus,
        "counts": "any" if args.gpu_counts == "any" else "powers of two",
        "zero": args.zero,
        "tensor": args.tp,
        "pipeline": args.pp,
        "sequence_parallel": args.sequence_parallel,
        "offload": args.offload,
        "checkpointing": args.checkpointing,
        "gpu": args.gpu,
        "limit": args.limit,
        "reserve": args.reserve,
        "convention": args.convention,
        "grad_accum": args.grad_accum,
        "global_batch": args.global_batch,
        "activation_offload": args.activation_offload,
        "context_parallel": args.cp,
        "prompt": args.prompt,
        "completion": args.completion,
        "precompute_ref_log_probs": args.precompute_ref_log_probs,
    }


def _run_sweep(args: argparse.Namespace, keywords: dict[str, Any]) -> int:
    """Answer every combination of ``--sweep``: one table, or a JSON list."""
    from memtheory.estimate.sweep import parse_sweeps, sweep, sweep_table

    answers = sweep(args.model, parse_sweeps(args.sweep), **keywords)
    if args.json:
        print(json.dumps([{"sweep": point, **answer.to_dict()} for point, answer in answers],
                         indent=2))
        return 0
    first = answers[0][1]
    print(f"{first.model.name}: peak per device at {len(answers)} points "
          f"(recipe {first.settings['recipe']}, convention {first.convention_name})")
    print()
    print(sweep_table(answers))
    print()
    print("sizes in GiB (2^30 bytes); each point's assumptions and formula: drop --sweep")
    return 0


def _recipe_with(
    model: str, name: str, lora: int | None, qlora: bool, fields: dict[str, Any]
) -> Any:
    """Return the recipe ``name`` (or the question's default one) with ``fields`` changed."""
    from memtheory.estimate.plan import chosen_setup

    return chosen_setup(name, model, lora=lora, qlora=qlora).changed(**fields)


def _gpus(text: str) -> int | str:
    """Parse ``--gpus``: a positive whole number or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a number of GPUs nor 'auto'"
        ) from None


def main_estimate(argv: Sequence[str] | None = None) -> int:
    """Run ``memtheory estimate`` on its own (``argv`` without the word ``estimate``).

    With ``--serve`` it answers as ``memtheory serve`` does (see
    :func:`~memtheory.estimate.serve_command.serve_instead`).
    """
    from memtheory.estimate.serve_command import main_serve, serve_instead

    arguments = list(sys.argv[1:] if argv is None else argv)
    served = serve_instead(arguments)
    if served is not None:
        return main_serve(served, asked_as="estimate --serve")
    return run_estimate(build_estimate_parser().parse_args(arguments))
