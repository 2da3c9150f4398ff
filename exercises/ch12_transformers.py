"""Chapter 12, transformers: GPT-2's parameters, activations per layer, the S^2 attention."""

import sympy as sp

from memtheory.exercises import Choice, Exercise, ExerciseSet, Integer, Number, Quantity, at
from memtheory.exercises.derivation import shown
from memtheory.exercises.step_log import note
from memtheory.exercises.technique_steps import attention_saved_bytes, layer_activations
from memtheory.models import GPT2_SIZES, gpt2
from memtheory.optimizers import optimizer
from memtheory.symbols import B, D, S
from memtheory.transformer_activations import HEADS


def _config(p):
    config = GPT2_SIZES[p.size]
    return {"layers": config.layers, "hidden": config.hidden, "heads": config.heads}


def _split(how):
    """Split a layer's activation bytes (symbols B, S, D, a) into its S^2 part and the rest."""
    per_layer = sp.expand(layer_activations(how))
    quadratic = per_layer.coeff(S, 2) * S**2
    linear = sp.expand(per_layer - quadratic)
    note("The S^2 part", quadratic)
    note("The part linear in S", linear)
    return quadratic, linear


def _crossover(p, how):
    quadratic, linear = _split(how)  # solved over the symbols: S is a whole number
    (crossover,) = sp.solve(sp.Eq(quadratic, linear), S)
    note("They are equal at S", crossover)
    value = crossover.subs({D: p.hidden, HEADS: p.heads})
    note(f"With D = {p.hidden} and a = {p.heads}, S", value)
    return value


_TERMS = ("the S^2 attention terms", "the terms linear in S")


def _dominant(p, how):
    quadratic, linear = _split(how)
    config = GPT2_SIZES[p.size]
    point = {S: p.sequence, B: 1, D: config.hidden, HEADS: config.heads}
    note(
        f"At S = {p.sequence}, B = 1, D = {config.hidden}, a = {config.heads}: the S^2 part",
        quadratic.subs(point),
    )
    note("and the linear part", linear.subs(point))
    return _TERMS[0] if quadratic.subs(point) > linear.subs(point) else _TERMS[1]


def _flash_saving(p, how):
    config = GPT2_SIZES[p.size]
    shape = {"heads": config.heads, "hidden": config.hidden, "sequence": p.sequence}
    standard = attention_saved_bytes(how, flash=False, **shape)
    flash = attention_saved_bytes(how, flash=True, **shape)
    return shown(
        f"{config.layers} layers x ({standard} - {flash}) bytes", config.layers * (standard - flash)
    )


SET = ExerciseSet(
    id="ch12",
    title="Transformers",
    intro="A transformer layer keeps 34*B*D*S bytes of activations in 16 bits, plus 5*B*a*S^2 "
    "for the softmax output, its dropout mask and the dropped probabilities (Korthikanti et "
    "al.); a flash kernel keeps none of the S^2 tensors. GPT-2's sizes: small 12 layers of "
    "768 with 12 heads, medium 24 of 1024 with 16, large 36 of 1280 with 20, xl 48 of 1600 "
    "with 25.",
    exercises=(
        Exercise(
            id="q1",
            title="GPT-2's parameters",
            question="How many parameters does GPT-2 {size} have ({layers} layers of width "
            "{hidden}, vocabulary 50,257, 1,024 positions, output projection tied to the token "
            "embedding)?",
            params={"size": ("small", "medium", "large", "xl")},
            derive=_config,
            answer=Integer(),
            solve=lambda p, how: how.parameter_count(gpt2(p.size)),
        ),
        Exercise(
            id="q2",
            title="activations of one layer",
            question="GPT-2 {size} (width {hidden}, {heads} heads) is trained on batches of "
            "{batch} sequences of {sequence} tokens with 16-bit activations. How much memory do "
            "the activations one transformer layer keeps for the backward pass take, with "
            "recomputation '{recompute}'?",
            params={
                "size": ("medium", "small", "large"),
                "batch": (8, 4, 16),
                "sequence": (1024, 512),
                "recompute": ("none", "selective"),
            },
            derive=_config,
            answer=Quantity("GiB"),
            solve=lambda p, how: layer_activations(
                how,
                sequence=p.sequence,
                batch=p.batch,
                hidden=GPT2_SIZES[p.size].hidden,
                heads=GPT2_SIZES[p.size].heads,
                recompute=p.recompute,
            ),
            misconceptions=("attention_one_head", "mib_vs_mb"),
        ),
        Exercise(
            id="q3",
            title="where the square takes over",
            question="A transformer layer has width D = {hidden} and a = {heads} attention heads "
            "and no flash kernel. At what sequence length S do the S^2 attention terms of its "
            "activations equal the terms linear in S?",
            params={"hidden": (768, 1600, 1024, 2048, 4096), "heads": (12, 25, 16, 8, 32)},
            constraint=lambda p: p.hidden % p.heads == 0,
            answer=Number(what="a sequence length"),
            solve=_crossover,
            misconceptions=("attention_one_head",),
        ),
        Exercise(
            id="q4",
            title="which term dominates",
            question="GPT-2 {size} (width {hidden}, {heads} heads) is trained on sequences of "
            "{sequence} tokens without a flash kernel. Which part of a layer's activation memory "
            "is larger?",
            params={"size": ("small", "xl", "medium"), "sequence": (1024, 128, 2048, 4096)},
            derive=_config,
            answer=Choice(_TERMS),
            solve=_dominant,
            misconceptions=("attention_one_head",),
        ),
        Exercise(
            id="q5",
            title="training GPT-2 small",
            question="GPT-2 small is trained with {optimizer_title} in fp32 on batches of {batch} "
            "sequences of {sequence} tokens. Counting weights, gradients, optimizer state, every "
            "layer's output with its gradient, and the token ids, how much memory does a step "
            "take?",
            params={"optimizer": ("adam", "sgd"), "batch": (8, 4, 2), "sequence": (1024, 512)},
            derive=lambda p: {"optimizer_title": optimizer(p.optimizer).title},
            answer=Quantity("GiB"),
            solve=lambda p, how: at(
                how.training_memory(gpt2("small"), optimizer=p.optimizer).total,
                B=p.batch,
                S=p.sequence,
            ),
            misconceptions=(
                "forgot_x2",
                "forgot_optimizer_state",
                "activations_per_image",
                "mib_vs_mb",
            ),
            points=2,
            partial={"mib_vs_mb": 1},  # the memory right, the unit misread
        ),
        Exercise(
            id="q6",
            title="what flash attention saves",
            question="GPT-2 {size} ({layers} layers of {hidden}, {heads} heads, attention "
            "dropout 0.1) is trained in fp16 on one sequence of {sequence} tokens. Its standard "
            "attention keeps three {heads} x {sequence} x {sequence} tensors per layer (the "
            "softmax output, its dropout mask at one byte per element, the dropped "
            "probabilities); a flash kernel keeps none of them, but keeps an fp32 log-sum-exp "
            "per row and head. How many fewer bytes do the attention layers keep for the "
            "backward pass with the flash kernel?",
            params={"size": ("small", "medium"), "sequence": (1024, 512, 256)},
            derive=_config,
            answer=Integer(unit="B"),
            solve=_flash_saving,
            misconceptions=("attention_mask_left_out", "flash_logsumexp_left_out"),
        ),
    ),
)
