r"""The book's live calculator: memtheory's formulas compiled to exact JavaScript at build time.

The calculator page of the book runs in a browser with no Python behind it.
So that it can never disagree with the library, nothing on it is a formula
typed in JavaScript: :func:`bundle` asks :func:`~memtheory.memory.training_memory`
for every model, optimizer, precision and convention the page offers, and
compiles each component, the total and the peak to JavaScript with
:class:`ExactJavaScriptPrinter`, a subclass of sympy's JavaScript code printer.

Exact arithmetic
    The printer does not emit JavaScript numbers (doubles, exact only up to
    :math:`2^{53}`, which a Llama-size step times a large batch passes). Every
    constant becomes a rational of two ``BigInt``\ s and every operation a call
    into a twenty-line runtime (:data:`RUNTIME`): ``A`` adds, ``M`` multiplies,
    ``P`` raises to a whole power, ``F`` and ``C`` are ``floor`` and
    ``ceiling``, ``X`` is ``Max``. A value is exact at any size.
The peak
    Under the ``autograd`` convention the peak is the largest moment of the
    step's timeline: a ``Max`` of one candidate per moment, which
    :mod:`memtheory.maximum` has already pruned to the candidates that can be
    the largest. The bundle ships those candidates, each with the label of the
    moment it belongs to, so the page shows where the peak happens.
The largest batch
    Every candidate is a polynomial in the batch ``B`` whose coefficients are
    sums of positive terms (checked here as the bundle is built: a model for
    which this fails is refused), so the peak never decreases as ``B`` grows.
    The page doubles ``B`` until the peak passes the card's usable memory,
    then bisects: the largest batch is exact in about :math:`2\log_2 B` evaluations.

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

from memtheory.conventions import convention as get_convention
from memtheory.errors import MemtheoryError, UnsupportedError
from memtheory.footprint import COMPONENT_TITLES, Footprint
from memtheory.gpus import DEFAULT_RESERVE, GPUS
from memtheory.maximum import provably_nonnegative, undominated
from memtheory.memory import training_memory
from memtheory.network import Network
from memtheory.optimizers import optimizer as get_optimizer
from memtheory.precision import precision as get_precision
from memtheory.symbols import B, H, S

__all__ = [
    "CALCULATOR_MODELS",
    "CONVENTIONS",
    "OPTIMIZERS",
    "PRECISIONS",
    "RUNTIME",
    "CalculatorModel",
    "ExactJavaScriptPrinter",
    "bundle",
    "bundle_script",
    "exact_js",
    "footprint",
    "source_examples",
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
        ``build()`` returns the Network, symbolic in the batch ``B`` and the
        image side ``H`` or the sequence ``S``.
    kind : {"image", "sequence"}
    default_size, max_size : int
        The image side or sequence length the page starts at, and the largest
        it accepts (a language model's position table).
    default_batch : int
    note : str
        What the model is, in a line.
    """

    title: str
    build: Callable[[], Network]
    kind: Kind
    default_size: int
    max_size: int
    default_batch: int
    note: str

    @property
    def size_symbol(self) -> sp.Symbol:
        """``H`` for an image model, ``S`` for a language model."""
        return H if self.kind == "image" else S


def _stackexchange_cnn() -> Network:
    from memtheory.worked_examples import small_cnn_network

    return small_cnn_network(image_size=H)


def _builder(name: str) -> Callable[[], Network]:
    def build() -> Network:
        from memtheory.estimate.resolve import resolve_model

        return resolve_model(name, batch=B, sequence=S, image=H).network

    return build


def _llama_positions() -> int:
    from memtheory.models import PRESETS

    return int(PRESETS["llama-3-8b"].config["max_position_embeddings"])


CALCULATOR_MODELS: dict[str, CalculatorModel] = {
    "stackexchange-cnn": CalculatorModel(
        "StackExchange CNN", _stackexchange_cnn, "image", 50, 1024, 64,
        "two padded 3x3 convolutions with 2x2 pooling, a 500-unit layer, 10 classes "
        "(the worked example of chapter 8)",
    ),
    "vgg16": CalculatorModel(
        "VGG-16", _builder("vgg16"), "image", 224, 1024, 32, "torchvision's VGG-16, 1000 classes"
    ),
    "resnet50": CalculatorModel(
        "ResNet-50", _builder("resnet50"), "image", 224, 1024, 64,
        "torchvision's ResNet-50 with BatchNorm, 1000 classes",
    ),
    "gpt2": CalculatorModel(
        "GPT-2 small", _builder("gpt2"), "sequence", 1024, 1024, 8,
        "124M parameters, with its language-model loss",
    ),
    "gpt2-medium": CalculatorModel(
        "GPT-2 medium", _builder("gpt2-medium"), "sequence", 1024, 1024, 4,
        "355M parameters, with its language-model loss",
    ),
    "bert-base": CalculatorModel(
        "BERT-base", _builder("bert-base-mlm"), "sequence", 128, 512, 32,
        "110M parameters, with its masked-LM head and loss",
    ),
    "llama-3-8b": CalculatorModel(
        "Llama-3-8B", _builder("llama-3-8b"), "sequence", 2048, _llama_positions(), 1,
        "Llama-style decoder (RMSNorm, SwiGLU, RoPE, grouped-query attention) from its config",
    ),
}
"""The models the page offers, by key."""

