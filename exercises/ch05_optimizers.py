"""Chapter 5, optimizers.

The state SGD, momentum, RMSprop and Adam keep; the x3 rule versus x2 and x4.
"""

from memtheory.exercises import Choice, Exercise, ExerciseSet, Expression, Integer, Quantity, at
from memtheory.exercises.shared import (
    MODELS,
    model_names,
    model_values,
    parameter_side,
    parameters_only,
)
from memtheory.optimizers import optimizer
from memtheory.symbols import P


def _title(name):
    return optimizer(name).title


_RULE_OPTIONS = ("sgd", "sgd+momentum", "adam", "adadelta")


def _fits_rule(p, how):
    counts = parameters_only(1_000)
    rule = parameter_side(how.training_memory(counts, convention="rule_of_thumb"))
    for name in _RULE_OPTIONS:
        if parameter_side(how.training_memory(counts, optimizer=name)) == rule:
            return _title(name)
    raise AssertionError("no optimizer fits the rule of thumb")


def _rule_gap(p, how):
    counts = parameters_only(p.parameters)
    adam = parameter_side(how.training_memory(counts, optimizer="adam"))
    return adam - parameter_side(how.training_memory(counts, convention="rule_of_thumb"))


SET = ExerciseSet(
    id="ch05",
    title="Optimizers",
    intro="An optimizer's memory is its state: per parameter, SGD keeps nothing, SGD with "
    "momentum one velocity, RMSprop one running average, Adam two moments. With the weights and "
    "the gradients, that is x2, x3, x3 and x4 the parameters.",
    exercises=(
        Exercise(
            id="q1",
            title="optimizer state",
            question="A model with {parameters:,} parameters is trained with {optimizer_title} in "
            "fp32. How much memory does the optimizer state take?",
            params={
                "parameters": (25_557_032, 110_000_000, 19_072_984, 138_357_544),
                "optimizer": (
                    "adam",
                    "sgd+momentum",
                    "rmsprop",
                    "adamw",
                    "adagrad",
                    "adadelta",
                    "lion",
                ),
            },
            derive=lambda p: {"optimizer_title": _title(p.optimizer)},
            answer=Quantity("MiB"),
            solve=lambda p, how: how.training_memory(
                parameters_only(p.parameters), optimizer=p.optimizer
            )["optimizer_state"],
            misconceptions=("forgot_optimizer_state", "wrong_optimizer_factor", "mib_vs_mb"),
        ),
        Exercise(
            id="q2",
            title="bytes per parameter",
            question="Training with {optimizer_title} in fp32, how many bytes does each parameter "
            "cost for its weight, its gradient and the optimizer state together?",
            params={
                "optimizer": (
                    "adam",
                    "sgd+momentum",
                    "rmsprop",
                    "adamax",
                    "sgd",
                    "rmsprop+momentum",
                )
            },
            derive=lambda p: {"optimizer_title": _title(p.optimizer)},
            answer=Integer(unit="B"),
            solve=lambda p, how: parameter_side(
                how.training_memory(parameters_only(1), optimizer=p.optimizer)
            ),
            misconceptions=("forgot_optimizer_state", "wrong_optimizer_factor", "forgot_gradients"),
        ),
        Exercise(
            id="q3",
            title="what the x3 rule assumes",
            question="A rule of thumb counts the parameters three times when training (weights, "
            "gradients, one more copy). Which optimizer does it fit exactly?",
            answer=Choice(tuple(_title(name) for name in _RULE_OPTIONS)),
            solve=_fits_rule,
        ),
        Exercise(
            id="q4",
            title="training memory with an optimizer",
            question="{model_title} has {parameters:,} parameters, keeps {activations:,} "
            "activations "
            "per image and reads {inputs:,} input values per image. It is trained with "
            "{optimizer_title} at batch {batch} in fp32. Counting the weights, gradients, "
            "optimizer "
            "state, activations with their gradients, and the input batch, how much memory does a "
            "training step need?",
            params={
                "model": model_names(1, 0, 2),
                "optimizer": ("adam", "sgd+momentum", "rmsprop"),
                "batch": (64, 32, 128),
            },
            derive=model_values,
            answer=Quantity("MiB"),
            solve=lambda p, how: at(
                how.training_memory(MODELS[p.model], optimizer=p.optimizer).total, B=p.batch
            ),
            misconceptions=(
                "forgot_optimizer_state",
                "wrong_optimizer_factor",
                "forgot_gradients",
                "forgot_x2",
                "parameters_times_batch",
                "per_image_gradients",
                "mib_vs_mb",
            ),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q5",
            title="Adam over momentum",
            question="A model with {parameters:,} parameters is trained in fp32. How much more "
            "memory "
            "does Adam need than SGD with momentum, everything else being equal?",
            params={"parameters": (110_000_000, 25_557_032, 4_632_902, 138_357_544)},
            answer=Quantity("MiB"),
            solve=lambda p, how: (
                how.training_memory(parameters_only(p.parameters), optimizer="adam").total
                - how.training_memory(parameters_only(p.parameters), optimizer="sgd+momentum").total
            ),
            misconceptions=("mib_vs_mb",),
        ),
        Exercise(
            id="q6",
            title="the parameter side as a formula",
            question="A model with P parameters is trained with {optimizer_title} in fp32. Write "
            "the "
            "bytes of its weights, gradients and optimizer state together as a formula in P.",
            params={"optimizer": ("adam", "sgd+momentum", "rmsprop", "adadelta", "sgd")},
            derive=lambda p: {"optimizer_title": _title(p.optimizer)},
            answer=Expression((P,)),
            solve=lambda p, how: parameter_side(
                how.training_memory(parameters_only(P), optimizer=p.optimizer)
            ),
            misconceptions=("forgot_optimizer_state", "wrong_optimizer_factor", "forgot_gradients"),
        ),
        Exercise(
            id="q7",
            title="state buffers",
            question="How many values per parameter does {optimizer_title} keep as its state (as "
            "PyTorch implements it; a scalar step count does not count)?",
            params={
                "optimizer": (
                    "rmsprop",
                    "adam",
                    "sgd+momentum",
                    "adadelta",
                    "lion",
                    "adagrad",
                    "rmsprop-centered",
                ),
            },
            derive=lambda p: {"optimizer_title": _title(p.optimizer)},
            answer=Integer(),
            solve=lambda p, how: how.optimizer(p.optimizer).states_per_parameter,
            misconceptions=("forgot_optimizer_state", "wrong_optimizer_factor"),
        ),
        Exercise(
            id="q8",
            title="what the x3 rule misses with Adam",
            question="A model with {parameters:,} parameters is trained with Adam in fp32. By how "
            "much does the x3 rule of thumb underestimate the memory of its weights, gradients and "
            "optimizer state?",
            params={"parameters": (19_072_984, 110_000_000, 4_632_902, 25_557_032)},
            answer=Quantity("MiB"),
            solve=_rule_gap,
            misconceptions=("mib_vs_mb",),
        ),
    ),
)
