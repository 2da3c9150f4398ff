r"""The calculator page's HTML: controls, result tables and the script that fills them.

:func:`page_html` wraps :func:`memtheory.calculator.bundle_script` (the
formulas, compiled) with the page's own code, which only reads inputs, calls
the compiled formulas and writes numbers: it computes no memory itself. The
result is one self-contained block of HTML (no file, server or network is
needed), which the book's calculator page prints from a build-time cell.

The script, in the order it runs on each change:

1. reads the model, optimizer, precision, convention, batch ``B`` and size
   (image side ``H`` or sequence ``S``), refusing a size outside the model's
   range with a message;
2. evaluates the model's floors and ceilings once (``MT_ATOMS``), then each
   component, the total and every peak candidate (``MT_CODE``), exactly;
3. with a card chosen: usable memory = the card's bytes less the reserve; it
   compares the peak with it and searches the largest batch (doubling, then
   bisection, valid because every peak candidate is nondecreasing in ``B``,
   which :mod:`memtheory.calculator` checks as it builds the bundle).

Every number shown carries its exact value in a ``data-bytes`` (or
``data-value``) attribute, which the browser test reads beside the text.

Examples
--------
>>> from memtheory.calculator import bundle
>>> html = page_html(bundle(["stackexchange-cnn"]))
>>> html.count("<script>"), "mt-calculator" in html
(1, True)
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Mapping
from typing import Any

from memtheory.calculator import bundle_script

__all__ = ["PAGE_SCRIPT", "STYLE", "page_html"]

STYLE = """
#mt-calculator { font-size: 0.95rem; }
#mt-calculator .mt-controls { display: grid; gap: 0.5rem 1rem;
  grid-template-columns: repeat(auto-fill, minmax(15rem, 1fr)); margin-bottom: 0.8rem; }
#mt-calculator label { display: flex; flex-direction: column; font-weight: 600; gap: 0.2rem; }
#mt-calculator select, #mt-calculator input { font-weight: normal; max-width: 100%;
  padding: 0.2rem; }
#mt-calculator .mt-buttons { display: flex; flex-wrap: wrap; gap: 0.5rem; margin: 0.5rem 0; }
#mt-calculator button { padding: 0.3rem 0.7rem; cursor: pointer; }
#mt-calculator .mt-scroll { overflow-x: auto; max-width: 100%; }
#mt-calculator table { border-collapse: collapse; margin: 0.5rem 0; }
#mt-calculator td, #mt-calculator th { padding: 0.2rem 0.6rem; border-bottom: 1px solid #ddd;
  text-align: left; vertical-align: top; }
#mt-calculator td.mt-num, #mt-calculator th.mt-num { text-align: right;
  font-variant-numeric: tabular-nums; white-space: nowrap; }
#mt-calculator .mt-formula { font-family: monospace; font-size: 0.85rem;
  overflow-wrap: anywhere; white-space: normal; background: #f6f6f6; padding: 0.4rem; }
#mt-calculator .mt-error { color: #b00020; font-weight: 600; }
#mt-calculator .mt-fits { color: #1b5e20; font-weight: 600; }
#mt-calculator .mt-fails { color: #b00020; font-weight: 600; }
#mt-calculator .mt-note { color: #555; font-size: 0.85rem; }
"""
"""The page's CSS: controls wrap on a phone, tables scroll inside their own box."""

