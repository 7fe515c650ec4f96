// Detail pages: a run (attempts on a timeline, the fault that ended it), a schedule
// (definition, counters, next ticks with DST notes, recent ticks, history) and a worker.
// A missing id draws a "no such ..." page, never what the previous page showed.
"use strict";
import { api, act, ApiError, badge, el, enc, every, fill, FINAL, go, href, json, link, missing, runLink, span, when } from "./core.js";
import { attemptTimeline } from "./timeline.js";
import { tickStrip } from "./charts.js";
import { planError, RUN_HEAD, runRows, scheduleActions, stuck, table } from "./views.js";

// How a run or attempt ended, in words, from its error's type.
const FAULTS = {
  Timeout: "timed out: the handler ran past the run's timeout",
  WorkerLost: "worker lost: its lease expired without a heartbeat",
  Cancelled: "cancelled on request",
  HandedBack: "handed back by a worker that shut down",
  Overlap: "skipped: the previous run was still going (overlap policy)",
  Misfire: "skipped: the tick was missed (misfire policy)",
  Replaced: "replaced by a newer tick (overlap=replace)",
  Withdrawn: "withdrawn: its schedule changed before the tick came",
  Removed: "its schedule was removed",
};
export function fault(error) {
  if (!error) return null;
  return FAULTS[error.type] || (error.type ? "failed: the handler raised " + error.type : "failed");
}

function errorBlock(error) {
  if (!error) return null;
  return el("div", { class: "error" }, el("strong", {}, (error.type || "error") + ": "), error.message || "",
    error.traceback ? el("pre", {}, error.traceback) : null);
}

