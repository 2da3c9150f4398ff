"""Chapter 10, what an estimate misses: budget, in-place layers, indices, copies, temporaries."""

from memtheory import Conv2d, Dense, Input, MaxPool2d, ReLU, training_memory
from memtheory.conventions.autograd import AutogradConvention
from memtheory.exercises import Choice, Exercise, ExerciseSet, Integer, Number, Quantity, at
from memtheory.exercises.derivation import note, quantity_text, shown
from memtheory.exercises.shared import MODELS, model_names, model_values, noted_max_value
from memtheory.exercises.steps_residual import saved_activation_bytes, step_peak
from memtheory.exercises.steps_trace import card_usable_bytes
from memtheory.exercises.technique_steps import index_dtype, step_implementation
from memtheory.layers.base import elements
from memtheory.models import vgg16
from memtheory.optimizers import optimizer
from memtheory.symbols import B
from memtheory.techniques import autocast_weight_copy_bytes
from memtheory.worked_examples import small_cnn_layers, small_cnn_network

_LARGEST = {
    "parameters": "the weights",
    "gradients": "the parameter gradients",
    "optimizer_state": "the optimizer state",
    "activations": "the activations",
    "activation_gradients": "the activation gradients",
    "input": "the input batch",
}


def _largest(p, how):
    memory = how.training_memory(MODELS[p.model], optimizer=p.optimizer)
    sizes = {name: at(value, B=p.batch) for name, value in memory.components.items()}
    return _LARGEST[max((name for name in sizes if name in _LARGEST), key=sizes.__getitem__)]


_PLANNED = {
    "VGG-16 on 224x224x3 images": vgg16,
    "the small CNN of a StackExchange question on 224x224x3 images": lambda: small_cnn_network(
        image_size=224
    ),
}
"""Networks whose step chapter 6 plans with the autograd peak (live tensors), by description."""


def _planned_values(p):
    model = str(p["model"])
    return {
        "model_title": model[0].upper() + model[1:],
        "optimizer_title": optimizer(p["optimizer"]).title,
    }


def _planned_batch(p, how):
    peak = step_peak(how, _PLANNED[p.model](), optimizer=p.optimizer)
    return noted_max_value(peak, B, card_usable_bytes(how, p.card))


def _relu_pair_saved(p, how):
    """Elements autograd saves for a padded 3x3 convolution and its ReLU, per image."""
    layers = [Input((3, p.size, p.size)), Conv2d(p.filters, 3, padding=1)]
    net = how.network([*layers, ReLU(inplace=p.relu != "ReLU()")], name="convolution and ReLU")
    nbytes = at(saved_activation_bytes(how, net, optimizer="sgd"), B=1)
    return shown(f"{quantity_text(nbytes)} bytes / 4 bytes per fp32 element", nbytes / 4)


def _indices(p, how):
    net = how.network(small_cnn_layers(image_size=p.image))
    kept = sum(elements(row.output_shape) for row in net.rows if isinstance(row.layer, MaxPool2d))
    return at(kept, B=p.batch) * index_dtype(how).bytes


_CNN = (
    "The small CNN of a StackExchange question (two 3x3 padded convolutions with 32 and 64 "
    "filters, each followed by 2x2 max pooling with stride 2, dense layers of 500 and 10 units) "
    "on {image}x{image}x3 images"
)


def _small_cnn(p, how):
    return how.network(small_cnn_layers(image_size=p.image), name="StackExchange CNN")


def _mlp(p, how):
    return how.network(
        [Input((p.inputs,)), Dense(p.hidden), ReLU(), Dense(p.second), ReLU(), Dense(10)],
        name="MLP",
    )


def _step_temporaries(net, how, implementation):
    """Adam's temporaries at the peak of step(), as the autograd convention follows torch.optim.

    The live bytes at the optimizer step less those of the fused implementation,
    which allocates no tensors: what the implementation adds, whatever the batch.
    """
    adam = how.optimizer("adam")

    def at_step(name):
        convention = AutogradConvention(name)
        return training_memory(net, optimizer=adam, convention=convention).timeline[
            "optimizer step"
        ]

    return at(at_step(step_implementation(how, implementation)) - at_step("fused"), B=1)


def _temporaries_share(p, how):
    temporaries = _step_temporaries(_mlp(p, how), how, "for-loop")
    weights = how.parameter_count(_mlp(p, how)) * 4
    note(f"The fp32 weights: 4 bytes x the parameters = {quantity_text(weights)}")
    return shown(
        f"The temporaries' share: 100 x {quantity_text(temporaries)} / "
        f"{quantity_text(weights)}, in percent",
        100 * temporaries / weights,
    )