PAGE_SCRIPT = r"""
(() => {
const D = MT_DATA, T = D.text;
const $ = id => document.getElementById(id);
const GIB = 1n << 30n, MIB = 1n << 20n;
const group = n => n.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
const exact = v => v[1] === 1n ? group(v[0]) : group(v[0]) + "/" + v[1].toString();
// v (bytes, exact [n, d]) in unit of `scale` bytes, rounded half up to two decimals.
const inUnit = (v, scale) => {
  const hundredths = (2n * 100n * v[0] + scale * v[1]) / (2n * scale * v[1]);
  const whole = hundredths / 100n, rest = (hundredths % 100n).toString().padStart(2, "0");
  return group(whole) + "." + rest;
};
const option = (select, value, label) => {
  const o = document.createElement("option"); o.value = value; o.textContent = label;
  select.appendChild(o); return o;
};
const cell = (row, text, cls, attrs) => {
  const td = document.createElement("td"); td.textContent = text;
  if (cls) td.className = cls;
  for (const [k, v] of Object.entries(attrs || {})) td.setAttribute(k, v);
  row.appendChild(td); return td;
};
const evaluate = (model, index, B, S, H, a) => R(MT_CODE[index](B, S, H, a));

function fill() {
  for (const [key, m] of Object.entries(D.models)) option($("mt-model"), key, m.title);
  for (const [key, label] of Object.entries(D.optimizers)) option($("mt-optimizer"), key, label);
  for (const [key, label] of Object.entries(D.precisions)) option($("mt-precision"), key, label);
  for (const [key, label] of Object.entries(D.conventions)) option($("mt-convention"), key, label);
  option($("mt-gpu"), "", "none");
  for (const [name, , stated] of D.gpus) option($("mt-gpu"), name, name + " (" + stated + ")");
  $("mt-reserve").value = (BigInt(D.reserve) / MIB).toString();
}

function choice() {
  const m = D.models[$("mt-model").value];
  const key = [$("mt-optimizer").value, $("mt-precision").value, $("mt-convention").value]
    .join("|");
  return [m, m.choices[key], key];
}

function setModel(keep) {
  const m = D.models[$("mt-model").value];
  $("mt-size-label").firstChild.textContent = m.kind === "image"
    ? "image side H (pixels)" : "sequence length S (tokens)";
  $("mt-size").min = m.min_size; $("mt-size").max = m.max_size;
  if (!keep) { $("mt-size").value = m.default_size; $("mt-batch").value = m.default_batch; }
  $("mt-model-note").textContent = m.note + "; " + group(T[m.parameters]) + " parameters; "
    + m.symbol + " from " + m.min_size + " to " + m.max_size + ".";
}

function readInt(id, low, high, what) {
  const text = $(id).value.trim();
  if (!/^[0-9]+$/.test(text)) {
    throw new Error(what + " must be a whole number, not '" + text + "'.");
  }
  const v = BigInt(text);
  if (v < BigInt(low) || (high !== null && v > BigInt(high))) {
    throw new Error(what + " must be between " + low + " and " + high + "; it is " + text + ".");
  }
  return v;
}

// The peak at batch b (the candidates' maximum) and the moment it belongs to.
function peakAt(m, c, model, b, size) {
  const S = [m.symbol === "S" ? size : 1n, 1n], H = [m.symbol === "H" ? size : 1n, 1n];
  const B = [b, 1n], a = MT_ATOMS[model](B, S, H);
  let best = null, moment = "";
  for (const [index, label] of c.peak) {
    const v = evaluate(model, index, B, S, H, a);
    if (best === null || K(v, best) > 0) { best = v; moment = T[label]; }
  }
  return [best, moment, B, S, H, a];
}

// The largest batch whose peak fits `usable`: double until it does not fit, then bisect.
// Exact because every peak candidate is nondecreasing in B (checked when the bundle is built).
const LARGEST = 1n << 40n;
function largestBatch(m, c, model, size, usable) {
  const fits = b => K(peakAt(m, c, model, b, size)[0], usable) <= 0;
  if (!fits(1n)) return 0n;
  let low = 1n, high = 2n;
  while (high <= LARGEST && fits(high)) { low = high; high *= 2n; }
  if (high > LARGEST) return low;
  while (high - low > 1n) {
    const mid = (low + high) / 2n;
    if (fits(mid)) low = mid; else high = mid;
  }
  return low;
}

function update() {
  $("mt-error").textContent = "";
  const [m, c, key] = choice();
  const model = $("mt-model").value;
  const result = $("mt-result");
  if (!c) {
    $("mt-error").textContent = "The " + $("mt-convention").value + " convention does not model "
      + $("mt-precision").value + " (PyTorch's optimizers keep no master copy): pick another "
      + "precision or the breakdown convention.";
    result.hidden = true; return;
  }
  let b, size;
  try {
    b = readInt("mt-batch", 1, null, "The batch");
    size = readInt("mt-size", m.min_size, m.max_size,
                   m.kind === "image" ? "The image side" : "The sequence length");
  } catch (e) { $("mt-error").textContent = e.message; result.hidden = true; return; }
  result.hidden = false;
  const [peak, moment, B, S, H, a] = peakAt(m, c, model, b, size);
  const total = evaluate(model, c.total, B, S, H, a);
  const scale = K(peak, [GIB, 1n]) >= 0 ? GIB : MIB, unit = scale === GIB ? "GiB" : "MiB";
  $("mt-unit").textContent = unit;
  const body = $("mt-components"); body.textContent = "";
  for (const [name, index] of c.components) {
    const v = evaluate(model, index, B, S, H, a), row = document.createElement("tr");
    row.dataset.component = name;
    cell(row, D.titles[name] || name);
    cell(row, exact(v), "mt-num mt-bytes", {"data-bytes": v[0].toString() + "/" + v[1].toString()});
    cell(row, inUnit(v, scale), "mt-num");
    body.appendChild(row);
  }
  for (const [id, v] of [["mt-total", total], ["mt-peak", peak]]) {
    const row = $(id); row.querySelector(".mt-bytes").textContent = exact(v);
    row.querySelector(".mt-bytes").dataset.bytes = v[0].toString() + "/" + v[1].toString();
    row.querySelector(".mt-unit").textContent = inUnit(v, scale);
  }
  $("mt-peak-moment").textContent = c.peak.length > 1
    ? "the largest of " + c.peak.length + " candidate moments; here: " + (moment || "?")
    : (moment ? "at " + moment : "no timeline: the peak is the total");
  $("mt-formula-total").textContent = "total = " + T[c.total_text];
  $("mt-formula-peak").textContent = c.peak_text !== null
    ? "peak = " + T[c.peak_text]
    : "peak = the largest of " + c.peak.length + " moments' formulas (too long to print; "
      + "memtheory.calculator.footprint(...).peak gives it)";
  const gpu = $("mt-gpu").value, fit = $("mt-fit"), largest = $("mt-largest");
  if (!gpu) { fit.textContent = "Choose a card to compare."; fit.className = "mt-note";
              largest.textContent = ""; delete largest.dataset.value; return; }
  let reserve;
  try { reserve = readInt("mt-reserve", 0, null, "The reserve") * MIB; }
  catch (e) { $("mt-error").textContent = e.message; return; }
  const memory = BigInt(D.gpus.find(g => g[0] === gpu)[1]);
  if (reserve >= memory) {
    $("mt-error").textContent = "The reserve leaves nothing of the card: make it smaller.";
    return;
  }
  const usable = [memory - reserve, 1n];
  const ok = K(peak, usable) <= 0;
  fit.className = ok ? "mt-fits" : "mt-fails";
  fit.dataset.fits = ok ? "yes" : "no";
  fit.textContent = (ok ? "Fits: " : "Does not fit: ") + "the peak " + inUnit(peak, GIB)
    + " GiB against " + inUnit(usable, GIB) + " GiB usable (" + gpu + ", "
    + inUnit([memory, 1n], GIB) + " GiB less a reserve of " + inUnit([reserve, 1n], GIB) + " GiB).";
  const most = largestBatch(m, c, model, size, usable);
  largest.dataset.value = most.toString();
  largest.textContent = most === 0n
    ? "Largest batch: none (even batch 1 does not fit at " + m.symbol + " = " + size + ")."
    : "Largest batch at " + m.symbol + " = " + size + ": " + group(most) + ".";
}

function example(name) {
  const e = D.examples[name], s = e.settings;
  $("mt-model").value = s.model; setModel(false);
  $("mt-optimizer").value = s.optimizer; $("mt-precision").value = s.precision;
  $("mt-convention").value = s.convention;
  $("mt-batch").value = s.batch; $("mt-size").value = s.size;
  $("mt-slips-title").textContent = "The source calculator's " + e.title;
  $("mt-slips-source").textContent = "Its inputs: " + e.source + ". " + D.examples.summary;
  const body = $("mt-slips-body"); body.textContent = "";
  for (const [label, printed, exactValue, why] of e.slips) {
    const row = document.createElement("tr");
    cell(row, label); cell(row, printed, "mt-num"); cell(row, exactValue, "mt-num"); cell(row, why);
    body.appendChild(row);
  }
  $("mt-slips").hidden = false;
  update();
}

fill();
$("mt-model").value = "stackexchange-cnn";
$("mt-optimizer").value = "adamw";
setModel(false);
$("mt-model").addEventListener("change", () => { setModel(false); update(); });
for (const id of ["mt-optimizer", "mt-precision", "mt-convention", "mt-batch", "mt-size",
                  "mt-gpu", "mt-reserve"]) {
  $(id).addEventListener("input", update); $(id).addEventListener("change", update);
}
$("mt-example-bert").addEventListener("click", () => example("bert"));
$("mt-example-resnet").addEventListener("click", () => example("resnet"));
update();
window.memtheoryCalculator = {update, example, ready: true};
})();
"""
"""The page's own code: inputs to compiled formulas to numbers (no memory formula in it)."""