function dl(pairs) {
  return el("dl", {}, pairs.filter(([, v]) => v !== null && v !== undefined && v !== "").map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

// after=: the runs this one waits for (parents) or that wait for it (dependents), as links.
function runLinks(ids, kind) {
  if (!ids || !ids.length) return null;
  return el("span", { "data-links": kind }, ids.flatMap((id, i) => (i ? [", ", runLink(id)] : [runLink(id)])));
}

// Durable steps (ctx.step, ctx.sleep, ctx.wait_for): each saved step, in the order first made.
function stepsSection(run) {
  if (!run.steps || !run.steps.length) return null;
  const rows = run.steps.map((s) => el("tr", { class: "step" }, el("td", { class: "num" }, s.seq + 1), el("td", {}, s.name),
    el("td", { class: "num" }, s.attempt), el("td", {}, s.started_at || ""), el("td", {}, s.finished_at || ""),
    el("td", {}, badge(s.outcome)), el("td", { class: "wrap" }, s.error ? [fault(s.error), " — ", s.error.message || ""] : "")));
  return el("section", { id: "steps" }, el("h2", {}, "Steps"), table(["#", "step", "try", "started", "ended", "outcome", "fault"], rows, "No steps.", true));
}

// What a pending run waits for (Run.waiting): a park's sleep or signal, its rate's window, or a
// limit or rate that no worker declared (it starts once a worker that declares it runs).
function parked(w) {
  if (!w || w.kind === "rate" || w.kind === "undeclared") return null;
  return el("span", { "data-wait": w.kind }, (w.kind === "signal" ? "waiting for signal " + w.signal : "sleeping") + " until " + w.until + (w.since ? " (since " + w.since + ")" : ""));
}
function rateWait(w) {
  if (!w || w.kind !== "rate") return null;
  return el("span", { "data-wait": "rate" }, "rate " + w.rate + (w.key ? " (key " + w.key + ")" : "") + " is full until " + w.until);
}

function undeclaredWait(w) {
  if (!w || w.kind !== "undeclared") return null;
  const pools = ["limit", "rate"].filter((k) => w[k] !== undefined && w[k] !== null);
  const how = pools.map((k) => k === "limit" ? "@app.task(limit=rota.Limit(N, name=" + JSON.stringify(w[k]) + "))" : "@app.task(rate=rota.Rate(N, per=..., name=" + JSON.stringify(w[k]) + "))");
  return el("span", { "data-wait": "undeclared" }, badge("not declared", "failed"), " " + pools.map((k) => k + " " + w[k]).join(" and ") +
    (pools.length === 1 ? " is" : " are") + " not declared by any worker: it starts once a worker that declares it runs (",
    el("code", {}, how.join("; ")), ")");
}

function back(view, text) { return el("p", {}, link("← " + text, view)); }

function attemptRows(run) {
  const rows = (run.attempts || []).map((a, i, all) => {
    const next = all[i + 1];
    const wait = next && a.finished_at && next.started_at ? (Date.parse(next.started_at) - Date.parse(a.finished_at)) / 1000 : -1;
    const gap = wait >= 0 ? span(wait) : "";
    return el("tr", { class: "attempt" }, el("td", { class: "num" }, a.attempt), el("td", {}, badge(a.status, String(a.status).replace(/\s+/g, "-"))),
      el("td", {}, a.worker ? link(a.worker, "worker", a.worker) : "?"), el("td", {}, a.started_at || (a.held ? "held, no start recorded" : "")), el("td", {}, a.finished_at || "running"),
      el("td", { class: "num" }, a.started_at && a.finished_at ? span((Date.parse(a.finished_at) - Date.parse(a.started_at)) / 1000) : ""),
      el("td", { class: "num" }, gap), el("td", { class: "wrap" }, a.error ? [fault(a.error), " — ", a.error.message || ""] : ""));
  });
  return table(["try", "ended as", "worker", "started", "ended", "took", "backoff after", "fault"], rows, "Not started yet.", true);
}

// Runs after others (after=): a run's parents and dependents, each with its status badge
// from its summary (one small request per linked run, the first LINKS_SHOWN of them; a
// finished run's summary is kept, since its status no longer changes).
const LINKS_SHOWN = 50;
const finished = new Map();
async function linkedSummary(id) {
  if (finished.has(id)) return finished.get(id);
  let items;
  try {
    items = await api("api/runs?" + new URLSearchParams({ before: String(BigInt(id) + 1n), limit: "1" }).toString());
  } catch (e) {
    return null;
  }
  const found = items.length && items[0].id === id ? items[0] : null;
  if (found && FINAL.has(found.status)) finished.set(id, found);
  return found;
}
async function linkedRuns(r) {
  const ids = [...(r.parents || []), ...(r.dependents || [])].slice(0, LINKS_SHOWN);
  const found = await Promise.all(ids.map(linkedSummary));
  return Object.fromEntries(ids.map((id, i) => [id, found[i]]));
}
function linkList(ids, known, role) {
  if (!ids || !ids.length) return null;
  const items = ids.filter((id) => id in known).map((id) => {
    const s = known[id];
    return el("li", { "data-link": role, "data-run": id }, runLink(id), s ? [" ", el("span", { class: "muted" }, s.task), " ", badge(s.status)] : el("span", { class: "muted" }, " (no longer stored)"));
  });
  const more = ids.length - items.length;
  return el("ul", { class: "links" }, items, more > 0 ? el("li", { class: "muted" }, "… and " + more + " more") : null);
}
function flowSection(r, known) {
  if (!(r.parents || []).length && !(r.dependents || []).length) return null;
  const waiting = r.status === "pending" && r.waiting_on > 0;
  return el("section", { id: "links" }, el("h2", {}, "Runs after others", el("span", { class: "muted" }, "after=: a run is due once every parent has succeeded")),
    waiting ? el("p", { id: "waiting-on" }, badge("waiting on " + r.waiting_on, "pending"), " waiting on " + r.waiting_on + " parent" + (r.waiting_on === 1 ? "" : "s") + " to succeed") : null,
    (r.parents || []).length ? [el("strong", {}, "parents (" + r.parents.length + ")"), linkList(r.parents, known, "parent")] : null,
    (r.dependents || []).length ? [el("strong", {}, "dependents (" + r.dependents.length + ")"), linkList(r.dependents, known, "dependent")] : null);
}

function renderRun(root, r, refresh, known) {
  const actions = el("span", { class: "actions" },
    FINAL.has(r.status) ? null : el("button", { class: "danger act", onclick: () => { if (confirm("Cancel run " + r.id + "?")) act("api/runs/" + enc(r.id) + "/cancel", (x) => "run " + x.id + " " + x.status, refresh); } }, "cancel"),
    FINAL.has(r.status) ? el("button", { class: "act", onclick: () => act("api/runs/" + enc(r.id) + "/retry", (x) => { go(href("run", x.id)); return "retry enqueued as run " + x.id; }) }, "retry") : null);
  const ended = FINAL.has(r.status) && r.status !== "succeeded" ? fault(r.error) : null;
  fill(root,
    el("section", { id: "detail", "data-run": r.id },
      el("h2", {}, "Run " + r.id, badge(r.status), r.held ? badge("held") : null, r.backfill ? el("span", { class: "badge backfilled", title: "made by app.backfill / rota backfill for a past tick" }, "backfilled") : null, el("span", { class: "muted" }, "attempt " + r.attempt + " of " + r.max_attempts), el("span", { class: "spacer" }), actions),
      r.held ? el("p", { class: "muted" }, "held: a worker has claimed it and its handler has not started yet") : null,
      ended ? el("p", { class: "fault" }, el("strong", {}, "ended: "), ended) : null,
      attemptTimeline(r, Date.now()),
      el("div", { class: "legend" }, ["waiting", "queued", "backoff", "s-succeeded", "s-failed", "s-lost", "s-running"].map((k) => el("span", { class: "key" }, el("i", { class: "swatch seg " + k }), k === "waiting" ? "not due yet" : k.replace("s-", "")))),
      dl([["task", link(r.task, "runs", null, { task: r.task })], ["schedule", r.schedule ? link(r.schedule, "schedule", r.schedule) : null],
        ["queue", link(r.queue, "runs", null, { queue: r.queue })], ["priority", r.priority], ["key", r.key],
        ["scheduled for", r.scheduled_for], ["created", r.created_at], ["due", r.due_at], ["started", r.started_at], ["finished", r.finished_at],
        ["worker", r.worker ? link(r.worker, "worker", r.worker) : null], ["token", r.token], ["lease until", r.lease_until],
        ["cancel requested", r.cancel_requested ? "yes" : null], ["retry of", r.retry_of ? runLink(r.retry_of) : null],
        ["backfill", r.backfill ? "yes: made for a past tick" : null],
        ["waiting on", r.waiting_on ? r.waiting_on + " parent run(s) to succeed" : null],
        ["parked", parked(r.waiting)], ["waiting for rate", rateWait(r.waiting)], ["waiting for", undeclaredWait(r.waiting)],
        ["progress", r.progress ? (r.progress.fraction === null ? "unreadable" : Math.round(r.progress.fraction * 100) + "%") + (r.progress.message ? " — " + r.progress.message : "") : null],
        ["parents", runLinks(r.parents, "parents")], ["dependents", runLinks(r.dependents, "dependents")]]),
      r.corrupt.length ? el("p", { class: "bad" }, badge("corrupt"), " stored value(s) that cannot be read: " + r.corrupt.join(", ")) : null,
      Object.entries(r.raw || {}).map(([k, v]) => [el("strong", {}, k + " as stored"), el("pre", {}, v)]),
      el("strong", {}, "arguments"), el("pre", {}, json({ args: r.args, kwargs: r.kwargs })),
      r.result !== null && r.result !== undefined ? [el("strong", {}, "result"), el("pre", {}, json(r.result))] : null,
      r.error ? [el("strong", {}, "error"), errorBlock(r.error)] : null),
    flowSection(r, known),
    stepsSection(r),
    el("section", {}, el("h2", {}, "Attempts"), attemptRows(r), (r.attempts || []).map((a) => a.error && a.error.traceback ? el("details", {}, el("summary", {}, "traceback of attempt " + a.attempt), el("pre", {}, a.error.traceback)) : null)));
}

const run = {
  title: "Run",
  nav: "runs",
  mount(root, route) {
    let shown = null;  // the record drawn: unchanged, the page is left as it is (an open traceback stays open)
    return {
      async update(r2, alive) {
        let record;
        try {
          record = await api("api/runs/" + enc(route.arg || ""));
        } catch (e) {
          if (!alive()) return;
          shown = null;
          if (e instanceof ApiError && e.status === 404) return missing(root, "run", "There is no run with id " + route.arg + " (it may have been pruned, or the link is wrong).", back("runs", "all runs"));
          throw e;
        }
        const known = await linkedRuns(record);
        const text = JSON.stringify([record, known]);
        if (alive() && text !== shown) {
          shown = text;
          renderRun(root, record, () => this.update(r2, alive), known);
        }
      },
    };
  },
};

// The next ticks, and after them the next few that daylight saving moves (from further ahead).
function nextTicks(ticks, shown) {
  const row = (t) => el("tr", { class: t.note ? "dst-row" : null }, el("td", {}, t.at), el("td", {}, t.local || ""),
    el("td", { class: "wrap" }, t.note ? el("span", { class: "dst" }, t.note) : ""));
  const later = ticks.next.slice(shown).filter((t) => t.note).slice(0, 3);
  const rows = [ticks.next.slice(0, shown).map(row), later.length ? [el("tr", {}, el("td", { colspan: 3, class: "muted" }, "… next daylight-saving changes:")), later.map(row)] : null];
  return table(["UTC", "local", "note"], rows.flat(Infinity).filter(Boolean), ticks.paused ? "Paused." : "No upcoming ticks.");
}

const schedule = {
  title: "Schedule",
  nav: "schedules",
  mount(root, route) {
    const name = route.arg || "";
    return {
      async update(r2, alive) {
        let s, ticks, history;
        try {
          [s, ticks, history] = await Promise.all([api("api/schedules/" + enc(name)), api("api/schedules/" + enc(name) + "/ticks?count=100&recent=60"),
            api("api/runs?" + new URLSearchParams({ schedule: name, limit: "25" }).toString())]);
        } catch (e) {
          if (!alive()) return;
          if (e instanceof ApiError && e.status === 404) return missing(root, "schedule", "There is no schedule named " + JSON.stringify(name) + ".", back("schedules", "all schedules"));
          throw e;
        }
        if (!alive()) return;
        fill(root,
          el("section", { id: "schedule", "data-schedule": s.name }, el("h2", {}, "Schedule " + s.name, badge(s.paused ? "paused" : "active"), el("span", { class: "spacer" }), scheduleActions(s, () => this.update(r2, alive))),
            planError(s),
            dl([["task", link(s.task, "runs", null, { task: s.task })], ["when", s.cron ? "cron " + s.cron : "every " + every(s.every)], ["time zone", s.tz],
              ["overlap", s.overlap], ["misfire", s.misfire], ["source", s.source], ["next run", s.paused ? "paused" : s.next_run_at],
              ["last run", s.last_run_at ? [s.last_run_at, " ", s.last_status ? badge(s.last_status) : ""] : null],
              ["arguments", JSON.stringify({ args: s.args, kwargs: s.kwargs })]]),
            el("div", { class: "counters" }, [["runs", s.run_count], ["succeeded", s.success_count], ["failed", s.failure_count], ["skipped", s.skip_count]]
              .map(([k, v]) => el("div", { class: "counter", "data-counter": k }, el("b", {}, v), el("span", { class: "muted" }, k))))),
          el("section", {}, el("h2", {}, "Last " + ticks.recent.length + " ticks", el("span", { class: "muted" }, "oldest first, skipped ones included")),
            tickStrip(ticks.recent, (id) => go(href("run", id)))),
          el("section", {}, el("h2", {}, "Next ticks", el("span", { class: "muted" }, "with daylight-saving notes, as rota explain prints them")), nextTicks(ticks, 8)),
          el("section", {}, el("h2", {}, "History", link("all runs of this schedule", "runs", null, { schedule: s.name })), table(RUN_HEAD, runRows(history), "No runs yet.", true)));
      },
    };
  },
};

const worker = {
  title: "Worker",
  nav: "workers",
  mount(root, route) {
    const id = route.arg || "";
    return {
      async update(r2, alive) {
        let page;
        try {
          page = await api("api/workers/" + enc(id));
        } catch (e) {
          if (!alive()) return;
          if (e instanceof ApiError && e.status === 404) return missing(root, "worker", "No worker with id " + JSON.stringify(id) + " was seen recently.", back("workers", "all workers"));
          throw e;
        }
        if (!alive()) return;
        const w = page.worker, now = Date.now();
        const rows = (items, running) => items.map((r) => el("tr", { "data-run": r.id }, el("td", { class: "num" }, runLink(r.id)), el("td", {}, r.task),
          el("td", {}, r.schedule ? link(r.schedule, "schedule", r.schedule) : ""), el("td", {}, badge(r.status)), el("td", {}, when(r.started_at)),
          el("td", { class: "num" }, running && r.started_at ? span((now - Date.parse(r.started_at)) / 1000) : r.finished_at && r.started_at ? span((Date.parse(r.finished_at) - Date.parse(r.started_at)) / 1000) : "")));
        fill(root,
          el("section", { id: "worker", "data-worker": w.id }, el("h2", {}, "Worker " + w.id, badge(w.alive ? "alive" : "gone", w.alive ? "active" : "cancelled")),
            dl([["host", w.host], ["pid", w.pid], ["state", w.state], ["concurrency", w.concurrency], ["queues", (w.queues || ["all"]).join(", ")],
              ["started", [w.started_at, " (", when(w.started_at), ")"]], ["last heartbeat", [w.last_seen, " (", when(w.last_seen), ")"]],
              ["stuck slots", stuck(w.stuck)]]),
            Number(w.stuck) > 0 ? el("p", { class: "bad" }, w.stuck + " slot(s) hold a handler thread that outlived its run's timeout or lease; they free when the handler returns.") : null),
          el("section", {}, el("h2", {}, "Running now", el("span", { class: "muted" }, page.running.length + " of " + w.concurrency + " slots")),
            table(["id", "task", "schedule", "status", "started", "running for"], rows(page.running, true), "Nothing running.")),
          el("section", {}, el("h2", {}, "Recent runs", el("span", { class: "muted" }, "among the newest " + page.looked_at + " runs")),
            table(["id", "task", "schedule", "status", "started", "took"], rows(page.recent, false), "None recently.")));
      },
    };
  },
};

export const DETAILS = { run, schedule, worker };
