"""Chapter 15, residual networks and normalisation: BatchNorm's buffers and statistics, ResNets."""

from memtheory.exercises import Choice, Exercise, ExerciseSet, Integer, Quantity
from memtheory.exercises.steps_residual import (
    buffer_bytes,
    inference_peak,
    saved_activation_bytes,
    saved_bytes,
    step_peak,
    trained_parameters,
)
from memtheory.layers import BatchNorm2d, LayerNorm, RMSNorm
from memtheory.models import resnet18, resnet34, resnet50

_BUILDERS = {"ResNet-18": resnet18, "ResNet-34": resnet34, "ResNet-50": resnet50}
_NORMS = {"LayerNorm": LayerNorm, "RMSNorm": RMSNorm}


def _net(p, batch=1):
    return _BUILDERS[p.model](batch=batch)


_SIDES = (
    "the model states (weights, gradients and Adam's two moments)",
    "the saved activations",
)


def _larger(p, how):
    from memtheory.exercises.steps_residual import _training

    memory = _training(how, _net(p, p.batch), optimizer="adam")
    c = memory.components
    states = sum(c.get(k, 0) for k in ("parameters", "gradients", "optimizer_state"))
    saved = c["saved_activations"] if "saved_activations" in c else c["activations"]
    return _SIDES[0] if states > saved else _SIDES[1]


SET = ExerciseSet(
    id="ch15",
    title="Residual networks and normalisation",
    intro="A residual block adds its input back to its output; the input stays alive until the "
    "addition's backward pass. BatchNorm2d has 2C parameters, three buffers (running mean and "
    "variance in the model's dtype, an int64 batch count) and saves its input and two per-channel "
    "statistics for backward. The autograd convention counts what PyTorch keeps; the x2 "
    "(breakdown) convention counts every output twice.",
    exercises=(
        Exercise(
            id="q1",
            title="BatchNorm's buffers",
            question="A BatchNorm2d over {channels} channels (track_running_stats=True) sits in a "
            "model held in {model_dtype}. How many bytes do its buffers take?",
            params={"channels": (64, 128, 256, 512), "model_dtype": ("fp32", "bf16")},
            answer=Integer(unit="B"),
            solve=lambda p, how: buffer_bytes(
                how, BatchNorm2d(), (1, p.channels, 1, 1), p.model_dtype
            ),
            misconceptions=("bn_forgot_batch_count",),
        ),
        Exercise(
            id="q2",
            title="what BatchNorm saves",
            question="In training, a BatchNorm2d of a bf16 model receives a batch of shape "
            "({batch}, {channels}, {size}, {size}). How many bytes does it save for the backward "
            "pass?",
            params={"batch": (32, 8, 16), "channels": (64, 128, 256), "size": (56, 28, 14)},
            answer=Integer(unit="B"),
            solve=lambda p, how: saved_bytes(
                how, BatchNorm2d(), (p.batch, p.channels, p.size, p.size), "bf16"
            ),
            misconceptions=("norm_forgot_statistics",),
        ),
        Exercise(
            id="q3",
            title="trainable parameters of a ResNet",
            question="How many trainable parameters does torchvision's {model} (1,000 classes) "
            "have?",
            params={"model": ("ResNet-18", "ResNet-50", "ResNet-34")},
            answer=Integer(),
            solve=lambda p, how: trained_parameters(how, _net(p)),
            misconceptions=("running_stats_as_parameters",),
        ),
        Exercise(
            id="q4",
            title="what a ResNet keeps for backward",
            question="{model} is trained in fp32 with SGD on batches of {batch} images of "
            "224 x 224. How much memory do the activations saved for the backward pass take, "
            "as PyTorch keeps them?",
            params={"model": ("ResNet-18", "ResNet-50"), "batch": (32, 16, 64)},
            answer=Quantity("MiB"),
            solve=lambda p, how: saved_activation_bytes(how, _net(p, p.batch)),
            misconceptions=("breakdown_for_autograd", "mib_vs_mb"),
        ),
        Exercise(
            id="q5",
            title="the peak of a ResNet training step",
            question="{model} is trained in fp32 with plain SGD (no momentum) on batches of "
            "{batch} images of 224 x 224. What is the peak of a training step (tensor storage "
            "alive at once, as PyTorch keeps it)?",
            params={"model": ("ResNet-50", "ResNet-18"), "batch": (32, 16, 64)},
            answer=Quantity("MiB"),
            solve=lambda p, how: step_peak(how, _net(p, p.batch)),
            misconceptions=("breakdown_for_autograd", "mib_vs_mb"),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q6",
            title="a normalisation's saved bytes per token",
            question="In a {model_dtype} language model, how many bytes does one {norm} of width "
            "{hidden} save for the backward pass per token (PyTorch's LayerNorm; Llama's "
            "RMSNorm, which computes in fp32)?",
            params={
                "norm": ("RMSNorm", "LayerNorm"),
                "hidden": (4096, 768, 2048, 1024),
                "model_dtype": ("bf16", "fp32"),
            },
            answer=Integer(unit="B"),
            solve=lambda p, how: saved_bytes(
                how, _NORMS[p.norm](), (1, 1, p.hidden), p.model_dtype
            ),
            misconceptions=("norm_forgot_statistics", "norm_saved_in_model_dtype"),
        ),
        Exercise(
            id="q7",
            title="the inference peak of a ResNet",
            question="{model} runs in eval mode under torch.no_grad() in {precision} on a batch "
            "of {batch} images of 224 x 224. What is the peak of the forward pass (weights, "
            "buffers, input and the activations alive at once)?",
            params={
                "model": ("ResNet-50", "ResNet-18"),
                "batch": (64, 16, 128),
                "precision": ("bf16", "fp32"),
            },
            answer=Quantity("MiB"),
            solve=lambda p, how: inference_peak(how, _net(p, p.batch), p.precision),
            misconceptions=("breakdown_for_autograd", "mib_vs_mb"),
        ),
        Exercise(
            id="q8",
            title="which side dominates",
            question="{model} is trained in fp32 with Adam on batches of {batch} images of "
            "224 x 224. Which is larger?",
            params={"model": ("ResNet-18", "ResNet-50"), "batch": (9, 2, 4, 32)},
            answer=Choice(_SIDES),
            solve=_larger,
            misconceptions=("breakdown_for_autograd",),
        ),
    ),
)