_MARKUP = """
<div id="mt-calculator">
<div class="mt-controls">
<label>model <select id="mt-model"></select></label>
<label>optimizer <select id="mt-optimizer"></select></label>
<label>precision <select id="mt-precision"></select></label>
<label>convention <select id="mt-convention"></select></label>
<label>batch B <input id="mt-batch" type="number" min="1" step="1" value="1"></label>
<label id="mt-size-label">size <input id="mt-size" type="number" min="1" step="1"></label>
<label>card <select id="mt-gpu"></select></label>
<label>reserve (MiB) <input id="mt-reserve" type="number" min="0" step="1"></label>
</div>
<p class="mt-note" id="mt-model-note"></p>
<div class="mt-buttons">
<button type="button" id="mt-example-bert">Source calculator's example: BERT-base</button>
<button type="button" id="mt-example-resnet">Source calculator's example: ResNet-50</button>
</div>
<p class="mt-error" id="mt-error" role="alert"></p>
<div id="mt-result">
<div class="mt-scroll"><table>
<thead><tr><th>component</th><th class="mt-num">bytes</th><th class="mt-num" id="mt-unit">MiB</th>
</tr></thead>
<tbody id="mt-components"></tbody>
<tbody>
<tr id="mt-total"><th>total</th><td class="mt-num mt-bytes"></td>
<td class="mt-num mt-unit"></td></tr>
<tr id="mt-peak"><th>peak</th><td class="mt-num mt-bytes"></td>
<td class="mt-num mt-unit"></td></tr>
</tbody></table></div>
<p class="mt-note" id="mt-peak-moment"></p>
<p id="mt-fit"></p>
<p id="mt-largest"></p>
<p><strong>Formula</strong> (bytes; floor is rounding down):</p>
<div class="mt-formula" id="mt-formula-total"></div>
<div class="mt-formula" id="mt-formula-peak"></div>
</div>
<div id="mt-slips" hidden>
<p><strong id="mt-slips-title"></strong></p>
<p class="mt-note" id="mt-slips-source"></p>
<div class="mt-scroll"><table>
<thead><tr><th>figure</th><th class="mt-num">the page printed</th>
<th class="mt-num">memtheory, rounded alike</th>
<th>what happened</th></tr></thead>
<tbody id="mt-slips-body"></tbody></table></div>
</div>
</div>
"""


