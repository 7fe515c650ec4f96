// The list views: Runs (filters and pages in the URL), Schedules, Queues, Workers, Locks.
// A view is { title, mount(root, route) -> { update(route, alive) } }: mount builds what
// stays (forms), update fetches and redraws; `alive()` is false once the route has moved on.
"use strict";
import { api, act, badge, bulkAct, el, empty, enc, every, fill, go, href, link, paramsOf, runLink, short, took, when } from "./core.js";
import { backlogBars } from "./charts.js";

const STATUSES = ["pending", "running", "succeeded", "failed", "skipped", "cancelled"];
const RUN_FILTERS = ["status", "task", "schedule", "queue", "limit", "before", "damaged"];  // damaged=1: a link only (no form field)

// `stack`: on a narrow screen each row becomes a card whose cells wrap, labelled by their
// column (style.css), so that status and error stay on screen at 390 px.
function table(head, rows, none, stack) {
  if (stack) for (const row of rows) [...row.children].forEach((td, i) => { if (head[i]) td.setAttribute("data-label", head[i]); });
  return el("div", { class: "scroll" }, el("table", { class: stack ? "stack" : null }, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: head.length, class: "empty" }, none)))));
}

function summary(run) {
  if (run.error) return short((run.error.type || "error") + ": " + (run.error.message || ""), 120);
  if (run.result_preview !== null && run.result_preview !== undefined) return short(run.result_preview, 120);
  return "";
}
function corrupt(record) { return record.corrupt && record.corrupt.length ? [badge("corrupt"), " " + record.corrupt.join(", ") + " "] : null; }

export function runRows(items) {
  return items.map((r) => el("tr", { "data-run": r.id },
    el("td", { class: "num" }, runLink(r.id)), el("td", {}, link(r.task, "runs", null, { task: r.task })),
    el("td", {}, r.schedule ? link(r.schedule, "schedule", r.schedule) : ""),
    el("td", {}, badge(r.status), r.held ? [" ", badge("held")] : null,
      r.status === "pending" && r.waiting_on > 0 ? [" ", el("span", { class: "badge waiting", title: "waits for parent runs to succeed (after=)" }, "waiting on " + r.waiting_on)] : null,
      r.waiting ? [" ", el("span", { class: "badge parked", "data-wait": r.waiting.kind, title: "until " + r.waiting.until },
        r.waiting.kind === "signal" ? "waits for " + r.waiting.signal : "sleeping")] : null,
      r.backfill ? [" ", badge("backfilled")] : null),
    el("td", { class: "num" }, r.attempt + "/" + r.max_attempts), el("td", {}, when(r.scheduled_for)),
    el("td", {}, when(r.started_at)), el("td", { class: "num" }, took(r)),
    el("td", {}, r.worker ? link(r.worker, "worker", r.worker) : ""),
    el("td", { class: "wrap" }, corrupt(r), summary(r))));
}
export const RUN_HEAD = ["id", "task", "schedule", "status", "try", "scheduled for", "started", "took", "worker", "result / error"];

