"""Benchmark how memtheory scales: exact peaks, depth, max_batch, evaluate and the import.

Each figure is printed as ``_verdict.report`` prints it: CPU seconds (the median of the
runs; what the target is for) with the wall time beside it, the target, the verdict
(``met`` / ``missed by x%``) and the baseline measured in the same run. Every run is cold
(sympy's cache cleared first). The baseline of the exact peak is the maximum pruner as it
was on ``main`` at :data:`BASELINE_COMMIT` (``git show``, loaded beside today's), run
alternately with it on the same moments; where git or that commit is not here, the rows
say so and carry on.

* **exact peak**: :func:`memtheory.max_pruning.maximum` over the timeline of a 400-layer
  CNN with a 2x2 max pooling after every 5 convolutions and of a 400-layer MLP (target
  0.5 s, issue 26's for the whole pipeline), read as ``memory.peak`` reads it: from the
  timeline's running sum, without building a moment it drops (the baseline reads the
  moments, built beforehand); GPT-2 xl over (B, S) and ResNet-50 over (B, H) built,
  derived and peaked (target 1 s, issue 10);
* **400-layer pooled CNN, every convention**: build, derive and the peak (the autograd
  convention's is the exact maximum; the others' the total), target < 0.5 s (issue 26,
  which measured 1.27 / 1.66 / 4.55 s on ``main``); the autograd one also with the
  baseline pruner;
* **linear in depth**: the exact autograd peak (build, derive, maximum) of each of the four
  families at two depths, one twice the other; the growth exponent of the median ratio of
  five rounds, each timing both depths back to back (garbage collected and sympy's cache
  emptied before each run, untimed), target <= 1.1 (1 is linear), with the baseline
  pruner's exponent beside it;
* ``max_batch`` on VGG-16's exact peak with H given, beside sympy re-evaluating the ``Max``;
* ``evaluate`` on the 400-layer CNN's timeline, beside one ``xreplace`` per moment;
* ``import memtheory`` and its first use (``memtheory.training_memory``: the package
  imports its modules on first use), each in a fresh interpreter, against ``import sympy,
  numpy``; target 1.2x.

Run with ``python benchmarks/scaling.py`` (about two minutes on a quiet 2-core machine);
``--quick`` runs the depth rows at half the depth.
"""

from __future__ import annotations

import gc
import importlib.util
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from sympy.core.cache import clear_cache

from memtheory import (
    Conv2d,
    Dense,
    Flatten,
    Input,
    MaxPool2d,
    Network,
    ReLU,
    training_memory,
)
from memtheory import max_pruning as pruner
from memtheory.max_pruning import count_candidates
from memtheory.models import gpt2, resnet50, vgg16
from memtheory.models.gpt2 import GPT2Config
from memtheory.models.resnet import resnet
from memtheory.symbols import H
from memtheory.whatif import max_batch, max_value

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _verdict import Timing, report, seconds  # noqa: E402

NAME = "scaling"
BASELINE_COMMIT = "7a1f1ce"
"""``main`` when issue 26's peak work began: its ``memtheory/max_pruning.py`` is the baseline."""
CONVENTIONS = ("breakdown", "rule_of_thumb", "autograd")
ISSUE_26 = {"rule_of_thumb": "1.27 s", "breakdown": "1.66 s", "autograd": "4.55 s"}
"""The 400-layer pooled CNN per convention on ``main``, CPU seconds, as issue 26 recorded them."""
REPEAT = 3
DEPTH_ROUNDS = 5
"""Rounds of the depth rows, each timing both depths back to back (their ratio)."""
IMPORT_RUNS = 7


def pooled_cnn(convolutions: int) -> Network:
    """3x3 convolutions (4 channels, padding 1) over H x H, a 2x2 max pooling after every 5."""
    layers: list[Any] = [Input((3, H, H))]
    for i in range(convolutions):
        layers.append(Conv2d(4, 3, padding=1))
        if (i + 1) % 5 == 0:
            layers.append(MaxPool2d(2))
    return Network([*layers, Flatten(), Dense(10)])


