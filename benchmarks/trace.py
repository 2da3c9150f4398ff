"""How fast and how exact is ``memtheory.torch.trace``? Trace time, measure time, bytes off.

Every figure compares like with like, in the same run: the same model at the same sizes.

* Each model is traced into formulas in B (and S or H) at its sizes, and
  :func:`memtheory.torch.measure` runs one real step of the same model at the
  same sizes (where it can run here): the row prints both times (CPU and wall)
  and the traced formulas' error against that measurement in bytes, for every
  component, the training-step peak and the inference peak (CPU live tensor
  storages), and against a second measurement at a size the trace never saw.
* DenseNet-121 (whose concatenations once made the trace super-linear) and
  ResNet-50 are traced at the same sizes, in turn (A B A B ...), and the row
  prints the ratio of their CPU times, beside the ratio of the PyTorch
  operations one training step of each runs (counted on a small real step).

Models: a small residual CNN; Hugging Face GPT-2 small (124M, from its default
config) at B=4, S=512; a Llama-3-8B-shaped model built on the meta device from
its config (32 layers, width 4096, 32 heads with 8 key/value heads, FFN 14336,
vocabulary 128256) traced at B=4, S=2048 without allocating its 8 billion
weights (``measure`` cannot run it here: its fp32 weights and Adam state alone
are about 120 GiB, so the row says so); DenseNet-121 and ResNet-50 (the
torchvision architectures, 7,978,856 and 25,557,032 parameters, built here so
that torchvision is not needed) at B=8, H=224 (``--vision B,H`` changes it).

Targets on a 2-core machine (issue 26): GPT-2 small traced in under 8 s of CPU
time and at least 10x faster than ``measure``; the Llama-3-8B shape in under
40 s; DenseNet-121 within 2x ResNet-50's CPU time; 0 bytes off everywhere. Each
target prints a verdict line (``met`` or ``missed by x%``, see
``benchmarks/_verdict.py``). ``--quick`` runs the residual CNN only;
``--repeat N`` alternates the two vision traces N times (default 1);
``--help`` prints this.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _verdict import Timing, helped, option, report, skipped  # noqa: E402

NAME = "trace"
TARGETS = {"GPT-2 small (HF)": 8.0, "GPT-2 small, at_one=False": 8.0,
           "Llama-3-8B shape (meta)": 40.0}
"""CPU seconds each trace should take at most (issue 26). GPT-2 is timed twice: as ``trace``
runs by default, which traces B = 1 once more where the formula does not hold there (so that
B = 1 is answered; measured at (1, 40)), and with ``at_one=False``, the trace the issue timed."""
FASTER = 10.0
"""How many times faster than ``measure`` a trace should be, at the same sizes."""
VISION_RATIO = 2.0
"""DenseNet-121's trace CPU time over ResNet-50's, at most."""



def main(argv: list[str]) -> int:
    """Trace and measure every model, print one row per model, say whether the targets hold."""
    if helped(argv, __doc__):
        return 0
    try:
        import torch
        import transformers
    except ImportError:
        skipped(NAME, "needs the torch extra: pip install 'memtheory[torch]'")
        return 0
    quick = "--quick" in argv
    batch, side = (int(n) for n in option(argv, "--vision", "8,224").split(","))
    repeat = int(option(argv, "--repeat", "1"))
    torch.manual_seed(0)
    rows = [_cnn_row()]
    if not quick:
        gpt2 = transformers.GPT2Config()
        rows.append(_lm_row("GPT-2 small (HF)", lambda: transformers.GPT2LMHeadModel(gpt2),
                            50257, (4, 512), [(4, 512), (3, 40), (1, 40)]))
        rows.append(_lm_row("GPT-2 small, at_one=False", lambda: transformers.GPT2LMHeadModel(
            gpt2), 50257, (4, 512), [], at_one=False))
        llama = transformers.LlamaConfig(
            hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
            max_position_embeddings=8192, rope_theta=500000.0)

        def meta_llama() -> Any:
            with torch.device("meta"):
                return transformers.LlamaForCausalLM(llama)

        rows.append(_lm_row("Llama-3-8B shape (meta)", meta_llama, 128256, (4, 2048), []))
    exact = _report(rows)
    if not quick:
        _vision(batch, side, repeat)
    return 0 if exact else 1


def _timed_trace(call: Callable[[], Any]) -> tuple[Any, Timing]:
    timing = Timing()
    return timing.add(call), timing


def _cnn_row() -> tuple[str, Timing, Any, list[Any]]:
    """The residual CNN traced at B=5, H=32 and measured there and at B=9, H=45."""
    import torch
    from torch import nn

    from memtheory.torch import measure, torch_optimizer, trace

    cnn = _ResidualCNN().train()
    images, labels = torch.randn(5, 3, 32, 32), torch.randint(0, 10, (5,))
    memory, timing = _timed_trace(lambda: trace(
        cnn, images, {"B": 5, "H": 32}, loss=nn.CrossEntropyLoss(), target=labels,
        optimizer="adam"))
    checks = []
    for batch, side in ((5, 32), (9, 45)):
        measured = Timing()
        real = measured.add(lambda b=batch, s=side: measure(
            cnn, torch.randn(b, 3, s, s), nn.CrossEntropyLoss(),
            torch_optimizer("adam", cnn.parameters()), target=torch.randint(0, 10, (b,))))
        checks.append(((batch, side), measured, _off(memory.evaluate(B=batch, H=side), real)))
    return "residual CNN (B, H)", timing, memory, checks


def _lm_row(name: str, build: Callable[[], Any], vocabulary: int, example: tuple[int, int],
            sizes: list[tuple[int, int]], at_one: bool = True,
            ) -> tuple[str, Timing, Any, list[Any]]:
    """A causal LM traced at ``example`` and measured at each of ``sizes``."""
    import torch

    from memtheory.torch import measure, torch_optimizer, trace

    model = build().train()

    def loss(output: Any, labels: Any) -> Any:
        return model.loss_function(output.logits, labels, vocab_size=vocabulary)

    tokens = torch.randint(0, vocabulary, example)
    memory, timing = _timed_trace(lambda: trace(
        model, tokens, {"B": example[0], "S": example[1]}, loss=loss, target=tokens,
        optimizer="adamw", at_one=at_one))
    checks = []
    for batch, sequence in sizes:
        tokens = torch.randint(0, vocabulary, (batch, sequence))
        measured = Timing()
        real = measured.add(lambda t=tokens: measure(
            model, t, loss, torch_optimizer("adamw", model.parameters()), target=t))
        checks.append(((batch, sequence), measured,
                       _off(memory.evaluate(B=batch, S=sequence), real)))
    return name, timing, memory, checks


def _report(rows: list[Any]) -> bool:
    """Print one row per model and a verdict per target; return whether every check was exact."""
    print(f"{'model':<26}{'trace CPU s':>12}{'wall s':>8}{'measure CPU s':>15}{'x faster':>10}"
          "  bytes off at")
    all_exact = True
    for name, timing, memory, checks in rows:
        times = f"{name:<26}{timing.cpu[0]:>12.1f}{timing.wall[0]:>8.1f}"
        all_exact &= all(off == 0 for _, _, off in checks)
        offs = "; ".join(f"{size}: {off}" for size, _, off in checks)
        if not checks:
            print(f"{times}{'-':>15}{'-':>10}  measure cannot run here")
        else:
            # like with like: measure's time at the sizes the trace was taken at (the first)
            same = checks[0][1].cpu[0]
            print(f"{times}{same:>15.1f}{same / timing.cpu[0]:>10.1f}  {offs}")
        print(f"    peak = {_short(memory.peak)}")
        if name in TARGETS:
            report(NAME, f"trace {name}, CPU", timing.cpu[0], TARGETS[name],
                   detail=f"{timing.wall[0]:.1f} s wall")
            if checks:
                report(NAME, f"trace {name} vs measure, same sizes", same / timing.cpu[0],
                       FASTER, unit="x", at_least=True)
    print("0 bytes off on every model measure can run:", "yes" if all_exact else "NO")
    return all_exact


def _vision(batch: int, side: int, repeat: int) -> None:
    """DenseNet-121 and ResNet-50 traced at the same sizes, in turn; the ratio of CPU times."""
    import torch
    from torch import nn

    from memtheory.torch import trace
    from memtheory.validation.reference_models import ResNetReference

    images, labels = torch.randn(batch, 3, side, side), torch.randint(0, 1000, (batch,))
    models = {"ResNet-50": ResNetReference("bottleneck", (3, 4, 6, 3)).train(),
              "DenseNet-121": _DenseNet121().train()}
    timings = {name: Timing() for name in models}
    for _ in range(repeat):  # A B A B ...: a drift in the machine's speed falls on both
        for name, model in models.items():
            timings[name].add(lambda m=model: trace(
                m, images, {"B": batch, "H": side}, loss=nn.CrossEntropyLoss(), target=labels,
                optimizer="adam"))
    operations = {name: _operations(model) for name, model in models.items()}
    for name, timing in timings.items():
        print(f"{name} at B={batch}, H={side}: trace {timing.shown()}; "
              f"{operations[name]:,} operations in a training step")
    ratio = timings["DenseNet-121"].median_cpu / timings["ResNet-50"].median_cpu
    more = operations["DenseNet-121"] / operations["ResNet-50"]
    print(f"DenseNet-121 runs {more:.2f}x ResNet-50's operations: {ratio / more:.2f}x the trace "
          "time per operation (the 2x target asks for less than the operation count's ratio)")
    report(NAME, f"trace DenseNet-121 / ResNet-50 CPU (B={batch}, H={side})", ratio,
           VISION_RATIO, unit="x")


def _operations(model: Any) -> int:
    """PyTorch operations (ATen calls) one training step of ``model`` runs, counted at B=2, H=64.

    A real step on the CPU under a dispatch mode that counts: forward, loss, backward and an
    Adam step (the same optimizer as the trace). How many operations a CNN's step runs does
    not depend on the sizes.
    """
    from contextlib import nullcontext

    import torch
    from torch import nn
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            Counter.calls += 1
            return func(*args, **(kwargs or {}))

    optimizer = torch.optim.Adam(model.parameters())
    images, labels = torch.randn(2, 3, 64, 64), torch.randint(0, 1000, (2,))
    state = {name: value.clone() for name, value in model.state_dict().items()}
    for counted in (False, True):  # the second step is the steady one: Adam's state exists
        with Counter() if counted else nullcontext():
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(images), labels).backward()
            optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.load_state_dict(state)  # the traces after this one see the weights they saw before
    return Counter.calls


def _off(traced: Any, measured: Any) -> int:
    """Largest absolute byte difference over the components and both peaks."""
    names = set(traced.components) | set(measured.components)
    gaps = [abs(int(traced.components.get(n, 0)) - measured.components.get(n, 0)) for n in names]
    gaps.append(abs(int(traced.peak) - measured.peak))
    gaps.append(abs(int(traced.inference_peak) - measured.inference_peak))
    return max(gaps)


def _short(expression: Any, width: int = 90) -> str:
    text = str(expression)
    return text if len(text) <= width else text[: width - 3] + "..."


class _ResidualCNN:  # built lazily: torch is imported inside main
    def __new__(cls) -> Any:
        import torch.nn.functional as F  # noqa: N812 (PyTorch's convention)
        from torch import nn

        class ResidualCNN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.stem = nn.Conv2d(3, 16, 3, padding=1)
                self.bn = nn.BatchNorm2d(16)
                self.conv = nn.Conv2d(16, 16, 3, padding=1)
                self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1)
                self.fc = nn.Linear(32, 10)

            def forward(self, x: Any) -> Any:
                x = F.relu(self.bn(self.stem(x)))
                x = x + F.relu(self.conv(x))
                return self.fc(F.relu(self.down(x)).mean((2, 3)))

        return ResidualCNN()


class _DenseNet121:  # torchvision's densenet121 (memory-hungry concatenating forward)
    def __new__(cls, blocks: tuple[int, ...] = (6, 12, 24, 16), growth: int = 32) -> Any:
        import torch
        import torch.nn.functional as F  # noqa: N812 (PyTorch's convention)
        from torch import nn

        class DenseLayer(nn.Module):
            def __init__(self, features: int) -> None:
                super().__init__()
                self.norm1 = nn.BatchNorm2d(features)
                self.conv1 = nn.Conv2d(features, 4 * growth, 1, bias=False)
                self.norm2 = nn.BatchNorm2d(4 * growth)
                self.conv2 = nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)

            def forward(self, features: list[Any]) -> Any:
                x = self.conv1(F.relu(self.norm1(torch.cat(features, 1))))
                return self.conv2(F.relu(self.norm2(x)))

        class DenseNet(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                width = 64
                self.stem = nn.Sequential(
                    nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                    nn.MaxPool2d(3, 2, 1))
                self.blocks, self.transitions = nn.ModuleList(), nn.ModuleList()
                for index, layers in enumerate(blocks):
                    self.blocks.append(nn.ModuleList(
                        DenseLayer(width + n * growth) for n in range(layers)))
                    width += layers * growth
                    if index < len(blocks) - 1:
                        self.transitions.append(nn.Sequential(
                            nn.BatchNorm2d(width), nn.ReLU(),
                            nn.Conv2d(width, width // 2, 1, bias=False), nn.AvgPool2d(2, 2)))
                        width //= 2
                self.norm = nn.BatchNorm2d(width)
                self.classifier = nn.Linear(width, 1000)

            def forward(self, x: Any) -> Any:
                x = self.stem(x)
                for index, block in enumerate(self.blocks):
                    features = [x]
                    for layer in block:
                        features.append(layer(features))
                    x = torch.cat(features, 1)
                    if index < len(self.transitions):
                        x = self.transitions[index](x)
                x = F.adaptive_avg_pool2d(F.relu(self.norm(x)), 1)
                return self.classifier(torch.flatten(x, 1))

        return DenseNet()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
