r"""The calculator page's HTML: controls, result tables and the script that fills them.

:func:`page_html` wraps :func:`memtheory.calculator.bundle_script` (the
formulas, compiled) with the page's own code, which only reads inputs, calls
the compiled formulas and writes numbers: it computes no memory itself. The
result is one self-contained block of HTML (no file, server or network is
needed), which the book's calculator page prints from a build-time cell.

The script, in the order it runs on each change:

1. reads the model, recipe (on a change of model, the one ``memtheory
   estimate`` takes by default for it), attention kernel (language models), optimizer,
   how to count (the exact step, or the breakdown as a teaching comparison),
   batch ``B`` and size (image side ``H`` or sequence ``S``), refusing a size
   outside the model's range, and a batch and size at which a
   ``BatchNorm2d`` would see one value per channel (``MT_TOO_FEW``), with a
   message; any error clears the verdict and the largest batch, so that no
   answer to an earlier question stays beside it;
2. evaluates the model's floors and ceilings once (``MT_ATOMS``), then each
   component, the total and every peak candidate (``MT_CODE``, ``MT_PEAK``),
   exactly, and lists the recipe's assumptions and the equivalent
   ``memtheory estimate`` command;
3. with a card chosen: usable memory = the card's bytes less the reserve (the
   recipe's by default; :func:`memtheory.gpus.usable_memory`'s rule); it
   compares the peak with it and searches the largest batch (``MT_LARGEST``:
   doubling, then bisection, valid because every peak candidate is
   nondecreasing in ``B``, which :mod:`memtheory.calculator` checks as it
   builds the bundle).

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

function fill() {
  for (const [key, m] of Object.entries(D.models)) option($("mt-model"), key, m.title);
  for (const [key, r] of Object.entries(D.recipes)) option($("mt-recipe"), key, r.label);
  for (const [key, label] of Object.entries(D.attentions)) option($("mt-attention"), key, label);
  option($("mt-attention"), "-", "none (no attention in this model)");
  for (const [key, label] of Object.entries(D.optimizers)) option($("mt-optimizer"), key, label);
  for (const [key, label] of Object.entries(D.conventions)) option($("mt-convention"), key, label);
  option($("mt-gpu"), "", "none");
  for (const [name, , stated] of D.gpus) option($("mt-gpu"), name, name + " (" + stated + ")");
}

function choice() {
  const m = D.models[$("mt-model").value];
  const attention = m.kind === "image" ? "-" : $("mt-attention").value;
  const key = [$("mt-optimizer").value, $("mt-recipe").value, attention,
               $("mt-convention").value].join("|");
  return [m, m.choices[key]];
}

function setModel(keep) {
  const m = D.models[$("mt-model").value], image = m.kind === "image";
  $("mt-size-label").firstChild.textContent = image
    ? "image side H (pixels)" : "sequence length S (tokens)";
  $("mt-size").min = m.min_size; $("mt-size").max = m.max_size;
  if (!keep) {
    $("mt-size").value = m.default_size; $("mt-batch").value = m.default_batch;
    if ($("mt-recipe").value !== m.recipe) { $("mt-recipe").value = m.recipe; setRecipe(); }
  }
  $("mt-attention").disabled = image;
  $("mt-attention").querySelector('option[value="-"]').hidden = !image;
  if (image) $("mt-attention").value = "-";
  else if ($("mt-attention").value === "-") {
    $("mt-attention").value = D.recipes[$("mt-recipe").value].attention;
  }
  const batch1 = m.min_size_batch1 !== m.min_size
    ? " (at batch 1, from " + m.min_size_batch1 + ": a BatchNorm needs more than one value "
      + "per channel)" : "";
  $("mt-model-note").textContent = m.note + "; " + group(T[m.parameters]) + " parameters; "
    + m.symbol + " from " + m.min_size + " to " + m.max_size + batch1 + ".";
}

// A recipe brings its own attention kernel and reserve.
function setRecipe() {
  const r = D.recipes[$("mt-recipe").value];
  if (!$("mt-attention").disabled) $("mt-attention").value = r.attention;
  $("mt-reserve").value = (BigInt(r.reserve) / MIB).toString();
}

function readInt(id, low, high, what) {
  const text = $(id).value.trim();
  if (!/^[0-9]+$/.test(text)) {
    throw new Error(what + " must be a whole number, not '" + text + "'.");
  }
  const v = BigInt(text);
  if (v < BigInt(low) || (high !== null && v > BigInt(high))) {
    throw new Error(what + (high === null ? " must be at least " + low
      : " must be between " + low + " and " + high) + "; it is " + text + ".");
  }
  return v;
}

// No verdict, no largest batch: what an error leaves, so that no stale answer stays beside it.
function clearVerdict() {
  const fit = $("mt-fit"), largest = $("mt-largest");
  fit.textContent = ""; fit.className = ""; delete fit.dataset.fits;
  largest.textContent = ""; delete largest.dataset.value;
}

function fail(message, keepTable) {
  $("mt-error").textContent = message;
  clearVerdict();
  if (!keepTable) $("mt-result").hidden = true;
}

function command(m, b, size, gpu, reserve) {
  if (!m.estimate_name) {
    return "(chapter 8's worked example: not a model of memtheory estimate; "
      + "memtheory.calculator.footprint gives the same numbers)";
  }
  const recipe = $("mt-recipe").value, r = D.recipes[recipe];
  const quote = s => /\s/.test(s) ? '"' + s + '"' : s;
  let line = "memtheory estimate " + m.estimate_name + " --recipe " + recipe + " --batch " + b
    + (m.kind === "image" ? " --image " : " --seq ") + size;
  if (m.kind !== "image" && $("mt-attention").value !== r.attention) {
    line += " --attention " + $("mt-attention").value;
  }
  if ($("mt-optimizer").value !== "adamw") line += " --optimizer " + $("mt-optimizer").value;
  if ($("mt-convention").value === "breakdown") line += " --convention breakdown";
  if (gpu) line += " --gpu " + quote(gpu);
  if (reserve !== null && reserve !== BigInt(r.reserve)) {
    line += ' --reserve "' + (reserve / MIB).toString() + ' MiB"';
  }
  return line;
}

function update() {
  $("mt-error").textContent = "";
  clearVerdict();
  const [m, c] = choice();
  const model = $("mt-model").value;
  const result = $("mt-result");
  if (!c) { fail("This combination is not in the bundle: pick another."); return; }
  let b, size;
  try {
    b = readInt("mt-batch", 1, null, "The batch");
    size = readInt("mt-size", m.min_size, m.max_size,
                   m.kind === "image" ? "The image side" : "The sequence length");
  } catch (e) { fail(e.message); return; }
  const refused = MT_TOO_FEW(model, b, size);
  if (refused !== null) {
    fail(m.title + " cannot train at batch " + b + " and " + m.symbol + " = " + size + ": "
      + refused + " would see one value per channel, which PyTorch refuses in training "
      + "(\"Expected more than 1 value per channel when training\"). Use a batch of 2 or more, "
      + "or " + m.symbol + " of at least " + m.min_size_batch1 + ".");
    return;
  }
  result.hidden = false;
  const [peak, moment, z] = MT_PEAK(model, c, b, size);
  const total = MT_VALUE(c.total, z);
  const scale = K(peak, [GIB, 1n]) >= 0 ? GIB : MIB, unit = scale === GIB ? "GiB" : "MiB";
  $("mt-unit").textContent = unit;
  const body = $("mt-components"); body.textContent = "";
  for (const [name, index] of c.components) {
    const v = MT_VALUE(index, z), row = document.createElement("tr");
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
  const assumed = $("mt-assumed"); assumed.textContent = "";
  for (const line of [...c.assumed.map(i => "assumed: " + T[i]), "counted: " + T[c.why]]) {
    const item = document.createElement("li"); item.textContent = line; assumed.appendChild(item);
  }
  $("mt-formula-total").textContent = "total = " + T[c.total_text];
  $("mt-formula-peak").textContent = c.peak_text !== null
    ? "peak = " + T[c.peak_text]
    : "peak = the largest of " + c.peak.length + " moments' formulas (too long to print; "
      + "memtheory.calculator.footprint(...).peak gives it)";
  const gpu = $("mt-gpu").value, fit = $("mt-fit"), largest = $("mt-largest");
  $("mt-command").textContent = command(m, b, size, gpu, null);
  if (!gpu) { fit.textContent = "Choose a card to compare."; fit.className = "mt-note"; return; }
  let reserve;
  try { reserve = readInt("mt-reserve", 0, null, "The reserve") * MIB; }
  catch (e) { fail(e.message, true); return; }
  $("mt-command").textContent = command(m, b, size, gpu, reserve);
  const memory = BigInt(D.gpus.find(g => g[0] === gpu)[1]);
  if (reserve >= memory) {
    fail("The reserve leaves nothing of the card: make it smaller.", true);
    return;
  }
  // memtheory.gpus.usable_memory: the card less the reserve.
  const usable = [memory - reserve, 1n];
  const ok = K(peak, usable) <= 0;
  fit.className = ok ? "mt-fits" : "mt-fails";
  fit.dataset.fits = ok ? "yes" : "no";
  fit.textContent = (ok ? "Fits: " : "Does not fit: ") + "the peak " + inUnit(peak, GIB)
    + " GiB against " + inUnit(usable, GIB) + " GiB usable (" + gpu + ", "
    + inUnit([memory, 1n], GIB) + " GiB less a reserve of " + inUnit([reserve, 1n], GIB) + " GiB).";
  const most = MT_LARGEST(model, c, size, usable);
  largest.dataset.value = most.toString();
  const where = m.symbol + " = " + size;
  largest.textContent = most > 0n ? "Largest batch at " + where + ": " + group(most) + "."
    : K(MT_PEAK(model, c, 1n, size)[0], usable) <= 0
      ? "Largest batch: none (batch 1 cannot train at " + where + " and batch 2 does not fit)."
      : "Largest batch: none (even batch 1 does not fit at " + where + ").";
}

function example(name) {
  const e = D.examples[name], s = e.settings;
  $("mt-model").value = s.model; setModel(false);
  $("mt-recipe").value = s.recipe; setRecipe();
  if (s.attention !== "-") $("mt-attention").value = s.attention;
  $("mt-optimizer").value = s.optimizer; $("mt-convention").value = s.convention;
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
$("mt-recipe").value = D.models["stackexchange-cnn"].recipe;
$("mt-optimizer").value = "adamw";
$("mt-convention").value = "exact";
setRecipe();
setModel(false);
$("mt-model").addEventListener("change", () => { setModel(false); update(); });
$("mt-recipe").addEventListener("change", () => { setRecipe(); update(); });
for (const id of ["mt-attention", "mt-optimizer", "mt-convention", "mt-batch", "mt-size",
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
<label>recipe <select id="mt-recipe"></select></label>
<label id="mt-attention-label">attention <select id="mt-attention"></select></label>
<label>optimizer <select id="mt-optimizer"></select></label>
<label>count <select id="mt-convention"></select></label>
<label>batch B <input id="mt-batch" type="number" min="1" step="1" value="1"></label>
<label id="mt-size-label">size <input id="mt-size" type="number" min="1" step="1"></label>
<label>card <select id="mt-gpu"></select></label>
<label>reserve (MiB; the recipe's) <input id="mt-reserve" type="number" min="0" step="1"></label>
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
<ul class="mt-note" id="mt-assumed"></ul>
<p class="mt-note">The same question on the command line:</p>
<div class="mt-formula" id="mt-command"></div>
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
