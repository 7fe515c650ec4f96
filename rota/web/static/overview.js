// The overview: counts, throughput by outcome, start lateness and queue wait, backlog by
// queue, and the recent timeline. The window and the task/queue filter are in the URL.
"use strict";
import { api, el, fill, go, href, link, paramsOf, span } from "./core.js";
import { backlogBars, lines, stackedBars } from "./charts.js";
import { recentTimeline } from "./timeline.js";

const WINDOWS = ["15m", "1h", "24h", "7d"];
const MINUTES = { "15m": 15, "1h": 60, "24h": 1440, "7d": 1440 };
export const OUTCOMES = ["succeeded", "failed", "skipped"];  // runs, each counted once
export const APART = ["retried"];  // attempts retried before their run ended: drawn beside

function pct(stats) { return stats.p50 === null ? "–" : "p50 " + span(stats.p50) + " · p95 " + span(stats.p95); }

const overview = {
  title: "Overview",
  mount(root) {
    const pick = el("div", { class: "windows", role: "group", "aria-label": "window" });
    const tasks = el("datalist", { id: "known-tasks" }), queues = el("datalist", { id: "known-queues" });
    const form = el("form", { class: "filters", id: "chart-filters" },
      el("input", { name: "task", placeholder: "task", "aria-label": "chart task", list: "known-tasks" }),
      el("input", { name: "queue", placeholder: "queue", "aria-label": "chart queue", list: "known-queues" }), tasks, queues);
    const parts = {
      stats: el("div", { id: "stats", class: "cards" }), throughput: el("div", { id: "throughput" }), lateness: el("div", { id: "lateness" }),
      wait: el("div", { id: "wait" }), latenessNote: el("span", { class: "muted" }), backlog: el("div", { id: "backlog" }),
      timeline: el("div", { id: "timeline" }), timelineNote: el("span", { class: "muted" }), title: el("span", {}),
    };
    fill(root, parts.stats,
      el("section", { class: "controls" }, el("h2", {}, "Window"), pick, form),
      el("section", {}, el("h2", {}, parts.title), parts.throughput),
      el("section", { class: "pair" }, el("div", {}, el("h2", {}, "Start lateness", parts.latenessNote), parts.lateness),
        el("div", {}, el("h2", {}, "Queue wait"), parts.wait)),
      el("section", {}, el("h2", {}, "Backlog by queue", link("queues", "queues")), parts.backlog),
      el("section", {}, el("h2", {}, "Recent runs", parts.timelineNote), parts.timeline));
    let typing = null, current = {};
    form.addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => go(href("overview", null, { ...current, task: form.elements.task.value.trim(), queue: form.elements.queue.value.trim() })), 350);
    });
    form.addEventListener("submit", (e) => e.preventDefault());
    return {
      async update(route, alive) {
        const p = paramsOf(route, ["window", "task", "queue"]);
        const w = WINDOWS.includes(p.window) ? p.window : "1h";
        current = p;
        fill(pick, WINDOWS.map((k) => el("a", { href: href("overview", null, { ...p, window: k === "1h" ? "" : k }), class: "button" + (k === w ? " on" : ""), "aria-current": k === w ? "true" : null }, k)));
        for (const k of ["task", "queue"]) if (document.activeElement !== form.elements[k]) form.elements[k].value = p[k];
        const q = new URLSearchParams({ window: w });
        if (p.task) q.set("task", p.task);
        if (p.queue) q.set("queue", p.queue);
        const [stats, tp, late, backlog, tl] = await Promise.all([api("api/stats"), api("api/charts/throughput?" + q), api("api/charts/lateness?" + q),
          api("api/charts/backlog"), api("api/timeline?minutes=" + MINUTES[w])]);
        if (!alive()) return;
        fill(parts.stats, Object.entries(stats.runs).map(([s, n]) => el("a", { class: "card", href: href("runs", null, { status: s }), "data-status": s }, el("b", {}, n), el("span", {}, s))),
          el("a", { class: "card", href: href("workers") }, el("b", {}, stats.workers), el("span", {}, "workers")),
          el("div", { class: "card" }, el("b", {}, stats.capacity), el("span", {}, "capacity")));
        const per = tp.bucket_seconds === 60 ? "per minute" : "per " + span(tp.bucket_seconds);
        parts.title.textContent = "Throughput " + per + " by outcome" + (p.task ? " · task " + p.task : "") + (p.queue ? " · queue " + p.queue : "");
        fill(parts.throughput, stackedBars(parts.throughput, tp, OUTCOMES, "throughput", APART));
        fill(parts.lateness, lines(parts.lateness, late, [{ name: "p50", key: "p50", values: late.buckets.map((b) => b.lateness.p50) },
          { name: "p95", key: "p95", values: late.buckets.map((b) => b.lateness.p95) }], "start lateness"),
        el("div", { class: "legend", id: "lateness-summary" }, el("span", { class: "key" }, el("i", { class: "swatch s-p50" }), "p50"), el("span", { class: "key" }, el("i", { class: "swatch s-p95" }), "p95"),
          el("span", {}, "whole window: ", el("b", {}, pct(late.lateness)), " over " + late.lateness.n + " first attempts")));
        fill(parts.wait, lines(parts.wait, late, [{ name: "p50", key: "p50", values: late.buckets.map((b) => b.wait.p50) },
          { name: "p95", key: "p95", values: late.buckets.map((b) => b.wait.p95) }], "queue wait"),
        el("div", { class: "legend", id: "wait-summary" }, el("span", {}, "whole window: ", el("b", {}, pct(late.wait)), " over " + late.wait.n + " attempts")));
        parts.latenessNote.textContent = late.sampled ? "sampled in busy buckets" : "";
        fill(parts.backlog, backlogBars(parts.backlog, backlog));
        const names = (items) => [...new Set(items)].sort().map((n) => el("option", { value: n }));
        fill(tasks, names(tl.runs.map((r) => r.task)));  // suggestions: the tasks and queues seen
        fill(queues, names(backlog.queues.map((q) => q.queue)));
        const shown = p.task ? { ...tl, runs: tl.runs.filter((r) => r.task === p.task) } : tl;
        fill(parts.timeline, recentTimeline(parts.timeline, shown));
        parts.timelineNote.textContent = (tl.truncated ? "the newest runs only · " : "") + shown.runs.length + " runs" + (p.task ? " of task " + p.task : "");
      },
    };
  },
};

export const OVERVIEW = { overview };
