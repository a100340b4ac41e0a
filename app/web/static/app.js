// privacy-ledger dashboard: reads the HTTP API with a key kept in sessionStorage.
// Routes: #/ (all datasets) and #/datasets/<id> (one dataset). No network beyond this origin.
"use strict";

(function () {
  const { lineChart, barChart, gauge, fmt, html } = window.Charts;
  const KEY = "privacy-ledger.key";
  const REFRESH_MS = 30000;
  const $ = (id) => document.getElementById(id);
  let timer = null;

  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.detail) || `HTTP ${status}`);
      this.status = status;
      this.body = body;
    }
  }

  async function api(path) {
    const key = sessionStorage.getItem(KEY);
    const r = await fetch(path, { headers: { Authorization: `Bearer ${key}`, Accept: "application/json" } });
    const body = await r.json().catch(() => null);
    if (!r.ok) throw new ApiError(r.status, body);
    return body;
  }

  function show(section) {
    for (const id of ["login", "overview", "detail"]) $(id).hidden = id !== section;
    const signedIn = section !== "login";
    $("forget").hidden = !signedIn;
    $("refresh").hidden = !signedIn;
  }

  function status(text) {
    $("status").textContent = text;
  }

  function stamp() {
    $("updated").textContent = `Updated ${new Date().toLocaleTimeString()}`;
  }

  function signOut(message) {
    sessionStorage.removeItem(KEY);
    if (timer) clearInterval(timer);
    timer = null;
    show("login");
    $("login-error").textContent = message || "";
    $("key").focus();
  }

  function handle(err) {
    if (err instanceof ApiError && err.status === 401) {
      signOut("That key was not accepted (missing, unknown or revoked).");
    } else if (err instanceof ApiError && err.status === 404) {
      status("No such dataset (or not visible to this key).");
    } else {
      status(`Could not load: ${err.message}`);
    }
  }

  const eps = (x) => `ε = ${fmt(x)}`;
  const kindName = (k) => ({
    gaussian: "Gaussian",
    laplace: "Laplace",
    randomized_response: "Randomized response",
    rappor: "RAPPOR",
    subsampled_gaussian: "DP-SGD (subsampled Gaussian)",
    discrete_laplace: "Discrete Laplace",
  })[k] || k;

  // ---- overview ---------------------------------------------------------------------------

  async function renderOverview() {
    const data = await api("/v1/datasets");
    const list = $("dataset-list");
    list.replaceChildren();
    if (!data.datasets.length) {
      list.appendChild(html("li", { class: "muted" }, "No datasets yet. An admin creates them with POST /v1/datasets or `privacy-ledger datasets create`."));
    }
    for (const d of data.datasets) {
      const li = html("li", { class: d.exhausted ? "card exhausted" : "card", "data-dataset": d.id });
      const a = html("a", { href: `#/datasets/${encodeURIComponent(d.id)}`, class: "card-link" });
      const pct = d.budget.epsilon > 0 ? (100 * d.spent.epsilon) / d.budget.epsilon : 0;
      a.appendChild(html("h3", {}, d.name));
      a.appendChild(gauge(d.spent.epsilon, d.budget.epsilon,
        `${d.name}: spent ${pct.toFixed(1)}% of the epsilon budget, ${eps(d.spent.epsilon)} of ${fmt(d.budget.epsilon)} at δ = ${fmt(d.budget.delta)}${d.exhausted ? ", exhausted" : ""}`));
      const p = html("p", { class: "spent" });
      p.appendChild(html("span", { class: "value", "data-testid": "spent", "data-value": d.spent.epsilon }, eps(d.spent.epsilon)));
      p.appendChild(document.createTextNode(` of ${fmt(d.budget.epsilon)} at δ = ${fmt(d.budget.delta)}`));
      a.appendChild(p);
      const meta = html("p", { class: "muted" }, `${d.entries} ${d.entries === 1 ? "entry" : "entries"} · ${d.accounting.toUpperCase()} (${d.filter})`);
      a.appendChild(meta);
      if (d.exhausted) a.appendChild(html("p", { class: "badge", "data-testid": "exhausted" }, "EXHAUSTED: no further charges fit"));
      li.appendChild(a);
      list.appendChild(li);
    }
    show("overview");
    status(`${data.datasets.length} dataset${data.datasets.length === 1 ? "" : "s"}`);
  }

  // ---- one dataset ------------------------------------------------------------------------

  function summaryRow(dl, term, value, testid) {
    dl.appendChild(html("dt", {}, term));
    const dd = html("dd", testid ? { "data-testid": testid } : {}, value);
    dl.appendChild(dd);
    return dd;
  }

  function renderSummary(d) {
    $("detail-title").textContent = d.name;
    $("detail-description").textContent = d.description || "";
    const dl = $("summary");
    dl.replaceChildren();
    summaryRow(dl, "Budget", `${eps(d.budget.epsilon)}, δ = ${fmt(d.budget.delta)}`);
    const spent = summaryRow(dl, "Spent", `${eps(d.spent.epsilon)} at δ = ${fmt(d.spent.delta)} (${d.spent.method})`, "detail-spent");
    spent.setAttribute("data-value", d.spent.epsilon);
    summaryRow(dl, "Remaining", d.remaining.rho !== null && d.remaining.rho !== undefined
      ? `${eps(d.remaining.epsilon)} (ρ left ${fmt(d.remaining.rho)})` : eps(d.remaining.epsilon));
    summaryRow(dl, "Status", d.exhausted ? "EXHAUSTED: every further charge is refused" : "Within budget", "detail-status");
    summaryRow(dl, "Entries", String(d.entries), "detail-entries");
    summaryRow(dl, "Accounting", `${d.accounting.toUpperCase()}, filter ${d.filter}${d.adaptive ? " (adaptive)" : ""}`);
  }

  async function renderCalibration(d) {
    const p = $("calibration");
    if (d.allowed_mechanisms && !d.allowed_mechanisms.includes("gaussian")) {
      p.textContent = "Gaussian queries are not allowed on this dataset.";
      return;
    }
    if (d.exhausted) {
      p.textContent = "The budget is exhausted: no Gaussian query fits any more, whatever its noise.";
      return;
    }
    try {
      const c = await api(`/v1/datasets/${encodeURIComponent(d.id)}/calibrate?mechanism=gaussian&sensitivity=1`);
      p.replaceChildren(
        document.createTextNode("A Gaussian query with sensitivity 1 now needs σ ≥ "),
        html("strong", { "data-testid": "sigma", "data-value": c.value }, fmt(c.value)),
        document.createTextNode(` to fit the remaining budget.`),
      );
    } catch (err) {
      if (err instanceof ApiError && err.status === 409) p.textContent = "No Gaussian query with sensitivity 1 fits the remaining budget.";
      else throw err;
    }
  }

  function renderSeries(d, s) {
    const pts = s.points.map((p) => [p.seq, p.epsilon]);
    lineChart($("fig-series"), {
      testid: "chart-series",
      title: "Spend over time",
      description: `Epsilon at δ = ${fmt(d.budget.delta)} after each ledger entry${s.downsampled ? ` (${pts.length} of ${s.entries} entries shown, evenly spaced)` : ""}, with the budget line.`,
      summary: pts.length ? `Spend rises to ${eps(pts[pts.length - 1][1])} after entry ${pts[pts.length - 1][0]}; budget ${eps(d.budget.epsilon)}.` : "No entries yet.",
      xLabel: "ledger entry",
      yLabel: "epsilon",
      series: [{ name: "spent ε", points: pts }],
      hlines: [{ y: d.budget.epsilon, label: `budget ε = ${fmt(d.budget.epsilon)}` }],
      empty: "No ledger entries yet",
      table: { headers: ["entry", "time", "mechanism", "spent ε"], rows: s.points.map((p) => [p.seq, p.created_at, p.kind, p.epsilon]) },
    });
  }

  function renderBreakdown(d) {
    // zCDP datasets compose rho, so its shares are exact; under RDP accounting the unamplified rho
    // of a subsampled Gaussian would mislead, so bars show ledger entries there
    const counts = d.mechanism_counts || {};
    const byRho = d.accounting === "zcdp";
    const weight = (k) => (byRho ? counts[k].rho || 0 : counts[k].entries);
    const kinds = Object.keys(counts).sort((a, b) => weight(b) - weight(a));
    const total = kinds.reduce((acc, k) => acc + weight(k), 0);
    const share = (k) => `${total > 0 ? ((100 * weight(k)) / total).toFixed(1) : "0.0"}%`;
    const entries = (k) => `${counts[k].entries} entr${counts[k].entries === 1 ? "y" : "ies"}`;
    barChart($("fig-breakdown"), {
      testid: "chart-breakdown",
      title: "Breakdown by mechanism",
      description: byRho
        ? "Share of the composed zCDP ρ by mechanism kind, with the number of ledger entries."
        : "Ledger entries by mechanism kind (the RDP curve below shows what they cost together).",
      rows: kinds.map((k) => ({
        label: kindName(k),
        value: weight(k),
        text: byRho ? `${share(k)} of ρ · ${entries(k)}` : `${entries(k)} (${share(k)})`,
      })),
      table: { headers: ["mechanism", "entries", "invocations", "ρ"], rows: kinds.map((k) => [kindName(k), counts[k].entries, counts[k].count, counts[k].rho]) },
    });
  }

  function renderCurves(d, c) {
    const rdp = c.orders.map((a, i) => [a, c.rdp[i]]).filter((p) => p[1] !== null);
    const bud = c.orders.map((a, i) => [a, c.budget_rdp[i]]).filter((p) => p[1] !== null);
    const points = [];
    if (c.spent.order) {
      const i = c.orders.indexOf(c.spent.order);
      if (i >= 0 && c.rdp[i] > 0) points.push({ x: c.spent.order, y: c.rdp[i], label: `order ${fmt(c.spent.order)} sets the spend` });
    }
    lineChart($("fig-rdp"), {
      testid: "chart-rdp",
      title: "Composed RDP curve against the budget",
      description: "Rényi divergence bound ε(α) of the whole ledger at each order α; the ledger fits while its curve is below the budget's curve at some order (values far above the budget are cut off).",
      xLabel: "order α (log scale)",
      yLabel: "RDP ε(α) (log scale)",
      xLog: true,
      yLog: true,
      yMax: bud.length ? 100 * Math.max(...bud.map((p) => p[1])) : undefined,
      series: [{ name: "ledger", points: rdp }, { name: "budget", points: bud }],
      points,
      empty: "No entries yet: the curve is zero",
      table: { headers: ["order α", "ledger ε(α)", "budget ε(α)"], rows: c.orders.map((a, i) => [a, c.rdp[i] ?? "n/a", c.budget_rdp[i] ?? "none fits"]) },
    });
    const trade = c.tradeoff.filter((t) => t.epsilon !== null).map((t) => [t.delta, t.epsilon]);
    lineChart($("fig-tradeoff"), {
      testid: "chart-tradeoff",
      title: "(ε, δ) trade-off of the current spend",
      description: "Each point is an (ε, δ) guarantee the ledger satisfies now; the budget is marked.",
      xLabel: "δ (log scale)",
      yLabel: "epsilon",
      xLog: true,
      series: [{ name: "spent ε(δ)", points: trade }],
      points: [{ x: d.budget.delta, y: d.budget.epsilon, label: "budget" }],
      table: { headers: ["δ", "ε", "method"], rows: c.tradeoff.map((t) => [t.delta, t.epsilon ?? "∞", t.method]) },
    });
  }

  function fillTable(table, headers, rows, empty) {
    table.replaceChildren();
    const thead = html("thead");
    const tr = html("tr");
    headers.forEach((h) => tr.appendChild(html("th", { scope: "col" }, h)));
    thead.appendChild(tr);
    table.appendChild(thead);
    const body = html("tbody");
    if (!rows.length) {
      const r = html("tr");
      r.appendChild(html("td", { colspan: headers.length, class: "muted" }, empty));
      body.appendChild(r);
    }
    for (const row of rows) {
      const r = html("tr");
      row.forEach((cell) => r.appendChild(html("td", {}, cell)));
      body.appendChild(r);
    }
    table.appendChild(body);
  }

  const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");

  function describe(m) {
    const skip = new Set(["mechanism", "v", "count"]);
    const params = Object.entries(m).filter(([k]) => !skip.has(k)).map(([k, v]) => `${k}=${v}`).join(", ");
    return `${m.mechanism}(${params})${m.count && m.count > 1 ? ` × ${m.count}` : ""}`;
  }

  async function renderDetail(id) {
    const base = `/v1/datasets/${encodeURIComponent(id)}`;
    const [d, s, c, entries, rejections] = await Promise.all([
      api(base), api(`${base}/series?points=400`), api(`${base}/curves`),
      api(`${base}/ledger?limit=10`), api(`${base}/rejections?limit=10`),
    ]);
    renderSummary(d);
    renderSeries(d, s);
    renderBreakdown(d);
    renderCurves(d, c);
    fillTable($("entries"), ["#", "time", "mechanism", "label", "spent ε after"],
      entries.entries.map((e) => [String(e.seq), when(e.created_at), describe(e.mechanism), e.label || "", fmt(e.spent_epsilon)]),
      "No ledger entries yet.");
    fillTable($("rejections"), ["time", "operation", "mechanism", "label", "reason"],
      rejections.rejections.map((r) => [when(r.created_at), r.operation, describe(r.mechanism), r.label || "", r.reason]),
      "No request has been refused.");
    show("detail");
    await renderCalibration(d);
    status(`${d.name}: ${eps(d.spent.epsilon)} of ${fmt(d.budget.epsilon)} spent`);
  }

  // ---- routing ----------------------------------------------------------------------------

  async function route() {
    if (!sessionStorage.getItem(KEY)) {
      signOut();
      return;
    }
    const m = location.hash.match(/^#\/datasets\/(.+)$/);
    try {
      if (m) await renderDetail(decodeURIComponent(m[1]));
      else await renderOverview();
      stamp();
      document.body.setAttribute("data-ready", "true");
    } catch (err) {
      handle(err);
    }
  }

  function start() {
    $("login-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const key = $("key").value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY, key);
      $("key").value = "";
      $("login-error").textContent = "";
      await route();
      if (sessionStorage.getItem(KEY)) {
        $("main").focus();
        if (!timer) timer = setInterval(route, REFRESH_MS);
      }
    });
    $("forget").addEventListener("click", () => signOut("Key forgotten."));
    $("refresh").addEventListener("click", () => route());
    window.addEventListener("hashchange", () => {
      document.body.removeAttribute("data-ready");
      route().then(() => $("main").focus());
    });
    if (sessionStorage.getItem(KEY)) timer = setInterval(route, REFRESH_MS);
    route();
  }

  start();
})();
