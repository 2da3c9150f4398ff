"""Which section of the book teaches each step a worked solution takes.

A worked solution (:mod:`~memtheory.exercises.derivation`) records, besides
its lines, the *kinds* of step it took: the library steps of
:class:`~memtheory.exercises.reasoning.Reasoning` (``parameter_count``,
``optimizer``, ``in_unit``...), the accounting choices made inside them
(``convention_autograd``, ``precision_master_copy``...) and the named steps of
the later chapters' helpers (``kv_cache_formula``, ``zero_stage``..., the names
:func:`~memtheory.exercises.reasoning.own_step` looks up). :data:`STEP_SECTIONS`
maps each kind to the one section of the book where a reader learns it, so a
solution can say where to read up on each step without any solution naming a
section by hand. ``tests/exercises/test_sections.py`` checks every section
against the book's sources (its heading is there, its anchor is the one Sphinx
gives it).

Examples
--------
>>> section = STEP_SECTIONS["parameter_count"]
>>> section.title, section.anchor
('A whole network', 'a-whole-network')
>>> print(section)
Chapter 2, "A whole network" (chapters/02_counting_parameters.html#a-whole-network)
>>> [s.title for s in sections_for(["in_unit", "to_bytes", "not a step kind"])]
['Units: MB is not MiB']
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["STEP_SECTIONS", "Section", "anchor", "sections_for"]


def anchor(title: str) -> str:
    r"""Return the anchor Sphinx gives a heading: its text in lower case, other runs as ``-``.

    The rule of ``docutils.nodes.make_id`` for the heading's text as a reader
    sees it (without Markdown's backquotes and dollar signs; a LaTeX command
    keeps its name): leading characters other than letters are dropped.

    Examples
    --------
    >>> anchor("Units: MB is not MiB"), anchor("8-bit optimizer states")
    ('units-mb-is-not-mib', 'bit-optimizer-states')
    >>> anchor(r"The logits: $B \times S \times V$"), anchor("What `torch.autocast` does")
    ('the-logits-b-times-s-times-v', 'what-torch-autocast-does')
    """
    text = re.sub(r"[`$\\]", "", title)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower())
    return re.sub(r"^[^a-z]+", "", slug).rstrip("-")


@dataclass(frozen=True)
class Section:
    """A section of the book: its chapter, the chapter's source file, and its heading.

    Attributes
    ----------
    chapter : int
        The chapter's number.
    page : str
        The chapter's source file under ``book/chapters/``, without ``.md``.
    title : str
        The section's heading, as the source writes it.
    label : str
        The MyST label ``(label)=`` the source puts before the heading, if any:
        the anchor then (a chapter's own heading has one).
    """

    chapter: int
    page: str
    title: str
    label: str = ""

    @property
    def anchor(self) -> str:
        """The heading's anchor on the built page: its label, else :func:`anchor` of its title."""
        return self.label or anchor(self.title)

    @property
    def href(self) -> str:
        """The section's address in the built book, from the book's root."""
        return f"chapters/{self.page}.html#{self.anchor}"

    @property
    def plain_title(self) -> str:
        """The heading without Markdown's backquotes and dollar signs."""
        return re.sub(r"[`$]", "", self.title)

    def __str__(self) -> str:
        return f'Chapter {self.chapter}, "{self.plain_title}" ({self.href})'


def _in(page: str) -> tuple[int, str]:
    return int(page[:2]), page


_CONSUMERS = Section(*_in("01_why_memory_runs_out"), "Why memory runs out", "ch-why-memory")
_UNITS = Section(*_in("01_why_memory_runs_out"), "Units: MB is not MiB")
_INPUT = Section(*_in("01_why_memory_runs_out"), "The input batch and the rest")
_DENSE = Section(*_in("02_counting_parameters"), "Dense layers")
_CONV = Section(*_in("02_counting_parameters"), "Convolutions")
_WHOLE = Section(*_in("02_counting_parameters"), "A whole network")
_WINDOW = Section(*_in("03_shapes_and_activations"), "The output-size formula")
_FLOOR = Section(*_in("03_shapes_and_activations"), "Why 25 becomes 12")
_ACTIVATIONS = Section(*_in("03_shapes_and_activations"), "Activations per image")
_BACKWARD = Section(*_in("04_backprop_and_the_x2"), "What the backward pass needs")
_X2 = Section(*_in("04_backprop_and_the_x2"), "The x2 rule")
_ALIVE = Section(*_in("04_backprop_and_the_x2"), "Which tensors are alive when")
_STATE = Section(*_in("05_optimizers"), "What each update rule keeps")
_LARGEST = Section(*_in("06_batch_size"), "The largest batch that fits")
_CARDS = Section(*_in("06_batch_size"), "Cards: GB, GiB, and what is usable")
_ONE_TYPE = Section(*_in("07_precision"), "One precision for everything")
_AUTOCAST = Section(*_in("07_precision"), "What `torch.autocast` does")
_MASTER = Section(*_in("07_precision"), "The variant: 16-bit weights and an fp32 master copy")
_EIGHT_BIT = Section(*_in("07_precision"), "8-bit optimizer states")
_THUMB = Section(*_in("08_worked_examples"), "A question on training memory, and the rule of thumb")
_INDICES = Section(*_in("10_what_estimates_miss"), "Integer indices and dropout masks")
_TEMPORARIES = Section(*_in("10_what_estimates_miss"), "Optimizer temporaries")
_SAVED = Section(*_in("11_theory_vs_measurement"), "What autograd keeps, storage by storage")
_EMBEDDINGS = Section(*_in("12_transformers"), "Embeddings")
_LAYER_NORM = Section(*_in("12_transformers"), "Layer norm")
_BLOCK = Section(*_in("12_transformers"), "The transformer block")
_SEQUENCE = Section(*_in("12_transformers"), "Memory against the sequence length")
_LAYER = Section(*_in("12_transformers"), "Activation memory per layer")
_ATTENTION = Section(*_in("12_transformers"), "Attention and its $S^2$ tensors")
_FLASH = Section(*_in("12_transformers"), "Flash attention")
_CHECKPOINT = Section(*_in("13_memory_techniques"), "Gradient checkpointing")
_ZERO = Section(*_in("13_memory_techniques"), "ZeRO: sharding the model states")
_OFFLOAD = Section(*_in("13_memory_techniques"), "CPU offload")
_FORWARD = Section(*_in("14_inference"), "One forward pass")
_KV = Section(*_in("14_inference"), "The key/value cache")
_NORM = Section(
    *_in("15_residual_networks"), "Batch normalisation: parameters, buffers, statistics"
)
_LOSS = Section(*_in("16_language_models"), "The loss and its fp32 copy")
_LLAMA = Section(*_in("16_language_models"), "A Llama block")
_LORA = Section(*_in("17_fine_tuning"), "LoRA: a low-rank update beside a frozen matrix")
_FROZEN = Section(*_in("17_fine_tuning"), "What a frozen weight costs")
_STILL_SAVED = Section(*_in("17_fine_tuning"), "What autograd still saves")
_QLORA = Section(*_in("17_fine_tuning"), "QLoRA: the frozen weights in 4 bits")
_SHARDED = Section(*_in("18_distributed_training"), "ZeRO and FSDP: sharding the model states")
_HOST = Section(*_in("18_distributed_training"), "CPU offload and host RAM")
_PIPELINE = Section(
    *_in("18_distributed_training"), "Pipeline parallelism and the micro-batches in flight"
)
_PER_DEVICE = Section(*_in("18_distributed_training"), "The per-device formula")
_EXPECT = Section(*_in("19_your_own_model"), "What to expect, in math")
_HOLD = Section(*_in("19_your_own_model"), "Where the formulas hold")
_CARD_BATCH = Section(*_in("19_your_own_model"), "The largest batch for a card")
_CANNOT = Section(*_in("19_your_own_model"), "What a trace cannot do")
_ALLOCATOR = Section(*_in("20_measuring_on_a_gpu"), "The caching allocator's rules")

STEP_SECTIONS: dict[str, Section] = {
    # the library steps of Reasoning, as the Recorder takes them
    "output_size": _WINDOW,  # a network with a convolution or a pooling
    "pool_output_size": _FLOOR,
    "parameter_count": _WHOLE,
    "parameters_Dense": _DENSE,  # a layer's own count, by the layer's class
    "parameters_Linear": _DENSE,
    "parameters_Conv2d": _CONV,
    "parameters_Embedding": _EMBEDDINGS,
    "parameters_PositionEmbedding": _EMBEDDINGS,
    "parameters_LayerNorm": _LAYER_NORM,
    "parameters_MultiHeadAttention": _BLOCK,
    "parameters_BatchNorm2d": _NORM,
    "activation_count": _ACTIVATIONS,
    "input_elements": _INPUT,
    "optimizer": _STATE,
    "convention_breakdown": _X2,
    "convention_autograd": _ALIVE,
    "convention_rule_of_thumb": _THUMB,
    "precision_one_type": _ONE_TYPE,
    "precision_autocast": _AUTOCAST,
    "precision_master_copy": _MASTER,
    "memory_consumers": _CONSUMERS,  # weights or an input batch alone, no activations
    "forward_pass": _FORWARD,  # the activations of a forward pass alone
    "saved_for_backward": _BACKWARD,
    "to_bytes": _UNITS,
    "in_unit": _UNITS,
    "largest_value": _LARGEST,
    # the named steps of the later chapters' helpers (own_step's names)
    "usable_bytes": _CARDS,
    "adam8bit_state_bytes": _EIGHT_BIT,
    "index_dtype": _INDICES,
    "step_implementation": _TEMPORARIES,
    "saved": _SAVED,
    "accounting": _ALIVE,
    "activation_bytes": _LAYER,
    "attention_saved": _ATTENTION,
    "attention_specs": _FLASH,
    "uniform_memory": _CHECKPOINT,
    "uniform_recompute": _CHECKPOINT,
    "zero_stage": _ZERO,
    "offloaded_components": _OFFLOAD,
    "kv_cache_formula": _KV,
    "buffers": _NORM,
    "with_buffers": _NORM,
    "norm_count": _NORM,
    "loss_upcast": _LOSS,
    "read_config": _LLAMA,
    "lora_parameter_count": _LORA,
    "finetune_memory": _FROZEN,
    "constant_bits_per_parameter": _QLORA,
    "nf4_bytes": _QLORA,
    "parallel_options": _PER_DEVICE,
    "held_micro_batches": _PIPELINE,
    "host_per_node": _HOST,
    "saved_specs": _EXPECT,
    "within_trace": _HOLD,
    "card_bytes": _CARD_BATCH,
    "quadratic_takes_over": _SEQUENCE,
    "frozen_saved": _STILL_SAVED,
    "zero_not_sharded": _SHARDED,
    "untraceable": _CANNOT,
    "allocator_pool": _ALLOCATOR,
    "block_bytes": _ALLOCATOR,
    "segment_bytes": _ALLOCATOR,
}
"""Each kind of step a worked solution takes, and the section of the book that teaches it."""


def sections_for(kinds: Iterable[str]) -> tuple[Section, ...]:
    """Return the sections that teach these kinds of step: in the order taken, each once.

    A kind with no section (a solver's own arithmetic) is passed over.

    Examples
    --------
    >>> [s.chapter for s in sections_for(["optimizer", "parameter_count", "optimizer"])]
    [5, 2]
    """
    found: dict[Section, None] = {}
    for kind in kinds:
        section = STEP_SECTIONS.get(kind)
        if section is not None:
            found.setdefault(section)
    return tuple(found)
