"""Chapter 7, precision.

fp32, fp16, bf16 and int8; mixed precision with fp32 master weights and Adam state.
"""

from memtheory import ModelCounts
from memtheory.exercises import Choice, Exercise, ExerciseSet, Integer, Quantity, at
from memtheory.exercises.shared import parameter_side, parameters_only
from memtheory.optimizers import optimizer
from memtheory.precision import Precision
from memtheory.worked_examples import small_cnn_layers

_DTYPE_TITLES = {
    "fp16": "fp16 (half precision)",
    "bf16": "bf16 (bfloat16)",
    "fp32": "fp32 (single precision)",
    "int8": "int8 (8-bit integers)",
    "fp64": "fp64 (double precision)",
    "int64": "int64 (PyTorch's index type)",
}

_CHEAPER = (
    "fp32 everywhere",
    "mixed precision (fp16 weights and gradients, fp32 master weights and optimizer state)",
    "they need the same",
)


def _cheaper(p, how):
    fp32 = parameter_side(
        how.training_memory(parameters_only(1), optimizer=p.optimizer, precision="fp32")
    )
    mixed = parameter_side(
        how.training_memory(parameters_only(1), optimizer=p.optimizer, precision="mixed-fp16")
    )
    if fp32 == mixed:
        return _CHEAPER[2]
    return _CHEAPER[0] if fp32 < mixed else _CHEAPER[1]


def _int8_inference(p, how):
    counts = ModelCounts.per_sample(
        parameters=p.parameters, activations=p.activations, input_elements=p.inputs
    )
    memory = how.inference_memory(
        counts, precision=Precision(parameters="int8", activations="fp16")
    )
    return at(memory.total, B=p.batch)


