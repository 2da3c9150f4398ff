"""The ``memtheory serve`` subcommand: how many sequences a served model fits on a card.

Examples
--------
>>> main_serve(["llama-3-8b", "--context", "4096", "--gpu", "L4", "--json"])
... # doctest: +ELLIPSIS
{
  "model": "llama-3-8b",
...
0
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from memtheory.errors import MemtheoryError

__all__ = [
    "SERVE_FLAG",
    "add_serve_parser",
    "build_serve_parser",
    "main_serve",
    "run_serve",
    "serve_instead",
]

SERVE_FLAG = "--serve"
"""``memtheory estimate``'s flag that asks the serving question (``memtheory serve``'s)."""

_EPILOG = """\
examples:
  memtheory serve llama-3-8b --context 4096 --gpu L4
  memtheory serve llama-3.1-70b --context 8192 --weights awq --gpu H100 --tp 2
  memtheory serve llama-3.1-70b --context 32768 --kv-cache fp8 --gpu H200 --tp 4 --json
  memtheory serve llama-3.1-8b --context 8192 --batch 16 --gpu A10G --weights int8
  memtheory serve llama-3.1-70b --context 4096 --gpu H100 --tp 4 --draft llama-3.1-8b

The answer models vLLM's documented rule: it may use --gpu-memory-utilization
(0.9) of the card's memory; from that it subtracts the weights, a profiled
forward pass of --max-num-batched-tokens tokens and --reserve (1.5 GiB: CUDA
context, NCCL, CUDA graphs), and keeps the rest as KV-cache blocks of
--block-size (16) tokens. A sequence of L tokens takes ceil(L/16) blocks.
Every figure is per GPU; sizes in GiB (2^30 bytes) with GB (10^9) beside them.
--gpu reads the card's nominal memory ("24 GB" as 24 GiB); the total the
driver reports (nvidia-smi, torch.cuda.mem_get_info), which vLLM multiplies by
the utilization, can be lower: give it with --limit for a closer answer.
"""


def add_serve_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``serve`` subcommand to the ``memtheory`` command's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "serve",
        help="memory of serving a language model with vLLM, and how many sequences fit",
        description=(
            "Per-GPU memory of serving a language model with vLLM: weights (16-bit, int8, "
            "GPTQ, AWQ, NF4), the paged KV cache per sequence and in total, the prefill's and "
            "a decoding step's working memory, and the most concurrent sequences of the "
            "context that fit the card."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _arguments(parser)
    parser.set_defaults(run=run_serve)
    return parser


def build_serve_parser() -> argparse.ArgumentParser:
    """Return a stand-alone parser of the ``serve`` arguments (for ``main_serve``)."""
    parser = argparse.ArgumentParser(
        prog="memtheory serve", epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _arguments(parser)
    return parser


def _arguments(parser: argparse.ArgumentParser) -> None:
    from memtheory.estimate.serving_model import KV_FORMATS, WEIGHT_FORMATS

    parser.add_argument(
        "model", metavar="MODEL_OR_CONFIG",
        help="a preset (llama-3-8b, llama-3.1-70b, ...), a Hugging Face config.json, or a "
        "built-in model (gpt2, ...)",
    )
    size = parser.add_argument_group("sizes")
    size.add_argument("--context", type=int, required=True, metavar="L",
                      help="tokens per sequence, prompt plus generated (max_model_len)")
    many = size.add_mutually_exclusive_group()
    many.add_argument("--batch", type=int, metavar="N", help="concurrent sequences")
    many.add_argument("--concurrency", choices=("auto",), default="auto",
                      help="auto (default): the most sequences that fit the card")
    formats = parser.add_argument_group("formats")
    formats.add_argument(
        "--weights", "--quant", dest="weights", metavar="FORMAT",
        help=f"{', '.join(f for f in WEIGHT_FORMATS if not f.startswith('gguf-'))}, or a GGUF "
        "mix: gguf-q4_k_m, gguf-q5_k_m, gguf-q6_k, gguf-q8_0, gguf-q4_0, ... (default the "
        "checkpoint's dtype, bf16 for Llama 3)",
    )
    formats.add_argument("--kv-cache", metavar="DTYPE",
                         help=f"{', '.join(KV_FORMATS)} (default the compute dtype)")
    formats.add_argument("--draft", metavar="MODEL",
                         help="a draft model for speculative decoding (its weights and cache)")
    engine = parser.add_argument_group("vLLM")
    engine.add_argument("--gpu-memory-utilization", default="0.9", metavar="SHARE",
                        help="share of the card vLLM may use (default 0.9)")
    engine.add_argument("--block-size", type=int, default=16, help="tokens per KV block (16)")
    engine.add_argument("--max-num-batched-tokens", type=int, default=8192, metavar="T",
                        help="tokens of the profiled forward pass (default 8192)")
    engine.add_argument("--max-num-seqs", type=int, default=256, metavar="N",
                        help="rows of logits of the profiled sampler (default 256)")
    engine.add_argument("--reserve", default="1.5 GiB", metavar="SIZE",
                        help="CUDA context, NCCL, CUDA graphs (default 1.5 GiB)")
    devices = parser.add_argument_group("devices")
    card = devices.add_mutually_exclusive_group()
    card.add_argument("--gpu", metavar="CARD", help='a card: L4, A10G, "RTX 4090", H100, H200')
    card.add_argument("--limit", metavar="SIZE", help='device memory instead: "24 GiB"')
    devices.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs (default 1)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def run_serve(args: argparse.Namespace) -> int:
    """Run ``memtheory serve`` with parsed arguments; return the exit status."""
    from memtheory.estimate.serving import serving_memory

    try:
        answer = serving_memory(
            args.model,
            context=args.context,
            batch="auto" if args.batch is None else args.batch,
            weights=args.weights,
            kv_cache=args.kv_cache,
            gpu=args.gpu,
            limit=args.limit,
            utilization=args.gpu_memory_utilization,
            block_size=args.block_size,
            tensor=args.tp,
            reserve=args.reserve,
            batched_tokens=args.max_num_batched_tokens,
            max_sequences=args.max_num_seqs,
            draft=args.draft,
        )
    except MemtheoryError as error:
        print(f"memtheory serve: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(answer.to_dict(), indent=2))
    else:
        print(answer.report())
    return 0


def serve_instead(argv: Sequence[str]) -> list[str] | None:
    """Return ``argv`` for ``memtheory serve`` when an ``estimate`` command asks ``--serve``.

    ``memtheory estimate MODEL --serve ...`` asks the serving question, so it runs as
    ``memtheory serve MODEL ...`` with the same arguments (``--context``, ``--quant`` or
    ``--weights``, ``--gpu``, ...); a training option there is refused by ``serve``'s parser.
    Returns ``None`` when ``argv`` (without the word ``estimate``) does not ask it; only
    arguments before a ``--`` count.

    Examples
    --------
    >>> serve_instead(["llama-3.1-70b", "--serve", "--context", "32768", "--quant", "awq"])
    ['llama-3.1-70b', '--context', '32768', '--quant', 'awq']
    >>> serve_instead(["gpt2", "--batch", "8"]) is None
    True
    """
    arguments = list(argv)
    options = arguments[: arguments.index("--")] if "--" in arguments else arguments
    if SERVE_FLAG not in options:
        return None
    arguments.remove(SERVE_FLAG)
    return arguments


def main_serve(argv: Sequence[str] | None = None, *, asked_as: str = "serve") -> int:
    """Run ``memtheory serve`` on its own (``argv`` without the word ``serve``).

    ``asked_as`` names the command the user typed (``"estimate --serve"``) in the message
    that refuses an option ``serve`` does not take, such as a training option.

    Examples
    --------
    >>> main_serve(["llama-3-8b", "--context", "4096", "--lora", "16"], asked_as="estimate --serve")
    2
    """
    parser = build_serve_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(
            f"memtheory {asked_as}: {' '.join(unknown)[:200]}: not an option of the serving "
            "question (training options such as --lora, --recipe or --zero apply to memtheory "
            "estimate without --serve); memtheory serve --help lists the options it takes",
            file=sys.stderr,
        )
        return 2
    return run_serve(args)
