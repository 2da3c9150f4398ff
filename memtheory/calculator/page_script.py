"""The calculator page's JavaScript program: the runtime, the search, the compiled bundle.

Examples
--------
>>> "MT_LARGEST" in SEARCH
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from memtheory.calculator.bundle import bundle
from memtheory.calculator.js_printer import RUNTIME

__all__ = ["SEARCH", "bundle_script"]


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
