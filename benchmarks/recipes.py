"""Each recipe's predicted peak beside its real library's step, tracked, and beside the peers.

For every named recipe whose step runs on one CPU
(:data:`memtheory.torch.recipe_steps.CPU_RECIPES`: ``pytorch-fp32``,
``pytorch-amp``, ``hf-trainer``, ``lightning-bf16``) and each tiny decoder
built from its configuration (no download) at two sizes, one row:

- **predicted**: :func:`memtheory.training_memory` under the recipe's
  :class:`~memtheory.recipes.Setup` (its loop, the optimizer implementation
  that ran, the CPU's attention kernel), in bytes;
- **tracked**: the peak of the real step under :func:`memtheory.torch.track`
  (live tensor storages, exact on CPU): the plain PyTorch loop
  (``check_recipe``: ``measure`` with the Setup), transformers'
  ``Trainer.train()`` and Lightning's ``Trainer.fit()``, two optimizer steps
  each (``benchmarks/_library_steps.py``);
- **off**: predicted less tracked, bytes;
- the same question as the peers answer it (:mod:`memtheory.validation.peers`,
  each written out from its published formula, on the parameter count read
  from the real model, shared weights once): accelerate's ``estimate-memory``
  "Training using Adam (Peak vRAM)" for the dtype the weights train in;
  DeepSpeed's ZeRO-3 model states on one GPU (:math:`4L + 18P`, what
  DeepSpeed would answer had the model been trained under ZeRO-3; none of
  these recipes is); 16 and 18 bytes per parameter. None counts activations.

Models: transformers' Llama (``TINY_LLAMA``, the recipe tests' model), a
Qwen2 with tied embeddings and q/k/v biases, and a GPT-2 with its default
settings (``gelu_new``, dropout 0.1 everywhere). The checkpoint is bf16, as
``from_pretrained`` loads most published ones: the Trainer keeps it (bf16
weights), the other recipes cast it to fp32.

The Llama, Qwen2 and GPT-2 rows are held to 0 bytes off (the Llama ones by
``tests/pytorch/test_recipe_steps.py``, ``test_trainer_recipe.py`` and
``test_lightning_recipe.py``, GPT-2's by ``test_gpt2_recipes.py``;
``tests/pytorch/test_recipes_benchmark.py`` checks this table). GPT-2 is
exact because memtheory builds what transformers runs: ``gelu_new`` as seven
element-wise operations (:class:`memtheory.layers.NewGELU`), the CPU's fp32
dropout noise, and with attention dropout in training CPU SDPA's math kernel
(its flash kernel takes no dropout: ``sdp_utils_cpp.cpp``).

``peft-lora`` (peft's ``get_peft_model``, rank 4 on ``q_proj``/``v_proj``,
its fp32 adapters on the bf16 base, trained by the Trainer with ``bf16=True``)
is run on the Llama only (:data:`PEFT_FAMILIES`: the tied Qwen2 head is not
modelled under the exact convention with LoRA, GPT-2 has no ``q_proj``), in
the full run, predicted by ``estimate(..., setup="peft-lora")``, and held to
0 bytes off as well (``tests/pytorch/test_peft_recipe.py``: peft's casts of
each adapted layer's input, ``tuners/lora/layer.py`` ``_cast_input_dtype``,
and autocast's copies of the fp32 adapter weights are modelled).

What cannot run here is printed with the reason, read from ``check_recipe``'s
refusal (4-bit bitsandbytes kernels are CUDA-only; ZeRO and FSDP shard over
several GPUs), and the stacks the catalog refuses by name (TRL's SFT and DPO
trainers) with their own answer.

Each row's CPU and wall seconds are printed; the whole run's CPU time is
held to a target (two minutes; ``--quick``, one model at one size: 30 s),
and the count of rows 0 bytes off to the count of rows that should be.
``--json`` prints the rows as JSON instead. Run
``python benchmarks/recipes.py [--quick] [--json]``; it needs the torch extra
(transformers, Lightning).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _verdict import Timing, helped, report, seconds, skipped  # noqa: E402

BENCHMARK = "benchmarks/recipes.py"

TINY_QWEN2: Mapping[str, Any] = {
    "model_type": "qwen2", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 40,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 256, "tie_word_embeddings": True,
}
"""A Qwen2 as small as the recipes' Llama: tied embeddings, biases on q, k and v."""

TINY_GPT2: Mapping[str, Any] = {
    "model_type": "gpt2", "vocab_size": 96, "n_embd": 32, "n_layer": 2, "n_head": 4,
    "n_positions": 64,
}
"""A GPT-2 with transformers' defaults otherwise (gelu_new, dropout 0.1, tied embeddings)."""

