"""The calculator's compiled JavaScript, run with node, against memtheory's own evaluation.

Each formula the page uses (components, total, peak candidates) is compiled by
memtheory.calculator; node runs the compiled code at random sizes and the
results must equal what memtheory's Footprint.evaluate gives there, to the byte.
"""

import json
import random
import shutil
import subprocess

import pytest
import sympy as sp

from memtheory.calculator import (
    CALCULATOR_MODELS,
    RUNTIME,
    bundle,
    bundle_script,
    exact_js,
    footprint,
    source_examples,
)
from memtheory.errors import UnsupportedError
from memtheory.symbols import B, H, S

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")


def run_node(program: str) -> object:
    """Run a JavaScript program with node; it prints one JSON value."""
    done = subprocess.run([NODE, "-e", program], capture_output=True, text=True, timeout=120)
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


def test_unknown_choices_and_mixed_precision_under_autograd_are_refused():
    """A name the page does not offer, and mixed precision under autograd, are errors."""
    with pytest.raises(UnsupportedError, match="no model 'gpt5'"):
        footprint("gpt5", "adamw", "fp32", "breakdown")
    with pytest.raises(UnsupportedError, match="autograd convention does not model"):
        footprint("gpt2", "adamw", "mixed-bf16", "autograd")


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
            cases.append((key, choice, rng.randint(1, 5000), size))
    script = bundle_script(data)
    program = script + "const out=[];const s=v=>[String(R(v)[0]),String(R(v)[1])];" + "".join(
        "{"
        f"const m=MT_DATA.models[{json.dumps(key)}],c=m.choices[{json.dumps(choice)}];"
        f"const B=[{batch}n,1n],S=[{size if CALCULATOR_MODELS[key].kind == 'sequence' else 1}n,1n],"
        f"H=[{size if CALCULATOR_MODELS[key].kind == 'image' else 1}n,1n];"
        f"const a=MT_ATOMS[{json.dumps(key)}](B,S,H),f=i=>MT_CODE[i](B,S,H,a);"
        "out.push({components:c.components.map(([n,i])=>[n,s(f(i))]),total:s(f(c.total)),"
        "peak:s(X(...c.peak.map(([i])=>f(i))))});}"
        for key, choice, batch, size in cases
    ) + "console.log(JSON.stringify(out));"
    results = run_node(program)
    for (key, choice, batch, size), shown in zip(cases, results, strict=True):
        optimizer, precision, convention = choice.split("|")
        symbol = CALCULATOR_MODELS[key].size_symbol.name
        expected = footprint(key, optimizer, precision, convention).evaluate(
            B=batch, **{symbol: size}
        )
        where = f"{key} {choice} B={batch} {symbol}={size}"
        assert {n: rational(v) for n, v in shown["components"]} == dict(expected.components), where
        assert rational(shown["total"]) == expected.total, where
        assert rational(shown["peak"]) == expected.peak, where


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
        footprint(settings["model"], settings["optimizer"], settings["precision"],
                  settings["convention"])
