"""The whole ``memtheory estimate`` command, as a user runs it: a fresh process each time.

Times, in child processes of this checkout (CPU: the child's user + system time):

* the README's first question (GPT-2 small, batch 8 at 1024 tokens on an RTX 4090: its
  step, with the model's position limit, is not kept on disk) and its two Llama-3-8B
  questions (LoRA rank 16 at 4096 tokens on an RTX 4090; ZeRO-3 over as many H100s as
  needed), each run alternately with an empty cache
  directory (the step derived), with a warm one whose answers and replay entries are
  deleted (the step read back and evaluated: what a new card costs), with a warm one
  asked at new sizes (another ``--seq`` each time: the replay entry,
  :mod:`memtheory.estimate.replay`, evaluated with plain integers, no sympy imported,
  where the question has one) and with a warm one (the answer read back: the same
  question asked again, no sympy imported), A B C D A B C D;
* a ``--sweep`` of 100 (sequence, batch, card) points, the step read back (its target's
  row), and the answer read back;
* ``import memtheory.cli`` alone (it imports no sympy), the floor under a question asked
  again, and ``import sympy, numpy``, the floor under the others.

Every child may write and read Python's bytecode cache (``__pycache__``), as an installed
package has: ``PYTHONDONTWRITEBYTECODE`` is removed from the children's environment, since with
it set (as on the machines this project is developed on) every run compiles about 70 modules
again, about 0.6 s of CPU that no user pays.

Targets (issue 26): the command under 1 s, the 100-point sweep under 2 s, on a quiet 2-core
machine. Run with ``make bench`` or ``python benchmarks/estimate_command.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _verdict import Timing, report, seconds  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NAME = "estimate_command"
COMMAND = "from memtheory.cli import console; console()"
"""The installed ``memtheory`` command's entry point (it ends the process as that does)."""
PROBED = (
    "import os, sys; from memtheory.cli import main; status = main(sys.argv[1:]); "
    "print('sympy imported:', 'sympy' in sys.modules, file=sys.stderr); "
    "sys.stdout.flush(); sys.stderr.flush(); os._exit(status)"
)
"""The command, saying on standard error whether it imported sympy (the replay entry does not),
then ending the process as :func:`memtheory.cli.console` ends it."""
QUESTIONS = {
    "GPT-2": ["gpt2", "--batch", "8", "--seq", "1024", "--gpu", "RTX 4090"],
    "LoRA": ["llama-3-8b", "--lora", "16", "--seq", "4096", "--gpu", "RTX 4090"],
    "ZeRO-3": ["llama-3-8b", "--seq", "4096", "--gpus", "auto", "--zero", "3", "--gpu",
               "H100-80GB"],
}
SWEEP = ["llama-3-8b", "--lora", "16", "--sweep", "seq=256,512,1024,2048,4096",
         "--sweep", "batch=1,2,4,8,16", "--sweep", "gpu=RTX 4090,H100-80GB,A100-40GB,L4"]


def run(arguments: list[str], cache: str, said: list[str] | None = None) -> tuple[float, float]:
    """CPU and wall seconds of one child process running ``arguments``.

    With ``said``, the child's standard error is appended to it.
    """
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "MEMTHEORY_CACHE": cache}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *arguments], env=environment, check=True,
                          stdout=subprocess.DEVNULL,
                          stderr=None if said is None else subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if said is not None:
        said.append(done.stderr)
    return cpu, wall


def forget_answers(cache: str, *, replays: bool = True) -> None:
    """Delete the answers kept in ``cache`` (memtheory.estimate.answer_cache), not the steps.

    With ``replays`` the replay entries too (memtheory.estimate.replay): what is left
    is the derived step, read back with sympy.
    """
    kinds = ("answer", "replay") if replays else ("answer",)
    for kind in kinds:
        for entry in Path(cache).glob(f"*-{kind}-*.json"):
            entry.unlink()


