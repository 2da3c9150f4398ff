"""The real transformers ``Trainer`` under ``track()``, against the ``hf-trainer`` recipe.

Two steps of ``Trainer.train()`` on a tiny Llama built from its config (fp32,
as ``from_config`` builds it; SDPA; the Trainer's default fused AdamW; no
gradient clipping), tracked as they run, set beside memtheory's prediction of
a steady-state step under ``Setup.recipe("hf-trainer")`` at the fp32 the
checkpoint is in. The second step is the steady one; it peaks in the
backward pass.

Known gap, measured and not yet attributed tensor by tensor: the tracked
peak is 20 bytes above the prediction, the same at both sizes, so it is a few
scalar tensors and not an activation. At the peak the tracker sees, besides
the step the recipe predicts, four 4-byte and two 16-byte tensors that the
Trainer made outside the forward, backward and optimizer step (its running
loss and its count of label tokens, ``num_items_in_batch``, by which it
normalises the loss, are of that kind), while the recipe's loop holds its own
few scalars that the Trainer's does not. With gradient clipping (the
Trainer's default ``max_grad_norm=1.0``) the peak is the same: clipping runs
after the backward pass, below its peak.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from memtheory import training_memory  # noqa: E402
from memtheory.models import from_config  # noqa: E402
from memtheory.recipes import Setup  # noqa: E402
from memtheory.torch import track  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

TINY = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
        "tie_word_embeddings": False}
SCALARS = 32
"""A few scalar tensors' worth of bytes: the most the unattributed gap may be."""


def _trainer_peak(tmp_path, batch: int, sequence: int, clip: float) -> int:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**TINY))
    assert model.config._attn_implementation == "sdpa"
    ids = torch.randint(0, TINY["vocab_size"], (2 * batch, sequence))
    rows = [{"input_ids": row.clone(), "labels": row.clone()} for row in ids]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=batch, report_to=[],
        save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
        max_grad_norm=clip,
    )
    assert str(args.optim.value) == "adamw_torch_fused"
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows)
    with track(model) as tracker:
        trainer.train()
    return tracker.peak


def _gap(tmp_path, batch: int, sequence: int, clip: float = 0.0) -> int:
    network = from_config({"model_type": "llama", **TINY}, batch=batch, sequence=sequence,
                          loss=True, flash=True)
    predicted = training_memory(network, setup=Setup.recipe("hf-trainer"), precision="fp32")
    return _trainer_peak(tmp_path, batch, sequence, clip) - int(predicted.peak)


def test_the_trainer_step_is_the_recipe_but_a_few_scalars(tmp_path):
    """The gap to hf-trainer's prediction is the same at two sizes, and a few scalars at most."""
    small, large = _gap(tmp_path, 2, 9), _gap(tmp_path, 3, 13)
    assert small == large
    assert 0 <= small <= SCALARS


def test_gradient_clipping_does_not_move_the_peak(tmp_path):
    """The Trainer's default max_grad_norm=1.0 clips after the backward pass, below its peak."""
    assert _gap(tmp_path, 2, 9, clip=1.0) == _gap(tmp_path, 2, 9, clip=0.0)
