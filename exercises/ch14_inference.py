"""Chapter 14, inference: the key/value cache, grouped-query attention, what fits a card."""

from memtheory.dtypes import dtype
from memtheory.exercises import Choice, Exercise, ExerciseSet, Expression, Integer, Quantity
from memtheory.exercises.derivation import shown
from memtheory.exercises.shared import noted_max_value
from memtheory.exercises.steps_trace import card_usable_bytes
from memtheory.exercises.technique_steps import kv_cache
from memtheory.models import GPT2_SIZES, gpt2
from memtheory.symbols import B, S

LLAMA_2_7B = {"layers": 32, "heads": 32, "head_dim": 128}
"""Llama 2 7B's attention (Touvron et al. 2023, table of hyperparameters): 32 layers of 32 heads
of width 128, one key/value head per query head."""


def _gpt2_cache(how, size, dtype_name="fp16", **shape):
    config = GPT2_SIZES[size]
    return kv_cache(
        how,
        layers=config.layers,
        heads=config.heads,
        head_dim=config.hidden // config.heads,
        dtype=dtype_name,
        **shape,
    )


def _weights(how, size, dtype_name):
    return how.parameter_count(gpt2(size)) * dtype(dtype_name).bytes


_PARTS = ("the weights", "the key/value cache")


def _larger(p, how):
    cache = _gpt2_cache(how, p.size, sequence=p.sequence, batch=p.batch)
    return _PARTS[0] if _weights(how, p.size, "fp16") > cache else _PARTS[1]


def _largest_batch(p, how):
    weights = _weights(how, p.size, p.weights)
    cache = _gpt2_cache(how, p.size, p.weights, sequence=p.sequence)
    return noted_max_value(weights + cache, B, card_usable_bytes(how, p.card))


SET = ExerciseSet(
    id="ch14",
    title="Inference and the KV cache",
    intro="Generating text keeps the weights and, for every attention layer, a key and a value "
    "per position, per key/value head, per sequence: 2 x layers x kv_heads x head_dim x S x B "
    "values, 2 bytes each in fp16. The activations of the one new token are small beside "
    "these.",
    exercises=(
        Exercise(
            id="q1",
            title="Llama 2 7B's cache",
            question="Llama 2 7B has 32 layers of 32 attention heads of width 128, each with its "
            "own keys and values. How large is its key/value cache in fp16 for a batch of "
            "{batch} sequences of {sequence} tokens?",
            params={"batch": (8, 1, 4, 16), "sequence": (4096, 2048, 1024)},
            answer=Quantity("GiB"),
            solve=lambda p, how: kv_cache(how, **LLAMA_2_7B, sequence=p.sequence, batch=p.batch),
            misconceptions=("kv_forgot_values", "kv_one_layer", "kv_fp32", "mib_vs_mb"),
        ),
        Exercise(
            id="q2",
            title="sequences that fit the cache",
            question="Llama 2 7B has 32 layers of 32 attention heads of width 128. How many "
            "sequences of {sequence} tokens fit in {memory} GiB of fp16 key/value cache?",
            params={"sequence": (4096, 2048, 1024), "memory": (40, 20, 60)},
            answer=Integer(),
            solve=lambda p, how: noted_max_value(
                kv_cache(how, **LLAMA_2_7B, sequence=p.sequence),
                B,
                how.to_bytes(p.memory, "GiB"),
            ),
            misconceptions=("kv_forgot_values", "kv_one_layer", "kv_fp32", "mib_vs_mb"),
        ),
        Exercise(
            id="q3",
            title="sharing key/value heads",
            question="A model has {layers} layers of {heads} query heads of width 128. By what "
            "factor does its key/value cache shrink when the heads share {kv_heads} key/value "
            "heads instead of having one each?",
            params={"layers": (40, 32, 80), "heads": (40, 32, 64), "kv_heads": (8, 4, 1)},
            constraint=lambda p: p.heads % p.kv_heads == 0,
            answer=Integer(),
            solve=lambda p, how: shown(
                "Times smaller: the full cache / the grouped one",
                kv_cache(how, layers=p.layers, heads=p.heads, head_dim=128, sequence=1, batch=1)
                / kv_cache(
                    how,
                    layers=p.layers,
                    heads=p.heads,
                    head_dim=128,
                    kv_heads=p.kv_heads,
                    sequence=1,
                    batch=1,
                ),
            ),
            misconceptions=("kv_ignored_shared_heads",),
        ),
        Exercise(
            id="q4",
            title="tokens in a grouped cache",
            question="A model has {layers} layers of {heads} query heads of width 128 that share "
            "{kv_heads} key/value heads. How many tokens of one sequence fit in {memory} GiB of "
            "fp16 key/value cache?",
            params={
                "layers": (40, 32, 80),
                "heads": (40, 32, 64),
                "kv_heads": (8, 4),
                "memory": (10, 20, 5),
            },
            constraint=lambda p: p.heads % p.kv_heads == 0,
            answer=Integer(),
            solve=lambda p, how: noted_max_value(
                kv_cache(
                    how, layers=p.layers, heads=p.heads, head_dim=128, kv_heads=p.kv_heads, batch=1
                ),
                S,
                how.to_bytes(p.memory, "GiB"),
            ),
            misconceptions=(
                "kv_ignored_shared_heads",
                "kv_forgot_values",
                "kv_fp32",
                "mib_vs_mb",
            ),
        ),
        Exercise(
            id="q5",
            title="the cache as a formula",
            question="A model has {layers} layers of {heads} query heads of width {head_dim}, "
            "sharing {kv_heads} key/value heads. Write the bytes of its fp16 key/value cache as "
            "a formula in the batch B and the sequence length S.",
            params={
                "layers": (32, 24, 48),
                "heads": (32, 16, 64),
                "head_dim": (128, 64),
                "kv_heads": (8, 4),
            },
            constraint=lambda p: p.heads % p.kv_heads == 0,
            answer=Expression((B, S)),
            solve=lambda p, how: kv_cache(
                how, layers=p.layers, heads=p.heads, head_dim=p.head_dim, kv_heads=p.kv_heads
            ),
            misconceptions=(
                "kv_forgot_values",
                "kv_one_layer",
                "kv_fp32",
                "kv_ignored_shared_heads",
            ),
        ),
        Exercise(
            id="q6",
            title="weights or cache",
            question="GPT-2 {size} generates {batch} sequences of {sequence} tokens in fp16 "
            "(weights and cache). Which takes more memory?",
            params={
                "size": ("small", "medium", "large", "xl"),
                "batch": (8, 1, 32),
                "sequence": (1024, 256),
            },
            answer=Choice(_PARTS),
            solve=_larger,
            misconceptions=("kv_forgot_values", "kv_one_layer"),
        ),
        Exercise(
            id="q7",
            title="the largest batch for generation",
            question="GPT-2 {size} generates sequences of {sequence} tokens with {weights} "
            "weights and a {weights} key/value cache on a card sold as {card} GB. With the "
            "book's card budget (its memory less a 1.5 GiB reserve for the CUDA context, the "
            "driver and the allocator), and counting only the weights and the cache, what is "
            "the largest batch?",
            params={
                "size": ("medium", "small", "large"),
                "sequence": (1024, 512),
                "weights": ("fp16", "int8"),
                "card": (16, 8, 24),
            },
            answer=Integer(),
            solve=_largest_batch,
            misconceptions=(
                "kv_forgot_values",
                "kv_one_layer",
                "no_card_reserve",
                "card_gb_as_decimal",
            ),
            points=2,
        ),
    ),
)
