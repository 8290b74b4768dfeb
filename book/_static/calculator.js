/* "Try your own numbers": Theorem 3.8 of Leviathan, Kalman & Matias (ICML 2023), in the page.
 *
 * Plain JavaScript, no server, no network: it works from file://. Every number it shows is
 * computed here by the same definitions as the book's Python package, and
 * tests/test_browser.py checks them against specdec.theory.speedup and `specdec plan` in a real
 * browser for a grid of inputs:
 *
 *   expectedTokens          = specdec.theory.speedup.expected_tokens            (Eq. 1)
 *   walltimeSpeedup         = specdec.theory.speedup.walltime_speedup           (Theorem 3.8)
 *   walltimeSpeedupMeasured = specdec.theory.speedup.walltime_speedup_measured  (verify cost V)
 *   optimalGamma            = specdec.theory.speedup.optimal_gamma              (gamma in 0..64)
 *   bestGammaWithVerify     = specdec.cli.app.plan's optimum with a verify cost
 *   speedupCeiling          = specdec.theory.speedup.speedup_ceiling
 *   compute                 = the numbers of `specdec plan --alpha A --c C --gamma G [--verify-cost V]`
 *
 * Embed it in any page of the book with a div that this script fills (_config.yml loads this file
 * and calculator.css on every page); the data-* attributes set the initial inputs, all optional:
 *
 *   ```{raw} html
 *   <div class="specdec-calc" data-alpha="0.8" data-c="0.05" data-gamma="4" data-verify-cost="1.3"></div>
 *   ```
 *
 * Numbers are shown with 4 decimals, as `specdec plan` prints them, rounded like Python's
 * format(x, ".4f") (ties to even on the exact binary value).
 */