def page_html(data: Mapping[str, Any] | None = None) -> str:
    """Return the calculator as one block of HTML: style, controls, bundle and script.

    The bundle and the page's script travel gzip-compressed and base64-encoded
    (the formulas repeat a lot: about a sixth of the size); the browser
    unpacks them with its built-in ``DecompressionStream``, with no file,
    server or network involved, then runs them. When the page is ready,
    ``window.memtheoryCalculator.ready`` is true.

    Parameters
    ----------
    data : mapping, optional
        :func:`memtheory.calculator.bundle` output (built when not given).
    """
    program = bundle_script(data) + PAGE_SCRIPT
    packed = base64.b64encode(gzip.compress(program.encode(), mtime=0)).decode()
    loader = (
        f'const packed = "{packed}";\n'
        "(async () => {\n"
        "  const bytes = Uint8Array.from(atob(packed), c => c.charCodeAt(0));\n"
        "  const stream = new Blob([bytes]).stream()"
        '.pipeThrough(new DecompressionStream("gzip"));\n'
        "  new Function(await new Response(stream).text())();\n"
        "})().catch(e => { document.getElementById('mt-error').textContent = "
        "'The calculator could not start: ' + e; });\n"
    )
    return f"<style>{STYLE}</style>{_MARKUP}<script>{{{loader}}}</script>"