def mlp(depth: int) -> Network:
    """Dense(64) + ReLU layers over 32 features."""
    layers: list[Any] = [Input((32,))]
    for _ in range(depth):
        layers += [Dense(64), ReLU()]
    return Network(layers)


def gpt2_stack(blocks: int) -> Network:
    """GPT-2 xl's width (1600, 25 heads) with ``blocks`` transformer blocks, over (B, S)."""
    return gpt2(GPT2Config(layers=blocks, hidden=1600, heads=25))


def resnet_stack(blocks: int) -> Network:
    """A bottleneck ResNet over (B, H) with ``blocks`` blocks, a quarter in each stage."""
    return resnet((blocks // 4,) * 4, image_size=H)


FAMILIES: dict[str, tuple[Callable[[int], Network], int, str]] = {
    "pooled CNN": (pooled_cnn, 200, "convolutions"),
    "MLP": (mlp, 200, "Dense+ReLU"),
    "GPT-2 xl-wide stack": (gpt2_stack, 100, "blocks"),
    "ResNet bottleneck stack": (resnet_stack, 64, "blocks"),
}
"""Each family's builder, its smaller depth (the larger is twice it), and what it counts."""


def baseline_pruner() -> ModuleType | None:
    """Return ``memtheory/max_pruning.py`` as it was at :data:`BASELINE_COMMIT`, or None."""
    root = Path(__file__).resolve().parent.parent
    try:
        source = subprocess.run(
            ["git", "show", f"{BASELINE_COMMIT}:memtheory/max_pruning.py"], cwd=root,
            capture_output=True, text=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as file:
        file.write(source)
    spec = importlib.util.spec_from_file_location("baseline_max_pruning", file.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.unlink(file.name)
    return module


def cold(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` with sympy's cache emptied first."""

    def run() -> Any:
        clear_cache()
        return call()

    return run


def in_turn(
    calls: dict[str, Callable[[], Any]], repeat: int = REPEAT
) -> tuple[dict[str, Timing], dict[str, Any]]:
    """Time each call cold, in turn (A B A B ...), ``repeat`` runs each; the last results."""
    timings = {name: Timing() for name in calls}
    results: dict[str, Any] = {}
    for _ in range(repeat):
        for name, call in calls.items():
            results[name] = timings[name].add(cold(call))
    return timings, results


def both(timing: Timing) -> str:
    return f"{seconds(timing.median_cpu)} CPU, {seconds(timing.median_wall)} wall"


def peak_rows(old: ModuleType | None) -> None:
    """The exact maximum over the timeline of deep and real networks, beside the baseline."""
    print("-- exact peak: the maximum over the timeline of moments derived once (not timed; "
          "read from the running sum's changes, the baseline reads the built moments); "
          "target 0.5 s, the whole pipeline's (issue 26)")
    for label, build in (
        ("CNN, 400 conv + 80 pools", lambda: pooled_cnn(400)),
        ("MLP, 400 Dense+ReLU", lambda: mlp(400)),
    ):
        moments = training_memory(build(), optimizer="sgd", convention="autograd").timeline.values()
        list(moments)  # every moment built (not timed): what the baseline reads
        calls = {"now": lambda moments=moments: pruner.maximum(moments)}
        if old is not None:
            calls["baseline"] = lambda moments=moments: old.maximum(moments)
        timings, results = in_turn(calls)
        if old is not None and results["now"] != results["baseline"]:  # pragma: no cover
            raise SystemExit(f"the peak of {label} changed")
        kept = count_candidates(results["now"])
        baseline = f"baseline {both(timings['baseline'])}" if old is not None else "no baseline"
        report(NAME, f"exact peak of {label} ({len(moments)} moments, {kept} kept)",
               timings["now"].median_cpu, 0.5, detail=f"{both(timings['now'])}; {baseline}")
    print("-- real networks: build, derive and the exact peak; target 1 s (issue 10)")
    for label, build in (
        ("GPT-2 xl over (B, S)", lambda: gpt2("xl")),
        ("ResNet-50 over (B, H)", lambda: resnet50(image_size=H)),
    ):
        calls = {"now": lambda build=build: pipeline(build, "autograd", optimizer="adamw")}
        if old is not None:
            calls["baseline"] = lambda build=build: pipeline(build, "autograd", old.maximum,
                                                             optimizer="adamw")
        timings, results = in_turn(calls)
        if old is not None and results["now"] != results["baseline"]:  # pragma: no cover
            raise SystemExit(f"the peak of {label} changed")
        baseline = f"baseline pruner {both(timings['baseline'])}" if old else "no baseline"
        report(NAME, f"exact peak of {label}: build, derive, peak", timings["now"].median_cpu,
               1.0, detail=f"{both(timings['now'])}; {baseline}")


def pipeline(
    build: Callable[[], Network], convention: str, maximum: Any = None, optimizer: str = "sgd"
) -> Any:
    """Build, derive, and the peak (the exact maximum under autograd; else the total)."""
    memory = training_memory(build(), optimizer=optimizer, convention=convention)
    if convention != "autograd":
        return memory.total
    return (maximum or pruner.maximum)(memory.timeline.values())


def convention_rows(old: ModuleType | None) -> None:
    """The 400-layer pooled CNN built, derived and peaked in every convention (issue 26)."""
    print("-- 400-layer pooled CNN: build, derive and peak, each convention")
    for convention in CONVENTIONS:
        calls = {"now": lambda convention=convention: pipeline(
            lambda: pooled_cnn(400), convention)}
        if convention == "autograd" and old is not None:
            calls["baseline"] = lambda: pipeline(lambda: pooled_cnn(400), "autograd", old.maximum)
        timings, _ = in_turn(calls)
        baseline = (f"baseline pruner {both(timings['baseline'])}, " if "baseline" in timings
                    else "")
        report(NAME, f"CNN 400 conv, {convention}: build, derive, peak",
               timings["now"].median_cpu, 0.5,
               detail=f"{both(timings['now'])}; {baseline}issue 26 on main: "
                      f"{ISSUE_26[convention]} CPU")


def depth_rows(old: ModuleType | None, scale: float) -> None:
    """The exact peak of each family at two depths: growth exponent, target <= 1.1.

    Each pipeline runs once untimed (modules, first-use imports such as NumPy's), then
    :data:`DEPTH_ROUNDS` rounds. A round runs the two depths back to back (the deeper
    first in every other round), each after emptying sympy's cache and collecting
    garbage, outside the timing; its ratio is the deeper run's CPU time over the
    shallower's. The exponent is that of the median ratio. This machine's speed drifts
    by up to 1.7x within seconds (a fixed Python loop, timed six times in a row), so
    two depths timed apart, even each at its fastest, gave exponents from 0.5 to 1.2
    for the same code; a ratio within a round sees one speed.
    """
    print("-- exact peak (build, derive, maximum) at two depths: growth exponent "
          f"(median of {DEPTH_ROUNDS} ratios of runs back to back)")
    for family, (build, small, unit) in FAMILIES.items():
        depths = (max(4, int(small * scale)), 2 * max(4, int(small * scale)))
        pruners = {"now": None}
        if old is not None:
            pruners["baseline"] = old.maximum
        pipeline(partial(build, depths[0]), "autograd")  # untimed: first use
        exponents = {}
        shown = []
        for name, maximum in pruners.items():
            times: dict[int, list[float]] = {depth: [] for depth in depths}
            ratios = []
            for round_ in range(DEPTH_ROUNDS):
                for depth in depths if round_ % 2 == 0 else depths[::-1]:
                    clear_cache()
                    gc.collect()
                    timing = Timing()
                    timing.add(lambda depth=depth, maximum=maximum, build=build: pipeline(
                        lambda: build(depth), "autograd", maximum))
                    times[depth].append(timing.cpu[0])
                ratios.append(times[depths[1]][-1] / times[depths[0]][-1])
            exponents[name] = math.log(statistics.median(ratios), 2)
            medians = [statistics.median(times[depth]) for depth in depths]
            shown.append(f"{name} {seconds(medians[0])} / {seconds(medians[1])} CPU "
                         f"(n^{exponents[name]:.2f}, ratios "
                         f"{min(ratios):.2f} to {max(ratios):.2f})")
        report(NAME, f"depth growth, {family}, {depths[0]} -> {depths[1]} {unit}",
               exponents["now"], 1.1, unit="", detail="; ".join(shown))


def max_batch_rows() -> None:
    """max_batch on VGG-16's exact peak with H given, beside sympy's own substitution."""
    memory = training_memory(vgg16(image_size=H), optimizer="adam", convention="autograd")
    peak = memory.peak
    timings, results = in_turn({
        "now": lambda: max_batch(memory, "80 GB", H=224),
        "baseline": lambda: max_value(peak.xreplace({H: 224}), "B", "80 GB"),
    })
    if results["now"] != results["baseline"]:  # pragma: no cover - a regression, not a timing
        raise SystemExit(f"max_batch changed: {results['now']} != {results['baseline']}")
    report(NAME, f"max_batch(VGG-16 autograd peak, 80 GB, H=224) = {results['now']}",
           timings["now"].median_cpu, 0.05,
           detail=f"{both(timings['now'])}; sympy substituting into the Max "
                  f"{both(timings['baseline'])}")


def evaluate_rows() -> None:
    """evaluate() on the 400-layer pooled CNN's autograd result, beside one xreplace per moment."""
    memory = training_memory(pooled_cnn(400), optimizer="sgd", convention="autograd")
    values = {"B": 2, "H": 2**81 + 7}
    mapping = {symbol: values[symbol.name] for symbol in memory.free_symbols}
    timings, results = in_turn({
        "now": lambda: memory.evaluate(**values),
        "baseline": lambda: [v.xreplace(mapping) for v in memory.timeline.values()],
    }, repeat=2)
    if list(results["now"].timeline.values()) != results["baseline"]:  # pragma: no cover
        raise SystemExit("evaluate changed the timeline")
    report(NAME, f"evaluate(B=2, H=2**81+7), CNN 400 conv, autograd ({len(mapping)} sizes, "
           f"{len(memory.timeline)} moments)", timings["now"].median_cpu, 1.0,
           detail=f"{both(timings['now'])}; one xreplace per moment "
                  f"{both(timings['baseline'])}")


def import_rows() -> None:
    """Fresh-interpreter import times (fastest of several runs), byte code cached."""
    with tempfile.TemporaryDirectory() as cache:
        environment = dict(os.environ, PYTHONPYCACHEPREFIX=cache)
        environment.pop("PYTHONDONTWRITEBYTECODE", None)

        def fastest(statement: str) -> float:
            code = (f"import time; t = time.process_time(); {statement}; "
                    "print(time.process_time() - t)")
            return min(
                float(subprocess.run([sys.executable, "-c", code], env=environment,
                                     capture_output=True, text=True, check=True).stdout)
                for _ in range(IMPORT_RUNS)
            )

        used = "import memtheory; memtheory.training_memory"
        fastest(used)  # fills the byte-code cache
        base = fastest("import sympy, numpy")
        bare = fastest("import memtheory")
        first_use = fastest(used)
    report(NAME, "import memtheory and its first use, over import sympy, numpy",
           first_use / base, 1.2, unit="x",
           detail=f"{seconds(first_use)} CPU against {seconds(base)}; the bare import "
                  f"{seconds(bare)} (names load on first use)")


def main() -> None:
    """Measure everything, each figure beside its target and baseline."""
    old = baseline_pruner()
    if old is None:
        print(f"no baseline pruner: git or commit {BASELINE_COMMIT} is not here; "
              "rows carry no baseline")
    scale = 0.5 if "--quick" in sys.argv else 1.0
    peak_rows(old)
    convention_rows(old)
    depth_rows(old, scale)
    max_batch_rows()
    evaluate_rows()
    import_rows()


if __name__ == "__main__":
    main()
