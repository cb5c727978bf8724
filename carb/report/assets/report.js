/* CARB report: the Pareto explorer. Vanilla JS + SVG, no library, no network.
 *
 * Reads the JSON in <script id="carb-data">: the configs of a screening's feasible set (or of
 * the measured data) with their costs, which of them are on the Pareto front (the shortlist),
 * and the objectives. Draws a 2-D projection (axes chosen by the user), a tooltip with the
 * config and its costs on hover, and budget sliders that hide configs over a budget.
 *
 * For tests and tools it writes, on the body element: data-points (shortlist points drawn),
 * data-feasible (other points drawn), data-visible (points within the budgets and with
 * both coordinates in the current projection) and
 * data-ready="1" once drawn; data-errors counts script errors (set by the guard in <head>).
 */
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";  // a namespace name, never fetched
  var W = 760, H = 500, M = {l: 78, r: 18, t: 14, b: 52};

  function fmt(v) {
    if (v === null || v === undefined || !isFinite(v)) return "n/a";
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    return v.toPrecision(3);
  }

  function el(name, attrs, parent) {
    var e = document.createElementNS(SVGNS, name);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function finiteValues(arr) {
    var out = [];
    for (var i = 0; i < arr.length; i++) if (arr[i] !== null && isFinite(arr[i])) out.push(arr[i]);
    return out;
  }

  function tickFmt(v) {
    var a = Math.abs(v);
    if (a >= 1e4 || (a > 0 && a < 1e-3)) {
      var e = Math.floor(Math.log10(a) + 1e-9), m = v / Math.pow(10, e);
      return (Math.abs(m - Math.round(m)) < 1e-6 ? String(Math.round(m)) : m.toFixed(1)) + "e" + e;
    }
    return String(Number(v.toPrecision(3)));
  }

  function niceTicks(lo, hi, log) {
    var t = [], i;
    if (log) {
      var e0 = Math.floor(Math.log10(lo)), e1 = Math.ceil(Math.log10(hi));
      var dec = Math.log10(hi / lo);
      var steps = dec < 1.2 ? [1, 2, 3, 4, 5, 6, 7, 8, 9] : dec <= 2.5 ? [1, 2, 5] : [1];
      for (var e = e0; e <= e1; e++) for (i = 0; i < steps.length; i++) {
        var v = steps[i] * Math.pow(10, e);
        if (v >= lo * 0.999 && v <= hi * 1.001) t.push(v);
      }
      return t;
    }
    var span = hi - lo || Math.abs(hi) || 1, step = Math.pow(10, Math.floor(Math.log10(span / 5)));
    if (span / step > 10) step *= 2;
    if (span / step > 10) step *= 2.5;
    for (var x = Math.ceil(lo / step) * step; x <= hi + 1e-9 * span; x += step) t.push(x);
    return t;
  }

  function scale(values, log, a, b) {
    var v = finiteValues(values).filter(function (x) { return !log || x > 0; });
    var lo = Math.min.apply(null, v), hi = Math.max.apply(null, v);
    if (!v.length) { lo = 1; hi = 10; }
    if (log) {
      if (lo === hi) { lo /= 2; hi *= 2; }
      var l0 = Math.log10(lo) - 0.04 * (Math.log10(hi) - Math.log10(lo));
      var l1 = Math.log10(hi) + 0.04 * (Math.log10(hi) - Math.log10(lo));
      return {lo: Math.pow(10, l0), hi: Math.pow(10, l1), log: true,
              f: function (x) { return x > 0 ? a + (Math.log10(x) - l0) / (l1 - l0) * (b - a) : NaN; }};
    }
    if (lo === hi) { lo -= 1; hi += 1; }
    var pad = 0.04 * (hi - lo); lo -= pad; hi += pad;
    return {lo: lo, hi: hi, log: false, f: function (x) { return a + (x - lo) / (hi - lo) * (b - a); }};
  }

  function main() {
    var node = document.getElementById("carb-data");
    var D = JSON.parse(node.textContent);
    var P = D.points, n = P.label.length, cols = D.columns;
    var svg = document.getElementById("pareto-svg");
    var tip = document.getElementById("tooltip");
    var selX = document.getElementById("axis-x"), selY = document.getElementById("axis-y");
    var logBox = document.getElementById("log-axes");
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("width", W); svg.setAttribute("height", H);
    if (!cols.length || !n) {  // nothing to explore (e.g. no feasible config): say so, stay clean
      el("text", {x: W / 2, y: H / 2, "text-anchor": "middle", "class": "axis-label"}, svg).textContent =
        "no configs to show";
      document.getElementById("counts").textContent = "No configs to show.";
      document.body.dataset.points = "0"; document.body.dataset.feasible = "0";
      document.body.dataset.visible = "0"; document.body.dataset.ready = "1";
      return;
    }

    cols.forEach(function (c) {
      [selX, selY].forEach(function (s) {
        var o = document.createElement("option"); o.value = c; o.textContent = D.labels[c] || c; s.appendChild(o);
      });
    });
    selX.value = D.default_axes[0]; selY.value = D.default_axes[1];

    var gGrid = el("g", {}, svg), gAxes = el("g", {"class": "axis"}, svg);
    var front = el("polyline", {"class": "front-line"}, svg);
    var gFeas = el("g", {}, svg), gShort = el("g", {}, svg);
    var circles = new Array(n);
    var order = [];
    // feasible points first, shortlist on top, so the front is never hidden behind the cloud
    for (var i = 0; i < n; i++) if (!P.shortlist[i]) order.push(i);
    for (i = 0; i < n; i++) if (P.shortlist[i]) order.push(i);
    order.forEach(function (i) {
      var s = !!P.shortlist[i];
      circles[i] = el("circle", {"class": s ? "pareto-point" : "feasible-point", r: s ? 4.2 : 2.6, "data-i": i},
                      s ? gShort : gFeas);
    });

    // budgets: one slider per column; "min" objectives get an upper bound, "max" ones a lower bound
    var budgets = {}, holder = document.getElementById("budgets");
    cols.forEach(function (c) {
      var v = finiteValues(P.values[c]);
      if (!v.length) return;
      var lo = Math.min.apply(null, v), hi = Math.max.apply(null, v), log = lo > 0 && hi / lo > 20;
      var dir = D.dirs[c] || "min";
      var box = document.createElement("div"); box.className = "budget";
      var lab = document.createElement("label");
      var val = document.createElement("span"); val.className = "val";
      lab.textContent = (D.labels[c] || c) + (dir === "max" ? " at least " : " at most ");
      lab.appendChild(val);
      var r = document.createElement("input"); r.type = "range"; r.min = 0; r.max = 1000; r.step = 1;
      r.value = dir === "max" ? 0 : 1000; r.id = "budget-" + c; r.setAttribute("aria-label", "budget on " + c);
      box.appendChild(lab); box.appendChild(r); holder.appendChild(box);
      var b = {col: c, dir: dir, lo: lo, hi: hi, log: log, input: r, label: val};
      b.exact = null;  // a budget given exactly (URL hash), until the slider is moved
      b.value = function () {
        if (b.exact !== null) return b.exact;
        var u = Number(r.value) / 1000;
        return log ? Math.exp(Math.log(lo) + u * (Math.log(hi) - Math.log(lo))) : lo + u * (hi - lo);
      };
      b.set = function (v) {
        var u = log ? (Math.log(Math.max(v, lo)) - Math.log(lo)) / (Math.log(hi) - Math.log(lo) || 1)
                    : (v - lo) / ((hi - lo) || 1);
        r.value = Math.round(1000 * Math.min(1, Math.max(0, u)));
        b.exact = v;
      };
      r.addEventListener("input", function () { b.exact = null; update(); });
      budgets[c] = b;
    });
    document.getElementById("reset-budgets").addEventListener("click", function () {
      for (var c in budgets) { budgets[c].input.value = budgets[c].dir === "max" ? 0 : 1000; budgets[c].exact = null; }
      update();
    });

    var visible = new Array(n);
    function applyBudgets() {
      var lim = {}, c;
      for (c in budgets) {
        var b = budgets[c], v = b.value();
        var atEnd = b.exact === null && ((b.dir === "max") ? Number(b.input.value) === 0 : Number(b.input.value) === 1000);
        lim[c] = atEnd ? null : v;  // at its end a slider filters nothing (no rounding at the edge)
        b.label.textContent = atEnd ? "(any)" : fmt(v) + (D.units[c] ? " " + D.units[c] : "");
      }
      for (var i = 0; i < n; i++) {
        var ok = true;
        for (c in lim) {
          if (lim[c] === null) continue;
          var x = P.values[c][i];
          if (x === null || !isFinite(x)) continue;  // unknown cost: not filtered out by a budget on it
          if (budgets[c].dir === "max" ? x < lim[c] : x > lim[c]) { ok = false; break; }
        }
        visible[i] = ok;
      }
    }

    function draw() {
      var xc = selX.value, yc = selY.value, log = logBox.checked;
      var sx = scale(P.values[xc], log, M.l, W - M.r), sy = scale(P.values[yc], log, H - M.b, M.t);
      while (gGrid.firstChild) gGrid.removeChild(gGrid.firstChild);
      while (gAxes.firstChild) gAxes.removeChild(gAxes.firstChild);
      el("line", {x1: M.l, y1: H - M.b, x2: W - M.r, y2: H - M.b}, gAxes);
      el("line", {x1: M.l, y1: M.t, x2: M.l, y2: H - M.b}, gAxes);
      niceTicks(sx.lo, sx.hi, sx.log).forEach(function (t) {
        var x = sx.f(t);
        el("line", {x1: x, y1: M.t, x2: x, y2: H - M.b, "class": "gridline"}, gGrid);
        el("line", {x1: x, y1: H - M.b, x2: x, y2: H - M.b + 5}, gAxes);
        el("text", {x: x, y: H - M.b + 18, "text-anchor": "middle"}, gAxes).textContent = tickFmt(t);
      });
      niceTicks(sy.lo, sy.hi, sy.log).forEach(function (t) {
        var y = sy.f(t);
        el("line", {x1: M.l, y1: y, x2: W - M.r, y2: y, "class": "gridline"}, gGrid);
        el("line", {x1: M.l - 5, y1: y, x2: M.l, y2: y}, gAxes);
        el("text", {x: M.l - 8, y: y + 4, "text-anchor": "end"}, gAxes).textContent = tickFmt(t);
      });
      el("text", {x: (M.l + W - M.r) / 2, y: H - 10, "text-anchor": "middle", "class": "axis-label"}, gAxes)
        .textContent = (D.labels[xc] || xc) + (D.dirs[xc] ? "  (" + D.dirs[xc] + ")" : "");
      el("text", {x: 16, y: (M.t + H - M.b) / 2, "text-anchor": "middle", "class": "axis-label",
                  transform: "rotate(-90 16 " + (M.t + H - M.b) / 2 + ")"}, gAxes)
        .textContent = (D.labels[yc] || yc) + (D.dirs[yc] ? "  (" + D.dirs[yc] + ")" : "");

      var pts = [], nShort = 0, nVis = 0;
      for (var i = 0; i < n; i++) {
        var x = sx.f(P.values[xc][i]), y = sy.f(P.values[yc][i]);
        var c = circles[i], bad = !(isFinite(x) && isFinite(y));
        c.setAttribute("cx", bad ? -10 : x.toFixed(1)); c.setAttribute("cy", bad ? -10 : y.toFixed(1));
        c.classList.toggle("missing", bad);
        c.classList.toggle("filtered", !visible[i]);
        if (!bad && visible[i]) {
          pts.push(i); nVis++;
          if (P.shortlist[i]) nShort++;
        }
      }
      // the 2-D front of the visible points in this projection (a staircase)
      var dx = (D.dirs[xc] || "min") === "min" ? 1 : -1, dy = (D.dirs[yc] || "min") === "min" ? 1 : -1;
      pts.sort(function (a, b) {
        return dx * (P.values[xc][a] - P.values[xc][b]) || dy * (P.values[yc][a] - P.values[yc][b]);
      });
      var best = Infinity, stair = [];
      pts.forEach(function (i) {
        var v = dy * P.values[yc][i];
        if (v < best) {
          var px = sx.f(P.values[xc][i]), py = sy.f(P.values[yc][i]);
          if (stair.length) stair.push([px, stair[stair.length - 1][1]]);
          stair.push([px, py]); best = v;
        }
      });
      front.setAttribute("points", stair.map(function (p) { return p[0].toFixed(1) + "," + p[1].toFixed(1); }).join(" "));
      document.getElementById("counts").textContent =
        nShort + " of " + D.n_shortlist + " shortlist configs and " + (nVis - nShort) + " of " + (n - D.n_shortlist) +
        " other feasible configs shown within the budgets" + (D.n_feasible_total > n - D.n_shortlist ?
        " (" + D.n_feasible_total.toLocaleString() + " feasible in all; a sample is drawn)" : "") + ".";
      document.body.dataset.visible = String(nVis);
    }

    function update() { applyBudgets(); draw(); }
    selX.addEventListener("change", draw); selY.addEventListener("change", draw); logBox.addEventListener("change", draw);

    svg.addEventListener("mouseover", function (ev) {
      var t = ev.target;
      if (!t.hasAttribute || !t.hasAttribute("data-i")) return;
      var i = Number(t.getAttribute("data-i")), html = "<b>" + escapeHtml(P.label[i]) + "</b>";
      if (P.rank[i] !== null && P.rank[i] !== undefined) html += "<br>shortlist rank " + P.rank[i];
      cols.forEach(function (c) {
        var v = P.values[c][i];
        var s = fmt(v) + (D.units[c] ? " " + D.units[c] : "");
        if (P.lo[c] && P.hi[c] && P.lo[c][i] !== null && P.hi[c][i] !== null)
          s += "  [" + fmt(P.lo[c][i]) + ", " + fmt(P.hi[c][i]) + "]";
        html += "<br>" + escapeHtml(D.labels[c] || c) + ": " + s;
      });
      tip.innerHTML = html; tip.style.display = "block";
    });
    svg.addEventListener("mousemove", function (ev) {
      tip.style.left = (ev.clientX + 14) + "px"; tip.style.top = (ev.clientY + 12) + "px";
    });
    svg.addEventListener("mouseout", function (ev) {
      if (ev.target.hasAttribute && ev.target.hasAttribute("data-i")) tip.style.display = "none";
    });

    // a view can be shared or scripted in the URL: report.html#latency_ms=5&x=latency_ms&y=memory_mb&log=0
    (location.hash || "").replace(/^#/, "").split("&").forEach(function (kv) {
      var p = kv.split("="), k = decodeURIComponent(p[0] || ""), v = decodeURIComponent(p[1] || "");
      if ((k === "x" || k === "y") && cols.indexOf(v) >= 0) (k === "x" ? selX : selY).value = v;
      else if (k === "log") logBox.checked = v !== "0";
      else if (budgets[k] && v !== "" && isFinite(Number(v))) budgets[k].set(Number(v));
    });
    update();
    document.body.dataset.points = String(svg.querySelectorAll("circle.pareto-point").length);
    document.body.dataset.feasible = String(svg.querySelectorAll("circle.feasible-point").length);
    document.body.dataset.ready = "1";
  }

  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;"}[c];
    });
  }

  try {
    main();
  } catch (e) {
    // counted like an uncaught error, so a broken explorer fails the browser test
    window.carbErrors = (window.carbErrors || []);
    window.carbErrors.push(String(e && e.stack || e));
    document.body.dataset.errors = String(window.carbErrors.length);
    if (window.console) console.error(e);
  }
})();
