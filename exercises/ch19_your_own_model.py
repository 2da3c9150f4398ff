"""Chapter 19, your own model: reading what memtheory.torch.trace returns."""

from memtheory.exercises import CORRECT as _CORRECT
from memtheory.exercises import Choice, Exercise, ExerciseSet, Integer, Quantity
from memtheory.exercises.steps_trace import (
    batchnorm_saved,
    block_parameters,
    card_batch,
    quadratic_takes_over,
    traced_batch,
    untraceable_option,
)
from memtheory.gpus import gpu

_CARDS = ("RTX 4090", "A100-80GB", "RTX 3090", "A100-40GB", "V100-32GB")

_OPERATIONS = (
    ("x.mean((2, 3))", "boolean-mask indexing (x[x > 0])", "x[:, : x.shape[1] // 2]",
     "torch.cat([x, x], dim=1)"),
    ("torch.nonzero(x)", "x.view(x.shape[0], -1)", "x + self.table[: x.shape[1]]",
     "F.relu(self.conv(x))"),
    ("x.flatten(1)", "x.transpose(1, 2)", "x.item()", "F.max_pool2d(x, 2)"),
    ("x.softmax(-1)", "torch.unique(x)", "x.reshape(-1, 64)", "x.sum(0)"),
)


def _card_memory(p):
    """Return the card's memory as its vendor states it (memtheory reads the GB as GiB)."""
    return {"stated": gpu(p.card).stated}


def _fits_beyond(p):
    return card_batch(_CORRECT, per=p.per, fixed=p.fixed, unit="MiB", card=p.card) >= p.below


SET = ExerciseSet(
    id="ch19",
    title="Your own model",
    intro="memtheory.torch.trace runs one training step on fake tensors whose sizes are symbols "
    "and returns the step's memory as formulas in those sizes, a table of the modules, and "
    "the conditions (PyTorch's guards) under which the formulas hold. A card's usable memory is "
    "memtheory's: the vendor's 'GB' read as GiB, less a 1.5 GiB reserve for the CUDA context "
    "and the allocator.",
    exercises=(
        Exercise(
            id="q1",
            title="a BatchNorm row of the module table",
            question="A BatchNorm2d in training mode receives a fp32 tensor of shape ({batch}, "
            "{channels}, {side}, {side}). How many bytes does it keep for the backward pass (its "
            "row of the trace's module table)?",
            params={"batch": (8, 4, 16, 32), "channels": (16, 32, 64, 8), "side": (32, 16, 28)},
            answer=Integer(unit="B"),
            solve=lambda p, how: batchnorm_saved(
                how, batch=p.batch, channels=p.channels, side=p.side
            ),
            misconceptions=("batchnorm_input_only",),
        ),
        Exercise(
            id="q2",
            title="a residual block's parameters",
            question="A residual block has two 3x3 convolutions from {channels} to {channels} "
            "channels without bias (padding 1), each followed by a BatchNorm2d with a learned "
            "scale and shift. How many parameters does the trace's module table give the block "
            "(the sum of its rows)?",
            params={"channels": (16, 32, 64, 128, 256)},
            answer=Integer(),
            solve=lambda p, how: block_parameters(how, p.channels),
            misconceptions=("buffers_as_parameters",),
        ),
        Exercise(
            id="q3",
            title="the largest batch on a card",
            question="A trace of your model at its image size gives a training peak of {per} MiB "
            "per image plus {fixed} MiB, holding for every batch of at least 16. What is the "
            "largest batch whose peak fits one {card} ({stated}, as its vendor states it), with "
            "memtheory's 1.5 GiB reserve?",
            params={
                "per": (48, 100, 37, 150, 12),
                "fixed": (500, 1200, 300, 2048),
                "card": _CARDS,
            },
            constraint=lambda p: card_batch(
                _CORRECT, per=p.per, fixed=p.fixed, unit="MiB", card=p.card
            ) >= 16,
            derive=_card_memory,
            answer=Integer(),
            solve=lambda p, how: card_batch(
                how, per=p.per, fixed=p.fixed, unit="MiB", card=p.card
            ),
            misconceptions=("no_card_reserve", "card_gb_as_decimal", "mib_vs_mb"),
        ),
        Exercise(
            id="q4",
            title="inside the traced range",
            question="Traced at batch 4, your CNN's step peaks at {per} MiB per image plus "
            "{fixed} MiB, and the trace says the formulas hold for B < {below} (PyTorch's CPU "
            "convolution changes kernel there). What is the largest batch that both fits one "
            "{card} ({stated}, as its vendor states it; 1.5 GiB reserve) and lies where this "
            "trace is exact?",
            params={
                "per": (48, 100, 37, 150),
                "fixed": (500, 1200, 300),
                "card": _CARDS,
                "below": (16, 12, 20),
            },
            constraint=_fits_beyond,
            derive=_card_memory,
            answer=Integer(),
            solve=lambda p, how: traced_batch(
                how, per=p.per, fixed=p.fixed, unit="MiB", card=p.card, below=p.below
            ),
            misconceptions=("ignored_trace_conditions",),
        ),
        Exercise(
            id="q5",
            title="where the attention term takes over",
            question="A trace of a small language model gives saved activations of "
            "{quadratic}*B*S^2 + {linear}*B*S bytes. From which whole sequence length S on is "
            "the S^2 term at least as large as the B*S term?",
            params={"quadratic": (96, 192, 384, 48), "linear": (20176, 30000, 65536, 12000)},
            answer=Integer(),
            solve=lambda p, how: quadratic_takes_over(how, p.quadratic, p.linear),
        ),
        Exercise(
            id="q6",
            title="what a trace cannot follow",
            question="Which of these lines in a model's forward stops memtheory.torch.trace "
            "(an UntraceableError), because fake tensors carry shapes and not values?",
            params={"options": tuple(range(len(_OPERATIONS)))},
            answer=Choice(lambda p: _OPERATIONS[p["options"]]),
            solve=lambda p, how: untraceable_option(_OPERATIONS[p.options]),
        ),
        Exercise(
            id="q7",
            title="the card's budget",
            question="How much memory of a {card} ({stated}, as its vendor states it) does "
            "memtheory leave for the training step, after its 1.5 GiB reserve for the CUDA "
            "context and the allocator? Answer in GiB.",
            params={"card": _CARDS},
            derive=_card_memory,
            answer=Quantity("GiB"),
            solve=lambda p, how: card_batch(how, per=1, fixed=0, unit="B", card=p.card),
            misconceptions=("no_card_reserve", "card_gb_as_decimal"),
        ),
    ),
)