const runs = {
  title: "Runs",
  mount(root, route) {
    const form = el("form", { class: "filters", id: "filters" },
      el("select", { name: "status", "aria-label": "status" }, el("option", { value: "" }, "any status"), STATUSES.map((s) => el("option", {}, s))),
      el("input", { name: "task", placeholder: "task", "aria-label": "task" }),
      el("input", { name: "schedule", placeholder: "schedule", "aria-label": "schedule" }),
      el("input", { name: "queue", placeholder: "queue", "aria-label": "queue" }),
      el("select", { name: "limit", "aria-label": "limit" }, ["25", "50", "100", "500"].map((n) => el("option", { value: n }, n))),
      el("a", { id: "clear", href: href("runs") }, "clear"),
      el("span", { class: "spacer" }),
      el("span", { class: "bulk actions", id: "bulk" },
        el("button", { type: "button", id: "bulk-retry", onclick: () => bulkAct("retry", filterOf(), refresh) }, "retry all matching"),
        el("button", { type: "button", id: "bulk-cancel", class: "danger", onclick: () => bulkAct("cancel", filterOf(), refresh) }, "cancel all matching")),
      el("a", { id: "newest", class: "button", hidden: true }, "← newest"),
      el("a", { id: "older", class: "button", hidden: true }, "older →"));
    const body = el("div", {});
    fill(root, el("section", {}, el("h2", {}, "Runs", el("span", { id: "runs-note", class: "muted" })), form, body));
    let typing = null, shown = {}, refresh = null;
    const filterOf = () => ({ status: shown.status || null, task: shown.task || null, schedule: shown.schedule || null, queue: shown.queue || null });
    const apply = () => {
      const p = {};
      for (const k of ["status", "task", "schedule", "queue", "limit"]) p[k] = form.elements[k].value.trim();
      if (p.limit === "50") p.limit = "";
      go(href("runs", null, p));  // a new filter starts from the newest page
    };
    // A select applies at once; typing applies 350 ms after the last key. Until an edit is
    // applied, a refresh (every 5 s, or on resize) leaves the form as the user left it.
    const now = () => { clearTimeout(typing); typing = null; apply(); };
    form.addEventListener("input", (e) => {
      if (e.target.tagName === "SELECT") return now();
      clearTimeout(typing);
      typing = setTimeout(now, 350);
    });
    form.addEventListener("submit", (e) => { e.preventDefault(); now(); });
    return {
      async update(route, alive) {
        const p = paramsOf(route, RUN_FILTERS);
        shown = p;  // bulk actions take the filter of the list on screen
        refresh = () => this.update(route, alive);
        if (typing === null) {
          for (const k of ["status", "task", "schedule", "queue"]) if (document.activeElement !== form.elements[k]) form.elements[k].value = p[k];
          form.elements.limit.value = p.limit || "50";
        }
        const q = new URLSearchParams();
        for (const k of RUN_FILTERS) if (p[k]) q.set(k, p[k]);
        const items = await api("api/runs?" + q.toString());
        if (!alive()) return;
        fill(body, table(RUN_HEAD, runRows(items), "No runs match.", true));
        const limit = Number(p.limit || "50"), older = $q(form, "#older"), newest = $q(form, "#newest");
        older.hidden = items.length < limit;
        if (items.length) older.setAttribute("href", href("runs", null, { ...p, before: items[items.length - 1].id }));
        newest.hidden = !p.before;
        newest.setAttribute("href", href("runs", null, { ...p, before: "" }));
        root.querySelector("#runs-note").textContent = (p.before ? "older than run " + p.before + " · " : "") + items.length + " shown";
      },
    };
  },
};
function $q(node, sel) { return node.querySelector(sel); }

export function scheduleActions(s, after) {
  const path = "api/schedules/" + enc(s.name);
  return el("span", { class: "actions" },
    s.paused
      ? el("button", { onclick: () => act(path + "/resume", () => "resumed " + s.name, after) }, "resume")
      : el("button", { onclick: () => act(path + "/pause", () => "paused " + s.name, after) }, "pause"),
    el("button", { onclick: () => act(path + "/trigger", (r) => "run " + r.id + " " + r.status, after) }, "trigger"));
}
// Marks a schedule carries when the API has them: a plan error, damaged stored fields, and a
// fire rate above the high-frequency threshold.
export function planError(s) {
  return [
    s.plan_error ? [" ", el("span", { class: "badge failed", title: s.plan_error }, "cannot plan"), " ", el("span", { class: "bad" }, short(s.plan_error, 80))] : null,
    corrupt(s) ? [" ", corrupt(s)] : null,
    s.high_frequency ? [" ", el("span", { class: "badge", title: "fires more often than the high-frequency threshold (ROTA_HIGH_FREQUENCY)" }, "high frequency")] : null,
  ];
}
export function whenText(s) { return [s.cron ? s.cron : "every " + every(s.every), el("span", { class: "muted" }, " " + s.tz)]; }

