"""Chapter 9, VGG-16: a large classic network, through memtheory.models.vgg16."""

from memtheory import MaxPool2d
from memtheory.exercises import Exercise, ExerciseSet, Expression, Integer, Quantity, at
from memtheory.exercises.derivation import shown
from memtheory.exercises.shared import noted_max_value
from memtheory.exercises.steps_residual import step_peak
from memtheory.exercises.steps_trace import card_usable_bytes
from memtheory.models import vgg16
from memtheory.symbols import B, H


def _vgg(how, **options):
    return how.network(vgg16(**options).layers, name="VGG-16")


_ORDINALS = ("first", "second", "third", "fourth", "fifth")


def _which_pool(p):
    return {"which": _ORDINALS[p.pools - 1]}


def _after_pools(p, how):
    net = _vgg(how, image_size=H)
    pools = [row for row in net.rows if isinstance(row.layer, MaxPool2d)]
    which = _ORDINALS[p.pools - 1]
    return shown(f"The {which} pooling's height", pools[p.pools - 1].output_shape[2])


SET = ExerciseSet(
    id="ch09",
    title="VGG-16",
    intro="VGG-16 (as torchvision builds it): thirteen 3x3 convolutions with padding 1 and "
    "in-place "
    "ReLUs, five 2x2 max poolings, then dense layers of 4096, 4096 and the classes, with dropout.",
    exercises=(
        Exercise(
            id="q1",
            title="parameters",
            question="How many trainable parameters does VGG-16 have with {classes} output "
            "classes?",
            params={"classes": (1_000, 10, 100, 200, 365)},
            answer=Integer(),
            solve=lambda p, how: how.parameter_count(_vgg(how, classes=p.classes)),
            misconceptions=("forgot_bias",),
        ),
        Exercise(
            id="q2",
            title="activations per image",
            question="VGG-16 is fed {size}x{size}x3 images. Counting the output of every layer "
            "that "
            "creates a new tensor (convolutions, poolings, dense layers, dropouts; the in-place "
            "ReLUs "
            "add nothing, flattening is a view) and not the input, how many activation values does "
            "it keep per image?",
            params={"size": (224, 192, 256, 160, 288)},
            answer=Integer(),
            solve=lambda p, how: at(how.activation_count(_vgg(how, image_size=p.size)), B=1),
            misconceptions=("input_as_activations",),
        ),
        Exercise(
            id="q3",
            title="training at a batch",
            question="VGG-16 (1000 classes, 224x224x3 images) is trained with SGD with momentum at "
            "batch {batch} in fp32. Counting the weights, gradients, optimizer state, those "
            "activations with their gradients, and the input batch, how much memory does a "
            "training "
            "step need?",
            params={"batch": (32, 64, 16, 128)},
            answer=Quantity("GiB"),
            solve=lambda p, how: at(
                how.training_memory(_vgg(how), optimizer="sgd+momentum").total, B=p.batch
            ),
            misconceptions=(
                "forgot_x2",
                "forgot_optimizer_state",
                "wrong_optimizer_factor",
                "per_image_gradients",
                "parameters_times_batch",
                "mib_vs_mb",
            ),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q4",
            title="the largest batch on a GPU",
            question="VGG-16 (1000 classes, 224x224x3 images) is trained with Adam in fp32 (a "
            "plain PyTorch loop) on a card sold as {gpu} GB. Planning as chapter 6 does, with the "
            "autograd peak (the most bytes alive at once in PyTorch's step, not the breakdown's "
            "total) within the book's card budget (a 1.5 GiB reserve for the CUDA context, the "
            "driver and the allocator), what is the largest batch that fits?",
            params={"gpu": (24, 16, 40, 80, 12)},
            answer=Integer(),
            solve=lambda p, how: noted_max_value(
                step_peak(how, vgg16(), optimizer="adam"), B, card_usable_bytes(how, p.gpu)
            ),
            misconceptions=(
                "breakdown_for_autograd",
                "no_card_reserve",
                "card_gb_as_decimal",
                "forgot_optimizer_state",
            ),
            points=2,
        ),
        Exercise(
            id="q5",
            title="the height after a pooling",
            question="VGG-16 is fed H x H x 3 images. Its convolutions keep the size (padding 1) "
            "and each of its five 2x2 max poolings with stride 2 floors. Write the height of the "
            "output of its {which} pooling as a formula in H.",
            params={"pools": (5, 3, 4, 2)},
            derive=_which_pool,
            answer=Expression((H,)),
            solve=_after_pools,
            misconceptions=("round_in_pooling",),
        ),
        Exercise(
            id="q6",
            title="the peak PyTorch reaches",
            question="VGG-16 (1000 classes, 224x224x3 images) is trained in fp32 with plain SGD "
            "(no momentum) at batch {batch}. Counting what PyTorch keeps (the tensors alive at "
            "once during the step, not every layer's output twice), what is the peak of a "
            "training step?",
            params={"batch": (32, 16, 64, 8)},
            answer=Quantity("GiB"),
            solve=lambda p, how: step_peak(how, vgg16(batch=p.batch)),
            misconceptions=("breakdown_for_autograd", "mib_vs_mb"),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
    ),
)
