"""GPT-2 built by ``from_config`` against transformers' real step: 0 bytes off on CPU.

transformers' ``GPT2LMHeadModel`` from a small configuration with its own
defaults (``activation_function="gelu_new"``, ``attn_pdrop``, ``resid_pdrop``
and ``embd_pdrop`` 0.1, tied embeddings, SDPA attention), trained under the
recipes' steps on CPU: the plain PyTorch loop (``check_recipe``, which is
``measure`` with the recipe's Setup) and transformers' ``Trainer.train()``
inside :func:`memtheory.torch.track` (``benchmarks/_library_steps.py``, as
``benchmarks/recipes.py`` runs it). Against each, the prediction of
:func:`memtheory.models.from_config` of the same configuration with
``device="cpu"``: ``gelu_new`` as seven operations
(:class:`~memtheory.layers.NewGELU`), the CPU's dropout noise in the
activation dtype, and SDPA's CPU math path, which runs because the CPU flash
kernel refuses dropout. The sizes are chosen so that the peak falls in the
backward pass, among the activations (at smaller ones the optimizer step
sets it, whatever the activations).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is the optional 'torch' extra")
pytest.importorskip("transformers", reason="needs Hugging Face transformers")

from memtheory.layers import NewGELU  # noqa: E402
from memtheory.models import from_config  # noqa: E402
from memtheory.recipes import Setup  # noqa: E402
from memtheory.torch.recipe_steps import check_recipe  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")

ROOT = Path(__file__).resolve().parents[2]

GPT2 = {"model_type": "gpt2", "vocab_size": 96, "n_embd": 32, "n_layer": 2, "n_head": 4,
        "n_positions": 64}
"""A tiny GPT-2; every other setting is transformers' default."""

SIZES = ((3, 16), (2, 40))
"""(batch, sequence): both put the peak in the backward pass."""


def _library_steps():
    spec = importlib.util.spec_from_file_location(
        "library_steps", ROOT / "benchmarks" / "_library_steps.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("batch", "sequence"), SIZES)
@pytest.mark.parametrize("recipe", ["pytorch-fp32", "pytorch-amp"])
def test_gpt2_plain_loop_is_exact(recipe, batch, sequence):
    """The plain PyTorch step (fp32, autocast-bf16) on GPT-2 is predicted to the byte."""
    check = check_recipe(recipe, GPT2, batch=batch, sequence=sequence)
    assert check.predicted_moment.startswith("backward"), check.predicted_moment
    assert check.predicted_peak == check.measured.peak


@pytest.mark.slow
@pytest.mark.parametrize(("batch", "sequence"), SIZES)
def test_gpt2_trainer_is_exact(batch, sequence):
    """The Trainer's train() (bf16 weights, fused AdamW) on GPT-2, tracked: 0 B off."""
    step = _library_steps().run_recipe("hf-trainer", GPT2, batch=batch, sequence=sequence)
    assert step.predicted == step.tracked, step.moment


def test_from_config_reads_gpt2_activation_and_dropouts():
    """gelu_new is NewGELU; the config's dropouts are used; 0 leaves the dropout out."""
    net = from_config({**GPT2, "resid_pdrop": 0.0, "embd_pdrop": 0.2}, batch=2, sequence=8)
    assert isinstance(net["h.0.mlp_act"].layer, NewGELU)
    assert net["drop"].layer.p == 0.2
    assert net["h.0.mlp_dropout"].layer.p == 0.0
    assert net["h.0.attn"].layer.dropout == 0.1
    fused = from_config({**GPT2, "activation_function": "gelu_pytorch_tanh"}, batch=2, sequence=8)
    assert fused["h.0.mlp_act"].layer.kind == "GELU"


def test_cpu_attention_kernel_follows_dropout():
    """On the CPU, SDPA is the math path with attention dropout and flash without it."""
    setup = Setup.recipe("pytorch-fp32")
    dropped = from_config(GPT2, batch=2, sequence=8, flash=True, device="cpu")
    plain = from_config({**GPT2, "attn_pdrop": 0.0}, batch=2, sequence=8, flash=True,
                        device="cpu")
    assert setup.attention_kernel(dropped["h.0.attn"].layer, device="cpu") == "math"
    assert setup.attention_kernel(plain["h.0.attn"].layer, device="cpu") == "flash"
    assert not setup.flash_for(dropped, device="cpu")
    assert setup.flash_for(plain, device="cpu")


@pytest.mark.parametrize(("precision", "optimizer"), [("fp32", "adamw"), ("autocast", "sgd")])
def test_gpt2_builder_with_gelu_new_matches_gpt2lmheadmodel(precision, optimizer):
    """GPT2Config(activation="gelu_new") equals GPT2LMHeadModel with its default activation.

    The eager comparison of ``test_hugging_face.py`` (every component and the
    peak), with transformers' default ``gelu_new`` on both sides rather than
    the fused GELU it sets there.
    """
    import test_hugging_face as hf

    from memtheory.models import gpt2
    from memtheory.models.gpt2 import GPT2Config
    from memtheory.validation.reference_models import as_hugging_face

    def build():
        model, loss, _, vocabulary = hf._gpt2("gelu_new")
        network = gpt2(
            GPT2Config(layers=hf.LAYERS, hidden=hf.HIDDEN, heads=hf.HEADS, vocabulary=vocabulary,
                       positions=hf.POSITIONS, activation="gelu_new"),
            batch=hf.BATCH, sequence=hf.SEQUENCE, loss=True,
        )
        return model, loss, as_hugging_face(network, "gpt2"), vocabulary

    got, want = hf._compare(build, precision, optimizer)
    assert got == want
