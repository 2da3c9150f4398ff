r"""The book's live calculator: memtheory's formulas compiled to exact JavaScript at build time.

The calculator page of the book runs in a browser with no Python behind it.
So that it can never disagree with the library, nothing on it is a formula
typed in JavaScript: :func:`bundle` derives the step of every model, recipe,
attention kernel and optimizer the page offers through the same code path as
:func:`memtheory.estimate.estimate` (:func:`~memtheory.estimate.resolve.resolve_model`
with the recipe's attention, then :func:`~memtheory.estimate.step.step_memory`
with the recipe's precision for the checkpoint's dtype and its exact
convention, :meth:`Setup.convention() <memtheory.recipes.Setup.convention>`),
and compiles each component, the total and the peak to JavaScript with
:class:`ExactJavaScriptPrinter`, a subclass of sympy's JavaScript code printer.
The page therefore shows ``memtheory estimate``'s numbers for a single GPU.

Recipes
    A :class:`~memtheory.recipes.Setup` holds every assumption of the step:
    the precision (or the checkpoint's dtype), the optimizer implementation,
    the attention kernel, whether the loop keeps the logits, the reserve. The
    page offers :data:`RECIPES` and prints the recipe's assumptions
    (:meth:`Setup.describe <memtheory.recipes.Setup.describe>`) under the result.
    The breakdown convention (chapter 4's estimate, not a bound) is there as a labelled
    teaching comparison (:data:`CONVENTIONS`).
Exact arithmetic
    The printer does not emit JavaScript numbers (doubles, exact only up to
    :math:`2^{53}`, which a Llama-size step times a large batch passes). Every
    constant becomes a rational of two ``BigInt``\ s and every operation a call
    into a twenty-line runtime (:data:`RUNTIME`): ``A`` adds, ``M`` multiplies,
    ``P`` raises to a whole power, ``F`` and ``C`` are ``floor`` and
    ``ceiling``, ``X`` is ``Max``. A value is exact at any size.
The peak
    The exact step's peak is the largest moment of its timeline: a ``Max`` of
    one candidate per moment, which :mod:`memtheory.max_pruning` has already
    pruned to the candidates that can be the largest (:func:`peak_candidates`).
    The bundle ships those candidates, each with the label of the moment it
    belongs to, so the page shows where the peak happens.
The largest batch
    Every candidate is a polynomial in the batch ``B`` whose coefficients are
    sums of positive terms (checked here as the bundle is built: a model for
    which this fails is refused), so the peak never decreases as ``B`` grows.
    :data:`SEARCH` doubles ``B`` until the peak passes the card's usable
    memory (the card less the recipe's reserve, as
    :func:`memtheory.gpus.usable_memory` computes it), then bisects: the
    largest batch is exact in about :math:`2\log_2 B` evaluations.
Sizes PyTorch refuses
    Besides the sizes every layer needs (:meth:`Network.size_checks
    <memtheory.network.Network.size_checks>`), a ``BatchNorm2d`` in training
    needs more than one value per channel (``batch x height x width > 1``):
    ResNet-50 at batch 1 and an image side of 32 or less ends at a 1 x 1 map,
    which PyTorch refuses. The bundle carries those counts
    (:func:`batchnorm_counts`) and the page refuses such a step.

Examples
--------
>>> from memtheory.symbols import B, H
>>> import sympy as sp
>>> exact_js(3 * B * sp.floor(H / 2) ** 2 + 7)
'A(7n,M(3n,B,P(F(M(Q(1n,2n),H)),2)))'
>>> CALCULATOR_MODELS["gpt2"].title
'GPT-2 small'
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import sympy as sp
from sympy.printing.jscode import JavascriptCodePrinter

from memtheory.conventions.autograd import AutogradConvention
from memtheory.errors import MemtheoryError, UnsupportedError
from memtheory.estimate.resolve import ResolvedModel, resolve_model
from memtheory.estimate.step import Step, step_memory
from memtheory.evaluation import evaluate
from memtheory.footprint import COMPONENT_TITLES, Footprint
from memtheory.gpus import GPUS
from memtheory.layers import BatchNorm2d
from memtheory.max_pruning import provably_nonnegative, undominated
from memtheory.memory import training_memory
from memtheory.models import PRESETS
from memtheory.recipes import Setup, default_recipe
from memtheory.symbols import B, H, S
from memtheory.worked_examples import memory_calculator, small_cnn_network

__all__ = [
    "ATTENTIONS",
    "CALCULATOR_MODELS",
    "CONVENTIONS",
    "NO_ATTENTION",
    "OPTIMIZERS",
    "RECIPES",
    "RUNTIME",
    "SEARCH",
    "CalculatorModel",
    "ExactJavaScriptPrinter",
    "assumptions",
    "batchnorm_counts",
    "bundle",
    "bundle_script",
    "choice_key",
    "exact_js",
    "footprint",
    "peak_candidates",
    "setup",
    "source_examples",
    "step",
]

Kind = Literal["image", "sequence"]


@dataclass(frozen=True)
class CalculatorModel:
    """A model the calculator offers.

    Attributes
    ----------
    title : str
        As the page shows it.
    build : callable
        ``build(flash)`` returns the :class:`~memtheory.estimate.resolve.ResolvedModel`
        (the Network, symbolic in the batch ``B`` and the image side ``H`` or
        the sequence ``S``, and the dtype of its checkpoint), with SDPA's
        attention (``flash=True``) or eager attention.
    kind : {"image", "sequence"}
    default_size, max_size : int
        The image side or sequence length the page starts at, and the largest
        it accepts (a language model's position table).
    default_batch : int
    note : str
        What the model is, in a line.
    estimate_name : str or None
        The name ``memtheory estimate`` takes for it (None: not one of its models).
    """

    title: str
    build: Callable[[bool], ResolvedModel]
    kind: Kind
    default_size: int
    max_size: int
    default_batch: int
    note: str
    estimate_name: str | None = None

    @property
    def size_symbol(self) -> sp.Symbol:
        """``H`` for an image model, ``S`` for a language model."""
        return H if self.kind == "image" else S


def _stackexchange_cnn(flash: bool) -> ResolvedModel:
    network = small_cnn_network(image_size=H)
    return ResolvedModel(network, "StackExchange CNN", "image", None, "worked example", "fp32")


def _builder(name: str) -> Callable[[bool], ResolvedModel]:
    def build(flash: bool) -> ResolvedModel:
        return resolve_model(name, batch=B, sequence=S, image=H, flash=flash)

    return build


def _llama_positions() -> int:
    return int(PRESETS["llama-3-8b"].config["max_position_embeddings"])


CALCULATOR_MODELS: dict[str, CalculatorModel] = {
    "stackexchange-cnn": CalculatorModel(
        "StackExchange CNN", _stackexchange_cnn, "image", 50, 1024, 64,
        "two padded 3x3 convolutions with 2x2 pooling, a 500-unit layer, 10 classes "
        "(the worked example of chapter 8)",
    ),
    "vgg16": CalculatorModel(
        "VGG-16", _builder("vgg16"), "image", 224, 1024, 32, "torchvision's VGG-16, 1000 classes",
        "vgg16",
    ),
    "resnet50": CalculatorModel(
        "ResNet-50", _builder("resnet50"), "image", 224, 1024, 64,
        "torchvision's ResNet-50 with BatchNorm, 1000 classes", "resnet50",
    ),
    "gpt2": CalculatorModel(
        "GPT-2 small", _builder("gpt2"), "sequence", 1024, 1024, 8,
        "124M parameters, with its language-model loss", "gpt2",
    ),
    "gpt2-medium": CalculatorModel(
        "GPT-2 medium", _builder("gpt2-medium"), "sequence", 1024, 1024, 4,
        "355M parameters, with its language-model loss", "gpt2-medium",
    ),
    "bert-base": CalculatorModel(
        "BERT-base", _builder("bert-base-mlm"), "sequence", 128, 512, 32,
        "110M parameters, with its masked-LM head and loss", "bert-base-mlm",
    ),
    "llama-3-8b": CalculatorModel(
        "Llama-3-8B", _builder("llama-3-8b"), "sequence", 2048, _llama_positions(), 1,
        "Llama-style decoder (RMSNorm, SwiGLU, RoPE, grouped-query attention) from its config",
        "llama-3-8b",
    ),
}
"""The models the page offers, by key."""

OPTIMIZERS: dict[str, str] = {
    "adamw": "Adam or AdamW (same state; every recipe's)",
    "sgd+momentum": "SGD with momentum",
    "sgd": "SGD (no state)",
}
"""Optimizer key (memtheory's name) -> label; the recipes use AdamW, the others override it."""

RECIPES: dict[str, str] = {
    "hf-trainer": "hf-trainer: transformers' Trainer, bf16=True",
    "pytorch-amp": "pytorch-amp: a PyTorch loop under torch.autocast(bfloat16)",
    "pytorch-fp32": "pytorch-fp32: a PyTorch loop in fp32",
}
"""Recipe key (:data:`memtheory.recipes.RECIPES`) -> label."""

ATTENTIONS: dict[str, str] = {
    "sdpa": "SDPA, flash or memory-efficient (the recipes' default)",
    "eager": "eager (S x S scores and probabilities kept)",
}
"""Attention key (:attr:`Setup.attention <memtheory.recipes.Setup.attention>`) -> label;
language models only."""

CONVENTIONS: dict[str, str] = {
    "exact": "the step as PyTorch runs it (what memtheory estimate answers)",
    "breakdown": "teaching comparison: chapter 4's breakdown (an estimate, not a bound)",
}
"""How the step is counted -> label: ``"exact"`` is :func:`memtheory.estimate.estimate`'s
(the autograd convention wherever it follows the step), ``"breakdown"`` every kept output
and its gradient, for comparison with chapter 4."""

NO_ATTENTION = "-"
"""The attention key of an image model's choices (it has no attention)."""

RUNTIME = """\
const G=(a,b)=>{a=a<0n?-a:a;b=b<0n?-b:b;while(b){[a,b]=[b,a%b];}return a;};
const Q=(n,d=1n)=>{if(d<0n){n=-n;d=-d;}const k=G(n,d)||1n;return [n/k,d/k];};
const R=x=>typeof x==="bigint"?[x,1n]:x;
const A=(...x)=>x.map(R).reduce((s,y)=>Q(s[0]*y[1]+y[0]*s[1],s[1]*y[1]));
const M=(...x)=>x.map(R).reduce((s,y)=>Q(s[0]*y[0],s[1]*y[1]));
const P=(x,k)=>{let r=[1n,1n];for(let i=0;i<k;i++)r=M(r,x);return r;};
const F=x=>{x=R(x);let q=x[0]/x[1];if(x[0]<0n&&q*x[1]!==x[0])q-=1n;return [q,1n];};
const C=x=>{x=R(x);let q=x[0]/x[1];if(x[0]>0n&&q*x[1]!==x[0])q+=1n;return [q,1n];};
const K=(x,y)=>{x=R(x);y=R(y);const d=x[0]*y[1]-y[0]*x[1];\
return d>0n?1:d<0n?-1:0;};
const X=(...x)=>x.map(R).reduce((s,y)=>K(s,y)>=0?s:y);
"""
"""The exact arithmetic the compiled formulas call: rationals as ``[numerator, denominator]``
pairs of ``BigInt`` (``Q``; ``R`` reads a bare ``BigInt`` integer as one), sum ``A``,
product ``M``, whole power ``P``, ``floor`` ``F``,
``ceiling`` ``C``, comparison ``K`` and ``Max`` ``X``."""

_ALLOWED = (sp.Add, sp.Mul, sp.Pow, sp.Integer, sp.Rational, sp.Symbol, sp.floor, sp.ceiling,
            sp.Max)


class ExactJavaScriptPrinter(JavascriptCodePrinter):
    """sympy's JavaScript printer, printing exact ``BigInt`` rational arithmetic (:data:`RUNTIME`).

    Only what memory formulas contain is accepted: sums, products, whole
    positive powers, rationals, size symbols, ``floor``, ``ceiling`` and
    ``Max``; anything else is an :class:`~memtheory.errors.UnsupportedError`.

    Examples
    --------
    >>> ExactJavaScriptPrinter().doprint(sp.ceiling(S / 3) + sp.Max(B, 4))
    'A(X(4n,B),C(M(Q(1n,3n),S)))'
    """

    def _print_Integer(self, expr: sp.Integer) -> str:  # noqa: N802 (sympy names)
        return f"{int(expr)}n"

    def _print_Rational(self, expr: sp.Rational) -> str:  # noqa: N802 (sympy names)
        if expr.q == 1:
            return self._print_Integer(sp.Integer(expr.p))
        return f"Q({int(expr.p)}n,{int(expr.q)}n)"

    _print_Zero = _print_One = _print_NegativeOne = _print_Integer  # noqa: N815
    _print_Half = _print_Rational  # noqa: N815

    def _call(self, name: str, args: Iterable[sp.Basic]) -> str:
        return f"{name}({','.join(self._print(arg) for arg in args)})"

    def _print_Add(self, expr: sp.Add, order: str | None = None) -> str:  # noqa: N802 (sympy names)
        return self._call("A", expr.args)  # any order: the sum is exact

    def _print_Mul(self, expr: sp.Mul, **kwargs: Any) -> str:  # noqa: N802 (sympy names)
        return self._call("M", expr.args)

    def _print_Pow(self, expr: sp.Pow, rational: bool = False) -> str:  # noqa: N802 (sympy names)
        exponent = expr.exp
        if not (exponent.is_Integer and exponent > 0):
            raise UnsupportedError(
                f"the calculator compiles whole positive powers only, not {expr}; "
                "rewrite the formula without it."
            )
        return f"P({self._print(expr.base)},{int(exponent)})"

    def _print_floor(self, expr: sp.floor) -> str:  # noqa: N802 (sympy names)
        return self._call("F", expr.args)

    def _print_ceiling(self, expr: sp.ceiling) -> str:  # noqa: N802 (sympy names)
        return self._call("C", expr.args)

    def _print_Max(self, expr: sp.Max) -> str:  # noqa: N802 (sympy names)
        return self._call("X", expr.args)

    def doprint(self, expr: Any, assign_to: Any = None) -> str:
        """Print ``expr``, refusing what the runtime cannot compute exactly."""
        expr = sp.sympify(expr)
        for node in sp.preorder_traversal(expr):
            if not isinstance(node, _ALLOWED):
                raise UnsupportedError(
                    f"the calculator cannot compile {type(node).__name__} ({node}) in {expr}: "
                    "only sums, products, whole powers, floor, ceiling and Max."
                )
        return str(super().doprint(expr, assign_to))


def exact_js(expr: sp.Expr | int) -> str:
    """Return ``expr`` as a JavaScript expression over :data:`RUNTIME` (symbols by their names).

    Examples
    --------
    >>> exact_js(sp.Rational(3, 2) * B)
    'M(Q(3n,2n),B)'
    """
    return ExactJavaScriptPrinter().doprint(expr)


SEARCH = """\
const MT_MOST=1n<<40n;
const MT_AT=(key,b,size)=>{const m=MT_DATA.models[key],B=[b,1n],\
S=[m.symbol==="S"?size:1n,1n],H=[m.symbol==="H"?size:1n,1n];\
return [B,S,H,MT_ATOMS[key](B,S,H)];};
const MT_VALUE=(index,z)=>R(MT_CODE[index](...z));
const MT_PEAK=(key,c,b,size)=>{const z=MT_AT(key,b,size);let best=null,moment="";\
for(const [i,l] of c.peak){const v=MT_VALUE(i,z);\
if(best===null||K(v,best)>0){best=v;moment=MT_DATA.text[l];}}return [best,moment,z];};
const MT_TOO_FEW=(key,b,size)=>{const z=MT_AT(key,b,size);\
for(const [i,l] of MT_DATA.models[key].batchnorm){\
if(K(MT_VALUE(i,z),[2n,1n])<0)return MT_DATA.text[l];}return null;};
const MT_LARGEST=(key,c,size,usable)=>{\
const fits=b=>K(MT_PEAK(key,c,b,size)[0],usable)<=0;if(!fits(1n))return 0n;\
let low=1n,high=2n;while(high<=MT_MOST&&fits(high)){low=high;high*=2n;}\
if(high<=MT_MOST){while(high-low>1n){const mid=(low+high)/2n;if(fits(mid))low=mid;else high=mid;}}\
return low===1n&&MT_TOO_FEW(key,1n,size)!==null?0n:low;};
"""
"""The page's questions, free of the page (node runs them in the tests): ``MT_AT`` (the sizes
and the model's floors and ceilings at batch ``b``), ``MT_PEAK`` (the peak at batch ``b``: the
candidates' maximum, and its moment), ``MT_TOO_FEW`` (the first ``BatchNorm2d`` that sees fewer
than two values per channel, or null) and ``MT_LARGEST`` (the largest batch whose peak fits
``usable`` bytes: doubling, then bisection, valid because every candidate is nondecreasing in
``B``; 0 when none fits, or when only batch 1 would and a BatchNorm refuses it)."""

def _known(what: str, name: str, table: Mapping[str, str]) -> None:
    if name not in table:
        raise UnsupportedError(
            f"the calculator has no {what} {name!r}; choose one of {', '.join(table)}."
        )


def _model(model: str) -> CalculatorModel:
    if model not in CALCULATOR_MODELS:
        raise UnsupportedError(
            f"the calculator has no model {model!r}; choose one of {', '.join(CALCULATOR_MODELS)}."
        )
    return CALCULATOR_MODELS[model]


def _attention(model: CalculatorModel, recipe: str, attention: str | None) -> str:
    """Return a choice's attention key: the recipe's if not given; images: :data:`NO_ATTENTION`."""
    if model.kind == "image":
        if attention not in (None, NO_ATTENTION):
            raise UnsupportedError(
                f"{model.title} has no attention: leave attention out (or {NO_ATTENTION!r})."
            )
        return NO_ATTENTION
    if attention is None:
        return Setup.recipe(recipe).attention
    _known("attention", attention, ATTENTIONS)
    return attention


def setup(recipe: str, optimizer: str = "adamw", attention: str | None = None) -> Setup:
    """Return the :class:`~memtheory.recipes.Setup` of a choice: the recipe with the page's changes.

    Parameters
    ----------
    recipe : str
        A key of :data:`RECIPES`.
    optimizer : str, default "adamw"
        A key of :data:`OPTIMIZERS` (every recipe's is AdamW).
    attention : str, optional
        A key of :data:`ATTENTIONS` (default the recipe's; :data:`NO_ATTENTION`
        for an image model, which keeps the recipe's).

    Examples
    --------
    >>> setup("hf-trainer").label, setup("hf-trainer", "sgd", "eager").label
    ('hf-trainer', 'hf-trainer (optimizer=sgd, attention=eager)')
    """
    _known("recipe", recipe, RECIPES)
    _known("optimizer", optimizer, OPTIMIZERS)
    changes: dict[str, str] = {"optimizer": optimizer}
    if attention is not None and attention != NO_ATTENTION:
        _known("attention", attention, ATTENTIONS)
        changes["attention"] = attention
    return Setup.recipe(recipe, **changes)


def choice_key(optimizer: str, recipe: str, attention: str, convention: str) -> str:
    """Return the key of a choice in :func:`bundle`'s ``choices``.

    Examples
    --------
    >>> choice_key("adamw", "hf-trainer", "sdpa", "exact")
    'adamw|hf-trainer|sdpa|exact'
    """
    return f"{optimizer}|{recipe}|{attention}|{convention}"


@cache
def _resolved(model: str, flash: bool) -> ResolvedModel:
    return CALCULATOR_MODELS[model].build(flash)


@cache
def _derived(
    model: str, flash: bool, optimizer: str, precision: str, exact: tuple[str, bool, str] | None
) -> Step:
    """One derivation per distinct step (recipes that agree on this model share it)."""
    network = _resolved(model, flash).network
    if exact is None:
        return step_memory(network, optimizer=optimizer, precision=precision,
                           convention="breakdown")
    implementation, keeps_logits, loop = exact
    return step_memory(
        network, optimizer=optimizer, precision=precision, convention="auto",
        exact=AutogradConvention(implementation, keeps_logits=keeps_logits,  # type: ignore[arg-type]
                                 loop=loop),  # type: ignore[arg-type]
    )


def step(
    model: str,
    optimizer: str = "adamw",
    recipe: str = "hf-trainer",
    attention: str | None = None,
    convention: str = "exact",
) -> Step:
    """Return the training step the page shows for one choice, symbolic in B and H or S.

    The same derivation as :func:`memtheory.estimate.estimate` on one GPU: the
    model resolved with the recipe's attention, and
    :func:`~memtheory.estimate.step.step_memory` with the recipe's precision
    for the checkpoint's dtype (:meth:`Setup.precision_for
    <memtheory.recipes.Setup.precision_for>`) and its exact convention
    (:meth:`Setup.convention <memtheory.recipes.Setup.convention>`).

    Parameters
    ----------
    model : str
        A key of :data:`CALCULATOR_MODELS`.
    optimizer, recipe, attention, convention : str
        Keys of :data:`OPTIMIZERS`, :data:`RECIPES`, :data:`ATTENTIONS` (a
        language model's; default the recipe's) and :data:`CONVENTIONS`.

    Raises
    ------
    UnsupportedError
        For a name the page does not offer.

    Examples
    --------
    >>> found = step("gpt2", recipe="hf-trainer")
    >>> found.convention, found.precision
    ('autograd', 'autocast-bf16')
    >>> step("llama-3-8b", recipe="hf-trainer").precision
    'bf16'
    """
    spec = _model(model)
    _known("convention", convention, CONVENTIONS)
    _known("recipe", recipe, RECIPES)
    attention = _attention(spec, recipe, attention)
    chosen = setup(recipe, optimizer, attention)
    flash = chosen.flash and spec.kind == "sequence"
    resolved = _resolved(model, flash)
    exact = ((chosen.implementation, chosen.keeps_logits, chosen.loop) if convention == "exact"
             else None)
    return _derived(model, flash, chosen.optimizer, chosen.precision_for(resolved.dtype), exact)


def footprint(
    model: str,
    optimizer: str = "adamw",
    recipe: str = "hf-trainer",
    attention: str | None = None,
    convention: str = "exact",
) -> Footprint:
    """Return the memory of :func:`step` (its ``memory``), symbolic in B and H or S.

    Examples
    --------
    >>> memory = footprint("stackexchange-cnn", "adamw", "pytorch-fp32", convention="breakdown")
    >>> memory.evaluate(B=64, H=50).format("MiB")
    '145.64 MiB'
    """
    return step(model, optimizer, recipe, attention, convention).memory


def assumptions(
    model: str, optimizer: str = "adamw", recipe: str = "hf-trainer", attention: str | None = None
) -> list[str]:
    """Return the choice's assumptions in words, as ``memtheory estimate`` prints them.

    Examples
    --------
    >>> print(assumptions("llama-3-8b")[1])
    precision bf16 (the checkpoint's dtype, loaded with dtype="auto"): ...
    """
    spec = _model(model)
    attention = _attention(spec, recipe, attention)
    chosen = setup(recipe, optimizer, attention)
    said = chosen.describe(_resolved(model, False).dtype)
    if spec.kind != "sequence":
        said = [line for line in said if not line.startswith("attention:")]
    return said


def _flat(expr: sp.Expr) -> list[sp.Expr]:
    """``expr`` as the candidates of one ``Max`` with none inside (sums and products distribute)."""
    if isinstance(expr, sp.Max):
        return [part for arg in expr.args for part in _flat(arg)]
    if isinstance(expr, sp.Add | sp.Mul) and expr.has(sp.Max):
        combine = sp.Add if isinstance(expr, sp.Add) else sp.Mul
        if combine is sp.Mul and any(
            arg.has(sp.Max) and not arg.is_nonnegative for arg in expr.args
        ):
            return [expr]
        parts: list[sp.Expr] = [sp.Integer(0 if combine is sp.Add else 1)]
        for arg in expr.args:
            parts = [combine(done, piece) for done in parts for piece in _flat(arg)]
        return parts
    return [expr]


def _candidates(memory: Footprint) -> list[tuple[sp.Expr, str]]:
    """Return the peak's candidates (the undominated moments), each with its moment's label.

    The same pruning as :attr:`Footprint.peak <memtheory.footprint.Footprint.peak>`
    (:func:`memtheory.max_pruning.undominated`), kept flat: one polynomial per moment.
    """
    if not memory.timeline:
        return [(memory.total, "")]
    labels: list[str] = []
    values: list[sp.Expr] = []
    for label, value in memory.timeline.items():
        for piece in _flat(value):
            labels.append(label)
            values.append(piece)
    return [(values[i], labels[i]) for i in undominated(values)]


def _nondecreasing_in_batch(candidate: sp.Expr) -> bool:
    """Return whether every term with the batch B has a positive coefficient (atoms are >= 0)."""
    for term in sp.Add.make_args(candidate):
        if not term.has(B):
            continue
        for part in sp.Add.make_args(sp.expand(term) if term.has(sp.Add) else term):
            if part.as_coeff_Mul()[0] <= 0:
                return False
    return True


class _Atoms:
    """The floors and ceilings of one model's formulas, each computed once as ``a[i]``."""

    def __init__(self) -> None:
        self.symbols: dict[sp.Expr, sp.Symbol] = {}
        self.code: list[str] = []

    def replace(self, expression: sp.Expr) -> sp.Expr:
        """``expression`` with every floor and ceiling replaced by its atom symbol."""
        expression = sp.sympify(expression)
        found = sorted(
            expression.atoms(sp.floor, sp.ceiling) - set(self.symbols), key=sp.count_ops
        )
        for atom in found:
            if atom in self.symbols:
                continue
            inner = atom.func(*(self.replace(arg) for arg in atom.args), evaluate=False)
            if not provably_nonnegative(atom):
                raise UnsupportedError(f"the calculator needs {atom} >= 0 to search the batch.")
            symbol = sp.Symbol(f"a[{len(self.code)}]", integer=True, nonnegative=True)
            self.code.append(exact_js(inner))
            self.symbols[atom] = symbol
        return expression.xreplace(self.symbols)



@cache
def peak_candidates(
    model: str,
    optimizer: str = "adamw",
    recipe: str = "hf-trainer",
    attention: str | None = None,
    convention: str = "exact",
) -> tuple[tuple[sp.Expr, str], ...]:
    """Return the peak's candidates the page compiles, each with its moment's label.

    The peak of :func:`footprint` is the largest of them at any sizes (the
    candidates that can never be the largest are dropped, as
    :attr:`Footprint.peak <memtheory.footprint.Footprint.peak>` drops them).

    Examples
    --------
    >>> found = peak_candidates("stackexchange-cnn", "sgd", "pytorch-fp32")
    >>> max(c.subs({B: 64, H: 50}) for c, _ in found) == footprint(
    ...     "stackexchange-cnn", "sgd", "pytorch-fp32").evaluate(B=64, H=50).peak
    True
    """
    return tuple(_candidates(footprint(model, optimizer, recipe, attention, convention)))


@cache
def batchnorm_counts(model: str) -> tuple[tuple[sp.Expr, str], ...]:
    """Return the values per channel each ``BatchNorm2d`` normalizes over, with its layer's label.

    In training, PyTorch refuses a batch norm whose input has one value per
    channel ("Expected more than 1 value per channel when training"): the
    count (``batch x height x width``) must be at least 2. One entry per
    distinct count.

    Examples
    --------
    >>> counts = batchnorm_counts("resnet50")
    >>> min(count.subs({B: 1, H: 32}) for count, _ in counts), min(
    ...     count.subs({B: 1, H: 33}) for count, _ in counts)
    (1, 4)
    >>> batchnorm_counts("gpt2")
    ()
    """
    found: dict[sp.Expr, str] = {}
    _model(model)
    for row in _resolved(model, False).network.rows:
        if isinstance(row.layer, BatchNorm2d):
            shape = [sp.sympify(size) for size in row.input_shape]
            count = sp.Mul(shape[0], *shape[2:])
            found.setdefault(count, row.layer.label)
    return tuple(found.items())


def _smallest_size(key: str, batch: int = 1) -> int:
    """Return the smallest image side or sequence every layer takes, BatchNorm's at ``batch``."""
    model = CALCULATOR_MODELS[key]
    total = training_memory(_resolved(key, False).network, optimizer="sgd").total
    counts = batchnorm_counts(key)
    for size in range(1, model.max_size + 1):
        values = {B: batch, model.size_symbol: size}
        try:
            evaluate(total, B=batch, **{model.size_symbol.name: size})
        except MemtheoryError:
            continue
        if all(count.xreplace(values) >= 2 for count, _ in counts):
            return size
    raise UnsupportedError(f"{model.title} takes no size up to {model.max_size}")


_LONGEST = 600
"""A peak formula longer than this many characters is not printed on the page (the page says
how many moments it is the largest of)."""


def _short_text(candidates: Iterable[sp.Expr]) -> str | None:
    """Return ``Max(candidates)`` printed, or None when longer than :data:`_LONGEST`.

    Printing a ``Max`` of a hundred long polynomials takes seconds and is
    thrown away: the candidates are printed one by one until they are too long.
    """
    found, length = [], 0
    for candidate in candidates:
        length += len(str(candidate))
        if length > _LONGEST:
            return None
        found.append(candidate)
    printed = str(sp.Max(*found, evaluate=False)) if len(found) > 1 else str(found[0])
    return printed if len(printed) <= _LONGEST else None


class _Table:
    """Strings kept once, referred to by index (formulas repeat across choices)."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.index: dict[str, int] = {}

    def add(self, text: str) -> int:
        if text not in self.index:
            self.index[text] = len(self.items)
            self.items.append(text)
        return self.index[text]


def _attentions(model: CalculatorModel) -> list[str]:
    return list(ATTENTIONS) if model.kind == "sequence" else [NO_ATTENTION]


def bundle(models: Iterable[str] | None = None) -> dict[str, Any]:
    """Derive everything the calculator page needs, as JSON-ready data with compiled formulas.

    Parameters
    ----------
    models : iterable of str, optional
        Keys of :data:`CALCULATOR_MODELS` (all by default).

    Returns
    -------
    dict
        ``models`` (per model: title, kind, size symbol and range, default
        batch, the name ``memtheory estimate`` takes and the recipe it takes by
        default (:func:`~memtheory.recipes.default_recipe`), the checkpoint's dtype,
        parameter count, ``atoms`` (its floors and ceilings, compiled),
        ``batchnorm`` (:func:`batchnorm_counts` as ``[code index, label's text
        index]``), ``min_size_batch1`` (the smallest size batch 1 can train
        at), and per :func:`choice_key`: ``components`` as ``[name, code
        index]``, ``total`` and ``peak`` (``[code index, moment label's text
        index]`` per candidate), the formulas as ``text`` indices, the
        precision used, ``assumed`` (text indices of :func:`assumptions`) and
        ``why`` (the convention in words)), ``code`` (JavaScript over
        :data:`RUNTIME`), ``text``, ``titles`` (component titles),
        ``optimizers``, ``recipes`` (label, attention and reserve in bytes
        per recipe), ``attentions``, ``conventions``, ``gpus`` (name, bytes,
        as stated) and ``examples`` (:func:`source_examples`).

    Examples
    --------
    >>> data = bundle(["stackexchange-cnn"])
    >>> choice = data["models"]["stackexchange-cnn"]["choices"]["adamw|pytorch-fp32|-|breakdown"]
    >>> [name for name, _code in choice["components"]][:2]
    ['parameters', 'gradients']
    """
    keys = list(models) if models is not None else list(CALCULATOR_MODELS)
    code, text = _Table(), _Table()
    out: dict[str, Any] = {}
    for key in keys:
        model = _model(key)
        choices: dict[str, Any] = {}
        atoms = _Atoms()

        def compiled(expression: sp.Expr) -> int:
            return code.add(exact_js(atoms.replace(expression)))  # noqa: B023 (used at once)

        for optimizer in OPTIMIZERS:
            for recipe in RECIPES:
                for attention in _attentions(model):
                    said = [text.add(line) for line in assumptions(key, optimizer, recipe,
                                                                   attention)]
                    for convention in CONVENTIONS:
                        found = step(key, optimizer, recipe, attention, convention)
                        memory = found.memory
                        candidates = peak_candidates(key, optimizer, recipe, attention,
                                                     convention)
                        for candidate, _ in candidates:
                            if not _nondecreasing_in_batch(atoms.replace(candidate)):
                                raise UnsupportedError(
                                    f"{model.title}: a peak candidate may decrease as the batch "
                                    "grows, so the page's search for the largest batch would "
                                    f"not be exact: {candidate}"
                                )
                        peak_text = _short_text(c for c, _ in candidates)
                        choices[choice_key(optimizer, recipe, attention, convention)] = {
                            "components": [
                                [name, compiled(value)]
                                for name, value in memory.components.items()
                            ],
                            "total": compiled(memory.total),
                            "peak": [[compiled(c), text.add(moment)] for c, moment in candidates],
                            "total_text": text.add(str(memory.total)),
                            "peak_text": None if peak_text is None else text.add(peak_text),
                            "precision": found.precision,
                            "assumed": said,
                            "why": text.add(found.why),
                        }
        resolved = _resolved(key, False)
        out[key] = {
            "title": model.title,
            "kind": model.kind,
            "symbol": model.size_symbol.name,
            "default_size": model.default_size,
            "min_size": _smallest_size(key, batch=2),
            "min_size_batch1": _smallest_size(key, batch=1),
            "max_size": model.max_size,
            "default_batch": model.default_batch,
            "note": model.note,
            "estimate_name": model.estimate_name,
            "recipe": default_recipe(kind=model.kind, lora=False, qlora=False),
            "dtype": resolved.dtype,
            "parameters": text.add(str(resolved.network.parameter_count)),
            "batchnorm": [[compiled(count), text.add(label)]
                          for count, label in batchnorm_counts(key)],
            "choices": choices,
            "atoms": atoms.code,
        }
    recipes = {}
    for name, label in RECIPES.items():
        chosen = Setup.recipe(name)
        recipes[name] = {"label": label, "attention": chosen.attention,
                         "reserve": int(chosen.reserve_bytes)}
    return {
        "models": out,
        "code": code.items,
        "text": text.items,
        "optimizers": OPTIMIZERS,
        "recipes": recipes,
        "attentions": ATTENTIONS,
        "conventions": CONVENTIONS,
        "titles": dict(COMPONENT_TITLES),
        "gpus": [[card.name, card.memory, card.stated] for card in GPUS.values()],
        "examples": source_examples(),
    }


def source_examples() -> dict[str, Any]:
    """Return the source calculator's two examples: the page's settings for each, and its slips.

    Each example names the choice that loads it on the page (the closest the
    page offers: the pytorch-amp recipe, ``torch.autocast`` in bf16, for the
    source's fp16 mixed precision, counted as a breakdown as the source
    counts) and lists the source's printed figures beside memtheory's exact
    value and the explanation, from :func:`memtheory.worked_examples.memory_calculator`.

    Examples
    --------
    >>> examples = source_examples()
    >>> examples["bert"]["settings"]["model"], examples["bert"]["settings"]["batch"]
    ('bert-base', 32)
    """
    example = memory_calculator()
    rows: dict[str, list[list[str]]] = {"bert": [], "resnet": []}
    for figure in example.figures:
        group = "bert" if figure.label.startswith("BERT") else "resnet"
        label = figure.label.split(": ", 1)[1]
        value = figure.memtheory_value
        rows[group].append([
            label,
            "" if figure.printed is None
            else f"{figure.printed} {figure.written_unit or figure.unit}",
            "" if value is None else f"{value} {figure.unit}",
            figure.explanation,
        ])
    return {
        "bert": {
            "title": "BERT-base, AdamW, batch 32, sequence 128",
            "source": example.inputs["BERT-base"],
            "settings": {"model": "bert-base", "optimizer": "adamw", "recipe": "pytorch-amp",
                         "attention": "sdpa", "convention": "breakdown",
                         "batch": 32, "size": 128},
            "slips": rows["bert"],
        },
        "resnet": {
            "title": "ResNet-50, Adam, batch 64, 224 x 224 images",
            "source": example.inputs["ResNet-50"],
            "settings": {"model": "resnet50", "optimizer": "adamw", "recipe": "pytorch-amp",
                         "attention": NO_ATTENTION, "convention": "breakdown",
                         "batch": 64, "size": 224},
            "slips": rows["resnet"],
        },
        "summary": example.summary,
    }


def bundle_script(data: Mapping[str, Any] | None = None) -> str:
    """Return the bundle as one JavaScript program: the runtime, the compiled formulas, the data.

    Defines ``MT_CODE`` (one function ``(B, S, H, a) => [numerator, denominator]``
    per formula, where ``a`` are the model's floors and ceilings), ``MT_ATOMS``
    (per model, ``(B, S, H) => a``), ``MT_DATA`` (the rest of :func:`bundle`)
    and the functions of :data:`SEARCH`; it needs no page (node runs it).

    Examples
    --------
    >>> script = bundle_script(bundle(["stackexchange-cnn"]))
    >>> script.startswith("const G=")
    True
    """
    data = dict(bundle() if data is None else data)
    functions = ",\n".join(f"(B,S,H,a)=>{line}" for line in data.pop("code"))
    models = {key: dict(model) for key, model in data["models"].items()}
    atoms = ",\n".join(
        f"{json.dumps(key)}:(B,S,H)=>{{const a=[];"
        + "".join(f"a.push({line});" for line in model.pop("atoms"))
        + "return a;}"
        for key, model in models.items()
    )
    data["models"] = models
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return (
        f"{RUNTIME}{SEARCH}const MT_CODE=[\n{functions}];\nconst MT_ATOMS={{\n{atoms}}};\n"
        f"const MT_DATA={payload};\n"
    )
