"""The calculator's compiled JavaScript, run with node, against memtheory's own evaluation.

Each formula the page uses (components, total, peak candidates) is compiled by
memtheory.calculator; node runs the compiled code and the results must equal
what memtheory gives there, to the byte: the Footprint's own evaluation at
random sizes, and ``memtheory.estimate.estimate`` under the same recipe (its
peak, and its largest batch on a card).
"""

import json
import random
import shutil
import subprocess

import pytest
import sympy as sp

from memtheory.calculator import (
    CALCULATOR_MODELS,
    NO_ATTENTION,
    RECIPES,
    RUNTIME,
    assumptions,
    batchnorm_counts,
    bundle,
    bundle_script,
    choice_key,
    exact_js,
    footprint,
    peak_candidates,
    setup,
    source_examples,
    step,
)
from memtheory.errors import UnsupportedError
from memtheory.symbols import B, H, S

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")


def run_node(program: str) -> object:
    """Run a JavaScript program with node; it prints one JSON value."""
    done = subprocess.run([NODE, "-"], input=program, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def rational(pair: list[str]) -> sp.Rational:
    """Return a [numerator, denominator] pair of strings as a sympy Rational."""
    return sp.Rational(int(pair[0]), int(pair[1]))


@needs_node
def test_printer_floor_ceiling_max_and_negative_rationals_are_exact():
    """Random expressions with floors of negative fractions and Max: node equals sympy."""
    rng = random.Random(15)
    expressions = []
    for _ in range(40):
        a, b, c = (sp.Rational(rng.randint(-50, 50), rng.randint(1, 9)) for _ in range(3))
        expressions.append(
            a * B**2 + sp.floor(b * H + c) * S + sp.ceiling((B - 3 * H) / 7)
            + sp.Max(a * B, c * S + 2**60) - sp.floor(sp.floor(H / 3) / 2) ** 3
        )
    points = [{"B": rng.randint(1, 10**6), "H": rng.randint(1, 999), "S": rng.randint(1, 10**5)}
              for _ in range(5)]
    calls = ",".join(
        f"(()=>{{const v=R({exact_js(e)});return [String(v[0]),String(v[1])];}})()"
        for e in expressions
    )
    program = RUNTIME + "const out=[];" + "".join(
        f"{{const B=[{p['B']}n,1n],H=[{p['H']}n,1n],S=[{p['S']}n,1n];out.push([{calls}]);}}"
        for p in points
    ) + "console.log(JSON.stringify(out));"
    results = run_node(program)
    for point, values in zip(points, results, strict=True):
        for expression, value in zip(expressions, values, strict=True):
            expected = expression.xreplace({B: point["B"], H: point["H"], S: point["S"]})
            assert rational(value) == expected, expression


def test_printer_refuses_what_it_cannot_compute_exactly():
    """A square root or a modulo is refused, not printed as inexact JavaScript."""
    with pytest.raises(UnsupportedError, match="sqrt|Pow|whole positive powers"):
        exact_js(sp.sqrt(B))
    with pytest.raises(UnsupportedError, match="Mod"):
        exact_js(sp.Mod(B, 3))


def test_unknown_choices_are_refused():
    """A model, recipe, optimizer, attention or count the page does not offer is an error."""
    with pytest.raises(UnsupportedError, match="no model 'gpt5'"):
        footprint("gpt5")
    with pytest.raises(UnsupportedError, match="no recipe 'deepspeed-zero3'"):
        footprint("gpt2", recipe="deepspeed-zero3")
    with pytest.raises(UnsupportedError, match="no attention 'flash3'"):
        footprint("gpt2", attention="flash3")
    with pytest.raises(UnsupportedError, match="no convention 'guess'"):
        footprint("gpt2", convention="guess")
    with pytest.raises(UnsupportedError, match="has no attention"):
        footprint("resnet50", attention="eager")


def test_a_choice_is_its_recipe_with_the_pages_changes_only():
    """The setup of a choice differs from the named recipe in the optimizer and attention only."""
    from memtheory.recipes import Setup

    for recipe in RECIPES:
        assert setup(recipe) == Setup.recipe(recipe)
        changed = setup(recipe, "sgd", "eager")
        assert changed.optimizer == "sgd" and changed.attention == "eager"
        assert changed.changed(optimizer="adamw", attention="sdpa", name=recipe) == Setup.recipe(
            recipe
        )


def test_the_page_states_the_recipes_assumptions():
    """The assumed lines are the recipe's own describe() for the checkpoint's dtype."""
    from memtheory.recipes import Setup

    lines = assumptions("llama-3-8b", recipe="hf-trainer")
    assert lines == Setup.recipe("hf-trainer").describe("bf16")
    image = assumptions("resnet50", recipe="pytorch-amp")
    assert not any(line.startswith("attention:") for line in image)
    assert len(image) == len(Setup.recipe("pytorch-amp").describe("fp32")) - 1


@needs_node
@pytest.mark.slow
@pytest.mark.parametrize("models", [("stackexchange-cnn", "gpt2"), ("vgg16",)])
def test_compiled_formulas_equal_memtheory_at_random_sizes(models):
    """Every choice of the bundle, at random sizes: components, total and peak, byte for byte."""
    rng = random.Random(2026)
    data = bundle(models)
    cases = []
    for key in models:
        model = CALCULATOR_MODELS[key]
        low = data["models"][key]["min_size"]
        for choice in data["models"][key]["choices"]:
            size = rng.randint(low, model.max_size if model.kind == "sequence" else 300)
            cases.append((key, choice, rng.randint(2, 5000), size))
    script = bundle_script(data)
    program = script + "const out=[];const s=v=>[String(R(v)[0]),String(R(v)[1])];" + "".join(
        "{"
        f"const key={json.dumps(key)},c=MT_DATA.models[key].choices[{json.dumps(choice)}];"
        f"const z=MT_AT(key,{batch}n,{size}n),f=i=>MT_VALUE(i,z);"
        "out.push({components:c.components.map(([n,i])=>[n,s(f(i))]),total:s(f(c.total)),"
        f"peak:s(MT_PEAK(key,c,{batch}n,{size}n)[0])}});}}"
        for key, choice, batch, size in cases
    ) + "console.log(JSON.stringify(out));"
    results = run_node(program)
    for (key, choice, batch, size), shown in zip(cases, results, strict=True):
        optimizer, recipe, attention, convention = choice.split("|")
        symbol = CALCULATOR_MODELS[key].size_symbol.name
        expected = footprint(key, optimizer, recipe, attention, convention).evaluate(
            B=batch, **{symbol: size}
        )
        where = f"{key} {choice} B={batch} {symbol}={size}"
        assert {n: rational(v) for n, v in shown["components"]} == dict(expected.components), where
        assert rational(shown["total"]) == expected.total, where
        assert rational(shown["peak"]) == expected.peak, where


CARD = "A100-80GB"
"""The card of the largest-batch check: GPT-2 and ResNet fit many, Llama-3-8B in bf16 a few,
and Llama-3-8B with fp32 weights and AdamW state (16 bytes a parameter) none."""


@pytest.fixture(scope="module")
def every_model():
    """The page's whole bundle (every model, recipe, attention, optimizer and count)."""
    return bundle()


def _points(key: str, data: dict) -> list[tuple[int, int]]:
    """Three (batch, size) points of a model: its defaults and two drawn in its range."""
    model, entry = CALCULATOR_MODELS[key], data["models"][key]
    rng = random.Random(key)
    top = model.max_size if model.kind == "sequence" else 512
    return [(model.default_batch, model.default_size)] + [
        (rng.randint(1, 3 * model.default_batch), rng.randint(entry["min_size_batch1"], top))
        for _ in range(2)
    ]


@needs_node
@pytest.mark.slow
@pytest.mark.parametrize("key", [k for k, m in CALCULATOR_MODELS.items() if m.estimate_name])
def test_the_page_answers_as_memtheory_estimate(every_model, key):
    """Per recipe: the peak at three points and the largest batch on a card are estimate()'s.

    The peak is checked twice: the sympy candidates the bundle compiles,
    evaluated in Python, and the compiled JavaScript, run by node with the
    page's own search (MT_PEAK, MT_LARGEST over the card less the recipe's
    reserve, as the page computes it).
    """
    from memtheory.estimate import estimate
    from memtheory.gpus import GPUS

    model = CALCULATOR_MODELS[key]
    points = _points(key, every_model)
    size_name = "sequence" if model.kind == "sequence" else "image"
    attention = "sdpa" if model.kind == "sequence" else NO_ATTENTION
    jobs = []
    for recipe in RECIPES:
        choice = choice_key("adamw", recipe, attention, "exact")
        for batch, size in points:
            jobs.append(f"s(MT_PEAK({json.dumps(key)},c({json.dumps(choice)}),{batch}n,{size}n)[0])")
        usable = (f"[BigInt(MT_DATA.gpus.find(g=>g[0]==={json.dumps(CARD)})[1])"
                  f"-BigInt(MT_DATA.recipes[{json.dumps(recipe)}].reserve),1n]")
        jobs.append(f"String(MT_LARGEST({json.dumps(key)},c({json.dumps(choice)}),"
                    f"{model.default_size}n,{usable}))")
    program = (
        bundle_script(every_model) + "const s=v=>[String(R(v)[0]),String(R(v)[1])];"
        f"const c=k=>MT_DATA.models[{json.dumps(key)}].choices[k];"
        f"console.log(JSON.stringify([{','.join(jobs)}]));"
    )
    shown = iter(run_node(program))
    for recipe in RECIPES:
        for batch, size in points:
            answer = estimate(model.estimate_name, batch=batch, setup=recipe, **{size_name: size})
            candidates = peak_candidates(key, "adamw", recipe, attention, "exact")
            values = {B: batch, model.size_symbol: size}
            in_python = max(candidate.xreplace(values) for candidate, _ in candidates)
            where = f"{key} {recipe} B={batch} {model.size_symbol}={size}"
            assert in_python == answer.peak, where
            assert rational(next(shown)) == answer.peak, where
        on_card = estimate(model.estimate_name, batch=1, setup=recipe, gpu=CARD,
                           **{size_name: model.default_size})
        usable = GPUS[CARD].memory - every_model["recipes"][recipe]["reserve"]
        assert on_card.budget.usable == usable  # the page's rule is usable_memory's
        assert int(next(shown)) == on_card.max_batch, f"{key} {recipe} on {CARD}"


def test_the_pages_steps_are_estimates_own_derivation():
    """GPT-2 under each recipe: the same precision, convention and reason as estimate()."""
    from memtheory.estimate import estimate

    for recipe in RECIPES:
        found = step("gpt2", recipe=recipe)
        answer = estimate("gpt2", batch=2, sequence=64, setup=recipe)
        assert found.precision == answer.settings["precision"]
        assert found.convention == answer.convention_name
        assert found.why in answer.why


def test_batchnorm_refuses_one_value_per_channel_in_pytorch():
    """ResNet-50: PyTorch refuses the smallest image batch 1 cannot take, accepts the bundle's.

    The bundle's smallest side at batch 1 is where every BatchNorm2d sees at
    least two values per channel; one pixel less, the last stage's map is
    1 x 1 and PyTorch's BatchNorm raises in training. At batch 2 the smallest
    side every layer takes is enough.
    """
    torch = pytest.importorskip("torch")
    from memtheory.validation.reference_models import ResNetReference

    data = bundle(["resnet50"])["models"]["resnet50"]
    smallest, smallest_any = data["min_size_batch1"], data["min_size"]
    counts = batchnorm_counts("resnet50")
    at = lambda b, h: min(count.xreplace({B: b, H: h}) for count, _ in counts)  # noqa: E731
    assert at(1, smallest - 1) == 1 and at(1, smallest) >= 2 and at(2, smallest_any) >= 2
    module = ResNetReference("bottleneck", (3, 4, 6, 3)).train()
    with torch.no_grad():
        with pytest.raises(ValueError, match="more than 1 value per channel"):
            module(torch.zeros(1, 3, smallest - 1, smallest - 1))
        module(torch.zeros(1, 3, smallest, smallest))
        module(torch.zeros(2, 3, smallest_any, smallest_any))


@needs_node
def test_the_page_refuses_what_batchnorm_refuses():
    """MT_TOO_FEW names a BatchNorm at batch 1 below the smallest side, and nothing at or above."""
    data = bundle(["resnet50", "stackexchange-cnn"])
    smallest = data["models"]["resnet50"]["min_size_batch1"]
    program = bundle_script(data) + "console.log(JSON.stringify([" + ",".join(
        f"MT_TOO_FEW({json.dumps(key)},{b}n,{h}n)"
        for key, b, h in [("resnet50", 1, smallest - 1), ("resnet50", 1, smallest),
                          ("resnet50", 2, 1), ("stackexchange-cnn", 1, 50)]
    ) + "]));"
    refused, fine, two, cnn = run_node(program)
    assert refused and "BatchNorm2d" in refused
    assert fine is None and two is None and cnn is None
    assert data["models"]["stackexchange-cnn"]["batchnorm"] == []


def test_source_examples_carry_the_calculator_slips():
    """Both examples load settings the page offers and list every figure of chapter 8's rebuild."""
    from memtheory.worked_examples import memory_calculator

    examples = source_examples()
    figures = memory_calculator().figures
    assert len(examples["bert"]["slips"]) + len(examples["resnet"]["slips"]) == len(figures)
    # The source printed 419.5 "MB" for 110M fp32 parameters (document 004); exactly, in MiB
    # rounded as it rounded:
    exact = f"{110_000_000 * 4 / 2**20:.1f} MiB"
    assert ["parameters", "419.5 MB", exact] == examples["bert"]["slips"][1][:3]
    for name in ("bert", "resnet"):
        settings = examples[name]["settings"]
        assert settings["model"] in CALCULATOR_MODELS
        footprint(settings["model"], settings["optimizer"], settings["recipe"],
                  settings["attention"], settings["convention"])