SIZES = ((2, 8), (3, 16))
"""(batch, sequence) of every model's rows; ``--quick`` runs the first only."""

CHECKPOINT = "bf16"
"""The dtype the checkpoint is published in (``from_pretrained`` loads it so)."""

HELD_EXACT = ("llama", "qwen2", "gpt2")
"""Model families whose rows must be 0 bytes off."""

NAMED_DIFFERENCES: dict[str, str] = {}
"""Why a family's (or a recipe's) rows are off, as far as it is known (see the module docstring)."""

LIBRARY_RECIPES = ("peft-lora",)
"""Recipes beyond ``CPU_RECIPES`` that a library runner of ``_library_steps`` runs (held too)."""

PEFT_FAMILIES = ("llama",)
"""Model families the ``peft-lora`` rows are run on (full run only)."""

TARGETS = {"full": 120.0, "quick": 30.0}
"""CPU seconds the whole run should take at most."""


@dataclass(frozen=True)
class Row:
    """One recipe on one model at one size: prediction, tracked peak, the peers (bytes)."""

    model: str
    family: str
    batch: int
    sequence: int
    recipe: str
    runner: str
    precision: str
    implementation: str
    parameters: int
    largest_layer: int
    predicted: int
    moment: str
    tracked: int
    accelerate: int
    accelerate_dtype: str
    deepspeed_zero3: int
    per_parameter_16: int
    per_parameter_18: int
    cpu_s: float
    wall_s: float

    @property
    def off(self) -> int:
        """Predicted less tracked, bytes."""
        return self.predicted - self.tracked

    @property
    def verdict(self) -> str:
        """``0 B off``, or the difference and what is known of it."""
        if self.off == 0:
            return "0 B off"
        reason = NAMED_DIFFERENCES.get(self.recipe) or NAMED_DIFFERENCES.get(
            self.family, "not named")
        side = "over" if self.off > 0 else "under"
        return f"{abs(self.off):,} B {side}: {reason}"


def models() -> dict[str, Mapping[str, Any]]:
    """The tiny decoders, by name."""
    from memtheory.torch.recipe_steps import TINY_LLAMA

    return {"tiny Llama": TINY_LLAMA, "tiny Qwen2": TINY_QWEN2, "tiny GPT-2": TINY_GPT2}


def not_on_cpu() -> dict[str, str]:
    """Each catalog recipe this benchmark cannot run on one CPU, with the reason it is refused."""
    from memtheory.errors import UnsupportedError
    from memtheory.recipes import RECIPES, REFUSED_RECIPES
    from memtheory.torch.recipe_steps import CPU_RECIPES, check_recipe

    reasons = {}
    for name in sorted(set(RECIPES) - set(CPU_RECIPES) - set(LIBRARY_RECIPES)):
        try:
            check_recipe(name)
        except UnsupportedError as error:
            reasons[name] = str(error)
        else:  # pragma: no cover - check_recipe runs only CPU_RECIPES' kind of step
            reasons[name] = "runs, but is not one of CPU_RECIPES"
    for name, why in REFUSED_RECIPES.items():
        reasons[name] = "refused by the catalog: " + why
    return reasons


def recipe_rows(quick: bool = False) -> list[Row]:
    """Run every CPU recipe on every model and size (``quick``: the first model and size)."""
    from _library_steps import run_recipe

    from memtheory.torch.recipe_steps import CPU_RECIPES
    from memtheory.validation.peers import accelerate_peak, deepspeed_zero3, per_parameter_rule

    chosen = dict(list(models().items())[:1]) if quick else models()
    rows = []
    for name, config in chosen.items():
        for batch, sequence in SIZES[:1] if quick else SIZES:
            peft = () if quick or config["model_type"] not in PEFT_FAMILIES else LIBRARY_RECIPES
            for recipe in (*CPU_RECIPES, *peft):
                timing = Timing()
                with _quiet():
                    step = timing.add(lambda r=recipe, c=config, b=batch, s=sequence: run_recipe(
                        r, c, batch=b, sequence=s, checkpoint_dtype=CHECKPOINT))
                dtype = str(step.weight_dtype).removeprefix("torch.")
                rows.append(Row(
                    name, str(config["model_type"]), batch, sequence, recipe, step.runner,
                    step.precision, step.implementation, step.parameters, step.largest_layer,
                    step.predicted, step.moment, step.tracked,
                    accelerate_peak(step.parameters, dtype), dtype,
                    deepspeed_zero3(step.parameters, step.largest_layer)[0],
                    per_parameter_rule(step.parameters, 16),
                    per_parameter_rule(step.parameters, 18),
                    timing.cpu[0], timing.wall[0],
                ))
    return rows