const schedules = {
  title: "Schedules",
  mount(root) {
    const body = el("div", {});
    fill(root, el("section", {}, el("h2", {}, "Schedules"), body));
    const update = async (route, alive) => {
      const items = await api("api/schedules");
      if (!alive()) return;
      fill(body, table(["name", "task", "when", "state", "next run", "last run", "runs · ok · fail · skip", ""], items.map((s) => el("tr", { "data-schedule": s.name },
        el("td", {}, link(s.name, "schedule", s.name)), el("td", {}, s.task), el("td", {}, whenText(s)),
        el("td", {}, badge(s.paused ? "paused" : "active"), planError(s)),
        el("td", {}, s.paused ? "–" : when(s.next_run_at)),
        el("td", {}, when(s.last_run_at), " ", s.last_status ? badge(s.last_status) : ""),
        el("td", { class: "num" }, [s.run_count, s.success_count, s.failure_count, s.skip_count].join(" · ")),
        el("td", {}, scheduleActions(s, () => update(route, alive))))), "No schedules."));
    };
    return { update };
  },
};

const queues = {
  title: "Queues",
  mount(root) {
    const chart = el("div", { id: "backlog" }), body = el("div", {});
    fill(root, el("section", {}, el("h2", {}, "Backlog by queue"), chart), el("section", {}, el("h2", {}, "Queues"), body));
    return {
      async update(route, alive) {
        const data = await api("api/charts/backlog");
        if (!alive()) return;
        fill(chart, backlogBars(chart, data));
        fill(body, table(["queue", "due now", "due later", "running", ""], data.queues.map((q) => el("tr", { "data-queue": q.queue },
          el("td", {}, q.queue), el("td", { class: "num" }, q.due), el("td", { class: "num" }, q.later), el("td", { class: "num" }, q.running),
          el("td", {}, link("pending runs", "runs", null, { queue: q.queue, status: "pending" }), " · ",
            link("throughput", "overview", null, { queue: q.queue })))), "No queue has pending or running runs."));
      },
    };
  },
};

export function stuck(value) {
  if (value === undefined || value === null) return el("span", { class: "muted" }, "–");
  return Number(value) > 0 ? [badge("stuck"), " " + value] : String(value);
}

const workers = {
  title: "Workers",
  mount(root) {
    const body = el("div", {});
    fill(root, el("section", {}, el("h2", {}, "Workers"), body));
    return {
      async update(route, alive) {
        const items = (await api("api/workers")).map((w, i) => [w, i]);
        items.sort(([a, i], [b, j]) => (b.alive ? 1 : 0) - (a.alive ? 1 : 0) || i - j);  // live first, else as listed
        if (!alive()) return;
        fill(body, table(["worker", "state", "alive", "concurrency", "queues", "started", "last seen", "stuck"], items.map(([w]) => el("tr", { "data-worker": w.id },
          el("td", {}, link(w.id, "worker", w.id)), el("td", {}, w.state), el("td", {}, w.alive ? "yes" : "no"), el("td", { class: "num" }, w.concurrency),
          el("td", {}, (w.queues || ["all"]).join(", ")), el("td", {}, when(w.started_at)), el("td", {}, when(w.last_seen)),
          el("td", {}, stuck(w.stuck)))), "No workers seen recently."));
      },
    };
  },
};

const locks = {
  title: "Locks",
  mount(root) {
    const body = el("div", {});
    fill(root, el("section", {}, el("h2", {}, "Named locks"), body));
    return {
      async update(route, alive) {
        const items = await api("api/locks");
        if (!alive()) return;
        fill(body, table(["name", "state", "owner", "token", "acquired", "expires"], items.map((l) => el("tr", { "data-lock": l.name },
          el("td", {}, l.name), el("td", {}, badge(l.held ? "held" : "free")), el("td", {}, l.owner || "–"),
          el("td", { class: "num" }, l.token), el("td", {}, when(l.acquired_at)), el("td", {}, l.held ? when(l.expires_at) : "–"))), "No named locks."));
      },
    };
  },
};

export const LISTS = { runs, schedules, queues, workers, locks };
export { table, empty };