OPTIMIZERS: dict[str, str] = {
    "sgd": "SGD (no state)",
    "sgd+momentum": "SGD with momentum",
    "adamw": "Adam or AdamW (same state)",
}
"""Optimizer key (memtheory's name) -> label."""

PRECISIONS: dict[str, str] = {
    "fp32": "fp32 (everything 4 bytes)",
    "bf16": "bf16 (everything 2 bytes)",
    "mixed-bf16": "mixed bf16 (16-bit weights, fp32 master copy and state)",
    "autocast-bf16": "autocast bf16 (fp32 weights, bf16 activations)",
}
"""Precision key (memtheory's name) -> label."""

CONVENTIONS: dict[str, str] = {
    "breakdown": "breakdown: each component counted",
    "autograd": "autograd: PyTorch's step, tensor by tensor",
}
"""Convention key -> label."""


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


def _supported(precision: str, convention: str) -> bool:
    if convention == "autograd" and precision.startswith("mixed"):
        return False
    return True


@cache
def _network(model: str) -> Network:
    return CALCULATOR_MODELS[model].build()


@cache
def footprint(model: str, optimizer: str, precision: str, convention: str) -> Footprint:
    """Return the training step's memory the page shows for one choice, symbolic in B and H or S.

    Parameters
    ----------
    model : str
        A key of :data:`CALCULATOR_MODELS`.
    optimizer, precision, convention : str
        Keys of :data:`OPTIMIZERS`, :data:`PRECISIONS` and :data:`CONVENTIONS`.

    Raises
    ------
    UnsupportedError
        For a precision the convention does not model (mixed precision under
        ``autograd``).

    Examples
    --------
    >>> memory = footprint("stackexchange-cnn", "adamw", "fp32", "breakdown")
    >>> memory.evaluate(B=64, H=50).format("MiB")
    '145.64 MiB'
    """
    for key, table in (("model", CALCULATOR_MODELS), ("optimizer", OPTIMIZERS),
                       ("precision", PRECISIONS), ("convention", CONVENTIONS)):
        name = {"model": model, "optimizer": optimizer, "precision": precision,
                "convention": convention}[key]
        if name not in table:
            raise UnsupportedError(
                f"the calculator has no {key} {name!r}; choose one of {', '.join(table)}."
            )
    if not _supported(precision, convention):
        raise UnsupportedError(
            f"the {convention} convention does not model {precision!r}; use fp32, bf16 or "
            "autocast-bf16 with it, or the breakdown convention."
        )
    return training_memory(
        _network(model),
        optimizer=get_optimizer(optimizer),
        precision=get_precision(precision),
        convention=get_convention(convention),
    )


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
    (:func:`memtheory.maximum.undominated`), kept flat: one polynomial per moment.
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


def _smallest_size(key: str) -> int:
    """Return the smallest image side or sequence every layer of the model takes."""
    from memtheory.evaluation import evaluate

    model = CALCULATOR_MODELS[key]
    total = training_memory(_network(key), optimizer="sgd").total
    for size in range(1, model.default_size + 1):
        try:
            evaluate(total, B=1, **{model.size_symbol.name: size})
        except MemtheoryError:
            continue
        return size
    raise UnsupportedError(f"{model.title} takes no size up to {model.default_size}")


