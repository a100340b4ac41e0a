// privacy-ledger dashboard: reads the HTTP API with a key kept in sessionStorage.
// Routes: #/ (all datasets) and #/datasets/<id> (one dataset). No network beyond this origin.
"use strict";

(function () {
  const { lineChart, barChart, gauge, heatmap, fmt, fmtUp, fmtDown, fmtStrict, html, pctUsed, stateIcon, el } = window.Charts;
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

  // the time of the figures on screen: a failed refresh leaves them there, and says so
  let lastUpdate = null;
  function stamp() {
    lastUpdate = new Date();
    $("updated").textContent = `Updated ${lastUpdate.toLocaleTimeString()}`;
    $("stale").hidden = true;
    $("stale").textContent = "";
  }
  // the server did not answer (gone, or the network): the figures shown are the last ones
  // read, which charges made since are not in, so the top of the page says so until a
  // refresh succeeds
  function unreachable(err) {
    const at = new Date().toLocaleTimeString();
    const shown = lastUpdate
      ? `The figures shown are from ${lastUpdate.toLocaleTimeString()} and may be out of date: charges made since are not in them.`
      : "Nothing could be read yet.";
    $("stale").textContent = `The server could not be reached at ${at} (${err.message}). ${shown} The page tries again every ${REFRESH_MS / 1000} seconds; Refresh tries now.`;
    $("stale").hidden = false;
    $("updated").textContent = lastUpdate ? `Not updated since ${lastUpdate.toLocaleTimeString()}` : "Not updated";
  }

  function signOut(message) {
    sessionStorage.removeItem(KEY);
    if (timer) clearInterval(timer);
    timer = null;
    show("login");
    $("stale").hidden = true;
    $("login-error").textContent = message || "";
    $("key").focus();
  }

  function handle(err) {
    if (err instanceof ApiError && err.status === 401) {
      signOut("That key was not accepted (missing, unknown or revoked).");
    } else if (err instanceof ApiError && err.status === 404) {
      status("No such dataset (or not visible to this key).");
    } else {
      if (!(err instanceof ApiError) || err.status >= 500) unreachable(err);
      status(`Could not load: ${err.message}`);
    }
  }

  // every number is rounded toward its safe side (fmtUp / fmtDown in charts.js): what is used
  // (spend, ρ, holds' reserve, "σ ≥") up, so it never reads less than it is; what is left
  // (remaining, budgets, "ε ≤", steps) down, so it never reads more; a δ up (the failure
  // probability stated is never smaller than the real one)
  const up = (x) => fmtUp(x);
  const down = (x) => fmtDown(x);
  const eps = (x) => `ε = ${fmtUp(x)}`;
  const epsLeft = (x) => `ε = ${fmtDown(x)}`;
  const dlt = (x) => fmtUp(x);
  // a spend below its cap, rounded up but with enough digits not to read as the whole cap
  // (0.9999993 of 1 is "0.9999993", not "1", while the block is not exhausted)
  function upBelow(x, cap) {
    let text = fmtUp(x);
    for (let digits = 5; x < cap && Number(text) >= cap && digits <= 17; digits++) text = fmtUp(x, digits);
    return text;
  }
  // a spend the API gives as null has no finite bound at its δ (the entries' own deltas reach
  // the budget δ, or pass the part of it set aside for them): it is infinite, and reads "∞"
  // with a full gauge, never as nothing used ("0.0%", an empty gauge) nor as "n/a"
  function unbounded(s) {
    if (s && s.epsilon === null) s.epsilon = Infinity;
    return s;
  }
  // the conversion that gave a spend, in words (the API's name beside it)
  const METHOD_WORDS = {
    gaussian_exact: "converted exactly: every charge is Gaussian",
    pure_dp: "the sum of the charges' ε, a pure-DP composition",
    rdp_improved: "converted from Rényi DP at the best order",
    rdp_classic: "converted from Rényi DP at the best order, classic bound",
    zcdp_bun_steinke: "converted from zCDP ρ by the Bun–Steinke bound",
    zcdp_cks: "converted from zCDP ρ by the Canonne–Kamath–Steinke bound",
    rdp_fixed_orders: "converted from Rényi DP at the order fixed when the dataset was created, as adaptive queries require",
    rdp_union_bound: "converted from Rényi DP with δ split over all orders, as adaptive queries require, older rule",
    pld: "computed from the privacy loss distribution, the tightest bound",
    not_gaussian: "no finite ε: a charge is not Gaussian, which this filter cannot count",
    entry_deltas_reach_delta: "no finite ε: the entries' own δ add up to the budget δ or more",
    entry_deltas_exceed_entry_delta_budget: "no finite ε: the entries' own δ add up to more than the part of δ set aside for them",
  };
  const methodWords = (m) => (METHOD_WORDS[m] ? `${METHOD_WORDS[m]}; method ${m}` : `converted by ${m}`);
  // the mechanism kinds, their names for people, descriptions and calibrations: the registry as
  // GET /v1/mechanisms serves it, read once (again after a failure)
  let KIND_INFO = {};
  let kindsRead = null;
  function readKinds() {
    if (!kindsRead) {
      kindsRead = api("/v1/mechanisms").then((cat) => {
        KIND_INFO = Object.fromEntries(cat.mechanisms.map((k) => [k.name, k]));
      }).catch((err) => {
        kindsRead = null;
        throw err;
      });
    }
    return kindsRead;
  }
  const kindName = (k) => (KIND_INFO[k] && KIND_INFO[k].title) || k;
  const kindTip = (k) => (KIND_INFO[k] ? { title: KIND_INFO[k].description } : {});
  const allKinds = () => Object.keys(KIND_INFO);

  // what each accounting rule guarantees, in plain words; the technical name and the docs beside
  const DOCS = "/static/accounting.html";
  const FILTERS = {
    rdp_fixed_orders: { words: "Adaptive queries allowed (Rényi filter at a fixed order)", tech: "RDP filter, fixed orders (rdp_fixed_orders)" },
    rdp_union_bound: { words: "Adaptive queries allowed (older, looser rule)", tech: "RDP filter, union bound over orders (rdp_union_bound)" },
    rdp: { words: "Parameters fixed in advance (Rényi DP, tight)", tech: "Rényi DP composition (rdp)" },
    zcdp: { words: "Parameters fixed in advance (zCDP)", tech: "zero-concentrated DP (zcdp)" },
    zcdp_filter: { words: "Adaptive queries allowed (zCDP filter)", tech: "zCDP filter (zcdp_filter)" },
    gdp: { words: "Adaptive Gaussian queries, exact", tech: "Gaussian DP filter (gdp)" },
    pld: { words: "Parameters fixed in advance, tightest (privacy loss distribution)", tech: "privacy loss distribution (pld)" },
  };
  const filterWords = (f) => (FILTERS[f] || { words: f, tech: f }).words;

  // the plain name with the technical one and a link to the docs beside it
  function accountingNode(d) {
    const f = FILTERS[d.filter] || { words: d.filter, tech: `${d.accounting} (${d.filter})` };
    const span = html("span", { class: "accounting", "data-testid": "accounting", "data-filter": d.filter });
    span.appendChild(html("strong", {}, f.words));
    span.appendChild(document.createTextNode(" — "));
    span.appendChild(html("span", { class: "tech" }, f.tech));
    span.appendChild(document.createTextNode(" · "));
    span.appendChild(html("a", { href: `${DOCS}#${encodeURIComponent(d.filter)}`, "aria-label": `what this means: ${f.words}` }, "what this means"));
    if (d.entry_delta_budget > 0) {
      // the part of the delta set aside for mechanisms with their own delta (adaptive filters)
      span.appendChild(html("span", { class: "tech", "data-testid": "entry-delta-budget" },
        ` · δ = ${dlt(d.entry_delta_budget)} set aside for mechanisms with their own δ` +
        (d.partition ? " in each block" : "")));
    }
    if (d.lifetime_entry_delta_budget > 0) {
      // the lifetime budget's own part (their deltas over all blocks)
      span.appendChild(html("span", { class: "tech", "data-testid": "lifetime-entry-delta-budget" },
        ` · δ = ${dlt(d.lifetime_entry_delta_budget)} of the lifetime budget set aside for them`));
    }
    return span;
  }

  // the budget that caps `spent` (the composition of all charges): a partitioned dataset's
  // lifetime budget when it has one (its `budget` applies to each block), else its budget
  const capOf = (d) => (d.partition && d.lifetime_budget ? d.lifetime_budget : d.budget);
  // a partitioned dataset without a lifetime budget: nothing caps `spent` (the composition of
  // the charges of all blocks; four blocks each 60 % used compose to more than one block's
  // budget), so its use is that of its most-spent block against the per-block budget:
  // `d.topBlock`, GET /budget's blocks.most_spent (null: none charged; undefined: not read)
  const perBlockOnly = (d) => !!(d.partition && !d.lifetime_budget);
  // what the gauge and the percentage compare: {spent, cap, exhausted, block}; null when a
  // per-block dataset's most-spent block is not known (then no percentage is shown)
  function usage(d) {
    if (!perBlockOnly(d)) return { spent: d.spent.epsilon, cap: capOf(d), exhausted: stateOf(d) === "exhausted", block: null };
    if (d.topBlock === undefined) return null;
    const top = d.topBlock;
    return { spent: top ? top.spent.epsilon : 0, cap: d.budget, exhausted: !!(top && top.exhausted), block: top ? top.block : null };
  }
  // state: the API's when it gives one, else from spent / budget (threshold 0.8 by default). A
  // per-block dataset is never exhausted (a new block has a fresh budget, and the API says
  // "ok"), but its badge warns when its most-spent block is exhausted or past the threshold:
  // the gauge beside it shows that block (a charge to an exhausted block is refused)
  // a partitioned dataset with a lifetime budget: its state is the lifetime budget's (the
  // API's), but a charge to an exhausted block is refused however much the lifetime budget has
  // left, so its most-spent block, when exhausted or past the threshold, is said beside it
  // (and turns an "ok" to a warning): "; most-spent block 2026-11-22 exhausted"
  function blockNote(d) {
    const top = d.partition && d.lifetime_budget ? d.topBlock : null;
    if (!top) return "";
    const t = d.warning_threshold ?? 0.8;
    if (!top.exhausted && !(d.budget.epsilon > 0 && top.spent.epsilon / d.budget.epsilon >= t)) return "";
    return `; most-spent block ${top.block} ${top.exhausted ? "exhausted" : `${pctUsed(top.spent.epsilon, d.budget.epsilon, false)} used`}`;
  }
  function stateOf(d) {
    if (!perBlockOnly(d) && d.state === "ok" && blockNote(d)) return "warning";
    if (perBlockOnly(d)) {
      const u = usage(d);
      const t = d.warning_threshold ?? 0.8;
      if (u && u.block && (u.exhausted || (u.cap.epsilon > 0 && u.spent / u.cap.epsilon >= t))) return "warning";
      return d.state || "ok";
    }
    if (d.state) return d.state;
    if (d.exhausted) return "exhausted";
    const t = d.warning_threshold ?? 0.8;
    return capOf(d).epsilon > 0 && d.spent.epsilon / capOf(d).epsilon >= t ? "warning" : "ok";
  }
  function used(d) {
    const u = usage(d);
    return u ? pctUsed(u.spent, u.cap.epsilon, u.exhausted) : null;
  }
  // how much is used, in words: "60.0%", or on a per-block dataset "most-spent block
  // 2026-11-23 60.0%" (or why there is no percentage)
  function usedWords(d) {
    if (d.partition && d.lifetime_budget) return `${used(d)} of the lifetime budget`;
    if (!perBlockOnly(d)) return used(d);
    const u = usage(d);
    if (!u) return "no lifetime budget, each block has its own,";
    if (!u.block) return "no block charged yet,";
    return `most-spent block ${u.block}${u.exhausted ? " (exhausted)" : ""} ${used(d)}`;
  }
  function stateText(d) {
    const st = stateOf(d);
    if (st === "exhausted") return "Exhausted: no further charge fits";
    if (st === "warning") return `Warning: ${usedWords(d)} used${blockNote(d)}`;
    return `Within budget: ${usedWords(d)} used`;
  }
  function stateBadge(d) {
    const st = stateOf(d);
    const p = html("p", { class: `badge ${st}`, "data-testid": "state", "data-state": st });
    const svg = el("svg", { viewBox: "0 0 20 20", class: "icon", "aria-hidden": "true", focusable: "false" });
    svg.appendChild(stateIcon(st, 10, 10, 16));
    p.appendChild(svg);
    p.appendChild(document.createTextNode(` ${stateText(d)}`));
    return p;
  }

  // ---- what the server offers (so a missing feature is not a failed request) ---------------

  let caps = null;
  async function capabilities() {
    if (caps) return caps;
    caps = { reservations: false, csv: false, archived: false, ledgerFilters: false, rejectionKind: false, allocations: false, blocks: false };
    try {
      const r = await fetch("/openapi.json", { headers: { Accept: "application/json" } });
      if (!r.ok) return caps;
      const spec = await r.json();
      const paths = spec.paths || {};
      const params = (path) => ((paths[path] || {}).get || {}).parameters || [];
      const named = (path, name) => params(path).some((p) => p.name === name);
      caps.reservations = !!(paths["/v1/datasets/{dataset_id}/reservations"] || {}).get;
      caps.csv = named("/v1/datasets/{dataset_id}/ledger", "format");
      caps.ledgerFilters = named("/v1/datasets/{dataset_id}/ledger", "kind");
      caps.rejectionKind = named("/v1/datasets/{dataset_id}/rejections", "kind");
      caps.archived = named("/v1/datasets", "archived");
      caps.allocations = !!(paths["/v1/datasets/{dataset_id}/allocations"] || {}).get;
      caps.blocks = !!(paths["/v1/datasets/{dataset_id}/blocks"] || {}).get;
    } catch (err) {
      // keep the conservative defaults
    }
    return caps;
  }

  // ---- overview ---------------------------------------------------------------------------

  // GET /v1/datasets answers one page (at most this many, by name) with `total` beside it
  const DATASET_PAGE = 1000;
  // every dataset the key may see: page after page by `offset` until the server's `total` (a
  // server without one: until a short page), stopping at an empty page; a dataset a shifted
  // page repeats (one was created meanwhile) is kept once
  async function allDatasets(archived) {
    const found = new Map();
    let offset = 0;
    for (;;) {
      const q = new URLSearchParams({ offset: String(offset), limit: String(DATASET_PAGE) });
      if (archived) q.set("archived", archived);
      const page = await api(`/v1/datasets?${q}`);
      const items = page.datasets || [];
      for (const d of items) if (!found.has(d.id)) found.set(d.id, (unbounded(d.spent), d));
      offset += items.length;
      const last = typeof page.total === "number" ? offset >= page.total : items.length < DATASET_PAGE;
      if (last || !items.length) return [...found.values()];
    }
  }

  // the most-spent block of each per-block dataset (GET /budget's blocks.most_spent, kept as
  // `d.topBlock`), at most 6 requests at a time; one that fails leaves it unknown
  async function readTopBlocks(list) {
    let next = 0;
    const worker = async () => {
      while (next < list.length) {
        const d = list[next++];
        try {
          const b = await api(`/v1/datasets/${encodeURIComponent(d.id)}/budget`);
          if (b.blocks) d.topBlock = b.blocks.most_spent && (unbounded(b.blocks.most_spent.spent), b.blocks.most_spent);
        } catch (err) {
          if (err instanceof ApiError && err.status === 401) throw err;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(6, list.length) }, worker));
  }

  async function renderOverview() {
    const c = await capabilities();
    const showArchived = $("show-archived").checked;
    $("archived-toggle").hidden = false;
    const all = await allDatasets(showArchived ? "all" : null);
    const list = $("dataset-list");
    list.replaceChildren();
    const datasets = all.filter((d) => showArchived || !d.archived);
    await readTopBlocks(datasets.filter((d) => d.partition));
    if (!datasets.length) {
      list.appendChild(html("li", { class: "muted" }, "No datasets yet. An admin creates them with POST /v1/datasets or `privacy-ledger datasets create`."));
    }
    for (const d of datasets) {
      const st = stateOf(d);
      const li = html("li", { class: `card ${st}${d.archived ? " archived" : ""}`, "data-dataset": d.id, "data-state": st });
      const a = html("a", { href: `#/datasets/${encodeURIComponent(d.id)}`, class: "card-link" });
      a.appendChild(html("h3", {}, d.name));
      const u = usage(d);
      if (!perBlockOnly(d)) {
        a.appendChild(gauge(d.spent.epsilon, capOf(d).epsilon,
          `${d.name}: spent ${used(d)} of the epsilon budget, ${eps(d.spent.epsilon)} of ${down(capOf(d).epsilon)} at δ = ${dlt(capOf(d).delta)}; ${stateText(d)}`, st));
      } else if (u) {
        const g = gauge(u.spent, u.cap.epsilon, u.block
          ? `${d.name}: its most-spent block ${u.block} has used ${used(d)} of its epsilon budget, ε = ${upBelow(u.spent, u.cap.epsilon)} of ${down(u.cap.epsilon)} per block at δ = ${dlt(u.cap.delta)}; ${stateText(d)}`
          : `${d.name}: no block charged yet, each has its whole budget of ${epsLeft(u.cap.epsilon)}; ${stateText(d)}`, st, "of a block's budget");
        g.setAttribute("data-block", u.block || "");
        a.appendChild(g);
      }
      a.appendChild(stateBadge(d));
      const p = html("p", { class: "spent" });
      p.appendChild(html("span", { class: "value", "data-testid": "spent", "data-value": d.spent.epsilon }, eps(d.spent.epsilon)));
      p.appendChild(document.createTextNode(perBlockOnly(d)
        ? ` over all blocks composed; budget ${down(d.budget.epsilon)} per block at δ = ${dlt(d.budget.delta)}, no lifetime budget`
        : ` of ${down(capOf(d).epsilon)} at δ = ${dlt(capOf(d).delta)}`));
      a.appendChild(p);
      if (d.reserved && d.reserved.count) {
        a.appendChild(html("p", { class: "muted", "data-testid": "reserved" }, `${d.reserved.count} active hold${d.reserved.count === 1 ? "" : "s"} reserving ${eps(d.reserved.epsilon)}`));
      }
      a.appendChild(html("p", { class: "muted" }, `${d.entries} ${d.entries === 1 ? "entry" : "entries"} · ${filterWords(d.filter)}`));
      if (d.archived) a.appendChild(html("p", { class: "badge archived", "data-testid": "archived" }, "Archived: read-only"));
      if (st === "exhausted") a.appendChild(html("p", { class: "sr-only", "data-testid": "exhausted" }, "EXHAUSTED"));
      li.appendChild(a);
      list.appendChild(li);
    }
    if (showArchived && !c.archived) status("This server does not archive datasets yet: every dataset is shown.");
    else status(`${datasets.length} dataset${datasets.length === 1 ? "" : "s"}`);
    show("overview");
  }

  // ---- one dataset ------------------------------------------------------------------------

  function summaryRow(dl, term, value, testid) {
    dl.appendChild(html("dt", {}, term));
    const dd = html("dd", testid ? { "data-testid": testid } : {});
    if (typeof value === "string") dd.textContent = value;
    else dd.appendChild(value);
    dl.appendChild(dd);
    return dd;
  }

  function renderSummary(d) {
    $("detail-title").textContent = d.name;
    $("detail-description").replaceChildren(d.description ? userText(d.description) : "");
    const dl = $("summary");
    dl.replaceChildren();
    const lifetime = d.partition && d.lifetime_budget
      ? `; lifetime ${epsLeft(d.lifetime_budget.epsilon)}, δ = ${dlt(d.lifetime_budget.delta)}` : "";
    summaryRow(dl, "Budget", `${epsLeft(d.budget.epsilon)}, δ = ${dlt(d.budget.delta)}${d.partition ? " per block" : ""}${lifetime}`);
    const share = perBlockOnly(d)
      ? `all blocks composed, which no budget caps (no lifetime budget)${usage(d) && usage(d).block ? `; ${usedWords(d).replace("most-spent block", "the most-spent block")} of its budget` : ""}`
      : `${used(d)} of the ${d.partition && d.lifetime_budget ? "lifetime " : ""}budget`;
    const spent = summaryRow(dl, "Spent", `${eps(d.spent.epsilon)} at δ = ${dlt(d.spent.delta)} — ${share} (${methodWords(d.spent.method)})`, "detail-spent");
    spent.setAttribute("data-value", d.spent.epsilon);
    let remaining = d.remaining.rho !== null && d.remaining.rho !== undefined
      ? `${epsLeft(d.remaining.epsilon)} (ρ left ${down(d.remaining.rho)})` : epsLeft(d.remaining.epsilon);
    if (perBlockOnly(d)) remaining += " in a block nobody charged (no lifetime budget)";
    if (d.reserved) {
      remaining += d.reserved.count
        ? `, after ${d.reserved.count} active hold${d.reserved.count === 1 ? "" : "s"} reserving ${eps(d.reserved.epsilon)}`
        : ", no active holds";
    }
    summaryRow(dl, "Remaining", remaining, "detail-remaining").setAttribute("data-value", d.remaining.epsilon);
    const st = summaryRow(dl, "Status", stateBadge(d), "detail-status");
    st.setAttribute("data-state", stateOf(d));
    summaryRow(dl, "Entries", String(d.entries), "detail-entries");
    summaryRow(dl, "Accounting", accountingNode(d));
    if (d.archived) summaryRow(dl, "Archived", "Yes: the ledger is read-only, charges are refused");
  }

  // "what can the next query be": one calibration per kind the dataset allows, with the fixed
  // parameters each kind declares for it (its next_query, stated in the row)
  // a calibrated value is typed back in: strictly on its safe side (fmtStrict), by the answer's
  // direction: a least value that fits (noise: σ, a scale) up, a largest one (ε, ρ, steps) down
  const PARAM_NAMES = { sigma: "noise σ", epsilon: "ε", rho: "ρ", scale: "noise scale" };
  function calibratedWords(c) {
    const info = KIND_INFO[c.mechanism && c.mechanism.mechanism] || {};
    const direction = c.direction || (info.calibration || {})[c.parameter];
    const least = direction === "min";
    const field = (info.fields || []).find((f) => f.name === c.parameter);
    if (field && field.type === "int") {
      const n = least ? Math.ceil(c.value) : Math.floor(c.value);
      return c.parameter === "steps" && !least ? `up to ${n} training steps` : `${c.parameter} ${least ? "≥" : "≤"} ${n}`;
    }
    return `${PARAM_NAMES[c.parameter] || c.parameter} ${least ? "≥" : "≤"} ${fmtStrict(c.value, least ? 1 : -1)}`;
  }

  async function renderCalibration(d) {
    const box = $("calibration");
    box.replaceChildren(html("h3", { id: "calibration-title" }, "What can the next query be?"));
    const offered = (k) => KIND_INFO[k] && KIND_INFO[k].next_query && Object.keys(KIND_INFO[k].calibration).length;
    const kinds = (d.allowed_mechanisms && d.allowed_mechanisms.length ? d.allowed_mechanisms : allKinds()).filter(offered);
    if (stateOf(d) === "exhausted") {
      box.appendChild(html("p", { "data-testid": "calibration-exhausted" }, "None: the budget is exhausted, so every further charge is refused whatever its noise."));
      return;
    }
    if (d.archived) {
      box.appendChild(html("p", { "data-testid": "calibration-archived" }, "None: the dataset is archived, so every charge is refused whatever budget is left (an admin can unarchive it)."));
      return;
    }
    if (d.partition) {
      // the budget is per block: /calibrate needs the blocks a query reads (block_from,
      // block_to), which the page cannot guess, so it points to the blocks' remaining budget
      box.appendChild(html("p", { "data-testid": "calibration-blocks" }, `It depends on the blocks the query reads: each block has its own budget of ${epsLeft(d.budget.epsilon)}, and a block nobody charged has all of it. The remaining ε of each block is in the heatmap below (and its data table).`));
      return;
    }
    const rows = await Promise.all(kinds.map(async (k) => {
      const next = KIND_INFO[k].next_query;
      const query = new URLSearchParams({ mechanism: k, ...next.fixed });
      try {
        const c = await api(`/v1/datasets/${encodeURIComponent(d.id)}/calibrate?${query}`);
        return { k, next, c, words: calibratedWords(c) };
      } catch (err) {
        if (err instanceof ApiError && (err.status === 409 || err.status === 422)) return { k, next, c: null, words: "nothing fits the remaining budget" };
        throw err;
      }
    }));
    const table = html("table", { "aria-labelledby": "calibration-title", "data-testid": "calibration-table" });
    const head = html("tr");
    ["mechanism", "with", "the next query can use"].forEach((h) => head.appendChild(html("th", { scope: "col" }, h)));
    const thead = html("thead");
    thead.appendChild(head);
    table.appendChild(thead);
    const body = html("tbody");
    for (const row of rows) {
      const tr = html("tr", { "data-kind": row.k });
      tr.appendChild(html("th", { scope: "row", ...kindTip(row.k) }, kindName(row.k)));
      tr.appendChild(html("td", {}, row.next.words));
      const td = html("td", {});
      const strong = html("strong", row.c ? { "data-testid": `calibrate-${row.k}`, "data-value": row.c.value, "data-parameter": row.c.parameter } : {}, row.words);
      td.appendChild(strong);
      tr.appendChild(td);
      body.appendChild(tr);
    }
    table.appendChild(body);
    box.appendChild(table);
    box.appendChild(html("p", { class: "muted" }, "Each answer is the least noise (or the largest ε, or the most steps) with which one more query of that kind still fits the remaining budget, active holds counted as spent."));
  }

  let seriesView = "time";
  let lastSeries = null;
  // whether the budget δ of the dataset shown has changed: each entry's "spent ε after" is at
  // the budget δ of its time, so the ledger table says so (from its series' budget changes)
  let deltaChangedShown = false;

  function renderSeries(d, s) {
    lastSeries = [d, s];
    const byTime = seriesView === "time";
    const t = (iso) => new Date(iso).getTime();
    const pts = s.points.map((p) => [byTime ? t(p.created_at) : p.seq, p.epsilon]);
    const changes = s.budget_changes;
    // the series' budget is one block's when it says so (a server without budget_scope: from
    // the dataset): no line then, since the spend plotted composes the charges of all blocks
    const perBlock = s.budget_scope ? s.budget_scope === "per_block" : perBlockOnly(d);
    const which = perBlock ? "per-block budget" : "budget";
    const budgetText = (b) => `ε = ${down(b.epsilon)}${b.delta !== undefined ? `, δ = ${dlt(b.delta)}` : ""}`;
    const vlines = byTime && changes ? changes.map((c) => ({
      x: t(c.created_at),
      label: `${when(c.created_at)}: ${which} ${c.new ? `changed to ${budgetText(c.new)}` : "changed"}${c.old ? ` (was ${budgetText(c.old)})` : ""}`,
    })) : [];
    // each entry stores the spend at the budget δ of its time: after a change of the budget δ
    // the earlier points are at the old δ, so the chart says so and ends with the current
    // spend (at the current δ, the dataset's `spent`) as a "now" point
    const deltaChanged = !!(changes && changes.some((c) => c.old && c.new && c.old.delta !== undefined && c.new.delta !== undefined && c.old.delta !== c.new.delta));
    deltaChangedShown = deltaChanged;
    // the same "now" point wherever the last stored point is not the current spend: totals
    // rebuilt from curves re-derived under corrected formulas raise the spend, not the points
    const behind = pts.length > 0 && s.points[s.points.length - 1].epsilon !== d.spent.epsilon;
    const nowX = pts.length ? (byTime ? Math.max(Date.now(), pts[pts.length - 1][0], ...vlines.map((v) => v.x)) : pts[pts.length - 1][0] + 1) : null;
    const nowPoint = (deltaChanged || behind) && pts.length ? { x: nowX, y: d.spent.epsilon, label: `now ${eps(d.spent.epsilon)}` } : null;
    const lastValue = nowPoint ? d.spent.epsilon : pts.length ? pts[pts.length - 1][1] : null;
    const span = pts.length ? (nowPoint ? nowX : Math.max(pts[pts.length - 1][0], ...vlines.map((v) => v.x))) - pts[0][0] : 0;
    const timeFmt = (ms) => {
      const dt = new Date(ms);
      return span < 2 * 864e5 ? dt.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: span < 600e3 ? "2-digit" : undefined })
        : dt.toLocaleDateString([], { month: "short", day: "numeric" });
    };
    let marks;
    if (!byTime) marks = "Budget changes are marked on the time view.";
    else if (!changes) marks = "This server does not report budget changes, so they are not marked.";
    else if (!changes.length) marks = "The budget has not changed.";
    else if (!pts.length) marks = `${changes.length} budget change${changes.length === 1 ? "" : "s"}, not drawn: no ledger entries yet.`;
    else marks = `${changes.length} budget change${changes.length === 1 ? "" : "s"} marked by triangles.`;
    $("series-marks").textContent = marks;
    const deltaNote = deltaChanged
      ? ` The budget δ changed (now δ = ${dlt(d.spent.delta)}): each point is the spend at the budget δ when that charge was made, so points before the change are at the old δ; the last point, "now", is the current spend at δ = ${dlt(d.spent.delta)}.`
      : nowPoint
        ? ` Each point is the spend as recorded when that charge was made; the spend has since been recomputed from the ledger, and the last point, "now", is the current spend.`
        : "";
    lineChart($("fig-series"), {
      testid: "chart-series",
      title: "Spend over time",
      description: (perBlock
        ? `The privacy loss of all charges composed (ε at ${deltaChanged ? "the budget δ of the time of each charge" : `δ = ${dlt(s.budget.delta)}`}) after each query, ${byTime ? "by the time it was charged" : "by ledger entry number"}; no budget line: this dataset has no lifetime budget, and its budget of ${epsLeft(s.budget.epsilon)} applies to each block, not to this composition (each block's use is in the heatmap below)${s.downsampled ? ` (${pts.length} of ${s.entries} entries shown, evenly spaced)` : ""}.`
        : `How much of the privacy budget (ε at ${deltaChanged ? "the budget δ of the time of each charge" : `δ = ${dlt(capOf(d).delta)}`}) had been used after each query, ${byTime ? "by the time it was charged" : "by ledger entry number"}; the dashed line is the budget${s.downsampled ? ` (${pts.length} of ${s.entries} entries shown, evenly spaced)` : ""}.`) + deltaNote,
      summary: !pts.length ? "No entries yet."
        : (perBlock ? `Spend of all blocks composed rises to ${eps(lastValue)}${nowPoint ? " now" : ""}; no lifetime budget caps it (per block: ${epsLeft(s.budget.epsilon)}).`
        : `Spend rises to ${eps(lastValue)}${nowPoint ? " now" : ""}; budget ${epsLeft(capOf(d).epsilon)}.`) + deltaNote,
      xLabel: byTime ? "time charged" : "ledger entry",
      xTime: byTime,
      xFormat: byTime ? timeFmt : undefined,
      yLabel: "epsilon",
      series: [{ name: "spent ε", points: pts }],
      points: nowPoint ? [nowPoint] : [],
      hlines: perBlock ? [] : [{ y: capOf(d).epsilon, label: `budget ε = ${down(capOf(d).epsilon)}` }],
      vlines,
      vlineName: "budget change",
      empty: "No ledger entries yet",
      table: {
        headers: ["entry", "time", "mechanism", deltaChanged ? "spent ε (at the budget δ of its time)" : "spent ε"],
        round: [null, null, null, "up"],
        rows: s.points.map((p) => [p.seq, when(p.created_at), kindName(p.kind), p.epsilon])
          .concat(nowPoint ? [["now", when(new Date(nowX).toISOString()), `current spend at δ = ${dlt(d.spent.delta)}`, d.spent.epsilon]] : []),
      },
    });
    $("fig-series").setAttribute("data-view", seriesView);
    $("fig-series").setAttribute("data-budget-scope", perBlock ? "per_block" : s.budget_scope || "dataset");
    $("fig-series").setAttribute("data-delta-changed", deltaChanged ? "true" : "false");
    $("fig-series").setAttribute("data-now", nowPoint ? "true" : "false");
  }

  function renderBreakdown(d) {
    // zCDP datasets compose rho, so its shares are exact; under RDP accounting the unamplified rho
    // of a subsampled Gaussian would mislead, so bars show ledger entries there
    const counts = d.mechanism_counts || {};
    const byRho = d.accounting === "zcdp";
    const weight = (k) => (byRho ? counts[k].rho || 0 : counts[k].entries);
    const kinds = Object.keys(counts).sort((a, b) => weight(b) - weight(a));
    const total = kinds.reduce((acc, k) => acc + weight(k), 0);
    const share = (k) => `${total > 0 ? (Math.ceil((1000 * weight(k)) / total - 1e-7) / 10).toFixed(1) : "0.0"}%`;
    const entries = (k) => `${counts[k].entries} entr${counts[k].entries === 1 ? "y" : "ies"}`;
    barChart($("fig-breakdown"), {
      testid: "chart-breakdown",
      title: "Breakdown by mechanism",
      description: byRho
        ? "Share of the budget used (as zCDP ρ) by each kind of query, with the number of ledger entries."
        : "How many ledger entries each kind of query made (the next chart shows what they cost together).",
      rows: kinds.map((k) => ({
        label: kindName(k),
        value: weight(k),
        text: byRho ? `${share(k)} of ρ · ${entries(k)}` : `${entries(k)} (${share(k)})`,
      })),
      table: { headers: ["mechanism", "entries", "invocations", "ρ"], round: [null, null, null, "up"], rows: kinds.map((k) => [kindName(k), counts[k].entries, counts[k].count, counts[k].rho]) },
    });
  }

  function renderCurves(d, c) {
    // a per-block budget (no lifetime budget) is not drawn against the composition of all blocks
    const perBlock = c.budget_scope ? c.budget_scope === "per_block" : perBlockOnly(d);
    const rdp = c.orders.map((a, i) => [a, c.rdp[i]]).filter((p) => p[1] !== null);
    const bud = perBlock ? [] : c.orders.map((a, i) => [a, c.budget_rdp[i]]).filter((p) => p[1] !== null);
    const points = [];
    if (c.spent.order) {
      const i = c.orders.indexOf(c.spent.order);
      if (i >= 0 && c.rdp[i] > 0) points.push({ x: c.spent.order, y: c.rdp[i], label: `tightest at α = ${fmt(c.spent.order)}` });
    }
    lineChart($("fig-rdp"), {
      testid: "chart-rdp",
      title: "Privacy loss so far against the budget, at each Rényi order",
      description: perBlock
        ? "The privacy loss of all charges composed, at each Rényi order α; no budget curve: this dataset has no lifetime budget, and its budget applies to each block, not to this composition (its per-block curve is in the data table, not comparable); the marked order is where the reported spend comes from."
        : "The ledger is within budget as long as its curve (solid) stays below the budget (dashed curve, or square marks at the orders a fixed-order filter checks) at some order α; the marked order is where the reported spend comes from (values far above the budget are cut off).",
      xLabel: "Rényi order α (log scale)",
      yLabel: "Rényi ε(α) (log scale)",
      xLog: true,
      yLog: true,
      yMax: bud.length ? 100 * Math.max(...bud.map((p) => p[1])) : undefined,
      series: perBlock ? [{ name: "ledger", points: rdp }] : [{ name: "ledger", points: rdp }, { name: "budget", points: bud }],
      points,
      empty: "No entries yet: the curve is zero",
      table: { round: [null, "up", "down"], headers: ["order α", "ledger ε(α)", perBlock ? "one block's budget ε(α), not comparable" : "budget ε(α)"], rows: c.orders.map((a, i) => [a, c.rdp[i] ?? "n/a", c.budget_rdp[i] ?? "none fits"]) },
    });
    const trade = c.tradeoff.filter((t) => t.epsilon !== null).map((t) => [t.delta, t.epsilon]);
    lineChart($("fig-tradeoff"), {
      testid: "chart-tradeoff",
      title: "The same spend stated at other δ",
      description: perBlock
        ? "The queries so far, all blocks composed, satisfy every (ε, δ) pair on this line: a smaller failure probability δ (left) costs a larger ε; no budget is marked (no lifetime budget: the budget applies to each block)."
        : "The queries so far satisfy every (ε, δ) pair on this line: a smaller failure probability δ (left) costs a larger ε; the budget is marked.",
      xLabel: "δ, the failure probability (log scale)",
      yLabel: "epsilon",
      xLog: true,
      series: [{ name: "spent ε(δ)", points: trade }],
      points: perBlock ? [] : [{ x: c.budget.delta, y: c.budget.epsilon, label: "budget" }],
      table: { round: [null, "up"], headers: ["δ", "ε", "method"], rows: c.tradeoff.map((t) => [t.delta, t.epsilon ?? "∞", t.method]) },
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
      row.forEach((cell) => {
        const td = html("td", {});
        if (cell instanceof Node) td.appendChild(cell);
        else td.textContent = cell;
        r.appendChild(td);
      });
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

  // text written by users (labels, metadata, key names) goes in <bdi>: a bidi override in it
  // (U+202E) cannot reorder the text around it
  const userText = (t) => (t ? html("bdi", {}, String(t)) : "");
  function meta(m) {
    if (!m || !Object.keys(m).length) return "";
    const frag = document.createDocumentFragment();
    Object.entries(m).forEach(([k, v], i) => {
      if (i) frag.appendChild(document.createTextNode("; "));
      frag.appendChild(html("bdi", {}, k));
      frag.appendChild(document.createTextNode(": "));
      frag.appendChild(html("bdi", {}, typeof v === "object" ? JSON.stringify(v) : String(v)));
    });
    return frag;
  }
  function who(x) {
    const frag = document.createDocumentFragment();
    frag.append(html("bdi", {}, x.key_name || x.key_id || "—"));
    // the team charged: a refusal names it (allocation), an entry too (allocation_name)
    const team = x.allocation || x.allocation_name;
    if (team) frag.append(" (", html("bdi", {}, team), ")");
    return frag;
  }

  // ---- history: ledger and rejections, paged by the API's cursor -------------------------

  // one pager per table: `stack` holds the cursors of the pages shown before (newer ones)
  const PAGE = 25;
  const pagers = {
    entries: { stack: [], cursor: null, next: null },
    rejections: { stack: [], cursor: null, next: null },
  };
  let detailId = null;

  function filterQuery() {
    const q = new URLSearchParams();
    const kind = $("f-kind").value, label = $("f-label").value.trim();
    const after = $("f-after").value, before = $("f-before").value;
    if (kind) q.set("kind", kind);
    if (label) q.set("label", label);
    if (after) q.set("created_after", new Date(`${after}T00:00:00`).toISOString());
    if (before) q.set("created_before", new Date(`${before}T23:59:59.999`).toISOString());
    return q;
  }

  function filterLocal(rows, kindOf) {
    // filters the API may not apply yet are applied to the page shown (the totals are the API's);
    // the label filter is an exact match, as on the server
    const kind = $("f-kind").value, label = $("f-label").value.trim();
    const after = $("f-after").value ? new Date(`${$("f-after").value}T00:00:00`).getTime() : null;
    const before = $("f-before").value ? new Date(`${$("f-before").value}T23:59:59.999`).getTime() : null;
    return rows.filter((r) => (!kind || kindOf(r) === kind) && (!label || (r.label || "") === label) &&
      (after === null || new Date(r.created_at).getTime() >= after) && (before === null || new Date(r.created_at).getTime() <= before));
  }

  const filtered = () => [...filterQuery().keys()].length > 0;
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

  async function loadEntries() {
    const pg = pagers.entries;
    const q = filterQuery();
    q.set("limit", String(PAGE));
    if (pg.cursor) q.set("cursor", pg.cursor);
    const page = await api(`/v1/datasets/${encodeURIComponent(detailId)}/ledger?${q}`);
    pg.next = page.next_cursor;
    const rows = filterLocal(page.entries, (e) => e.kind);
    fillTable($("entries"), ["#", "time", "mechanism", "label", "charged by", "metadata",
      deltaChangedShown ? "spent ε after, at the budget δ of its time (the budget δ changed)" : "spent ε after"],
      rows.map((e) => [String(e.seq), when(e.created_at), describe(e.mechanism), userText(e.label), who(e), meta(e.metadata), up(e.spent_epsilon)]),
      "No ledger entries match.");
    $("entries-newer").disabled = !pg.stack.length;
    $("entries-older").disabled = !pg.next;
    const oldest = page.next_cursor ? "" : " (oldest reached)";
    if (filtered()) {
      // the API's `total` is the whole ledger's, not the filter's: say only what this page shows
      $("entries-page").textContent = `Page ${pg.stack.length + 1}: ${plural(rows.length, "matching entry", "matching entries")} shown${oldest}`;
    } else {
      const first = page.entries.length ? page.entries[0].seq : null, last = page.entries.length ? page.entries[page.entries.length - 1].seq : null;
      $("entries-page").textContent = first === null ? "No entries" : `Entries ${last}–${first} of ${page.total}${oldest}`;
    }
  }

  async function loadRejections() {
    const pg = pagers.rejections;
    const c = await capabilities();
    const q = filterQuery();
    q.set("limit", String(PAGE));
    if (pg.cursor) q.set("cursor", pg.cursor);
    const page = await api(`/v1/datasets/${encodeURIComponent(detailId)}/rejections?${q}`);
    pg.next = page.next_cursor;
    // the server filters by kind (`kind`) where its OpenAPI says so; else only this page is
    const rows = filterLocal(page.rejections, (r) => r.mechanism.mechanism);
    fillTable($("rejections"), ["time", "operation", "mechanism", "label", "requested by", "metadata", "reason"],
      rows.map((r) => [when(r.created_at), r.operation, describe(r.mechanism), userText(r.label), who(r), meta(r.metadata), userText(r.reason)]),
      "No refused request matches.");
    $("rejections-newer").disabled = !pg.stack.length;
    $("rejections-older").disabled = !pg.next;
    const pageOnly = $("f-kind").value && !c.rejectionKind ? " (the kind filter applies to this page only)" : "";
    $("rejections-page").textContent = `Page ${pg.stack.length + 1}${filtered() ? `: ${plural(rows.length, "matching refusal", "matching refusals")} shown` : ""}${pg.next ? "" : " (oldest reached)"}${pageOnly}`;
  }

  async function page(which, dir) {
    if (!detailId) return;
    const pg = pagers[which];
    if (dir === "older" && pg.next) { pg.stack.push(pg.cursor); pg.cursor = pg.next; }
    else if (dir === "newer" && pg.stack.length) pg.cursor = pg.stack.pop();
    else if (dir === "reset") { pg.stack = []; pg.cursor = null; }
    try {
      await (which === "entries" ? loadEntries() : loadRejections());
    } catch (err) {
      handle(err);
    }
  }

  async function renderCsvLink() {
    const a = $("csv");
    a.hidden = true;
    if (!detailId) return;
    const c = await capabilities();
    if (!c.csv) return;
    const q = filterQuery();
    q.set("format", "csv");
    a.dataset.href = `/v1/datasets/${encodeURIComponent(detailId)}/ledger?${q}`;
    a.hidden = false;
  }

  async function downloadCsv(ev) {
    ev.preventDefault();
    // the key goes in a header, so the browser cannot follow a plain link: fetch, then save
    const key = sessionStorage.getItem(KEY);
    const r = await fetch($("csv").dataset.href, { headers: { Authorization: `Bearer ${key}`, Accept: "text/csv" } });
    if (!r.ok) {
      $("csv").hidden = true;
      status(`The CSV export is not available (HTTP ${r.status}).`);
      return;
    }
    const url = URL.createObjectURL(await r.blob());
    const a = html("a", { href: url, download: `ledger-${detailId}.csv` });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }

  async function renderHolds(d) {
    const box = $("holds");
    box.replaceChildren();
    const c = await capabilities();
    if (!c.reservations) {
      box.appendChild(html("p", { class: "muted", "data-testid": "holds-unavailable" }, d.reserved && d.reserved.count
        ? `${d.reserved.count} active hold${d.reserved.count === 1 ? "" : "s"} reserving ${eps(d.reserved.epsilon)}${d.reserved.next_expiry ? `, the next expiring ${when(d.reserved.next_expiry)}` : ""}.`
        : "This server does not list holds (reservations)."));
      return;
    }
    const page = await api(`/v1/datasets/${encodeURIComponent(d.id)}/reservations?status=active`);
    const holds = page.reservations || [];
    const table = html("table", { "aria-labelledby": "holds-title", "data-testid": "holds-table" });
    // focusable, with a name: it scrolls sideways on a narrow screen
    box.appendChild(html("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-labelledby": "holds-title" }));
    box.firstChild.appendChild(table);
    fillTable(table, ["held since", "expires", "mechanism", "label", "held by"],
      holds.map((h) => [when(h.created_at), when(h.expires_at), describe(h.mechanism), userText(h.label), who(h)]),
      "No active holds.");
  }

  // ---- budget structures (issue 15): teams (allocations) and blocks ------------------------

  // one row per allocation: a small gauge in the allocation's state, its numbers, its entries
  async function renderTeams(d) {
    const box = $("teams");
    const c = await capabilities();
    if (!c.allocations) { box.hidden = true; return; }
    const page = await api(`/v1/datasets/${encodeURIComponent(d.id)}/allocations`);
    const allocs = page.allocations || [];
    for (const a of allocs) unbounded(a.spent);
    box.hidden = !allocs.length;
    if (!allocs.length) return;
    const perBlock = !!d.partition;
    const total = allocs.reduce((acc, a) => acc + a.budget.epsilon, 0);
    $("teams-note").textContent = `The dataset's budget is split between ${allocs.length} team${allocs.length === 1 ? "" : "s"}. ` +
      "Team budgets may add up to more than the dataset's (here " + `${epsLeft(total)} against ${epsLeft(d.budget.epsilon)}` + "): " +
      "a team's charge must fit both its own budget and the dataset's, so the dataset's budget is the guarantee." +
      (perBlock ? " On this partitioned dataset each team's budget applies to each block; its spend is that of its most-spent block." : "");
    const table = $("teams-table");
    table.replaceChildren();
    const headers = ["team", "used", "status", "budget", "spent", "remaining", "entries"];
    if (perBlock) headers.push("most-spent block");
    const thead = html("thead");
    const hr = html("tr");
    headers.forEach((h) => hr.appendChild(html("th", { scope: "col" }, h)));
    thead.appendChild(hr);
    table.appendChild(thead);
    const body = html("tbody");
    for (const a of allocs) {
      const view = { ...a, warning_threshold: d.warning_threshold };
      const st = stateOf(view);
      const tr = html("tr", { "data-testid": "team-row", "data-allocation": a.name, "data-state": st, class: `team ${st}` });
      tr.appendChild(html("th", { scope: "row" }, a.name));
      const g = html("td", { class: "team-gauge" });
      const svg = gauge(a.spent.epsilon, a.budget.epsilon,
        `${a.name}: spent ${used(view)} of its epsilon budget, ε = ${upBelow(a.spent.epsilon, a.budget.epsilon)} of ${down(a.budget.epsilon)}; ${stateText(view)}`, st);
      svg.classList.add("small");
      g.appendChild(svg);
      tr.appendChild(g);
      const stc = html("td", { "data-testid": "team-state" });
      stc.appendChild(stateBadge(view));
      tr.appendChild(stc);
      const num = (testid, x, text) => tr.appendChild(html("td", { "data-testid": testid, "data-value": x }, text));
      num("team-budget", a.budget.epsilon, `${epsLeft(a.budget.epsilon)}, δ = ${dlt(a.budget.delta)}`);
      num("team-spent", a.spent.epsilon, `${eps(a.spent.epsilon)} (${used(view)})`);
      let rem = epsLeft(a.remaining.epsilon);
      if (a.reserved && a.reserved.count) rem += `, after ${a.reserved.count} hold${a.reserved.count === 1 ? "" : "s"} reserving ${eps(a.reserved.epsilon)}`;
      num("team-remaining", a.remaining.epsilon, rem);
      num("team-entries", a.entries, String(a.entries));
      if (perBlock) tr.appendChild(html("td", { "data-testid": "team-block" }, a.most_spent_block || "none charged"));
      body.appendChild(tr);
    }
    table.appendChild(body);
  }

  // UTC block keys: 2026-11-23, 2026-W48 (ISO week), 2026-11
  const DAY = 864e5;
  const utcDay = (t) => Math.floor(t / DAY) * DAY;
  const dayKey = (t) => new Date(t).toISOString().slice(0, 10);
  const mondayOf = (t) => t - ((new Date(t).getUTCDay() + 6) % 7) * DAY;
  function weekKey(t) {
    const thursday = mondayOf(t) + 3 * DAY;
    const y = new Date(thursday).getUTCFullYear();
    const week = 1 + Math.floor((thursday - Date.UTC(y, 0, 1)) / (7 * DAY));
    return `${y}-W${String(week).padStart(2, "0")}`;
  }
  const monthKey = (y, m) => `${y}-${String(m + 1).padStart(2, "0")}`;
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  const UNIT_WORDS = { day: "one day", week: "one week", month: "one month" };

  // the blocks the heatmap shows, oldest first, each with its grid place: the last 12 weeks of
  // days (columns weeks, rows weekdays), the last 26 weeks, or the last 12 months; at most max_span
  function blockLayout(unit, maxSpan, now) {
    const today = utcDay(now);
    let cells = [];
    const colLabels = [], rowLabels = [];
    if (unit === "day") {
      const start = mondayOf(today) - 11 * 7 * DAY;
      for (let t = start, i = 0; t <= today; t += DAY, i++) cells.push({ key: dayKey(t), col: Math.floor(i / 7), row: i % 7, t });
      rowLabels.push([0, "Mon"], [2, "Wed"], [4, "Fri"], [6, "Sun"]);
    } else if (unit === "week") {
      const mon = mondayOf(today);
      for (let i = 25; i >= 0; i--) cells.push({ key: weekKey(mon - i * 7 * DAY), t: mon - i * 7 * DAY });
      cells.forEach((c, i) => { c.col = i; c.row = 0; });
    } else {
      const d = new Date(today);
      for (let i = 11; i >= 0; i--) {
        const m = new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() - i, 1));
        cells.push({ key: monthKey(m.getUTCFullYear(), m.getUTCMonth()), t: m.getTime() });
      }
      cells.forEach((c, i) => { c.col = i; c.row = 0; });
    }
    if (maxSpan && cells.length > maxSpan) cells = cells.slice(cells.length - maxSpan);
    // column labels: the month where it changes (days), every fourth week, every month
    let last = null;
    cells.forEach((c, i) => {
      const dt = new Date(c.t);
      if (unit === "day") {
        if (c.row === 0 || i === 0) {
          const m = dt.getUTCMonth();
          if (m !== last) { colLabels.push([c.col, MONTHS[m]]); last = m; }
        }
      } else if (unit === "week") {
        if (i % 4 === 0) colLabels.push([c.col, c.key.slice(5)]);
      } else {
        colLabels.push([c.col, MONTHS[dt.getUTCMonth()]]);
      }
    });
    const rows = unit === "day" ? 7 : 1;
    const cols = cells.length ? Math.max(...cells.map((c) => c.col)) + 1 : 0;
    return { cells, rows, cols, rowLabels, colLabels };
  }

  async function renderBlocks(d, budget) {
    const box = $("blocks");
    const c = await capabilities();
    if (!d.partition || !c.blocks) { box.hidden = true; return; }
    const unit = d.partition.unit;
    const layout = blockLayout(unit, d.partition.max_span, Date.now());
    const base = `/v1/datasets/${encodeURIComponent(d.id)}`;
    const first = layout.cells[0].key, last = layout.cells[layout.cells.length - 1].key;
    const list = await api(`${base}/blocks?from=${encodeURIComponent(first)}&to=${encodeURIComponent(last)}`);
    const byKey = new Map((list.blocks || []).map((b) => [b.block, (unbounded(b.spent), b)]));
    const per = d.budget.epsilon;
    const cells = layout.cells.map((cell) => {
      const b = byKey.get(cell.key);
      const spent = b ? b.spent.epsilon : 0;
      const exhausted = b ? !!b.exhausted : false;
      const label = `${cell.key}: ${exhausted ? up(spent) : upBelow(spent, per)} of ${down(per)} used${exhausted ? ", exhausted" : ""}`;
      return { ...cell, spent, exhausted, budget: per, label, entries: b ? b.entries : 0 };
    });
    const span = unit === "day" ? "the last 12 weeks" : unit === "week" ? "the last 26 weeks" : "the last 12 months";
    $("blocks-note").textContent = `This dataset is split into blocks of ${UNIT_WORDS[unit] || unit} of data (UTC), and each block has its own budget of ${epsLeft(per)} at δ = ${dlt(d.budget.delta)}: ` +
      "a query is charged only to the blocks it reads, so using up one block leaves the others untouched; " +
      "a person whose records are in many blocks is protected only by the lifetime budget.";
    const charged = cells.filter((x) => x.spent > 0 || x.entries > 0);
    heatmap($("fig-blocks"), {
      testid: "chart-blocks",
      title: `Spend per ${unit}, ${span}`,
      description: `Each square is one block; the darker it is, the more of that block's budget (${epsLeft(per)}) is used; a crossed square is exhausted.`,
      cells,
      cols: layout.cols,
      rows: layout.rows,
      rowLabels: layout.rowLabels,
      colLabels: layout.colLabels,
      table: { headers: ["block", "spent ε", "remaining ε", "entries", "exhausted"], round: [null, "up", "down"], rows: charged.map((x) => {
        const b = byKey.get(x.key);
        return [x.key, x.spent, b ? b.remaining.epsilon : per, x.entries, x.exhausted ? "yes" : "no"];
      }) },
    });
    const ex = cells.filter((x) => x.exhausted).map((x) => x.key);
    $("blocks-exhausted").textContent = ex.length
      ? `Exhausted block${ex.length === 1 ? "" : "s"} shown: ${ex.join(", ")}. No further charge fits ${ex.length === 1 ? "it" : "them"}.`
      : "No block shown is exhausted.";
    $("blocks-exhausted").className = ex.length ? "badge exhausted" : "muted";
    const dl = $("blocks-summary");
    dl.replaceChildren();
    const sb = budget && budget.blocks;
    if (sb) {
      const top = sb.most_spent;
      summaryRow(dl, "Most-spent block", top
        ? `${top.block}: ε = ${top.exhausted ? up(top.spent.epsilon) : upBelow(top.spent.epsilon, per)} of ${down(per)} used${top.exhausted ? " (exhausted)" : ""}`
        : "none charged yet", "blocks-most-spent").setAttribute("data-value", top ? top.block : "");
      summaryRow(dl, "Exhausted blocks", String(sb.exhausted_blocks), "blocks-exhausted-count");
      summaryRow(dl, "Blocks charged", String(sb.charged_blocks), "blocks-charged");
    }
    const lt = budget && budget.lifetime;
    if (lt) {
      const text = lt.budget
        ? `${eps(lt.spent.epsilon)} of a lifetime budget of ${down(lt.budget.epsilon)} at δ = ${dlt(lt.budget.delta)}` +
          (lt.remaining ? `, ${epsLeft(lt.remaining.epsilon)} left` : "") + (lt.exhausted ? " (exhausted)" : "")
        : `${eps(lt.spent.epsilon)} over all charges together (no lifetime budget is set)`;
      summaryRow(dl, "Lifetime spend", text, "blocks-lifetime").setAttribute("data-value", lt.spent.epsilon);
    }
    dl.hidden = !dl.childElementCount;
    box.hidden = false;
  }

  // a dataset that cannot be read (unknown, or not visible to this key): nothing of the
  // dataset shown before stays on screen, and the error is said where the dataset would be
  function showDetailError(message) {
    detailId = null;
    lastSeries = null;
    for (const k of Object.keys(pagers)) pagers[k] = { stack: [], cursor: null, next: null };
    $("detail-title").textContent = "Dataset not available";
    $("detail-error").textContent = message;
    $("detail-body").hidden = true;
    for (const id of ["detail-description", "summary", "calibration", "holds", "teams-table", "entries", "rejections", "fig-series", "fig-breakdown", "fig-rdp", "fig-tradeoff", "fig-blocks", "blocks-summary"]) $(id).replaceChildren();
    for (const id of ["entries-page", "rejections-page", "series-marks", "teams-note", "blocks-note", "blocks-exhausted"]) $(id).textContent = "";
    show("detail");
    status(message);
  }

  async function renderDetail(id) {
    const base = `/v1/datasets/${encodeURIComponent(id)}`;
    // read first: the page's dataset (and the pagers' and filters' target) changes only once
    // the new one could be read
    const [d, s, c, b] = await Promise.all([api(base), api(`${base}/series?points=400`), api(`${base}/curves`),
      api(`${base}/budget`).catch(() => null), readKinds()]);
    unbounded(d.spent);
    if (b && b.blocks && b.blocks.most_spent) unbounded(b.blocks.most_spent.spent);
    if (b && b.lifetime) unbounded(b.lifetime.spent);
    if (b && b.blocks) d.topBlock = b.blocks.most_spent;
    if (detailId !== id) {
      detailId = id;
      for (const k of Object.keys(pagers)) pagers[k] = { stack: [], cursor: null, next: null };
    }
    $("detail-error").textContent = "";
    $("detail-body").hidden = false;
    renderSummary(d);
    renderSeries(d, s);
    renderBreakdown(d);
    renderCurves(d, c);
    const kinds = d.allowed_mechanisms && d.allowed_mechanisms.length ? d.allowed_mechanisms : allKinds();
    const sel = $("f-kind");
    const chosen = sel.value;
    sel.replaceChildren(html("option", { value: "" }, "any kind"));
    for (const k of kinds) sel.appendChild(html("option", { value: k, ...kindTip(k) }, kindName(k)));
    sel.value = kinds.includes(chosen) ? chosen : "";
    await Promise.all([loadEntries(), loadRejections(), renderHolds(d), renderCsvLink(), renderTeams(d), renderBlocks(d, b)]);
    show("detail");
    await renderCalibration(d);
    status(perBlockOnly(d)
      ? `${d.name}: ${eps(d.spent.epsilon)} over all blocks composed (no lifetime budget); ${stateText(d)}`
      : `${d.name}: ${eps(d.spent.epsilon)} of ${down(capOf(d).epsilon)} spent; ${stateText(d)}`);
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
      if (m && err instanceof ApiError && (err.status === 404 || err.status === 403)) {
        showDetailError("No such dataset, or it is not visible to this key.");
        document.body.setAttribute("data-ready", "true");
      } else {
        handle(err);
      }
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
    $("show-archived").addEventListener("change", () => route());
    for (const view of ["time", "entry"]) {
      $(`view-${view}`).addEventListener("change", () => {
        seriesView = view;
        if (lastSeries) renderSeries(...lastSeries);
      });
    }
    for (const which of ["entries", "rejections"]) {
      $(`${which}-older`).addEventListener("click", () => page(which, "older"));
      $(`${which}-newer`).addEventListener("click", () => page(which, "newer"));
    }
    $("filters").addEventListener("submit", (ev) => {
      ev.preventDefault();
      page("entries", "reset");
      page("rejections", "reset");
      renderCsvLink();
    });
    $("csv").addEventListener("click", downloadCsv);
    window.addEventListener("hashchange", () => {
      document.body.removeAttribute("data-ready");
      route().then(() => $("main").focus());
    });
    if (sessionStorage.getItem(KEY)) timer = setInterval(route, REFRESH_MS);
    route();
  }

  start();
})();