@contextlib.contextmanager
def _quiet() -> Any:
    """Keep the libraries' own printing (the Trainer's summary, Lightning's banner) out."""
    import transformers

    transformers.logging.set_verbosity_error()
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def table(rows: list[Row]) -> Any:
    """The rows as memtheory's plain table, bytes throughout."""
    from memtheory.tables import Column, Table

    columns = [
        Column("model"), Column("B x S", "right"), Column("recipe"), Column("precision, AdamW"),
        Column("predicted", "right"), Column("tracked", "right"), Column("off", "right"),
        Column("accelerate", "right"), Column("DeepSpeed Z3", "right"),
        Column("16 B/param", "right"), Column("18 B/param", "right"), Column("CPU s", "right"),
        Column("wall s", "right"),
    ]
    cells = [(
        r.model, f"{r.batch} x {r.sequence}", r.recipe, f"{r.precision}, {r.implementation}",
        f"{r.predicted:,}", f"{r.tracked:,}", f"{r.off:+,}", f"{r.accelerate:,}",
        f"{r.deepspeed_zero3:,}", f"{r.per_parameter_16:,}", f"{r.per_parameter_18:,}",
        f"{r.cpu_s:.1f}", f"{r.wall_s:.1f}",
    ) for r in rows]
    notes = [
        "Bytes. predicted: memtheory under the recipe's Setup; tracked: the real step under "
        "memtheory.torch.track() (CPU live storages); off = predicted - tracked.",
        "Peers on the real model's parameter count (model states only, no activations): "
        "accelerate estimate-memory's Adam peak in the weights' dtype; DeepSpeed ZeRO-3 on "
        "1 GPU, 4L + 18P; 16 and 18 bytes per parameter.",
    ]
    return Table(columns, cells, title="Recipes on CPU: predicted, tracked and the peers",
                 notes=notes)


def verdict_lines(rows: list[Row]) -> list[str]:
    """One line per row: 0 B off or the named difference, and where the peers fall."""
    lines = []
    for r in rows:
        peers = [r.accelerate, r.deepspeed_zero3, r.per_parameter_16, r.per_parameter_18]
        low, high = min(peers) / r.tracked, max(peers) / r.tracked
        lines.append(f"{r.model} {r.batch}x{r.sequence} {r.recipe} ({r.runner}): {r.verdict}; "
                     f"the peers say {low:.2f}x to {high:.2f}x the tracked peak")
    return lines


def _first_sentence(text: str) -> str:
    """Up to the first full stop or semicolon that ends a clause (``--json`` keeps it all)."""
    ends = [i for i in (text.find(". "), text.find("; ")) if i >= 0]
    return text[:min(ends)] + "." if ends else text


def as_json(rows: list[Row], reasons: dict[str, str]) -> str:
    """The rows (with ``off`` and ``verdict``) and what was not run, as JSON."""
    return json.dumps({
        "rows": [{**asdict(r), "off": r.off, "verdict": r.verdict} for r in rows],
        "not_run_on_cpu": reasons,
    }, indent=1)


def main(argv: list[str]) -> int:
    """Run the rows, print the table and the verdicts (or ``--json``); 1 if a held row is off."""
    if helped(argv, __doc__):
        return 0
    try:
        import lightning  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as error:
        skipped(BENCHMARK, f"needs the torch extra with transformers and Lightning ({error})")
        return 0
    quick = "--quick" in argv
    timing = Timing()
    rows = timing.add(lambda: recipe_rows(quick=quick))
    from memtheory.torch.recipe_steps import CPU_RECIPES

    reasons = not_on_cpu()
    held = [r for r in rows
            if r.family in HELD_EXACT and r.recipe in (*CPU_RECIPES, *LIBRARY_RECIPES)]
    exact = sum(r.off == 0 for r in held)
    if "--json" in argv:
        print(as_json(rows, reasons))
        return 0 if exact == len(held) else 1
    print(table(rows))
    print("\nVerdicts:")
    for line in verdict_lines(rows):
        print("  " + line)
    print("\nNot run on CPU:")
    for name, why in reasons.items():
        print(f"  {name}: {_first_sentence(why)}")
    print(f"\nThe whole run: {seconds(timing.cpu[0])} CPU, {seconds(timing.wall[0])} wall")
    target = TARGETS["quick" if quick else "full"]
    report(BENCHMARK, "every row" + (" (--quick)" if quick else ""), timing.cpu[0], target,
           detail=f"{len(rows)} rows, {seconds(timing.wall[0])} wall")
    report(BENCHMARK, "rows 0 B off (Llama, Qwen2)", exact, len(held), unit="",
           at_least=True)
    return 0 if exact == len(held) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