SET = ExerciseSet(
    id="ch10",
    title="What an estimate misses",
    intro="A card holds more than the model's tensors: the CUDA context, workspaces and the "
    "allocator's cache. The book budgets every card one way (chapter 6): the vendor's 'GB' "
    "read as GiB, less a 1.5 GiB reserve for the context, the driver and the allocator, and "
    "plans a batch with the autograd peak; in-place layers and shared tensors make counts too "
    "high, indices, the optimizer's temporaries and autocast's copies too low.",
    exercises=(
        Exercise(
            id="q1",
            title="the usable memory of a card",
            question="A card is sold as {card} GB. With the book's card budget (its memory less "
            "a 1.5 GiB reserve for the CUDA context, the driver and the allocator), how much "
            "memory is left for the training step?",
            params={"card": (16, 8, 12, 24, 40, 80)},
            answer=Quantity("GiB"),
            solve=lambda p, how: card_usable_bytes(how, p.card),
            misconceptions=("no_card_reserve", "card_gb_as_decimal"),
        ),
        Exercise(
            id="q2",
            title="the largest batch within the budget",
            question="{model_title} is trained with {optimizer_title} in fp32 (a plain PyTorch "
            "loop) on a card sold as {card} GB. Planning as chapter 6 does, with the autograd "
            "peak (the most bytes alive at once in PyTorch's step, not the breakdown's every "
            "output with its gradient) within the book's card budget (a 1.5 GiB reserve), what "
            "is the largest batch that fits?",
            params={
                "model": tuple(_PLANNED),
                "optimizer": ("adam", "sgd+momentum", "sgd"),
                "card": (16, 8, 12, 24),
            },
            derive=_planned_values,
            answer=Integer(),
            solve=_planned_batch,
            misconceptions=(
                "breakdown_for_autograd",
                "no_card_reserve",
                "card_gb_as_decimal",
                "forgot_optimizer_state",
            ),
            points=2,
        ),
        Exercise(
            id="q3",
            title="an in-place ReLU",
            question="A 3x3 convolution with padding 1 takes {size}x{size}x3 fp32 images to "
            "{filters} channels and is followed by {relu}. How many activation elements per "
            "image does autograd keep for the backward pass (its saved activations; the input "
            "image is counted apart, as the input)?",
            params={
                "relu": ("ReLU()", "ReLU(inplace=True)"),
                "size": (32, 28, 64, 48),
                "filters": (16, 32, 64),
            },
            answer=Integer(),
            solve=_relu_pair_saved,
            misconceptions=("breakdown_for_autograd",),
        ),
        Exercise(
            id="q4",
            title="the indices of max pooling",
            question="The small CNN of a StackExchange question (two 3x3 padded convolutions "
            "with 32 and 64 filters, each followed by 2x2 max pooling with stride 2, dense "
            "layers of 500 and 10 units) is fed a batch of {batch} images of {image}x{image}x3. "
            "Autograd keeps one index per output element of each max pooling, as PyTorch does. "
            "How much memory do these indices take?",
            params={"image": (50, 64, 46, 58), "batch": (64, 32, 128)},
            answer=Quantity("MiB"),
            solve=_indices,
            misconceptions=("indices_as_floats", "round_in_pooling", "mib_vs_mb"),
        ),
        Exercise(
            id="q5",
            title="autocast's weight copies",
            question="The small CNN of a StackExchange question (two 3x3 padded convolutions "
            "with 32 and 64 filters, each followed by 2x2 max pooling with stride 2, dense "
            "layers of 500 and 10 units) on {image}x{image}x3 images is trained under "
            "torch.autocast with {low}. How much memory do autocast's 16-bit copies of all its "
            "weights (and biases) hold during the forward pass?",
            params={"image": (50, 64, 46, 58), "low": ("fp16", "bf16")},
            answer=Quantity("MiB"),
            solve=lambda p, how: autocast_weight_copy_bytes(
                how.parameter_count(how.network(small_cnn_layers(image_size=p.image))), p.low
            ),
            misconceptions=("round_in_pooling", "mib_vs_mb"),
        ),
        Exercise(
            id="q6",
            title="which tensor dominates",
            question="{model_title} ({parameters:,} parameters, {activations:,} activations and "
            "{inputs:,} input values per image) is trained with {optimizer_title} in fp32 at "
            "batch {batch}. Which single component of the training memory is the largest?",
            params={
                "model": model_names(),
                "optimizer": ("adam", "sgd+momentum"),
                "batch": (64, 1, 8, 256),
            },
            derive=model_values,
            answer=Choice(tuple(_LARGEST.values())),
            solve=_largest,
            misconceptions=("parameters_times_batch", "wrong_optimizer_factor"),
        ),
        Exercise(
            id="q7",
            title="foreach Adam's temporaries",
            question=_CNN + " is trained with Adam in fp32, using PyTorch's foreach "
            "implementation (the default on CUDA), which takes the square roots of all second "
            "moments in one call and then divides them in place. How much memory do the "
            "temporaries of optimizer.step() take at their peak?",
            params={"image": (50, 64, 46, 58)},
            answer=Quantity("MiB"),
            solve=lambda p, how: _step_temporaries(_small_cnn(p, how), how, "foreach"),
            misconceptions=("swapped_step_implementation", "round_in_pooling", "mib_vs_mb"),
        ),
        Exercise(
            id="q8",
            title="the for-loop's temporaries, against the parameters",
            question="A multilayer perceptron {inputs} -> {hidden} -> ReLU -> {second} -> ReLU "
            "-> 10, every dense layer with a bias, is trained with Adam in fp32, using PyTorch's "
            "for-loop implementation (its default on the CPU). For each parameter tensor in "
            "turn, in the order of the layers, it computes denom = (exp_avg_sq.sqrt() / "
            "bias_correction2_sqrt).add_(eps), so the square root and the quotient of one tensor "
            "are alive with the previous tensor's denom. At their peak, how large are the "
            "temporaries of optimizer.step(), as a percentage of the parameter memory?",
            params={"inputs": (784, 3072), "hidden": (256, 512, 1024), "second": (128, 256)},
            answer=Number(what="a percentage", percent=True),
            solve=_temporaries_share,
            misconceptions=("swapped_step_implementation",),
        ),
    ),
)