def new_sizes(question: list[str], run: int) -> list[str]:
    """Return ``question`` at a sequence not asked before in this benchmark (the batch kept,
    so that ``--gpus auto`` finds the same count and compares like with like)."""
    asked = list(question)
    where = asked.index("--seq") + 1
    asked[where] = str(int(asked[where]) - 8 * (run + 1))
    return asked


def keep(timing: Timing, figures: tuple[float, float]) -> None:
    timing.cpu.append(figures[0])
    timing.wall.append(figures[1])


def main(argv: list[str] | None = None) -> None:
    """Time every case and print each beside its target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (default 3)")
    parser.add_argument("--only", choices=list(QUESTIONS), default=None,
                        help="time this question alone (no sweep)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as warm:
        run(["-c", "import memtheory.cli"], "off")  # bytecode written, disk cache warm
        floor = Timing()
        for _ in range(args.repeat):
            keep(floor, run(["-c", "import memtheory.cli"], "off"))
        print(f"import memtheory.cli alone: {floor.shown()}")
        libraries = Timing()
        for _ in range(args.repeat):
            keep(libraries, run(["-c", "import sympy, numpy"], "off"))
        print(f"import sympy, numpy alone: {libraries.shown()}")
        for name, question in QUESTIONS.items():
            if args.only is not None and name != args.only:
                continue
            arguments = ["-c", COMMAND, "estimate", *question]
            run(arguments, warm)  # fills the warm cache
            cold, step, fresh, hot = Timing(), Timing(), Timing(), Timing()
            said: list[str] = []
            for index in range(args.repeat):
                with tempfile.TemporaryDirectory() as empty:
                    keep(cold, run(arguments, empty))
                forget_answers(warm)
                keep(step, run(arguments, warm))  # the step read back; the entry written again
                keep(fresh, run(["-c", PROBED, "estimate", *new_sizes(question, index)], warm,
                                said))
                keep(hot, run(arguments, warm))
            print(f"estimate, {name}, step derived (empty cache): {cold.shown()}")
            print(f"estimate, {name}, step read back (warm cache, no answer): {step.shown()}")
            derived = sum("sympy imported: True" in text for text in said)
            how = ("replay entry, no sympy imported" if derived == 0 else
                   f"sympy imported in {derived} of {len(said)} runs: the step read back")
            print(f"estimate, {name}, new sizes ({how}): {fresh.shown()}")
            print(f"estimate, {name}, answer read back (asked again): {hot.shown()}")
            report(NAME, f"estimate {name}, derived", cold.median_cpu, 1.0)
            report(NAME, f"estimate {name}, step cached", step.median_cpu, 1.0,
                   detail=f"{cold.median_cpu / step.median_cpu:.1f}x faster than derived; "
                   f"{step.median_cpu / libraries.median_cpu:.2f}x import sympy, numpy")
            report(NAME, f"estimate {name}, new sizes", fresh.median_cpu, 1.0,
                   detail=f"{fresh.median_cpu / libraries.median_cpu:.2f}x import sympy, numpy"
                   + f" ({how})")
            report(NAME, f"estimate {name}, asked again", hot.median_cpu, 1.0,
                   detail=f"{cold.median_cpu / hot.median_cpu:.1f}x faster than derived; "
                   f"{hot.median_cpu / libraries.median_cpu:.2f}x import sympy, numpy "
                   "(no sympy imported)")
        if args.only is not None:
            return
        arguments = ["-c", COMMAND, "estimate", *SWEEP]
        run(arguments, warm)
        sweep, again = Timing(), Timing()
        for _ in range(args.repeat):
            forget_answers(warm)
            keep(sweep, run(arguments, warm))
            keep(again, run(arguments, warm))
        print(f"estimate --sweep, 100 points, step read back: {sweep.shown()}")
        print(f"estimate --sweep, 100 points, answer read back: {again.shown()}")
        report(NAME, "estimate --sweep 100 points, step cached", sweep.median_cpu, 2.0,
               detail=f"{seconds((sweep.median_cpu - libraries.median_cpu) / 100)} a point "
               "past import sympy, numpy")


if __name__ == "__main__":
    main()
