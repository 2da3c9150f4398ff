"""Every number the prose states is computed, checked, or on a list that says why it need not be.

A number typed in a chapter's prose (outside code, math, roles, headings and
captions; a glued value is a role, so it never counts) passes when:

* it appears as a literal in the chapter's code cells: an input the chapter
  sets (batch 32, 500 units) or a value a hidden cell asserts;
* it is a small count (0 to 10: "two kinds", "step 3", "x2");
* it is checked against the library here: the PyTorch release the kernel
  plans were checked on, the card reserve of :mod:`memtheory.gpus`, or a card
  size that :data:`memtheory.gpus.GPUS` lists, written as a card ("24 GB");
* it is a year in a citation ("Korthikanti et al. (2022)") or a place in a cited
  text ("Section 4.2", "Table 2.1");
* it is a dtype's width ("16-bit", "8-bit"), which the chapters define;
* it is the CUDA allocator's 512-byte rounding (:data:`memtheory.cuda_allocator.MIN_BLOCK`);
* it is on :data:`ALLOWED`, with the reason it is not computed in the chapter.

A number that passes none of these is a claim nobody checks: glue it, or
assert it in a hidden cell.
"""

from __future__ import annotations

import re

import pytest

from memtheory.conventions.autograd.torch_version import CHECKED_TORCH_VERSION
from memtheory.cuda_allocator import MIN_BLOCK
from memtheory.gpus import DEFAULT_RESERVE, GPUS
from memtheory.units import format_bytes
from tests.book.cells import code_cells
from tests.book.prose import chapters, prose_lines

# A hyphen before it makes it part of a name (VGG-16, ResNet-50), not a number.
NUMBER = re.compile(r"(?<![\w.-])\d[\d,]*(?:\.\d+)?(?![\w])")
CODE_NUMBER = re.compile(r"(?<![\w.])\d[\d_]*(?:\.\d+)?")
TORCH_RELEASE = ".".join(CHECKED_TORCH_VERSION.split(".")[:2])
RESERVE_GIB = format_bytes(DEFAULT_RESERVE, "GiB").split()[0].rstrip("0").rstrip(".")
CARD_SIZES = {str(card.memory // 2**30) for card in GPUS.values()}

# (chapter stem prefix, number as printed) -> why it is not computed in the chapter.
_QUESTION = "quoted from the StackExchange question the chapter discusses"
_REFERENCE = (
    "a size memtheory.validation.reference_models builds its test models at (its docstring)"
)
ALLOWED: dict[tuple[str, str], str] = {
    ("03", "12.5"): "quoted: the non-integer size the StackExchange answer pointed out",
    ("08", "532,752"): _QUESTION + " (the asker's activation count)",
    ("08", "19,072,984"): _QUESTION + " (the asker's parameter count)",
    ("08", "500"): "the width the question's CNN is built with (chapter 2 asserts it)",
    ("08", "1.5"): _QUESTION + " (the asker's first estimate, GB)",
    ("08", "4.5"): _QUESTION + " (the asker's second estimate, GB)",
    ("08", "16"): "the sentence's own sum: 12 bytes per parameter and a 4-byte master copy",
    ("08", "0.12"): "quoted: the calculator page's activation estimate",
    ("08", "50"): "quoted: the calculator page's guess (50 MB)",
    ("10", "1.5"): "an illustration of fragmentation (1.5 GiB free in pieces), no model's figure",
    ("11", "64"): "the StackExchange question's batch, which chapter 8 reproduces",
    ("12", "1.16"): "TRL's version, the one tests/pytorch/test_trl_recipe.py tracks",
    ("17", "1.16"): "TRL's version, the one tests/pytorch/test_dpo_recipe.py tracks",
    ("12", "32,768"): "TRL 1.16's tile width (trl/kernels/chunked_logprob.py), read from the "
                      "installed TRL in tests/pytorch/test_trl_recipe.py",
    ("11", "240,000"): "quoted: the forum thread's layer width, which the reference model scales",
    ("11", "24"): _REFERENCE,
    ("11", "40"): _REFERENCE,
    ("11", "32"): _REFERENCE,
    ("12", "11"): "Korthikanti et al. (2022)'s attention share of the 34, cited",
    ("12", "19"): "Korthikanti et al. (2022)'s MLP share of the 34, cited",
    ("15", "36"): _REFERENCE,
    ("15", "40"): _REFERENCE,
    ("16", "50,257"): "GPT-2's vocabulary, from its published configuration",
    ("16", "128,000"): "Llama 3's vocabulary (128,256, rounded in the text), from its config",
    ("16", "256,000"): "Gemma's vocabulary, from its published configuration",
    ("17", "0.127"): "quoted: the QLoRA paper's double-quantisation overhead, bits per parameter",
    ("17", "780"): "quoted: the QLoRA abstract's 'more than 780 GB', glued beside the derivation",
    ("18", "25"): "DistributedDataParallel's bucket_cap_mb default, cited from PyTorch",
    ("18", "70"): "an example model size (70 billion parameters) for the host-memory arithmetic",
    ("20", "30"): "an example request size (30 MiB) for the allocator's segment rule",
}


def _checked(number: str, after: str, before: str) -> bool:
    """Whether the number is one the library states, or a year in a citation."""
    if number == TORCH_RELEASE and re.search(r"(PyTorch|torch)\s*$", before):
        return True
    if number == RESERVE_GIB and after.startswith(" GiB"):
        return True
    if number in CARD_SIZES and re.match(r"\s*(GB|GiB)\b", after):
        return True
    if number in {str(MIN_BLOCK), str(MIN_BLOCK - 1)} and re.match(r"\s*(bytes|$)", after):
        return True  # PyTorch's 512-byte block rounding, and the most it adds
    if number in {"8", "16", "32", "64"} and re.match(r"(-bit|\s+bits)", after):
        return True
    if re.search(r"(Section|Table|Figure|Appendix|Eq\.)\s+$", before):
        return True
    return bool(re.fullmatch(r"(19|20)\d\d", number)
                and re.search(r"(et al\.|\w)[,]?\s*\($|et al\.,.*\s$", before))


def unchecked_numbers(source, allowed=ALLOWED) -> list[tuple[str, str]]:
    """The numbers of a chapter's prose that pass none of the module docstring's tests."""
    code = "\n".join(cell for _, cell in code_cells(source))
    in_code = {m.group(0).replace("_", "") for m in CODE_NUMBER.finditer(code)}
    left = []
    for line in prose_lines(source):
        for found in NUMBER.finditer(line.text):
            printed = found.group(0).rstrip(",")
            number = printed.replace(",", "")
            if number in in_code or (number.isdigit() and int(number) <= 10):
                continue
            before, after = line.text[: found.start()], line.text[found.end():]
            if _checked(printed, after, before):
                continue
            if (source.stem[:2], printed) in allowed:
                continue
            left.append((printed, f"line {line.number}: {line.text.strip()[:80]}"))
    return left


@pytest.mark.parametrize("source", chapters(), ids=lambda p: p.stem)
def test_every_number_in_the_prose_is_computed_or_explained(source):
    """Each number a chapter's prose states is in its code, checked here, or allowed."""
    assert unchecked_numbers(source) == []


def test_every_allowed_number_is_needed():
    """Each allow-list entry is a number its chapter states and nothing else accounts for."""
    flagged = {(source.stem[:2], printed) for source in chapters()
               for printed, _ in unchecked_numbers(source, allowed={})}
    assert sorted(set(ALLOWED) - flagged) == []
