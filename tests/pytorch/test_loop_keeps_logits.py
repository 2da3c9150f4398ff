"""Who keeps the logits: a loop that holds the model's output, and one that holds only the loss.

``measure`` runs ``model(**batch)`` inside a function: with
``keeps_outputs=True`` the loop holds the whole output (the logits and the
loss) until the step ends (``out = model(**batch); out.loss.backward()``).
With ``keeps_outputs=False`` it keeps only the loss, as
``Trainer.compute_loss`` does (it returns the loss alone), and the logits die
in the forward unless a backward node saved them. ``AutogradConvention(keeps_logits=)``
predicts both loops; each is compared with ``measure`` to the byte on
transformers' Llama at sizes no other test uses.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
transformers = pytest.importorskip("transformers", reason="needs Hugging Face transformers")

import memtheory as mt  # noqa: E402
from memtheory.conventions.autograd import AutogradConvention, autocast_precision  # noqa: E402
from memtheory.models import from_config  # noqa: E402
from memtheory.torch import measure  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TINY = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 40,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 128, "tie_word_embeddings": False}


def _pair(keeps_logits: bool, precision: str, attention: str, batch: int, sequence: int):
    values = {k: v for k, v in TINY.items() if k != "model_type"}
    # use_cache=False: a training forward then fills no DynamicCache (memtheory.models.decoder)
    hf = transformers.AutoConfig.for_model("llama", attn_implementation=attention,
                                           use_cache=False, **values)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = transformers.AutoModelForCausalLM.from_config(hf).to(dtype).train()
    ids = torch.randint(0, TINY["vocab_size"], (batch, sequence))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    measured = measure(
        model, {"input_ids": ids, "labels": ids.clone()}, optimizer=optimizer,
        keeps_outputs=keeps_logits, warmup_steps=1,
        autocast=torch.bfloat16 if precision == "autocast" else None,
    )
    network = from_config(TINY, batch=batch, sequence=sequence, loss=True,
                          flash=attention == "sdpa")
    predicted = mt.training_memory(
        network, optimizer="adamw",
        precision=autocast_precision() if precision == "autocast" else precision,
        convention=AutogradConvention(measured.implementation, keeps_logits=keeps_logits),
    )
    return int(predicted.peak), measured.peak


@pytest.mark.parametrize(
    ("precision", "attention", "batch", "sequence"),
    [("fp32", "eager", 2, 7), ("bf16", "sdpa", 3, 5), ("autocast", "eager", 2, 9),
     ("fp32", "sdpa", 3, 11), ("autocast", "sdpa", 2, 9)],
)
@pytest.mark.parametrize("keeps_logits", [True, False])
def test_either_loop_is_exact(keeps_logits, precision, attention, batch, sequence):
    """The step's peak equals the measured one whether or not the loop holds the logits."""
    predicted, measured = _pair(keeps_logits, precision, attention, batch, sequence)
    assert predicted == measured


def test_dropping_the_logits_lowers_the_peak_by_what_the_loop_held():
    """Holding the logits costs at most their bytes at the peak (B x S x V in the model dtype)."""
    batch, sequence = 2, 7
    kept, _ = _pair(True, "fp32", "eager", batch, sequence)
    dropped, _ = _pair(False, "fp32", "eager", batch, sequence)
    logits = batch * sequence * TINY["vocab_size"] * 4
    assert 0 < kept - dropped <= logits
