"""memtheory's builders beside torchinfo: the same model at the same sizes, how much faster?

``torchinfo.summary`` (torchinfo 1.8.0, the ``bench`` extra) runs one real forward
pass of the PyTorch model (``no_grad``, eval mode) and adds up the outputs'
bytes; memtheory derives the step from its builder without running anything.
For each model, in the same run and alternated (A B A B ...: a drift in the
machine's speed falls on both), this times

* **memtheory**: the builder with symbolic sizes, the autograd convention's
  training step derived (Adam for ResNet-50, AdamW for the language models;
  fp32) and its exact peak evaluated at the sizes: one formula for every size,
  then the number. Every run is cold (sympy's cache cleared first, as
  ``benchmarks/scaling.py`` runs it), the model built inside the timed call.
  The row also shows the builder called with the sizes as numbers (the peak
  derived at those sizes only), which is quicker; the verdict is on the
  symbolic one;
* **torchinfo**: ``summary(model, input_size=... or input_data=..., verbose=0)``
  on the PyTorch model, built beforehand (only ``summary`` is timed).

The models: ResNet-50 (torchvision's architecture, 25,557,032 parameters, the
``ResNetReference`` that ``benchmarks/trace.py`` traces) at B=8, H=224; GPT-2
small (``transformers.GPT2LMHeadModel`` from its default ``GPT2Config``,
124,439,808 parameters) at B=1, S=1024; BERT-base (``transformers.BertModel``
from its default ``BertConfig``, 109,482,240 parameters) at B=4, S=512. These
keep torchinfo's forward to a few CPU seconds each on a 2-core machine
(ResNet-50 at B=32 takes about 8 s, GPT-2 at B=8, S=1024 about 28 s). Each
model's parameter count is checked to be memtheory's builder's (torchinfo
counts GPT-2's tied output head twice, so its own total is printed beside).

Both answers are printed: torchinfo's "Forward/backward pass size" (its
outputs' bytes, doubled), "Params size" and "Estimated Total Size", beside
memtheory's exact training peak, all in MB (10^6 bytes) as torchinfo prints
them. They answer different questions (torchinfo has no optimizer, gradients
or saved tensors), so no number is held to another; the target is speed:
memtheory at least 10x faster than torchinfo on each model, CPU seconds
(issue 26).

Without torchinfo (or torch and transformers) it says what is skipped and
exits 0. ``--quick`` runs each model at tiny sizes (ResNet-50 at B=1, H=64;
GPT-2 and BERT at B=1, S=64), once; ``--repeat N`` times each side N times
(default 3); ``--help`` prints this. Run ``python benchmarks/torchinfo_peer.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _verdict import Timing, helped, option, report, seconds, skipped  # noqa: E402

NAME = "torchinfo_peer"
FASTER = 10.0
"""How many times faster than ``torchinfo.summary`` memtheory should be (issue 26)."""
SIZES = {"ResNet-50": {"B": 8, "H": 224}, "GPT-2 small": {"B": 1, "S": 1024},
         "BERT-base": {"B": 4, "S": 512}}
QUICK_SIZES = {"ResNet-50": {"B": 1, "H": 64}, "GPT-2 small": {"B": 1, "S": 64},
               "BERT-base": {"B": 1, "S": 64}}


@dataclass
class Pair:
    """One model on both sides: memtheory's builder and the PyTorch model torchinfo reads."""

    name: str
    build: Callable[..., Any]
    """memtheory's builder: keywords ``batch`` and ``image_size`` or ``sequence``."""
    optimizer: str
    module: Callable[[], Any]
    """Builds the PyTorch model."""
    example: Callable[[dict[str, int]], dict[str, Any]]
    """torchinfo's keyword arguments (``input_size`` or ``input_data``) at the sizes."""

    def network(self, sizes: dict[str, Any]) -> Any:
        """memtheory's network at ``sizes`` (numbers or sympy symbols)."""
        if "H" in sizes:
            return self.build(batch=sizes["B"], image_size=sizes["H"])
        return self.build(batch=sizes["B"], sequence=sizes["S"])


def pairs() -> list[Pair]:
    """ResNet-50, GPT-2 small and BERT-base (needs torch and transformers)."""
    import torch
    import transformers

    from memtheory.models import bert_base, gpt2, resnet50
    from memtheory.validation.reference_models import ResNetReference

    def tokens(vocabulary: int) -> Callable[[dict[str, int]], dict[str, Any]]:
        return lambda s: {"input_data": torch.randint(0, vocabulary, (s["B"], s["S"]))}

    return [
        Pair("ResNet-50", lambda **k: resnet50(**k), "adam",
             lambda: ResNetReference("bottleneck", (3, 4, 6, 3)),
             lambda s: {"input_size": (s["B"], 3, s["H"], s["H"])}),
        Pair("GPT-2 small", lambda **k: gpt2("small", **k), "adamw",
             lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config()), tokens(50257)),
        Pair("BERT-base", lambda **k: bert_base(**k), "adamw",
             lambda: transformers.BertModel(transformers.BertConfig()), tokens(30522)),
    ]