SET = ExerciseSet(
    id="ch07",
    title="Precision",
    intro="fp32 takes 4 bytes, fp16 and bf16 2, int8 1. Mixed precision keeps fp16 (or bf16) "
    "weights, gradients and activations, an fp32 master copy of the weights, and the optimizer "
    "state in fp32.",
    exercises=(
        Exercise(
            id="q1",
            title="bytes of a tensor",
            question="A tensor holds {count:,} values of type {dtype_title}. How many bytes does "
            "it take?",
            params={
                "count": (1_000_000, 4_096, 65_536, 1_024, 150_528),
                "dtype": ("fp16", "bf16", "fp32", "int8", "fp64", "int64"),
            },
            derive=lambda p: {"dtype_title": _DTYPE_TITLES[p.dtype]},
            answer=Integer(unit="B"),
            solve=lambda p, how: how.inference_memory(parameters_only(p.count), precision=p.dtype)[
                "parameters"
            ],
            misconceptions=("half_vs_single",),
        ),
        Exercise(
            id="q2",
            title="weights in a lower precision",
            question="A model with {parameters:,} parameters is stored in {dtype_title} for "
            "inference. "
            "How much memory do its weights take?",
            params={
                "parameters": (7_000_000_000, 13_000_000_000, 110_000_000, 138_357_544),
                "dtype": ("fp16", "bf16", "int8", "fp32"),
            },
            derive=lambda p: {"dtype_title": _DTYPE_TITLES[p.dtype]},
            answer=Quantity("GB"),
            solve=lambda p, how: how.inference_memory(
                parameters_only(p.parameters), precision=p.dtype
            )["parameters"],
            misconceptions=("half_vs_single", "mib_vs_mb"),
        ),
        Exercise(
            id="q3",
            title="mixed precision with Adam",
            question="A model with {parameters:,} parameters is trained with Adam in mixed "
            "precision: "
            "fp16 weights and gradients, an fp32 master copy of the weights, and Adam's two "
            "moments "
            "in fp32. How much memory do the weights, gradients, master weights and optimizer "
            "state "
            "take together?",
            params={"parameters": (7_000_000_000, 1_300_000_000, 350_000_000, 110_000_000)},
            answer=Quantity("GiB"),
            solve=lambda p, how: parameter_side(
                how.training_memory(
                    parameters_only(p.parameters), optimizer="adam", precision="mixed-fp16"
                )
            ),
            misconceptions=(
                "forgot_master_weights",
                "forgot_optimizer_state",
                "wrong_optimizer_factor",
                "forgot_gradients",
                "mib_vs_mb",
            ),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q4",
            title="bytes per parameter in mixed precision",
            question="Training with {optimizer_title} in mixed precision (fp16 weights and "
            "gradients, "
            "fp32 master weights, fp32 optimizer state), how many bytes does each parameter cost "
            "for "
            "its weight, gradient, master weight and optimizer state?",
            params={"optimizer": ("adam", "sgd+momentum", "rmsprop", "sgd")},
            derive=lambda p: {"optimizer_title": optimizer(p.optimizer).title},
            answer=Integer(unit="B"),
            solve=lambda p, how: parameter_side(
                how.training_memory(
                    parameters_only(1), optimizer=p.optimizer, precision="mixed-fp16"
                )
            ),
            misconceptions=(
                "forgot_master_weights",
                "forgot_optimizer_state",
                "wrong_optimizer_factor",
            ),
        ),
        Exercise(
            id="q5",
            title="does mixed precision save parameter memory?",
            question="A model is trained with {optimizer_title}. Counting only the weights, their "
            "gradients, any master copy and the optimizer state, which needs less memory?",
            params={"optimizer": ("adam", "sgd+momentum", "adamw")},
            derive=lambda p: {"optimizer_title": optimizer(p.optimizer).title},
            answer=Choice(_CHEAPER),
            solve=_cheaper,
            misconceptions=("forgot_master_weights",),
        ),
        Exercise(
            id="q6",
            title="activations in bf16",
            question="The small CNN of a StackExchange question (50x50x3 images, two 3x3 padded "
            "convolutions with 32 and 64 filters each followed by 2x2 max pooling with stride 2, "
            "dense layers of 500 and 10 units, softmax) is trained at batch {batch} with its "
            "activations and their gradients in bf16. Counting every layer's output once and not "
            "the input, how much memory do the activations and their gradients take?",
            params={"batch": (64, 128, 256, 32)},
            answer=Quantity("MiB"),
            solve=lambda p, how: at(
                sum(
                    how.training_memory(
                        how.network(small_cnn_layers()), optimizer="sgd", precision="bf16"
                    )[name]
                    for name in ("activations", "activation_gradients")
                ),
                B=p.batch,
            ),
            misconceptions=("forgot_x2", "activations_per_image", "mib_vs_mb"),
        ),
        Exercise(
            id="q7",
            title="a whole training step in mixed precision",
            question="The same small CNN is trained with Adam at batch {batch} in mixed precision "
            "with bf16: bf16 weights, gradients, activations and activation gradients; fp32 master "
            "weights and Adam state; the input batch stays fp32. How much memory does a training "
            "step need?",
            params={"batch": (64, 128, 32, 256)},
            answer=Quantity("MiB"),
            solve=lambda p, how: at(
                how.training_memory(
                    how.network(small_cnn_layers()), optimizer="adam", precision="mixed-bf16"
                ).total,
                B=p.batch,
            ),
            misconceptions=(
                "forgot_master_weights",
                "forgot_x2",
                "forgot_optimizer_state",
                "input_left_out",
                "half_vs_single",
                "mib_vs_mb",
            ),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q8",
            title="int8 inference",
            question="A model with {parameters:,} parameters is quantised to int8 for inference; "
            "its "
            "activations ({activations:,} per image) and its input ({inputs:,} values per image) "
            "are fp16. Counting the weights, every activation and the input, how much memory does "
            "a "
            "forward pass of a batch of {batch} need?",
            params={
                "parameters": (25_557_032, 138_357_544, 4_632_902),
                "activations": (11_000_000, 15_095_272, 149_736),
                "inputs": (150_528, 7_500),
                "batch": (32, 64, 8, 1),
            },
            answer=Quantity("MiB"),
            solve=_int8_inference,
            misconceptions=("input_left_out", "activations_per_image", "mib_vs_mb"),
        ),
    ),
)