_LONGEST = 600
"""A peak formula longer than this many characters is not printed on the page (the page says
how many moments it is the largest of)."""


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
        batch, parameter count, ``atoms`` (its floors and ceilings, compiled),
        and per ``"optimizer|precision|convention"``: ``components`` as
        ``[name, code index]``, ``total`` and ``peak`` (``[code index, moment
        label's text index]`` per candidate) and the formulas as ``text``
        indices), ``code`` (JavaScript over :data:`RUNTIME`), ``text``,
        ``titles`` (component titles), ``optimizers``, ``precisions``,
        ``conventions``, ``gpus`` (name, bytes, as stated), ``reserve`` (bytes)
        and ``examples``
        (:func:`source_examples`).

    Examples
    --------
    >>> data = bundle(["stackexchange-cnn"])
    >>> choice = data["models"]["stackexchange-cnn"]["choices"]["adamw|fp32|breakdown"]
    >>> [name for name, _code in choice["components"]][:2]
    ['parameters', 'gradients']
    """
    keys = list(models) if models is not None else list(CALCULATOR_MODELS)
    code, text = _Table(), _Table()
    out: dict[str, Any] = {}
    for key in keys:
        model = CALCULATOR_MODELS[key]
        choices: dict[str, Any] = {}
        atoms = _Atoms()

        def compiled(expression: sp.Expr) -> int:
            return code.add(exact_js(atoms.replace(expression)))  # noqa: B023 (used at once)

        for optimizer in OPTIMIZERS:
            for precision in PRECISIONS:
                for convention in CONVENTIONS:
                    if not _supported(precision, convention):
                        continue
                    memory = footprint(key, optimizer, precision, convention)
                    candidates = _candidates(memory)
                    for candidate, _ in candidates:
                        if not _nondecreasing_in_batch(atoms.replace(candidate)):
                            raise UnsupportedError(
                                f"{model.title}: a peak candidate may decrease as the batch "
                                "grows, so the page's search for the largest batch would not "
                                f"be exact: {candidate}"
                            )
                    peak_text = str(sp.Max(*(c for c, _ in candidates), evaluate=False))
                    choices[f"{optimizer}|{precision}|{convention}"] = {
                        "components": [
                            [name, compiled(value)]
                            for name, value in memory.components.items()
                        ],
                        "total": compiled(memory.total),
                        "peak": [[compiled(c), text.add(moment)] for c, moment in candidates],
                        "total_text": text.add(str(memory.total)),
                        "peak_text": text.add(peak_text) if len(peak_text) <= _LONGEST else None,
                    }
        parameters = _network(key).parameter_count
        out[key] = {
            "title": model.title,
            "kind": model.kind,
            "symbol": model.size_symbol.name,
            "default_size": model.default_size,
            "min_size": _smallest_size(key),
            "max_size": model.max_size,
            "default_batch": model.default_batch,
            "note": model.note,
            "parameters": text.add(str(parameters)),
            "choices": choices,
            "atoms": atoms.code,
        }
    return {
        "models": out,
        "code": code.items,
        "text": text.items,
        "optimizers": OPTIMIZERS,
        "precisions": PRECISIONS,
        "conventions": CONVENTIONS,
        "titles": dict(COMPONENT_TITLES),
        "gpus": [[card.name, card.memory, card.stated] for card in GPUS.values()],
        "reserve": int(DEFAULT_RESERVE),
        "examples": source_examples(),
    }


def source_examples() -> dict[str, Any]:
    """Return the source calculator's two examples: the page's settings for each, and its slips.

    Each example names the choice that loads it on the page (the closest the
    page offers: bf16 stands for the source's fp16, both two bytes) and lists
    the source's printed figures beside memtheory's exact value and the
    explanation, from :func:`memtheory.worked_examples.memory_calculator`.

    Examples
    --------
    >>> examples = source_examples()
    >>> examples["bert"]["settings"]["model"], examples["bert"]["settings"]["batch"]
    ('bert-base', 32)
    """
    from memtheory.worked_examples import memory_calculator

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
            "settings": {"model": "bert-base", "optimizer": "adamw",
                         "precision": "autocast-bf16", "convention": "breakdown",
                         "batch": 32, "size": 128},
            "slips": rows["bert"],
        },
        "resnet": {
            "title": "ResNet-50, Adam, batch 64, 224 x 224 images",
            "source": example.inputs["ResNet-50"],
            "settings": {"model": "resnet50", "optimizer": "adamw",
                         "precision": "mixed-bf16", "convention": "breakdown",
                         "batch": 64, "size": 224},
            "slips": rows["resnet"],
        },
        "summary": example.summary,
    }


def bundle_script(data: Mapping[str, Any] | None = None) -> str:
    """Return the bundle as one JavaScript program: the runtime, the compiled formulas, the data.

    Defines ``MT_CODE`` (one function ``(B, S, H, a) => [numerator, denominator]``
    per formula, where ``a`` are the model's floors and ceilings), ``MT_ATOMS``
    (per model, ``(B, S, H) => a``) and ``MT_DATA`` (the rest of :func:`bundle`).

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
        f"{RUNTIME}const MT_CODE=[\n{functions}];\nconst MT_ATOMS={{\n{atoms}}};\n"
        f"const MT_DATA={payload};\n"
    )