def parameter_count(module: Any) -> int:
    """A PyTorch model's parameters, each tied tensor once (as ``module.parameters()`` yields)."""
    return sum(p.numel() for p in module.parameters())


def memtheory_peak(pair: Pair, sizes: dict[str, int], symbolic: bool = True) -> int:
    """Build, derive the autograd step and evaluate its exact peak at ``sizes``, in bytes."""
    from memtheory import training_memory
    from memtheory.symbols import B, H, S

    if not symbolic:
        memory = training_memory(pair.network(sizes), optimizer=pair.optimizer,
                                 convention="autograd")
        return int(memory.peak)
    symbols = {"B": B, "H": H, "S": S}
    memory = training_memory(pair.network({name: symbols[name] for name in sizes}),
                             optimizer=pair.optimizer, convention="autograd")
    return int(memory.evaluate(**sizes).peak)


def cold(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` with sympy's cache emptied first (as ``benchmarks/scaling.py`` runs it)."""
    from sympy.core.cache import clear_cache

    def run() -> Any:
        clear_cache()
        return call()

    return run


def compare(pair: Pair, sizes: dict[str, int], repeat: int) -> None:
    """Time both sides in turn at ``sizes``, print both answers, report the ratio."""
    import torch
    import torchinfo

    module = pair.module()
    expected = int(pair.network(sizes).parameter_count)
    if parameter_count(module) != expected:  # pragma: no cover - a different model
        raise SystemExit(f"{pair.name}: PyTorch has {parameter_count(module):,} parameters, "
                         f"memtheory's builder {expected:,}")
    example = pair.example(sizes)
    results: dict[str, Any] = {}

    def ours() -> None:
        results["memtheory"] = memtheory_peak(pair, sizes)

    def numeric() -> None:
        results["numeric"] = memtheory_peak(pair, sizes, symbolic=False)

    def theirs() -> None:
        results["torchinfo"] = torchinfo.summary(module, verbose=0, **example)

    timings = {name: Timing() for name in ("memtheory", "numeric", "torchinfo")}
    calls = {"memtheory": cold(ours), "numeric": cold(numeric), "torchinfo": theirs}
    for call in calls.values():  # one untimed run each: imports, oneDNN's first kernels
        call()
    for _ in range(repeat):  # A B A B ...
        for name, call in calls.items():
            timings[name].add(call)
    if results["memtheory"] != results["numeric"]:  # pragma: no cover - a regression
        raise SystemExit(f"{pair.name}: the symbolic peak evaluated at {sizes} is "
                         f"{results['memtheory']:,}, the numeric build's {results['numeric']:,}")
    stats = results["torchinfo"]
    shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
    total = stats.total_input + stats.total_output_bytes + stats.total_param_bytes
    print(f"{pair.name} at {shown}, {expected:,} parameters "
          f"(torchinfo's total params {stats.total_params:,}); torch {torch.__version__}")
    print(f"    memtheory  exact training peak ({pair.optimizer}, fp32, autograd): "
          f"{results['memtheory'] / 1e6:,.2f} MB; symbolic build, derive, evaluate "
          f"{_both(timings['memtheory'])}; built at the sizes {_both(timings['numeric'])}")
    print(f"    torchinfo  forward/backward pass size {stats.total_output_bytes / 1e6:,.2f} MB, "
          f"params size {stats.total_param_bytes / 1e6:,.2f} MB, estimated total size "
          f"{total / 1e6:,.2f} MB; summary() {_both(timings['torchinfo'])}")
    theirs_cpu = timings["torchinfo"].median_cpu
    report(NAME, f"{pair.name} ({shown}) exact peak vs torchinfo.summary, CPU",
           theirs_cpu / timings["memtheory"].median_cpu, FASTER, unit="x", at_least=True,
           detail=f"built at the sizes {theirs_cpu / timings['numeric'].median_cpu:.0f}x")


def _both(timing: Timing) -> str:
    return (f"{seconds(timing.median_cpu)} CPU, {seconds(timing.median_wall)} wall "
            f"(median of {len(timing.cpu)})")



def main(argv: list[str]) -> int:
    """Time memtheory and torchinfo on each model in turn; one verdict per model."""
    if helped(argv, __doc__):
        return 0
    try:
        import torch
        import torchinfo  # noqa: F401 (checked here, used in compare)
        import transformers
    except ImportError as error:
        skipped(NAME, f"needs {error.name}: pip install 'memtheory[torch,bench]'")
        return 0
    transformers.logging.set_verbosity_error()
    quick = "--quick" in argv
    repeat = int(option(argv, "--repeat", "1" if quick else "3"))
    torch.manual_seed(0)
    for pair in pairs():
        compare(pair, (QUICK_SIZES if quick else SIZES)[pair.name], repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
