"""The real transformers ``Trainer`` under ``track()`` is the ``hf-trainer`` recipe, to the byte.

Steps of ``Trainer.train()`` on a tiny Llama built from its config (SDPA; the
Trainer's default fused AdamW), tracked as they run, set beside memtheory's
prediction of a steady-state step under ``Setup.recipe("hf-trainer")``. The
model is built in fp32 (as ``from_config`` builds it) or cast to bf16 (a bf16
checkpoint), and trained with ``bf16=False`` or, over fp32 weights,
``bf16=True`` (``torch.autocast``): the precisions the recipe gives those
checkpoints. The last step is the steady one (the optimizer state exists, the
previous step's gradient norm and loss are alive); it peaks in the backward
pass.

The recipe's loop is ``loop="hf-trainer"``: besides the step, the Trainer's
bookkeeping scalars (``memtheory.conventions.autograd.loops``: its running
loss, the count of label tokens, the gradient norm, the previous loss and
accelerate's scaled loss), sized from the source's dtypes. Without them the
prediction is exactly their bytes below the Trainer.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from memtheory import training_memory  # noqa: E402
from memtheory.conventions.autograd.loops import loop_scalars  # noqa: E402
from memtheory.dtypes import dtype  # noqa: E402
from memtheory.estimate.accumulation import accumulated  # noqa: E402
from memtheory.models import from_config  # noqa: E402
from memtheory.recipes import Setup  # noqa: E402
from memtheory.torch import track  # noqa: E402
from memtheory.torch.recipe_steps import TINY_LLAMA  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

TINY = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
"""The recipes' tiny Llama (memtheory.torch.recipe_steps), as LlamaConfig's keywords."""
PRECISIONS = {
    # checkpoint dtype -> (the dtype the model is cast to, TrainingArguments(bf16=...))
    "fp32": (torch.float32, False),
    "bf16": (torch.bfloat16, False),
    "autocast-bf16": (torch.float32, True),
}


def _trainer_peak(tmp_path, batch: int, sequence: int, precision: str, **arguments) -> int:
    """Track two optimizer steps of the real Trainer (in one epoch); return the peak."""
    return _tracked(tmp_path, batch, sequence, precision, **arguments).peak


def _tracked(tmp_path, batch: int, sequence: int, precision: str, **arguments):
    """Track two optimizer steps of the real Trainer (in one epoch), every operation recorded."""
    cast, bf16 = PRECISIONS[precision]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**TINY))
    model = model.to(cast)
    assert model.config._attn_implementation == "sdpa"
    steps = 2 * arguments.get("gradient_accumulation_steps", 1)
    ids = torch.randint(0, TINY["vocab_size"], (steps * batch, sequence))
    rows = [{"input_ids": row.clone(), "labels": row.clone()} for row in ids]
    settings = {"save_strategy": "no", "logging_strategy": "no", **arguments}
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=batch, report_to=[],
        use_cpu=True, disable_tqdm=True, bf16=bf16, **settings,
    )
    assert str(args.optim.value) == "adamw_torch_fused"
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows)
    with track(model, record=True) as tracker:
        trainer.train()
    return tracker


def _prediction(batch: int, sequence: int, precision: str, loop: str = "hf-trainer"):
    network = from_config({"model_type": "llama", **TINY}, batch=batch, sequence=sequence,
                          loss=True, flash=True)
    setup = Setup.recipe("hf-trainer", loop=loop)
    return training_memory(network, setup=setup, precision=precision)


def _predicted(batch: int, sequence: int, precision: str, loop: str = "hf-trainer",
               accumulation: int = 1) -> int:
    return int(accumulated(_prediction(batch, sequence, precision, loop), accumulation).peak)


def _most_between_backward_and_step(tracker) -> int:
    """The most bytes alive between the last backward pass and the last optimizer step."""
    operations = tracker.timeline
    last = max(i for i, (phase, _, _) in enumerate(operations) if phase == "backward (2)")
    step = min(i for i, (phase, _, _) in enumerate(operations)
               if phase == "optimizer step (2)")
    return max(live for _, _, live in operations[last + 1:step])


@pytest.mark.parametrize(("precision", "batch", "sequence"), [
    ("fp32", 2, 9), ("fp32", 3, 13), ("bf16", 2, 9), ("autocast-bf16", 2, 9)])
def test_the_trainer_step_is_the_recipe(tmp_path, precision, batch, sequence):
    """The real Trainer's peak is hf-trainer's prediction to the byte, at each precision."""
    assert _trainer_peak(tmp_path, batch, sequence, precision) == _predicted(
        batch, sequence, precision)


def test_the_gap_without_the_loop_is_the_trainers_scalars(tmp_path):
    """A plain loop's prediction is below the Trainer by the scalars, sized from the dtypes.

    In bf16 the gradient norm is bf16 (2 bytes); the loss is fp32 (the Hugging
    Face loss upcasts the logits), and so are the running loss and token count.
    """
    scalars = loop_scalars("hf-trainer", loss_bytes=dtype("fp32").bytes,
                           gradient_bytes=dtype("bf16").bytes)
    plain = _predicted(2, 9, "bf16", loop="plain")
    assert _trainer_peak(tmp_path, 2, 9, "bf16") - plain == scalars.total


@pytest.mark.parametrize("arguments", [
    {"max_grad_norm": 0.0},
    {"max_grad_norm": 1.0},
    {"logging_strategy": "steps", "logging_steps": 1},
], ids=["no clipping", "clipping", "logging every step"])
def test_clipping_and_logging_change_nothing(tmp_path, arguments):
    """The norm is taken with or without clipping; logging zeroes the running loss in place.

    Between the backward pass and the optimizer step the Trainer holds the most
    while it takes the gradient norm: the recipe's "gradient clipping" moment.
    """
    tracker = _tracked(tmp_path, 2, 9, "fp32", **arguments)
    predicted = _prediction(2, 9, "fp32")
    assert tracker.peak == int(predicted.peak)
    assert _most_between_backward_and_step(tracker) == int(predicted.timeline[
        "gradient clipping"])


def test_gradient_accumulation_is_the_accumulated_step(tmp_path):
    """Two micro-batches: the gradients stay alive and the Trainer holds both batches' data."""
    tracked = _trainer_peak(tmp_path, 2, 9, "fp32", gradient_accumulation_steps=2)
    predicted = _predicted(2, 9, "fp32", accumulation=2)
    assert tracked == predicted
