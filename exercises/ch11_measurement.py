"""Chapter 11, theory against measurement: what autograd keeps, and where the peak falls."""

import sympy as sp

from memtheory import MaxPool2d, training_memory
from memtheory.conventions.autograd import forward_storages
from memtheory.exercises import (
    CORRECT,
    Choice,
    Exercise,
    ExerciseSet,
    Expression,
    Number,
    Quantity,
    at,
)
from memtheory.exercises.derivation import note, note_lines, note_memory, quantity_text, shown
from memtheory.exercises.technique_steps import index_dtype
from memtheory.layers.base import elements
from memtheory.optimizers import optimizer
from memtheory.symbols import B
from memtheory.worked_examples import small_cnn_layers

_CNN = (
    "The small CNN of a StackExchange question (two 3x3 padded convolutions with 32 and 64 "
    "filters, each followed by 2x2 max pooling with stride 2, dense layers of 500 and 10 units, "
    "softmax) is fed {image}x{image}x3 images"
)


def _cnn(p, how):
    return how.network(small_cnn_layers(image_size=p.image), name="StackExchange CNN")


def _autograd(p, how):
    # the autograd convention needs the network itself (how.training_memory reduces it to
    # counts): the learner's network, the learner's optimizer, accounted storage by storage
    network = _cnn(p, how)
    memory = training_memory(network, optimizer=how.optimizer(p.optimizer), convention="autograd")
    kept = [s for s in forward_storages(network) if s.kept_by and s.role != "data"]
    note_lines(
        [
            "What autograd saves for the backward pass, storage by storage (fp32, batch B; the "
            "input batch it also keeps is counted as the input):"
        ]
        + [
            f"  {s.layer} {s.role}: {quantity_text(s.nbytes)} bytes, kept by {', '.join(s.kept_by)}"
            for s in kept
        ]
        + [f"  saved in all: {quantity_text(sum((s.nbytes for s in kept), sp.Integer(0)))} bytes"]
    )
    note_memory(f"A training step with {p.optimizer}, storage by storage", memory)
    return memory


def _breakdown(p, how):
    return how.training_memory(_cnn(p, how), optimizer=p.optimizer)


def _titles(p):
    return {"optimizer_title": optimizer(p.optimizer).title}


_LARGER = (
    "the breakdown convention's total",
    "the autograd convention's peak",
    "they are equal",
)


def _larger(p, how):
    gap = shown(
        f"At batch {p.batch}: the breakdown's total - autograd's peak, in bytes",
        at(_breakdown(p, how).total - _autograd(p, how).peak, B=p.batch),
    )
    return _LARGER[0] if gap > 0 else _LARGER[1] if gap < 0 else _LARGER[2]


def _indices(net, index_type):
    kept = sum(elements(r.output_shape) for r in net.rows if isinstance(r.layer, MaxPool2d))
    return kept * index_type.bytes


def _index_share(p, how):
    net = _cnn(p, how)
    saved = training_memory(net, optimizer="sgd", precision=p.precision, convention="autograd")[
        "saved_activations"
    ]
    theirs = _indices(net, index_dtype(how))
    # the rest of what autograd saves, with the learner's own indices in place of the int64 ones
    rest = saved - _indices(net, index_dtype(CORRECT))
    note(f"The indices, in bytes at batch 64 = {quantity_text(at(theirs, B=64))}")
    note(f"The rest of what autograd saves, in bytes at batch 64 = {quantity_text(at(rest, B=64))}")
    return shown(
        "The indices' share: 100 x indices / (rest + indices), in percent",
        100 * at(theirs / (rest + theirs), B=64),
    )


SET = ExerciseSet(
    id="ch11",
    title="Theory vs measurement",
    intro="The autograd convention counts, storage by storage, what PyTorch keeps during a "
    "training step (saved tensors stored once, int64 pooling indices, gradients freed as the "
    "backward pass goes), and matches a CPU measurement to the byte; the breakdown convention "
    "is the simpler teaching model.",
    exercises=(
        Exercise(
            id="q1",
            title="what autograd saves",
            question=_CNN + ", batch {batch}, trained with {optimizer_title} in fp32. By the "
            "autograd convention, how much memory do the tensors saved for the backward pass "
            "take?",
            params={"image": (50, 64, 46), "batch": (64, 32, 128), "optimizer": ("adam", "sgd")},
            derive=_titles,
            answer=Quantity("MiB"),
            solve=lambda p, how: at(_autograd(p, how)["saved_activations"], B=p.batch),
            misconceptions=("round_in_pooling", "mib_vs_mb"),
        ),
        Exercise(
            id="q2",
            title="the peak of a step",
            question=_CNN + ", batch {batch}, trained with {optimizer_title} in fp32. What is the "
            "peak of live tensors during a training step, by the autograd convention?",
            params={"image": (50, 64, 46), "batch": (64, 32, 128), "optimizer": ("adam", "sgd")},
            derive=_titles,
            answer=Quantity("MiB"),
            solve=lambda p, how: at(_autograd(p, how).peak, B=p.batch),
            misconceptions=("round_in_pooling", "mib_vs_mb"),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q3",
            title="the breakdown against autograd",
            question=_CNN + ", batch {batch}, trained with {optimizer_title} in fp32. By how "
            "much does the breakdown convention's total (every activation and its gradient, "
            "held at once) exceed the autograd convention's peak?",
            params={"image": (50, 64, 46), "batch": (64, 32, 128), "optimizer": ("adam", "sgd")},
            derive=_titles,
            answer=Quantity("MiB"),
            solve=lambda p, how: at(_breakdown(p, how).total - _autograd(p, how).peak, B=p.batch),
            misconceptions=("input_as_activations", "mib_vs_mb"),
        ),
        Exercise(
            id="q4",
            title="which count is larger",
            question=_CNN + ", batch {batch}, trained with {optimizer_title} in fp32. Which is "
            "larger?",
            params={"image": (50, 64, 46), "batch": (8, 1, 64), "optimizer": ("adam", "sgd")},
            derive=_titles,
            answer=Choice(_LARGER),
            solve=_larger,
            misconceptions=("forgot_optimizer_state",),  # at batch 8, Adam's step sets the peak
        ),
        Exercise(
            id="q5",
            title="the share of the indices",
            question=_CNN
            + " and trained with SGD in {precision}. Max pooling keeps one int64 index per "
            "output element for its backward pass. By the autograd convention, what share of "
            "the bytes saved for the backward pass are these indices?",
            params={"image": (50, 64, 46), "precision": ("fp32", "bf16")},
            answer=Number(what="a share", percent=True),
            solve=_index_share,
            misconceptions=("indices_as_floats", "round_in_pooling"),
        ),
        Exercise(
            id="q6",
            title="saved tensors as a formula",
            question=_CNN + ". By the autograd convention, write the bytes of the tensors saved "
            "for the backward pass as a formula in the batch size B.",
            params={"image": (50, 64, 46, 58), "optimizer": ("sgd",)},
            answer=Expression((B,)),
            solve=lambda p, how: shown(
                "What autograd saves (the saved_activations above), in bytes",
                _autograd(p, how)["saved_activations"],
            ),
            misconceptions=("round_in_pooling",),
        ),
    ),
)
