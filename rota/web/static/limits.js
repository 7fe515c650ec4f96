// The flow-control view: each concurrency limit and rate limit the workers stored, with its
// running and waiting runs (GET /api/limits, the records of `rota limits --json`). A max is per
// key (`Limit(1, by=...)`: one per key); running, waiting and starts count every key.
"use strict";
import { api, el, fill } from "./core.js";
import { table } from "./views.js";

function seconds(value) {
  const s = Number(value);
  if (s % 3600 === 0) return s / 3600 + " h";
  if (s % 60 === 0) return s / 60 + " min";
  return s + " s";
}

function badge(title) {
  return [" ", el("span", { class: "badge full", title }, "full")];
}

// max is per key: a limit (a rate) is full when one of its keys has every slot (every start of
// the window) taken, keys_full, not when its count over all keys reaches max (2 keys with a
// run each under max 1 are not).
function full(item, what) {
  if (!(item.keys_full > 0 && item.waiting > 0)) return null;
  if (item.keys <= 1 && item.keys_full <= 1) return badge(`${what} is taken: runs wait pending, costing no attempt`);
  const of = item.keys_full <= item.keys ? ` of ${item.keys}` : ""; // a rate's keys: those with a waiting run
  return badge(`${item.keys_full}${of} keys have ${what} taken: their runs wait pending, costing no attempt`);
}

function damaged(item) {
  const fields = item.corrupt || [];
  return fields.length ? [" ", el("span", { class: "badge corrupt", title: "its stored row is damaged: its runs wait until it is repaired" }, "damaged: " + fields.join(", "))] : null;
}

function limitRows(items) {
  return items.map((l) => el("tr", { "data-limit": l.name },
    el("td", {}, l.name, full(l, "every slot"), damaged(l)), el("td", { class: "num", "data-col": "max" }, l.max),
    el("td", { class: "num", "data-col": "running" }, l.running), el("td", { class: "num", "data-col": "waiting" }, l.waiting),
    el("td", { class: "num", "data-col": "keys" }, l.keys)));
}

function rateRows(items) {
  return items.map((r) => el("tr", { "data-rate": r.name },
    el("td", {}, r.name, full(r, "every start of the window"), damaged(r)),
    el("td", { class: "num", "data-col": "max" }, r.max + " per " + seconds(r.per_seconds)),
    el("td", { class: "num", "data-col": "started" }, r.started_in_window), el("td", { class: "num", "data-col": "waiting" }, r.waiting),
    el("td", { class: "num", "data-col": "keys" }, r.keys)));
}

function howTo() {
  const code = (text) => el("code", {}, text);
  return el("div", { class: "empty", id: "limits-empty" },
    el("p", {}, "No limits or rates are stored yet. Declare them on a task; a worker stores them when it starts (the worker that started last wins):"),
    el("pre", {}, "@app.task(limit=3)                                # at most 3 running at once, on every host\n" +
      "@app.task(limit=rota.Limit(1, by=\"customer_id\"))  # at most 1 per customer\n" +
      "@app.task(rate=rota.Rate(100, per=60, name=\"github\"))  # at most 100 starts a minute, shared"),
    el("p", {}, "Then ", code("rota limits"), " and this page show each one with its running and waiting runs."));
}

// Names that pending runs use and no worker declared (a typo in a client's name=, or no worker
// that declares it has started): they wait, never unlimited, until one does.
function undeclaredRows(data) {
  const rows = [["limit", data.unknown_limits || []], ["rate", data.unknown_rates || []]].flatMap(([kind, items]) =>
    items.map((u) => el("tr", { "data-undeclared": kind + ":" + u.name },
      el("td", {}, kind), el("td", {}, u.name, " ", el("span", { class: "badge failed", title: "no worker declared it: its runs do not start" }, "not declared")),
      el("td", { class: "num", "data-col": "waiting" }, u.waiting),
      el("td", {}, el("code", {}, kind === "limit" ? "@app.task(limit=rota.Limit(N, name=" + JSON.stringify(u.name) + "))" : "@app.task(rate=rota.Rate(N, per=..., name=" + JSON.stringify(u.name) + "))")))));
  if (!rows.length) return null;
  return el("section", { id: "undeclared" }, el("h2", {}, "Not declared",
    el("span", { class: "muted" }, "runs name these and no worker declared them: they wait until a worker that declares them runs (or cancel them)")),
    table(["kind", "name", "waiting", "declare it on a task a worker runs"], rows, ""));
}

const limits = {
  title: "Limits",
  mount(root) {
    return {
      async update(route, alive) {
        const data = await api("api/limits");
        if (!alive()) return;
        if (!data.limits.length && !data.rates.length) return fill(root, undeclaredRows(data), el("section", {}, el("h2", {}, "Limits and rates"), howTo()));
        fill(root, undeclaredRows(data),
          el("section", { id: "limits" }, el("h2", {}, "Concurrency limits",
            el("span", { class: "muted" }, "a run counts from its claim to its end; past the limit it waits pending, costing no attempt")),
          table(["limit", "max per key", "running (all keys)", "waiting", "keys"], limitRows(data.limits), "No concurrency limits.")),
          el("section", { id: "rates" }, el("h2", {}, "Rate limits",
            el("span", { class: "muted" }, "starts in a sliding window, across every worker, on the database's clock")),
          table(["rate", "max per key per window", "starts in the window (all keys)", "waiting", "keys"], rateRows(data.rates), "No rate limits.")),
          data.unresolved ? el("p", { id: "unresolved", class: "muted" }, `${data.unresolved} run(s) wait for a worker that declares their task to compute their limit key.`) : null);
      },
    };
  },
};

export const FLOW = { limits };
