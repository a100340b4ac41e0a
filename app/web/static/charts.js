// Small SVG charts for the dashboard: no library, no network. Each chart is an <svg role="img">
// with a <title> and <desc>, distinguishes its series by dash pattern and marker as well as
// colour, and comes with its data as a table (in a <details>) for screen readers and copying.
"use strict";

(function () {
  const NS = "http://www.w3.org/2000/svg";
  let uid = 0;

  function el(name, attrs, text) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function html(name, attrs, text) {
    const node = document.createElement(name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // numbers as people read them: 4 significant digits, exponent (3 digits) for very small or
  // large ones. `fmt` rounds to nearest (axis ticks, orders); `fmtUp` and `fmtDown` round in a
  // direction, for numbers whose safe side is known: a spend, a ρ used, a "σ ≥" up; a
  // remaining budget, an "ε ≤" down. A value the short form states exactly (it parses back
  // to the same float: 0.5, 1e-6) is printed as is; any other is moved one unit in its last
  // digit when rounding to nearest landed on the unsafe side by more than 1e-9 relative, so
  // the text is never below (fmtUp) or above (fmtDown) the number by more than that.
  function fmtDir(x, dir, digits, strict) {
    if (x === null || x === undefined || Number.isNaN(x)) return "n/a";
    if (!Number.isFinite(x)) return x > 0 ? "∞" : "-∞";
    if (x === 0) return "0";
    const a = Math.abs(x);
    const expForm = a < 1e-3 || a >= 1e6;
    const p = digits || (expForm ? 3 : 4);
    const s = x.toExponential(p - 1);
    let v = Number(s);
    // (within 1e-9 of it the short form stays, unless ``strict``: float noise of an exact
    // sum, 0.3 x 4 = 1.2000000000000002, reads 1.2 as in the command line, not 1.201; a value
    // a person types back in, a calibrated σ or ε, is ``strict``)
    if (dir && v !== x && (strict || Math.abs(v - x) > 1e-9 * a) && (dir > 0 ? v < x : v > x)) {
      const [mant, ex] = s.split("e");
      const neg = mant.startsWith("-");
      let m = Number(mant.replace("-", "").replace(".", "")); // p digits, as an integer
      let n = Number(ex);
      const lo = Math.pow(10, p - 1), hi = Math.pow(10, p);
      m += (dir > 0) !== neg ? 1 : -1; // away from zero when moving in the sign's direction
      if (m >= hi) { m = lo; n += 1; }
      if (m < lo) { m = hi - 1; n -= 1; }
      const digitsStr = String(m);
      v = Number(`${neg ? "-" : ""}${digitsStr[0]}.${digitsStr.slice(1)}e${n}`);
    }
    const b = Math.abs(v);
    if (b < 1e-3 || b >= 1e6) return v.toExponential(p - 1).replace("e+", "e");
    return String(v);
  }
  const fmt = (x) => fmtDir(x, 0);
  const fmtUp = (x, digits) => fmtDir(x, 1, digits);
  const fmtDown = (x, digits) => fmtDir(x, -1, digits);
  const fmtStrict = (x, dir) => fmtDir(x, dir, 0, true);

  function niceStep(span, count) {
    const raw = span / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / mag;
    const nice = norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10;
    return nice * mag;
  }

  function linearTicks(lo, hi, count) {
    if (hi <= lo) return [lo];
    const step = niceStep(hi - lo, count);
    const ticks = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
      ticks.push(Math.abs(t) < step * 1e-9 ? 0 : t);
    }
    return ticks;
  }

  function logTicks(lo, hi, count) {
    const a = Math.floor(Math.log10(lo));
    const b = Math.ceil(Math.log10(hi));
    const every = Math.max(1, Math.ceil((b - a) / count));
    const ticks = [];
    for (let k = a; k <= b; k += every) {
      const t = Math.pow(10, k);
      if (t >= lo * 0.999 && t <= hi * 1.001) ticks.push(t);
    }
    return ticks.length ? ticks : [lo, hi];
  }

  // ticks for a time axis in epoch milliseconds: round seconds, minutes, hours or days
  function timeTicks(lo, hi, count) {
    const steps = [1e3, 5e3, 15e3, 6e4, 3e5, 9e5, 36e5, 6 * 36e5, 864e5, 7 * 864e5, 30 * 864e5, 365 * 864e5];
    const want = (hi - lo) / Math.max(1, count);
    const step = steps.find((s) => s >= want) || Math.ceil(want / (365 * 864e5)) * 365 * 864e5;
    const ticks = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi; t += step) ticks.push(t);
    return ticks.length ? ticks : [lo, hi];
  }

  function scale(lo, hi, a, b, log) {
    if (log) {
      const l0 = Math.log10(lo);
      const l1 = Math.log10(hi);
      const span = l1 - l0 || 1;
      return (v) => a + ((Math.log10(v) - l0) / span) * (b - a);
    }
    const span = hi - lo || 1;
    return (v) => a + ((v - lo) / span) * (b - a);
  }

  function caption(figure, title, description, ids) {
    const cap = html("figcaption");
    cap.appendChild(html("h4", { id: ids.title }, title));
    if (description) cap.appendChild(html("p", { id: ids.desc, class: "muted" }, description));
    figure.appendChild(cap);
  }

  function dataTable(figure, table) {
    if (!table) return;
    const details = html("details");
    details.appendChild(html("summary", {}, "Data as a table"));
    const t = html("table");
    const head = html("tr");
    for (const h of table.headers) head.appendChild(html("th", { scope: "col" }, h));
    const thead = html("thead");
    thead.appendChild(head);
    t.appendChild(thead);
    const body = html("tbody");
    for (const row of table.rows) {
      const tr = html("tr");
      // numbers: whole ones as they are (entry numbers, counts), others rounded in the
      // column's direction (table.round: "up" for what is used, "down" for what is left)
      row.forEach((cell, i) => {
        const dir = (table.round || [])[i];
        const f = dir === "up" ? fmtUp : dir === "down" ? fmtDown : fmt;
        const text = typeof cell !== "number" ? String(cell) : Number.isInteger(cell) && Math.abs(cell) < 1e15 ? String(cell) : f(cell);
        tr.appendChild(html("td", {}, text));
      });
      body.appendChild(tr);
    }
    t.appendChild(body);
    details.appendChild(t);
    figure.appendChild(details);
  }

  const DASHES = ["", "6 4", "2 3", "10 3 2 3"];
  const MARKS = ["circle", "square", "triangle", "diamond"];

  function marker(g, kind, x, y, cls) {
    const s = 3.5;
    if (kind === "square") g.appendChild(el("rect", { x: x - s, y: y - s, width: 2 * s, height: 2 * s, class: cls }));
    else if (kind === "triangle") g.appendChild(el("path", { d: `M${x} ${y - s - 1}L${x + s + 1} ${y + s}L${x - s - 1} ${y + s}Z`, class: cls }));
    else if (kind === "diamond") g.appendChild(el("path", { d: `M${x} ${y - s - 1}L${x + s + 1} ${y}L${x} ${y + s + 1}L${x - s - 1} ${y}Z`, class: cls }));
    else g.appendChild(el("circle", { cx: x, cy: y, r: s, class: cls }));
  }

  // opts: {title, description, xLabel, yLabel, xLog, yLog, xFormat(t), vlines: [{x, label}], series: [{name, points: [[x, y]]}],
  //        hlines: [{y, label}], points: [{x, y, label}], table: {headers, rows}, testid}
  function lineChart(figure, opts) {
    figure.replaceChildren();
    const ids = { title: `chart-title-${++uid}`, desc: `chart-desc-${uid}` };
    caption(figure, opts.title, opts.description, ids);
    const W = 560, H = 300, L = 70, R = 16, T = 14, B = 64;
    // points off a log axis, or above yMax (the part of a curve far beyond the budget), are not drawn
    const ok = (p) => Number.isFinite(p[0]) && Number.isFinite(p[1]) && (!opts.xLog || p[0] > 0) &&
      (!opts.yLog || p[1] > 0) && (opts.yMax === undefined || p[1] <= opts.yMax);
    const series = opts.series.map((s) => ({ ...s, points: s.points.filter(ok) }));
    const all = series.flatMap((s) => s.points);
    (opts.points || []).filter((p) => ok([p.x, p.y])).forEach((p) => all.push([p.x, p.y]));
    const ys = all.map((p) => p[1]).concat((opts.hlines || []).map((h) => h.y).filter((y) => !opts.yLog || y > 0));
    const svg = el("svg", {
      viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": `${ids.title} ${ids.desc}`,
      class: "plot", "data-testid": opts.testid || "",
    });
    svg.appendChild(el("title", {}, opts.title));
    svg.appendChild(el("desc", {}, opts.summary || opts.description || ""));
    if (!all.length) {
      svg.appendChild(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, opts.empty || "No data yet"));
      figure.appendChild(svg);
      dataTable(figure, opts.table);
      return svg;
    }
    // the x range covers the points and the vertical marks (a budget change after the last
    // entry is drawn, not dropped)
    const xs = all.map((p) => p[0]).concat((opts.vlines || []).map((v) => v.x).filter((x) => Number.isFinite(x) && (!opts.xLog || x > 0)));
    let x0 = Math.min(...xs), x1 = Math.max(...xs);
    let y0 = opts.yLog ? Math.min(...ys) : Math.min(0, ...ys), y1 = Math.max(...ys);
    if (x1 === x0) { x0 = opts.xLog ? x0 / 2 : x0 - 1; x1 = opts.xLog ? x1 * 2 : x1 + 1; }
    if (y1 === y0) { y1 = opts.yLog ? y1 * 10 : y0 + 1; }
    if (!opts.yLog) y1 += (y1 - y0) * 0.05;
    else { y0 /= 1.5; y1 *= 1.5; }
    const sx = scale(x0, x1, L, W - R, opts.xLog);
    const sy = scale(y0, y1, H - B, T, opts.yLog);
    const axes = el("g", { class: "axes" });
    const xt = opts.xLog ? logTicks(x0, x1, 6) : opts.xTime ? timeTicks(x0, x1, 5) : linearTicks(x0, x1, 6);
    const yt = opts.yLog ? logTicks(y0, y1, 5) : linearTicks(y0, y1, 5);
    for (const t of yt) {
      axes.appendChild(el("line", { x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: "gridline" }));
      axes.appendChild(el("text", { x: L - 6, y: sy(t) + 4, "text-anchor": "end" }, fmt(t)));
    }
    for (const t of xt) {
      axes.appendChild(el("line", { x1: sx(t), x2: sx(t), y1: H - B, y2: H - B + 5, class: "tick" }));
      axes.appendChild(el("text", { x: sx(t), y: H - B + 18, "text-anchor": "middle" }, (opts.xFormat || fmt)(t)));
    }
    axes.appendChild(el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
    axes.appendChild(el("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }));
    axes.appendChild(el("text", { x: (L + W - R) / 2, y: H - B + 36, "text-anchor": "middle", class: "label" }, opts.xLabel));
    axes.appendChild(el("text", { x: 14, y: (T + H - B) / 2, "text-anchor": "middle", class: "label", transform: `rotate(-90 14 ${(T + H - B) / 2})` }, opts.yLabel));
    svg.appendChild(axes);
    const legend = [];
    for (const h of opts.hlines || []) {
      if (opts.yLog && h.y <= 0) continue;
      const g = el("g", { class: "hline" });
      g.appendChild(el("line", { x1: L, x2: W - R, y1: sy(h.y), y2: sy(h.y), "stroke-dasharray": "8 4" }));
      svg.appendChild(g);
      legend.push({ name: h.label, cls: "hline", dash: "8 4" });
    }
    for (const v of opts.vlines || []) {
      if (!Number.isFinite(v.x) || v.x < x0 || v.x > x1) continue;
      const g = el("g", { class: "vline", "data-testid": "budget-change" });
      g.appendChild(el("line", { x1: sx(v.x), x2: sx(v.x), y1: T, y2: H - B, "stroke-dasharray": "2 3" }));
      marker(g, "triangle", sx(v.x), T + 5, "mark");
      g.appendChild(el("title", {}, v.label));
      svg.appendChild(g);
    }
    if ((opts.vlines || []).length) legend.push({ name: opts.vlineName || "change", cls: "vline", dash: "2 3", mark: "triangle" });
    series.forEach((s, i) => {
      const cls = `series s${i}`;
      const dash = s.dash !== undefined ? s.dash : DASHES[i % DASHES.length];
      const g = el("g", { class: cls, "data-series": s.name, "data-n": s.points.length });
      const d = s.points.map((p, j) => `${j ? "L" : "M"}${sx(p[0]).toFixed(2)} ${sy(p[1]).toFixed(2)}`).join("");
      const path = el("path", { d, fill: "none" });
      if (dash) path.setAttribute("stroke-dasharray", dash);
      g.appendChild(path);
      if (s.points.length <= 60) s.points.forEach((p) => marker(g, MARKS[i % MARKS.length], sx(p[0]), sy(p[1]), "mark"));
      svg.appendChild(g);
      legend.push({ name: s.name, cls, dash, mark: MARKS[i % MARKS.length] });
    });
    for (const p of opts.points || []) {
      if (!ok([p.x, p.y])) continue;
      const g = el("g", { class: "point" });
      marker(g, "diamond", sx(p.x), sy(p.y), "mark");
      // a label near the right edge is written leftwards, so it is not cut off
      const nearRight = sx(p.x) > W - R - 6.5 * String(p.label).length - 10;
      g.appendChild(el("text", { x: sx(p.x) + (nearRight ? -8 : 8), y: sy(p.y) - 8, "text-anchor": nearRight ? "end" : "start" }, p.label));
      svg.appendChild(g);
    }
    // legend along the bottom
    let lx = L;
    const ly = H - 10;
    for (const item of legend) {
      const g = el("g", { class: `legend ${item.cls}` });
      const line = el("line", { x1: lx, x2: lx + 26, y1: ly - 4, y2: ly - 4 });
      if (item.dash) line.setAttribute("stroke-dasharray", item.dash);
      g.appendChild(line);
      if (item.mark) marker(g, item.mark, lx + 13, ly - 4, "mark");
      g.appendChild(el("text", { x: lx + 32, y: ly }, item.name));
      svg.appendChild(g);
      lx += 40 + item.name.length * 6.5;
    }
    figure.appendChild(svg);
    dataTable(figure, opts.table);
    return svg;
  }

  // rows: [{label, value, text}] drawn as horizontal bars scaled to the largest value
  function barChart(figure, opts) {
    figure.replaceChildren();
    const ids = { title: `chart-title-${++uid}`, desc: `chart-desc-${uid}` };
    caption(figure, opts.title, opts.description, ids);
    const rows = opts.rows;
    const W = 560, rowH = 30, L = 200, R = 150, T = 8;
    const H = Math.max(60, T * 2 + rows.length * rowH);
    const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": `${ids.title} ${ids.desc}`, class: "plot bars", "data-testid": opts.testid || "" });
    svg.appendChild(el("title", {}, opts.title));
    svg.appendChild(el("desc", {}, rows.map((r) => `${r.label}: ${r.text}`).join("; ") || "No entries yet"));
    if (!rows.length) {
      svg.appendChild(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, "No entries yet"));
    }
    const max = Math.max(...rows.map((r) => r.value), 0) || 1;
    rows.forEach((r, i) => {
      const y = T + i * rowH;
      const g = el("g", { class: `bar s${i % 4}`, "data-label": r.label });
      g.appendChild(el("text", { x: L - 8, y: y + 19, "text-anchor": "end" }, r.label));
      g.appendChild(el("rect", { x: L, y: y + 5, width: Math.max(1, ((W - L - R) * r.value) / max), height: rowH - 10 }));
      g.appendChild(el("text", { x: L + ((W - L - R) * r.value) / max + 6, y: y + 19 }, r.text));
      svg.appendChild(g);
    });
    figure.appendChild(svg);
    dataTable(figure, opts.table);
    return svg;
  }

  // percentage of the budget used, rounded UP to 0.1 (0.01 below 0.1 %), so it never reads
  // less than is used; "100.0%" shows only when the dataset is exhausted (a non-exhausted one
  // that rounds up to 100 gets more digits: "99.99%"); spent beyond the budget (a budget
  // lowered below the spend) reads its true share: "160.0% (over budget)", an infinite spend
  // "∞% (over budget)"
  function pctUsed(used, total, exhausted) {
    const f = total > 0 ? Math.max(0, used / total) : 0;
    const ceilTo = (digits) => {
      const k = Math.pow(10, digits);
      return Math.ceil(100 * f * k - 1e-7) / k;
    };
    // no finite spend (its ε at the budget δ is unbounded): beyond any budget
    if (f === Infinity) return "∞% (over budget)";
    let digits = f > 0 && f < 0.001 ? 2 : 1;
    let v = ceilTo(digits);
    if (f > 1 + 1e-9) return `${v.toFixed(digits)}% (over budget)`;
    if (exhausted) return `${Math.min(100, v).toFixed(digits)}%`;
    while (v >= 100 && f < 1 && digits < 8) v = ceilTo(++digits);
    if (v >= 100) v = 100 - Math.pow(10, -digits);
    return `${v.toFixed(digits)}%`;
  }

  // a state icon drawn in SVG: circle with a tick (ok), triangle with "!" (warning),
  // octagon with a bar (exhausted); shape tells the state without colour
  function stateIcon(state, x, y, size) {
    const g = el("g", { class: `state-icon ${state}`, "aria-hidden": "true" });
    const s = size / 2;
    if (state === "warning") {
      g.appendChild(el("path", { d: `M${x} ${y - s}L${x + s} ${y + s * 0.85}L${x - s} ${y + s * 0.85}Z` }));
      g.appendChild(el("text", { x, y: y + s * 0.65, "text-anchor": "middle" }, "!"));
    } else if (state === "exhausted") {
      const pts = [];
      for (let i = 0; i < 8; i++) {
        const a = Math.PI / 8 + (i * Math.PI) / 4;
        pts.push(`${(x + s * Math.cos(a)).toFixed(2)} ${(y + s * Math.sin(a)).toFixed(2)}`);
      }
      g.appendChild(el("path", { d: `M${pts.join("L")}Z` }));
      g.appendChild(el("rect", { x: x - s * 0.55, y: y - s * 0.15, width: s * 1.1, height: s * 0.3, class: "bar" }));
    } else {
      g.appendChild(el("circle", { cx: x, cy: y, r: s }));
      g.appendChild(el("path", { d: `M${x - s * 0.5} ${y}L${x - s * 0.1} ${y + s * 0.4}L${x + s * 0.5} ${y - s * 0.4}`, class: "tick" }));
    }
    return g;
  }

  const STATE_WORDS = { ok: "within budget", warning: "Warning", exhausted: "Exhausted" };

  // a semicircular gauge of used / total, in the dataset's state (ok / warning / exhausted):
  // colour, a pattern on the arc, an icon and words, so it reads without colour
  // `sub`: the words under the percentage when ok (default "of epsilon budget")
  function gauge(used, total, label, state, sub) {
    state = state || "ok";
    const f = total > 0 ? Math.max(0, Math.min(1, used / total)) : 0;
    const svg = el("svg", { viewBox: "0 0 200 118", role: "img", class: `gauge ${state}`, "aria-label": label, "data-state": state });
    svg.appendChild(el("title", {}, label));
    const cx = 100, cy = 100, r = 80;
    const end = (t) => [cx + r * Math.cos(Math.PI * (1 - t)), cy - r * Math.sin(Math.PI * (1 - t))];
    const [ex, ey] = end(1);
    svg.appendChild(el("path", { d: `M20 100A80 80 0 0 1 ${ex.toFixed(2)} ${ey.toFixed(2)}`, class: "track" }));
    if (f > 0) {
      const [fx, fy] = end(f);
      svg.appendChild(el("path", { d: `M20 100A80 80 0 0 1 ${fx.toFixed(2)} ${fy.toFixed(2)}`, class: `fill ${state}` }));
    }
    // over budget: the true share in the middle, "Over budget" under it (the arc stays full)
    const pct = pctUsed(used, total, state === "exhausted");
    const over = pct.endsWith(" (over budget)");
    svg.appendChild(el("text", { x: cx, y: cy - 14, "text-anchor": "middle", class: "pct", "data-testid": "gauge-pct" }, over ? pct.replace(" (over budget)", "") : pct));
    if (state !== "ok") svg.appendChild(stateIcon(state, cx - 44, cy + 8, 14));
    svg.appendChild(el("text", { x: cx + 6, y: cy + 13, "text-anchor": "middle", class: "sub" }, over ? "Over budget" : state === "ok" ? sub || "of epsilon budget" : STATE_WORDS[state]));
    return svg;
  }

  // a calendar heatmap of spend per block: cells [{key, col, row, spent, budget, exhausted,
  // label}], each its own <g role="img"> with a <title> and an aria-label; fill in five steps by
  // spent / budget, exhausted cells crossed out (a symbol, not colour alone); a legend below
  const HEAT_STEPS = [
    { cls: "h0", name: "nothing used" },
    { cls: "h1", name: "under 25 %" },
    { cls: "h2", name: "25–50 %" },
    { cls: "h3", name: "50–80 %" },
    { cls: "h4", name: "80 % or more" },
    { cls: "hx", name: "exhausted (crossed)" },
  ];
  function heatStep(spent, budget, exhausted) {
    if (exhausted) return "hx";
    const f = budget > 0 ? spent / budget : 0;
    if (!(f > 0)) return "h0";
    return f < 0.25 ? "h1" : f < 0.5 ? "h2" : f < 0.8 ? "h3" : "h4";
  }

  // opts: {title, description, cells, cols, rows, rowLabels: [[row, text]], colLabels: [[col, text]], table, testid}
  function heatmap(figure, opts) {
    figure.replaceChildren();
    const ids = { title: `chart-title-${++uid}`, desc: `chart-desc-${uid}` };
    caption(figure, opts.title, opts.description, ids);
    const C = 16, G = 3, L = 40, T = 18;
    const gridW = L + opts.cols * (C + G), gridH = T + opts.rows * (C + G);
    const W = Math.max(560, gridW + 10);
    // the legend's items in rows that fit the width (an item: 16 px of swatch and gap, its text
    // at about 6.8 px a character of the 11 px font, 14 px to the next): on one row the last
    // item used to run past the right edge and be clipped
    const items = [];
    let lx = L, ly = gridH + 24;
    for (const s of HEAT_STEPS) {
      const width = 16 + Math.ceil(s.name.length * 6.8);
      if (lx > L && lx + width > W - 4) { lx = L; ly += 18; }
      items.push({ s, lx, ly });
      lx += width + 14;
    }
    const H = ly + 20;
    const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "group", "aria-labelledby": `${ids.title} ${ids.desc}`, class: "plot heat", "data-testid": opts.testid || "" });
    svg.appendChild(el("title", {}, opts.title));
    for (const [row, text] of opts.rowLabels || []) {
      svg.appendChild(el("text", { x: L - 6, y: T + row * (C + G) + C - 4, "text-anchor": "end", "aria-hidden": "true" }, text));
    }
    for (const [col, text] of opts.colLabels || []) {
      svg.appendChild(el("text", { x: L + col * (C + G), y: T - 6, "aria-hidden": "true" }, text));
    }
    for (const c of opts.cells) {
      const step = heatStep(c.spent, c.budget, c.exhausted);
      const g = el("g", {
        role: "img", "aria-label": c.label, class: `cell ${step}`, "data-testid": "block-cell",
        "data-block": c.key, "data-spent": c.spent, "data-exhausted": c.exhausted ? "true" : "false", "data-step": step,
      });
      g.appendChild(el("title", {}, c.label));
      const x = L + c.col * (C + G), y = T + c.row * (C + G);
      g.appendChild(el("rect", { x, y, width: C, height: C, rx: 2 }));
      if (c.exhausted) {
        g.appendChild(el("path", { d: `M${x + 3} ${y + 3}L${x + C - 3} ${y + C - 3}M${x + C - 3} ${y + 3}L${x + 3} ${y + C - 3}`, class: "cross" }));
      }
      svg.appendChild(g);
    }
    // legend (laid out above)
    const legend = el("g", { class: "heat-legend", "aria-hidden": "true" });
    for (const { s, lx, ly } of items) {
      const g = el("g", { class: `cell ${s.cls}` });
      g.appendChild(el("rect", { x: lx, y: ly - 11, width: 12, height: 12, rx: 2 }));
      if (s.cls === "hx") g.appendChild(el("path", { d: `M${lx + 2} ${ly - 9}L${lx + 10} ${ly - 1}M${lx + 10} ${ly - 9}L${lx + 2} ${ly - 1}`, class: "cross" }));
      g.appendChild(el("text", { x: lx + 16, y: ly }, s.name));
      legend.appendChild(g);
    }
    svg.appendChild(legend);
    figure.appendChild(svg);
    const legendText = html("p", { class: "muted sr-only" }, `Legend: ${HEAT_STEPS.map((s) => s.name).join(", ")}.`);
    figure.appendChild(legendText);
    dataTable(figure, opts.table);
    return svg;
  }

  window.Charts = { lineChart, barChart, gauge, heatmap, heatStep, fmt, fmtUp, fmtDown, fmtStrict, html, pctUsed, stateIcon, el };
})();
