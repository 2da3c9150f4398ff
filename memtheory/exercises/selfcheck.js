// memtheory's self-check: an answer box under each exercise of the book, checked in the browser.
// The data of each box (expected answer, listed mistakes, formula sample points) is JSON written
// at build time by memtheory.exercises.selfcheck from the grader's own variant; this script reads
// the reader's answer with a subset of the grader's grammar and gives the grader's feedback.
// Offline and from file://: no request is made.
(function () {
  "use strict";
  if (window.memtheorySelfCheck) { return; }
  var LIMIT = 500;
  function Fail(message) { this.message = message; }
  function quote(text) { return "'" + (text.length > 60 ? text.slice(0, 57) + "..." : text) + "'"; }
  var SUPERSCRIPTS = { "⁰": "0", "¹": "1", "²": "2", "³": "3", "⁴": "4", "⁵": "5", "⁶": "6", "⁷": "7", "⁸": "8", "⁹": "9" };
  // -- exact rationals (BigInt): numbers are read and compared exactly, as the grader does --------
  function gcd(a, b) { a = a < 0n ? -a : a; b = b < 0n ? -b : b; while (b) { var t = a % b; a = b; b = t; } return a; }
  function Q(n, d) {
    if (d === undefined) { d = 1n; }
    if (d === 0n) { throw new Fail("division by zero."); }
    if (d < 0n) { n = -n; d = -d; }
    var g = gcd(n, d) || 1n;
    return { n: n / g, d: d / g };
  }
  function parseQ(text) {  // "p" or "p/q", as the build writes values
    var parts = String(text).split("/");
    return Q(BigInt(parts[0]), parts.length > 1 ? BigInt(parts[1]) : 1n);
  }
  function literal(text) {  // digits, a point, an exponent: exactly
    var m = /^(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(text.replace(/,/g, ""));
    var decimals = m[2] || "", exponent = Number(m[3] || 0) - decimals.length;
    if (Math.abs(exponent) > 400) { throw new Fail("the exponent of " + quote(text) + " is too large."); }
    var n = BigInt((m[1] || "0") + decimals);
    return exponent >= 0 ? Q(n * 10n ** BigInt(exponent)) : Q(n, 10n ** BigInt(-exponent));
  }
  var EXACT = {
    lit: literal,
    add: function (a, b) { return Q(a.n * b.d + b.n * a.d, a.d * b.d); },
    sub: function (a, b) { return Q(a.n * b.d - b.n * a.d, a.d * b.d); },
    mul: function (a, b) { return Q(a.n * b.n, a.d * b.d); },
    div: function (a, b) { if (b.n === 0n) { throw new Fail("division by zero."); } return Q(a.n * b.d, a.d * b.n); },
    neg: function (a) { return Q(-a.n, a.d); },
    pow: function (a, b) {
      if (b.d !== 1n || b.n > 64n || b.n < -64n) { throw new Fail("a power must be a whole number from -64 to 64."); }
      var e = b.n < 0n ? -b.n : b.n, r = Q(a.n ** e, a.d ** e);
      return b.n < 0n ? EXACT.div(Q(1n), r) : r;
    }
  };
  var FLOAT = {
    lit: function (text) { return Number(text); },
    add: function (a, b) { return a + b; },
    sub: function (a, b) { return a - b; },
    mul: function (a, b) { return a * b; },
    div: function (a, b) { if (b === 0) { throw new Fail("division by zero."); } return a / b; },
    neg: function (a) { return -a; },
    pow: function (a, b) { return Math.pow(a, b); }
  };
  function cmp(a, b) { var x = a.n * b.d, y = b.n * a.d; return x < y ? -1 : x > y ? 1 : 0; }
  function abs(a) { return a.n < 0n ? Q(-a.n, a.d) : a; }
  function isZero(a) { return a.n === 0n; }
  // -- tokens ----------------------------------------------------------------------------------
  function tokens(text, formula) {
    text = text.replace(/[⁰¹²³⁴⁵⁶⁷⁸⁹]+/g, function (s) {
      return "^" + s.split("").map(function (c) { return SUPERSCRIPTS[c]; }).join("");
    });
    var out = [], i = 0, m;
    while (i < text.length) {
      var rest = text.slice(i);
      if ((m = /^\s+/.exec(rest))) { i += m[0].length; continue; }
      m = (formula ? /^\d+(\.\d*)?(?:[eE][+-]?\d+)?|^\.\d+(?:[eE][+-]?\d+)?/
        : /^(\d{1,3}(?:,\d{3})+|\d+)(\.\d*)?(?:[eE][+-]?\d+)?|^\.\d+(?:[eE][+-]?\d+)?/).exec(rest);
      if (m) {
        if (!formula && /^,\d/.test(rest.slice(m[0].length))) {
          throw new Fail("cannot read " + quote(text) + ": a comma may only group thousands (1,048,576); write decimals with a point (224.69, not 224,69).");
        }
        out.push({ t: "num", v: m[0] });
        i += m[0].length; continue;
      }
      if ((m = /^\*\*/.exec(rest))) { out.push({ t: "^" }); i += 2; continue; }
      if (/^[+\-*/^()]/.test(rest)) { out.push({ t: rest[0] }); i += 1; continue; }
      if (/^[×·⋅]/.test(rest)) { out.push({ t: "*" }); i += 1; continue; }
      if (rest[0] === ",") { out.push({ t: "," }); i += 1; continue; }
      if ((m = /^[A-Za-z_][A-Za-z_0-9]*/.exec(rest))) {
        if (!formula && m[0] === "x") { out.push({ t: "*" }); } else { out.push({ t: "id", v: m[0] }); }
        i += m[0].length; continue;
      }
      throw new Fail("cannot read " + quote(text) + ": unexpected " + quote(rest[0]) + ".");
    }
    return out;
  }
  // -- arithmetic and formulas: a recursive-descent parser evaluating at one point ------------------
  var FUNCTIONS = {
    floor: function (a) { return Math.floor(a[0]); },
    ceiling: function (a) { return Math.ceil(a[0]); },
    ceil: function (a) { return Math.ceil(a[0]); },
    min: function (a) { return Math.min.apply(null, a); },
    max: function (a) { return Math.max.apply(null, a); }
  };
  function evaluate(text, formula, point) {
    var list = tokens(text, formula), k = 0, ops = formula ? FLOAT : EXACT;
    function peek() { return list[k]; }
    function take(t) {
      if (!list[k] || list[k].t !== t) { throw new Fail("cannot read " + quote(text) + ": expected " + quote(t) + "."); }
      return list[k++];
    }
    function sum() {
      var v = product();
      while (peek() && (peek().t === "+" || peek().t === "-")) {
        var op = list[k++].t, w = product();
        v = op === "+" ? ops.add(v, w) : ops.sub(v, w);
      }
      return v;
    }
    function startsAtom(tok) { return tok && (tok.t === "num" || tok.t === "id" || tok.t === "("); }
    function product() {
      var v = unary();
      for (;;) {
        var tok = peek();
        if (tok && (tok.t === "*" || tok.t === "/")) {
          k++;
          var w = unary();
          v = tok.t === "*" ? ops.mul(v, w) : ops.div(v, w);
        } else if (formula && startsAtom(tok)) {
          v = ops.mul(v, power());  // juxtaposition: 2B H^2
        } else { return v; }
      }
    }
    function unary() {
      var tok = peek();
      if (tok && (tok.t === "-" || tok.t === "+")) { k++; var v = unary(); return tok.t === "-" ? ops.neg(v) : v; }
      return power();
    }
    function power() {
      var base = atom();
      if (peek() && peek().t === "^") { k++; return ops.pow(base, unary()); }
      return base;
    }
    function atom() {
      var tok = list[k++];
      if (!tok) { throw new Fail("cannot read " + quote(text) + ": it ends too early."); }
      if (tok.t === "num") { return ops.lit(tok.v); }
      if (tok.t === "(") { var v = sum(); take(")"); return v; }
      if (tok.t === "id") {
        var name = tok.v, lower = name.toLowerCase();
        if (formula && FUNCTIONS[lower] && peek() && peek().t === "(") {
          k++;
          var args = [sum()];
          while (peek() && peek().t === ",") { k++; args.push(sum()); }
          take(")");
          return FUNCTIONS[lower](args);
        }
        if (formula && Object.prototype.hasOwnProperty.call(point, name)) { return point[name]; }
        throw new Fail(formula
          ? quote(name) + " is not allowed in a formula: use the question's symbols (" + Object.keys(point).join(", ") + "), numbers, + - * / ^, floor(...)."
          : "cannot read " + quote(text) + " as a number.");
      }
      throw new Fail("cannot read " + quote(text) + ": unexpected " + quote(tok.t) + ".");
    }
    if (!list.length) { throw new Fail("cannot read " + quote(text) + " as a number."); }
    var value = sum();
    if (k < list.length) { throw new Fail("cannot read " + quote(text) + ": unexpected " + quote(String(list[k].v || list[k].t)) + "."); }
    if (formula && !isFinite(value)) { throw new Fail(quote(text) + " is not a finite number."); }
    return value;
  }
  // -- numbers, sizes, choices ----------------------------------------------------------------
  function cleaned(raw) {
    var text = raw.trim();
    if (!text) { throw new Fail("empty"); }
    if (text.length > LIMIT) { throw new Fail("the answer is " + text.length + " characters long; the limit is " + LIMIT + "."); }
    if (/^[+-]?(nan|inf|infinity|∞)%?$/i.test(text)) { throw new Fail(text + " is not a finite number: give a number such as 12.5."); }
    if (text.length > 1 && /\.$/.test(text) && !/\.\.$/.test(text)) { text = text.slice(0, -1).trim(); }
    return text;
  }
  var APPROX = /^(?:~|≈|about\s|approx\.?\s|approximately\s)\s*/i;
  var PERCENT = /\s*(?:%|percent|per\s*cent|pct)$/i;
  function digits(text) {
    text = text.replace(/(\d)_(?=\d)/g, "$1");
    return text.replace(/(\d) (?=\d{3}(?!\d))/g, "$1");
  }
  function readNumber(raw, approxOk) {
    var original = cleaned(raw), text = original, approx = APPROX.exec(text);
    if (approx) {
      if (!approxOk) { throw new Fail(quote(original) + ": a count is graded exactly; write the exact number without '~' or 'about'."); }
      text = text.slice(approx[0].length);
    }
    var percent = PERCENT.exec(text);
    if (percent) { text = text.slice(0, percent.index); }
    var suffix = /^([\d.,_ ]*\d\.?)\s*([kKmMgGtT])$/.exec(text);
    if (suffix) {
      var power = { k: 3, m: 6, g: 9, t: 12 }[suffix[2].toLowerCase()];
      throw new Fail("cannot read " + quote(original) + ": '" + suffix[2] + "' could mean 1000 or 1024 (or their powers); write the number in digits or e-notation (" + suffix[1].trim() + "e" + power + " for 10^" + power + ").");
    }
    return { value: evaluate(digits(text), false, {}), percent: !!percent };
  }
  function unitBytes(units, written) {
    var lower = written.toLowerCase();
    if (lower === "b" || lower === "byte" || lower === "bytes") { return ["B", 1]; }
    for (var name in units) { if (name.toLowerCase() === lower) { return [name, String(units[name])]; } }
    return null;
  }
  function readSize(raw, data) {
    var original = cleaned(raw), text = original.replace(APPROX, ""), m = /^(.*?)\s*([A-Za-z]+)$/.exec(text);
    var written = null;
    if (m) {
      var found = unitBytes(data.units, m[2]);
      if (!found) {
        var extra = m[2].toLowerCase() === "k" ? " (k alone could mean kB or KiB)" : "";
        throw new Fail("unknown unit '" + m[2] + "' in " + quote(original) + extra + ": use B, kB, MB, GB (steps of 1000) or KiB, MiB, GiB (steps of 1024).");
      }
      written = found; text = m[1];
    }
    if (!text.trim() || text.trim() === original) {
      if (!/\d/.test(text)) { throw new Fail("cannot read " + quote(original) + " as a size: write a number and a unit, e.g. '22.9 MiB'."); }
    }
    var number = readNumber(text, true).value;
    var value = written ? EXACT.div(EXACT.mul(number, Q(BigInt(written[1]))), Q(BigInt(data.units[data.unit]))) : number;
    return { number: number, unit: written && written[0], value: value };
  }
  function normal(text) { return text.toLowerCase().split(/\s+/).filter(Boolean).join(" "); }
  function readChoice(raw, options) {
    var text = cleaned(raw);
    for (var i = 0; i < options.length; i++) { if (normal(text) === normal(options[i])) { return i; } }
    var m = /^\(?([A-Za-z])\)?[.)]?$/.exec(raw.trim());
    if (m) {
      var index = m[1].toLowerCase().charCodeAt(0) - 97;
      if (index >= 0 && index < options.length) { return index; }
    }
    throw new Fail(quote(raw.trim()) + " is not one of the options: answer with a letter from a to " + String.fromCharCode(96 + options.length) + ", or with an option's text.");
  }
  // -- comparing ------------------------------------------------------------------------------
  function close(given, expected, rtol) {  // exactly the grader's test: |given - expected| <= rtol |expected|
    if (isZero(expected)) { return isZero(given); }
    return cmp(abs(EXACT.sub(given, expected)), EXACT.mul(literal(rtol), abs(expected))) <= 0;
  }
  function matcher(data) {
    if (data.kind === "expression") {
      return function (given, expected) {
        for (var i = 0; i < expected.length; i++) {
          if (!(Math.abs(given[i] - expected[i]) <= 1e-9 * Math.max(1, Math.abs(expected[i])))) { return false; }
        }
        return true;
      };
    }
    if (data.kind === "choice") { return function (given, expected) { return given === expected; }; }
    if (data.kind === "integer" || Number(data.rtol) === 0) {
      return function (given, expected) { return cmp(given, expected) === 0; };
    }
    return function (given, expected) { return close(given, expected, data.rtol); };
  }
  function parse(raw, data) {
    if (data.kind === "integer") {
      var n = readNumber(raw, false);
      if (n.percent) { throw new Fail(quote(raw.trim()) + ": this answer is a count, not a percentage."); }
      if (n.value.d !== 1n) { throw new Fail(raw.trim() + " is not a whole number: this answer is a count."); }
      return n.value;
    }
    if (data.kind === "quantity") { return readSize(raw, data).value; }
    if (data.kind === "number") {
      var r = readNumber(raw, true);
      return data.percent || !r.percent ? r.value : EXACT.div(r.value, Q(100n));
    }
    if (data.kind === "choice") { return readChoice(raw, data.options); }
    var text = cleaned(raw);
    return data.points.map(function (point) { return evaluate(text, true, point); });
  }
  function exponent10(v) {  // floor(log10(|v|)), exactly (0 for zero)
    var a = abs(v);
    if (isZero(a)) { return 0; }
    var e = (a.n / a.d).toString().length - 1;
    if (a.n < a.d) { e = -1; }
    while (cmp(a, e >= 0 ? Q(10n ** BigInt(e + 1)) : Q(1n, 10n ** BigInt(-e - 1))) >= 0) { e++; }
    while (cmp(a, e >= 0 ? Q(10n ** BigInt(e)) : Q(1n, 10n ** BigInt(-e))) < 0) { e--; }
    return e;
  }
  function decimalText(v, significant, minDecimals) {  // the grader's decimal_text: rounded half up
    var decimals = Math.max(significant - 1 - exponent10(v), minDecimals, 0);
    var scaled = EXACT.mul(abs(v), Q(10n ** BigInt(decimals)));
    var digits = ((2n * scaled.n + scaled.d) / (2n * scaled.d)).toString();
    if (decimals) {
      digits = digits.padStart(decimals + 1, "0");
      digits = digits.slice(0, -decimals) + "." + digits.slice(-decimals);
    }
    return (v.n < 0n && /[1-9]/.test(digits) ? "-" : "") + digits;
  }
  function display(data, value) {  // as the grader writes a value (AnswerKind.display)
    if (data.kind === "quantity") { return decimalText(value, 3, 2) + " " + data.unit; }
    var text = value.d === 1n ? value.n.toString() : decimalText(value, 4, 0);
    return data.percent ? text + "%" : text;
  }
  function readings(raw, data) {
    var found = [];
    try {
      if (data.kind === "quantity") {
        var size = readSize(raw, data);
        if (!size.unit && data.unit !== "B") { found.push({ slip: "bare_bytes", value: EXACT.div(size.number, Q(BigInt(data.units[data.unit]))) }); }
        var twins = { kB: "KiB", MB: "MiB", GB: "GiB", TB: "TiB", KiB: "kB", MiB: "MB", GiB: "GB", TiB: "TB" };
        if (size.unit && twins[size.unit]) { found.push({ slip: "unit_label_swapped", value: EXACT.div(EXACT.mul(size.number, Q(BigInt(data.units[twins[size.unit]]))), Q(BigInt(data.units[data.unit]))) }); }
      } else if (data.kind === "number") {
        var r = readNumber(raw, true);
        if (!r.percent) { found.push(data.percent ? { slip: "fraction_for_percent", value: EXACT.mul(r.value, Q(100n)) } : { slip: "percent_for_fraction", value: EXACT.div(r.value, Q(100n)) }); }
      }
    } catch (e) { if (!(e instanceof Fail)) { throw e; } }
    return found;
  }
  function explain(raw, given, data) {
    var same = matcher(data), singles = [], seen = {};
    data.mistakes.forEach(function (m) {
      if (!seen[m.name] && same(given, m.value)) { seen[m.name] = true; singles.push([m]); }
    });
    if (singles.length) { return singles; }
    var found = [];
    readings(raw, data).forEach(function (reading) {
      var s = data.slips[reading.slip];
      var slip = { name: s.name, title: s.title, hint: s.hint, detail: raw.trim() + " read as " + display(data, reading.value) };
      if (same(reading.value, data.expected)) { found.push([slip]); return; }
      data.mistakes.forEach(function (m) { if (same(reading.value, m.value)) { found.push([slip, m]); } });
    });
    if (!found.length) {
      data.pairs.forEach(function (pair) { if (same(given, pair.value)) { found.push(pair.mistakes); } });
    }
    var unique = {}, out = [];
    found.forEach(function (e) {
      var key = e.map(function (m) { return m.name; }).sort().join("+");
      if (!unique[key]) { unique[key] = true; out.push(e); }
    });
    return out;
  }
  function names(e) { return e.map(function (m) { return m.title + " [" + m.name + "]"; }).join(" and "); }
  function prepared(data) {  // the build writes exact values as "p/q" text: read them once
    if (data.ready || data.kind === "expression" || data.kind === "choice") { return data; }
    data.expected = parseQ(data.expected);
    data.mistakes.forEach(function (m) { m.value = parseQ(m.value); });
    data.pairs.forEach(function (p) { p.value = parseQ(p.value); p.mistakes.forEach(function (m) { m.value = parseQ(m.value); }); });
    data.ready = true;
    return data;
  }
  function asciiDigits(text) {  // any Unicode decimal digit (fullwidth ５) as 0-9: Python reads them
    return String(text).replace(/\p{Nd}/gu, function (c) {
      var cp = c.codePointAt(0), start = cp;  // digits come in runs of ten, 0 to 9
      while (/\p{Nd}/u.test(String.fromCodePoint(start - 1))) { start -= 1; }
      return String((cp - start) % 10);
    });
  }
  function feedback(raw, data) {
    data = prepared(data);
    raw = asciiDigits(raw);
    var given;
    try { given = parse(raw, data); } catch (e) {
      if (!(e instanceof Fail)) { throw e; }
      if (e.message === "empty") { return { status: "unanswered", text: "The answer is empty." }; }
      return { status: "invalid", text: "Cannot grade this answer: " + e.message };
    }
    if (matcher(data)(given, data.expected)) {
      var exact = (data.kind === "quantity" || data.kind === "number") && Number(data.rtol) && cmp(given, data.expected) !== 0;
      return { status: "correct", text: exact ? "Correct (exactly " + data.shown + ")." : "Correct." };
    }
    var explanations = explain(raw, given, data);
    if (!explanations.length) {
      var hint = data.hint;
      if (!hint && (data.kind === "quantity" || data.kind === "number") && Number(data.rtol)) {
        hint = "It is not within " + Number((Number(data.rtol) * 100).toPrecision(6)) + "% of the exact value.";
      }
      return { status: "incorrect", text: ["Not correct.", hint].filter(Boolean).join(" "), mistakes: [] };
    }
    // one explanation is named; two or more that fit as well are listed as candidates, none named
    var hints = [];
    var all = [];
    explanations.forEach(function (e) { e.forEach(function (m) {
      if (hints.indexOf(m.hint) < 0) { hints.push(m.hint); }
      if (all.indexOf(m.name) < 0) { all.push(m.name); }
    }); });
    function details(e) { return e.map(function (m) { return m.detail; }).join("; and "); }
    if (explanations.length === 1) {
      var only = explanations[0];
      var text = "Not correct. This is the answer you get if you " + names(only) + ": " + details(only) + ". " + hints.join(" ");
      if (all.length === 1 && data.partial && data.partial[all[0]]) {  // the set's partial credit
        text += " Partial credit: " + data.partial[all[0]] + " of " + data.worth + " points for this one slip.";
      }
      return { status: "incorrect", text: text, mistakes: all };
    }
    var within = (data.kind === "quantity" || data.kind === "number") && Number(data.rtol) ? " within " + Number((Number(data.rtol) * 100).toPrecision(6)) + "%" : "";
    var options = explanations.map(function (e) { return names(e) + " (" + details(e) + ")"; }).join("; or you ");
    var listed = "Not correct. This answer matches " + explanations.length + " possible slips" + within + ", and the grader cannot tell which you made: you " + options + ". " + hints.join(" ");
    return { status: "incorrect", text: listed, mistakes: [], candidates: all };
  }
  // -- the boxes -----------------------------------------------------------------------------
  var NOTES = {
    integer: "Checked here as the grader checks it (exactly).",
    quantity: "Checked here with the grader's tolerance, in double precision; the grader (memtheory grade) is exact.",
    number: "Checked here with the grader's tolerance, in double precision; the grader (memtheory grade) is exact.",
    expression: "Checked here by comparing values at sample points; the grader also proves equivalence symbolically.",
    choice: "Checked here as the grader checks it."
  };
  function build(box) {
    var data = JSON.parse(box.querySelector("script[type='application/json']").textContent);
    var form = document.createElement("form"), input = document.createElement("input");
    var button = document.createElement("button"), out = document.createElement("p"), note = document.createElement("p");
    form.className = "mt-selfcheck-form";
    input.type = "text"; input.className = "mt-selfcheck-input"; input.setAttribute("aria-label", "Your answer to " + data.id);
    input.placeholder = "Your answer"; input.autocomplete = "off"; input.spellcheck = false; input.maxLength = LIMIT;
    input.style.cssText = "width:min(24em,100%);max-width:100%;padding:0.25em;font:inherit";
    button.type = "submit"; button.className = "mt-selfcheck-button"; button.textContent = "Check";
    button.style.cssText = "margin-left:0.5em;padding:0.25em 0.75em;font:inherit";
    out.className = "mt-selfcheck-feedback"; out.setAttribute("role", "status"); out.setAttribute("aria-live", "polite");
    note.className = "mt-selfcheck-note"; note.style.cssText = "font-size:0.8em;opacity:0.75";
    note.textContent = NOTES[data.kind] || "";
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var result = feedback(input.value, data);
      out.textContent = result.text;
      out.dataset.status = result.status;
      out.dataset.mistakes = (result.mistakes || []).join(" ");
      out.style.color = result.status === "correct" ? "#1a7f37" : result.status === "incorrect" ? "#b35900" : "#b42318";
    });
    form.appendChild(input); form.appendChild(button);
    box.appendChild(form); box.appendChild(out); box.appendChild(note);
  }
  function start() {
    var boxes = document.querySelectorAll("div.mt-selfcheck");
    for (var i = 0; i < boxes.length; i++) { if (!boxes[i].dataset.ready) { boxes[i].dataset.ready = "1"; build(boxes[i]); } }
  }
  window.memtheorySelfCheck = { feedback: feedback, start: start };
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