(function () {
  "use strict";

  /** The largest gamma the optimum may take (specdec.theory.speedup.optimal_gamma's default). */
  var MAX_GAMMA = 64;
  /** Decimals shown, as `specdec plan` prints (f"{x:.4f}"). */
  var DECIMALS = 4;

  function isNum(x) {
    return typeof x === "number";
  }

  // ------------------------------------------------------------------ argument checks
  // The same rules and messages as specdec.theory.speedup's _check_* helpers.
  function checkAlpha(alpha) {
    if (!isNum(alpha) || !isFinite(alpha) || alpha < 0 || alpha > 1) {
      throw new RangeError("alpha must lie in [0, 1]; got " + String(alpha));
    }
    return alpha;
  }

  function checkGamma(gamma) {
    if (!isNum(gamma) || !Number.isInteger(gamma) || gamma < 0) {
      throw new RangeError("gamma must be a non-negative integer; got " + String(gamma));
    }
    return gamma;
  }

  function checkCost(value, name) {
    if (!isNum(value) || !isFinite(value) || value < 0) {
      throw new RangeError(name + " must be a finite number >= 0; got " + String(value));
    }
    return value;
  }

  function checkVerifyCost(v) {
    if (!isNum(v) || !isFinite(v) || v <= 0) {
      throw new RangeError("verify_cost must be a finite number > 0 (T(gamma+1)/T(1)); got " + String(v));
    }
    return v;
  }

  // ------------------------------------------------------------------ specdec.theory.speedup
  /** E[T] = (1 - alpha^(gamma+1)) / (1 - alpha), Eq. 1; gamma + 1 at alpha = 1.
   *  Computed as -expm1((gamma+1) log alpha) / (1 - alpha), as specdec.theory.speedup does
   *  (alpha = 0: log 0 = -Infinity, expm1(-Infinity) = -1, so E[T] = 1). */
  function expectedTokens(alpha, gamma) {
    var a = checkAlpha(alpha);
    var g = checkGamma(gamma);
    if (a === 1) {
      return g + 1;
    }
    return -Math.expm1((g + 1) * Math.log(a)) / (1 - a);
  }

  /** Theorem 3.8: E[T] / (gamma c + 1). */
  function walltimeSpeedup(alpha, gamma, c) {
    var g = checkGamma(gamma);
    var cc = checkCost(c, "c");
    return expectedTokens(alpha, g) / (g * cc + 1);
  }

  /** Theorem 3.8 with the verify pass priced at V = T(gamma+1)/T(1): E[T] / (gamma c + V). */
  function walltimeSpeedupMeasured(alpha, gamma, c, verifyCost) {
    var g = checkGamma(gamma);
    var cc = checkCost(c, "c");
    var v = checkVerifyCost(verifyCost === undefined ? 1 : verifyCost);
    return expectedTokens(alpha, g) / (g * cc + v);
  }

  /** The integer gamma in [0, maxGamma] that maximises Theorem 3.8; ties (equal speedups in
   *  floating point) go to the smaller gamma, as numpy's argmax does. */
  function optimalGamma(alpha, c, maxGamma) {
    var m = maxGamma === undefined ? MAX_GAMMA : maxGamma;
    if (!isNum(m) || !Number.isInteger(m) || m < 0) {
      throw new RangeError("max_gamma must be a non-negative integer; got " + String(maxGamma));
    }
    checkAlpha(alpha);
    checkCost(c, "c");
    if (c === 0 && alpha > 0) {
      return m; // E[T] rises with gamma: the limit, exactly (not a floating-point tie), as `specdec plan`
    }
    var best = 0;
    var bestS = walltimeSpeedup(alpha, 0, c);
    for (var g = 1; g <= m; g++) {
      var s = walltimeSpeedup(alpha, g, c);
      if (s > bestS) {
        best = g;
        bestS = s;
      }
    }
    return best;
  }

  /** `specdec plan`'s optimum with a verify cost V for every gamma: the gamma in 1..maxGamma
   *  with the highest E[T] / (gamma c + V) (specdec.analysis.hardware.best_gamma_on_curve, ties to the
   *  smaller gamma), and gamma = 0 (plain decoding, speedup 1) when none exceeds 1. */
  function bestGammaWithVerify(alpha, c, verifyCost, maxGamma) {
    var m = maxGamma === undefined ? MAX_GAMMA : maxGamma;
    if (c === 0 && alpha > 0) {
      // E[T] / V rises with gamma: the limit, as `specdec plan` (plain decoding if it does not gain)
      var limitS = walltimeSpeedupMeasured(alpha, m, c, verifyCost);
      return limitS > 1 ? { gamma: m, speedup: limitS } : { gamma: 0, speedup: walltimeSpeedup(alpha, 0, c) };
    }
    var best = 1;
    var bestS = walltimeSpeedupMeasured(alpha, 1, c, verifyCost);
    for (var g = 2; g <= m; g++) {
      var s = walltimeSpeedupMeasured(alpha, g, c, verifyCost);
      if (s > bestS) {
        best = g;
        bestS = s;
      }
    }
    if (bestS <= 1) {
      return { gamma: 0, speedup: walltimeSpeedup(alpha, 0, c) };
    }
    return { gamma: best, speedup: bestS };
  }

  /** 1 / (1 - alpha): the c -> 0, gamma -> infinity limit (Infinity at alpha = 1). */
  function speedupCeiling(alpha) {
    var a = checkAlpha(alpha);
    return 1 / (1 - a);
  }

  // ------------------------------------------------------------------ `specdec plan`
  /** The calculator's (and `specdec plan`'s) argument rules and messages. */
  function checkInputs(alpha, c, gamma, verifyCost) {
    if (!isNum(alpha) || !(alpha >= 0 && alpha < 1)) {
      throw new RangeError("alpha must lie in [0, 1) (the acceptance rate, Corollary 3.6); got " + show(alpha));
    }
    if (!isNum(c) || !(isFinite(c) && c >= 0)) {
      throw new RangeError(
        "c must be a finite number >= 0 (a draft step's time in target steps, Definition 3.7); got " + show(c)
      );
    }
    if (!isNum(gamma) || !Number.isSafeInteger(gamma) || gamma < 1) {
      throw new RangeError("gamma must be an integer >= 1 (drafted tokens per round); got " + show(gamma));
    }
    if (verifyCost !== null && verifyCost !== undefined) {
      if (!isNum(verifyCost) || !(isFinite(verifyCost) && verifyCost > 0)) {
        throw new RangeError(
          "V must be a finite number > 0 (the verify cost T(gamma+1)/T(1), about 1 to 3 on real " +
            "hardware), or left empty; got " + show(verifyCost)
        );
      }
    }
  }

  function show(x) {
    return typeof x === "string" ? JSON.stringify(x) : String(x);
  }

  /** Every number the calculator shows, for alpha in [0, 1), c >= 0, an integer gamma >= 1 and
   *  an optional verify cost V > 0 (null: none). Field names follow specdec.cli.app.plan's JSON;
   *  optimal_gamma is always Theorem 3.8's (specdec.theory.speedup.optimal_gamma), and with V the
   *  verify-priced optimum is optimal_gamma_with_verify. Throws RangeError on bad input. */
  function compute(alpha, c, gamma, verifyCost, maxGamma) {
    var v = verifyCost === undefined ? null : verifyCost;
    var m = maxGamma === undefined ? MAX_GAMMA : maxGamma;
    checkInputs(alpha, c, gamma, v);
    var gStar = optimalGamma(alpha, c, m);
    var out = {
      alpha: alpha,
      c: c,
      gamma: gamma,
      max_gamma: m,
      expected_tokens: expectedTokens(alpha, gamma),
      speedup: walltimeSpeedup(alpha, gamma, c),
      verify_cost: v,
      speedup_with_verify: null,
      optimal_gamma: gStar,
      optimal_speedup: walltimeSpeedup(alpha, gStar, c),
      optimal_at_max_gamma: gStar === m,
      optimal_gamma_with_verify: null,
      optimal_speedup_with_verify: null,
      break_even: alpha > c,
      break_even_gamma1_speedup: walltimeSpeedup(alpha, 1, c),
      ceiling: speedupCeiling(alpha),
    };
    if (v !== null) {
      var best = bestGammaWithVerify(alpha, c, v, m);
      out.speedup_with_verify = walltimeSpeedupMeasured(alpha, gamma, c, v);
      out.optimal_gamma_with_verify = best.gamma;
      out.optimal_speedup_with_verify = best.speedup;
    }
    return out;
  }

  // ------------------------------------------------------------------ formatting
  /** Python's format(x, "." + d + "f") for a finite x: correctly rounded, ties to even.
   *  toFixed rounds ties away from zero; a tie is exact only when the binary value ends in 5
   *  at the next decimal, which toFixed(100) shows exactly for |x| >= 2^-47 (smaller values
   *  cannot be ties at d <= 12 decimals). */
  function formatFixed(x, d) {
    if (!isFinite(x)) {
      throw new RangeError("formatFixed needs a finite number; got " + String(x));
    }
    var s = x.toFixed(d);
    if (Math.abs(x) < 1e21 && d <= 12) {
      var exact = Math.abs(x).toFixed(100);
      var point = exact.indexOf(".");
      var rest = exact.slice(point + 1 + d);
      if (/^50*$/.test(rest)) {
        var kept = exact.slice(0, d > 0 ? point + 1 + d : point);
        var last = Number(kept.charAt(kept.length - 1));
        if (last % 2 === 0) {
          s = (x < 0 ? "-" : "") + kept; // ties to even: the truncated value
        }
      }
    }
    return s;
  }

  function fmt(x) {
    return formatFixed(x, DECIMALS);
  }

  // ------------------------------------------------------------------ the widget
  var SVG_NS = "http://www.w3.org/2000/svg";
  var counter = 0;

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    for (var k in attrs || {}) {
      node.setAttribute(k, attrs[k]);
    }
    if (text !== undefined) {
      node.textContent = text;
    }
    return node;
  }

  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG_NS, tag);
    for (var k in attrs || {}) {
      node.setAttribute(k, attrs[k]);
    }
    if (text !== undefined) {
      node.textContent = text;
    }
    return node;
  }

  /** A number from an <input type="number">: null when empty, NaN-free. */
  function readInput(input, name, optional) {
    if (input.validity && input.validity.badInput) {
      throw new RangeError(name + " is not a finite number");
    }
    var text = input.value.trim();
    if (text === "") {
      if (optional) {
        return null;
      }
      throw new RangeError(name + " is empty: enter a number");
    }
    var x = Number(text);
    if (!isFinite(x)) {
      throw new RangeError(name + " is not a finite number; got " + JSON.stringify(text));
    }
    return x;
  }

  function niceStep(span, ticks) {
    var raw = span / ticks;
    var p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
  }

  function build(root) {
    counter += 1;
    var id = "specdec-calc-" + counter;
    var d = root.dataset;
    root.textContent = "";
    root.setAttribute("role", "group");
    root.setAttribute("aria-label", "Speedup calculator (Theorem 3.8)");

    var title = el("p", { class: "specdec-calc-title" }, "Try your own numbers");
    root.appendChild(title);

    var form = el("div", { class: "specdec-calc-inputs" });
    function field(key, label, hint, attrs) {
      var wrap = el("label", { class: "specdec-calc-field", for: id + "-" + key });
      wrap.appendChild(el("span", { class: "specdec-calc-label" }, label));
      var input = el("input", Object.assign({ id: id + "-" + key, type: "number", "data-in": key }, attrs));
      wrap.appendChild(input);
      wrap.appendChild(el("span", { class: "specdec-calc-hint" }, hint));
      form.appendChild(wrap);
      return input;
    }
    var inAlpha = field("alpha", "α, acceptance rate", "0 ≤ α < 1 (Cor. 3.6)", {
      min: "0",
      max: "0.999",
      step: "0.01",
      value: d.alpha || "0.8",
    });
    var inC = field("c", "c, draft cost", "≥ 0: draft step / target step", {
      min: "0",
      step: "0.01",
      value: d.c || "0.05",
    });
    var inGamma = field("gamma", "γ, drafts per round", "integer ≥ 1", {
      min: "1",
      step: "1",
      value: d.gamma || "4",
    });
    var inV = field("verify", "V, verify cost", "optional: T(γ+1)/T(1) > 0", {
      min: "0",
      step: "0.05",
      value: d.verifyCost || "",
      placeholder: "none",
    });
    root.appendChild(form);

    var error = el("p", { class: "specdec-calc-error", role: "alert", "data-out": "error", hidden: "" });
    root.appendChild(error);

    var results = el("dl", { class: "specdec-calc-results", "aria-live": "polite" });
    function row(label, key) {
      var dt = el("dt", {}, label);
      var dd = el("dd", { "data-row": key });
      results.appendChild(dt);
      results.appendChild(dd);
      return { dt: dt, dd: dd };
    }
    function value(key, text) {
      return el("span", { class: "specdec-calc-value", "data-out": key }, text);
    }
    function fill(dd, parts) {
      dd.textContent = "";
      parts.forEach(function (p) {
        dd.appendChild(typeof p === "string" ? document.createTextNode(p) : p);
      });
    }
    var rows = {
      et: row("E[T], tokens per round (Eq. 1)", "expected_tokens"),
      sp: row("Speedup (Theorem 3.8)", "speedup"),
      spv: row("Speedup with verify cost V", "speedup_with_verify"),
      opt: row("Optimal γ ≤ " + MAX_GAMMA + " (Theorem 3.8)", "optimal_gamma"),
      optv: row("Optimal γ with V", "optimal_gamma_with_verify"),
      be: row("Break-even (Corollary 3.9)", "break_even"),
      ceil: row("Ceiling 1/(1 − α)", "ceiling"),
    };
    root.appendChild(results);

    var figure = el("div", { class: "specdec-calc-plot" });
    var plot = svg("svg", {
      viewBox: "0 0 640 300",
      role: "img",
      "data-out": "plot",
      preserveAspectRatio: "xMidYMid meet",
    });
    figure.appendChild(plot);
    root.appendChild(figure);

    function clearPlot(message) {
      while (plot.firstChild) {
        plot.removeChild(plot.firstChild);
      }
      if (message) {
        plot.appendChild(svg("text", { x: 320, y: 150, "text-anchor": "middle", class: "specdec-calc-muted" }, message));
        plot.setAttribute("aria-label", message);
      }
    }

    function draw(r) {
      clearPlot();
      var W = 640,
        H = 300,
        L = 52,
        R = 16,
        T = 14,
        B = 62;
      var gMax = Math.max(12, Math.ceil(1.5 * Math.max(r.gamma, r.optimal_gamma, r.optimal_gamma_with_verify || 0)));
      gMax = Math.min(gMax, MAX_GAMMA);
      gMax = Math.max(gMax, Math.min(r.gamma, 100000));
      var stride = Math.max(1, Math.ceil(gMax / 256));
      var xs = [];
      for (var g = 0; g <= gMax; g += stride) {
        xs.push(g);
      }
      if (xs[xs.length - 1] !== gMax) {
        xs.push(gMax);
      }
      var s1 = xs.map(function (x) {
        return walltimeSpeedup(r.alpha, x, r.c);
      });
      var sv =
        r.verify_cost === null
          ? null
          : xs.map(function (x) {
              return x === 0 ? null : walltimeSpeedupMeasured(r.alpha, x, r.c, r.verify_cost);
            });
      var yTop = 1;
      s1.concat(sv || []).forEach(function (y) {
        if (y !== null && y > yTop) {
          yTop = y;
        }
      });
      var yStep = niceStep(yTop * 1.08, 5);
      var yMax = Math.ceil((yTop * 1.08) / yStep) * yStep;
      function X(x) {
        return L + ((W - L - R) * x) / gMax;
      }
      function Y(y) {
        return T + (H - T - B) * (1 - y / yMax);
      }
      var axes = svg("g", { class: "specdec-calc-axes" });
      for (var y = 0; y <= yMax + 1e-9; y += yStep) {
        axes.appendChild(svg("line", { x1: L, x2: W - R, y1: Y(y), y2: Y(y), class: "specdec-calc-grid" }));
        axes.appendChild(
          svg("text", { x: L - 6, y: Y(y) + 4, "text-anchor": "end" }, String(Math.round(y * 1000) / 1000))
        );
      }
      var xStep = Math.max(1, Math.round(niceStep(gMax, 8)));
      for (var x = 0; x <= gMax; x += xStep) {
        axes.appendChild(svg("line", { x1: X(x), x2: X(x), y1: H - B, y2: H - B + 4, class: "specdec-calc-tick" }));
        axes.appendChild(svg("text", { x: X(x), y: H - B + 17, "text-anchor": "middle" }, String(x)));
      }
      axes.appendChild(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "specdec-calc-tick" }));
      axes.appendChild(svg("text", { x: (L + W - R) / 2, y: H - B + 35, "text-anchor": "middle" }, "drafts per round γ"));
      axes.appendChild(
        svg(
          "text",
          { x: 14, y: (T + H - B) / 2, "text-anchor": "middle", transform: "rotate(-90 14 " + (T + H - B) / 2 + ")" },
          "speedup"
        )
      );
      plot.appendChild(axes);
      // break-even: speedup 1
      plot.appendChild(svg("line", { x1: L, x2: W - R, y1: Y(1), y2: Y(1), class: "specdec-calc-one" }));

      function path(ys, cls) {
        var dd = "";
        ys.forEach(function (yy, i) {
          if (yy === null) {
            return;
          }
          dd += (dd === "" ? "M" : "L") + X(xs[i]).toFixed(2) + "," + Y(yy).toFixed(2);
        });
        plot.appendChild(svg("path", { d: dd, class: cls }));
      }
      path(s1, "specdec-calc-curve");
      if (sv) {
        path(sv, "specdec-calc-curve-v");
      }
      function starAt(cx, cy, cls) {
        var pts = [];
        for (var i = 0; i < 10; i++) {
          var rad = i % 2 === 0 ? 8 : 3.4;
          var ang = -Math.PI / 2 + (i * Math.PI) / 5;
          pts.push((cx + rad * Math.cos(ang)).toFixed(2) + "," + (cy + rad * Math.sin(ang)).toFixed(2));
        }
        return svg("polygon", { points: pts.join(" "), class: cls });
      }
      function star(gx, sy, cls, label) {
        var node = starAt(X(gx), Y(sy), cls);
        node.appendChild(svg("title", {}, label));
        plot.appendChild(node);
      }
      if (r.gamma <= gMax) {
        var dot = svg("circle", { cx: X(r.gamma), cy: Y(r.speedup), r: 5, class: "specdec-calc-dot" });
        dot.appendChild(svg("title", {}, "your γ = " + r.gamma + ": " + fmt(r.speedup) + "×"));
        plot.appendChild(dot);
        if (sv) {
          var dotv = svg("circle", { cx: X(r.gamma), cy: Y(r.speedup_with_verify), r: 5, class: "specdec-calc-dot-v" });
          dotv.appendChild(svg("title", {}, "your γ with V: " + fmt(r.speedup_with_verify) + "×"));
          plot.appendChild(dotv);
        }
      }
      star(r.optimal_gamma, r.optimal_speedup, "specdec-calc-star", "optimal γ = " + r.optimal_gamma);
      if (sv && r.optimal_gamma_with_verify > 0) {
        star(
          r.optimal_gamma_with_verify,
          r.optimal_speedup_with_verify,
          "specdec-calc-star-v",
          "optimal γ with V = " + r.optimal_gamma_with_verify
        );
      }
      // legend, below the axis title
      var lg = svg("g", { class: "specdec-calc-legend" });
      var ly = H - 10;
      var lx = L;
      function legendItem(node, label) {
        lg.appendChild(node);
        var t = svg("text", { x: lx + 28, y: ly + 4 }, label);
        lg.appendChild(t);
        lx += 28 + 7.2 * label.length + 18;
      }
      legendItem(svg("line", { x1: lx, x2: lx + 22, y1: ly, y2: ly, class: "specdec-calc-curve" }), "Theorem 3.8");
      if (sv) {
        legendItem(
          svg("line", { x1: lx, x2: lx + 22, y1: ly, y2: ly, class: "specdec-calc-curve-v" }),
          "with V = " + r.verify_cost
        );
      }
      legendItem(svg("circle", { cx: lx + 11, cy: ly, r: 4.5, class: "specdec-calc-dot" }), "your γ");
      legendItem(starAt(lx + 11, ly, "specdec-calc-star"), "optimal γ");
      legendItem(svg("line", { x1: lx, x2: lx + 22, y1: ly, y2: ly, class: "specdec-calc-one" }), "break-even (1×)");
      plot.appendChild(lg);
      plot.setAttribute(
        "aria-label",
        "Speedup against gamma from 0 to " + gMax + " for alpha = " + r.alpha + " and c = " + r.c +
          "; the optimum is gamma = " + r.optimal_gamma + " with " + fmt(r.optimal_speedup) + "x"
      );
    }

    function update() {
      var r;
      try {
        r = compute(
          readInput(inAlpha, "alpha", false),
          readInput(inC, "c", false),
          readInput(inGamma, "gamma", false),
          readInput(inV, "V", true)
        );
      } catch (e) {
        error.textContent = e.message;
        error.hidden = false;
        root.classList.add("specdec-calc-invalid");
        Object.keys(rows).forEach(function (k) {
          fill(rows[k].dd, ["—"]);
        });
        clearPlot("Fix the input above to redraw the curve.");
        return null;
      }
      error.textContent = "";
      error.hidden = true;
      root.classList.remove("specdec-calc-invalid");
      fill(rows.et.dd, [value("expected_tokens", fmt(r.expected_tokens)), " at γ = " + r.gamma]);
      fill(rows.sp.dd, [value("speedup", fmt(r.speedup)), "×"]);
      var hasV = r.verify_cost !== null;
      rows.spv.dt.hidden = rows.spv.dd.hidden = !hasV;
      rows.optv.dt.hidden = rows.optv.dd.hidden = !hasV;
      if (hasV) {
        fill(rows.spv.dd, [value("speedup_with_verify", fmt(r.speedup_with_verify)), "× at V = " + r.verify_cost]);
        fill(rows.optv.dd, [
          "γ = ",
          value("optimal_gamma_with_verify", String(r.optimal_gamma_with_verify)),
          ": ",
          value("optimal_speedup_with_verify", fmt(r.optimal_speedup_with_verify)),
          "×" +
            (r.optimal_gamma_with_verify === 0
              ? " (no γ gains at this V: decode without speculation)"
              : r.optimal_gamma_with_verify === r.max_gamma
                ? " (at the search limit)"
                : ""),
        ]);
      } else {
        fill(rows.spv.dd, []);
        fill(rows.optv.dd, []);
      }
      var note = "";
      if (r.optimal_gamma === 0) {
        note = " (no γ ≥ 1 gains: decode without speculation)";
      } else if (r.optimal_at_max_gamma) {
        note = r.c === 0 ? " (the search limit: with c = 0 the speedup rises towards the ceiling for ever)" : " (the search limit)";
      } else if (r.c === 0) {
        note = " (with c = 0 the speedup rises towards the ceiling for ever; here it stops rising in double precision)";
      }
      fill(rows.opt.dd, [
        "γ = ",
        value("optimal_gamma", String(r.optimal_gamma)),
        ": ",
        value("optimal_speedup", fmt(r.optimal_speedup)),
        "×" + note,
      ]);
      var g1 = value("break_even_gamma1_speedup", fmt(r.break_even_gamma1_speedup));
      var be = value("break_even", r.break_even ? "holds" : "fails");
      if (r.break_even) {
        fill(rows.be.dd, ["α > c ", be, ": some γ gains; γ = 1 gives (1 + α)/(1 + c) = ", g1, "×"]);
      } else {
        fill(rows.be.dd, ["α > c ", be, ": no γ gains (γ = 1 gives ", g1, "×); find a cheaper or better draft"]);
      }
      fill(rows.ceil.dd, [value("ceiling", fmt(r.ceiling)), "× (c → 0, γ → ∞)"]);
      draw(r);
      return r;
    }

    [inAlpha, inC, inGamma, inV].forEach(function (input) {
      input.addEventListener("input", update);
      input.addEventListener("change", update);
    });
    root.specdecUpdate = update;
    update();
  }

  function init() {
    var nodes = document.querySelectorAll("div.specdec-calc");
    for (var i = 0; i < nodes.length; i++) {
      if (!nodes[i].dataset.ready) {
        build(nodes[i]);
        nodes[i].dataset.ready = "1";
      }
    }
  }

  window.specdecCalc = {
    MAX_GAMMA: MAX_GAMMA,
    DECIMALS: DECIMALS,
    expectedTokens: expectedTokens,
    walltimeSpeedup: walltimeSpeedup,
    walltimeSpeedupMeasured: walltimeSpeedupMeasured,
    optimalGamma: optimalGamma,
    bestGammaWithVerify: bestGammaWithVerify,
    speedupCeiling: speedupCeiling,
    compute: compute,
    formatFixed: formatFixed,
    init: init,
  };

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
