// Timelines: recent runs by schedule or task (scaled to the data it has), and a run's attempts.
"use strict";
import { clock, el, empty, span, svg } from "./core.js";

const STEPS = [1, 5, 10, 30, 60, 300, 600, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400].map((s) => s * 1000);

// Tick times in [from, to] with at least `room` pixels between labels.
export function timeTicks(from, to, pixels, room) {
  const wanted = Math.max(1, Math.floor(pixels / room));
  const step = STEPS.find((s) => (to - from) / s <= wanted) || STEPS[STEPS.length - 1];
  const ticks = [];
  for (let t = Math.ceil(from / step) * step; t <= to; t += step) ticks.push(t);
  return { ticks, step };
}

function label(ms, step) {
  if (step < 60_000) { const d = new Date(ms); return clock(ms) + ":" + String(d.getSeconds()).padStart(2, "0"); }
  return clock(ms, step >= 86400_000);
}

// Recent runs in rows by schedule (or task): the axis spans what the data covers, from the
// first run shown to now (at least a minute), not the whole window asked for.
export function recentTimeline(container, data, onPick) {
  const until = Date.parse(data.until), since = Date.parse(data.since);
  const starts = data.runs.map((r) => Date.parse(r.started_at || r.finished_at)).filter((t) => !Number.isNaN(t));
  if (!starts.length) return [empty("Nothing ran in the last " + span(data.minutes * 60) + ".")];
  const first = Math.max(since, Math.min(...starts));
  const from = Math.max(since, until - Math.max(60_000, (until - first) * 1.05));
  const width = Math.max(1, until - from);
  const groups = new Map();
  for (const r of data.runs) {
    const key = r.schedule ? r.schedule : "task " + r.task;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(r);
  }
  const rows = [...groups.keys()].sort().slice(0, 40).map((key) => {
    const bars = groups.get(key).map((r) => {
      const start = Math.max(Date.parse(r.started_at || r.finished_at), from);
      const end = r.finished_at ? Date.parse(r.finished_at) : until;
      const bar = el("a", {
        class: "tl-bar " + r.status, href: "#/run/" + encodeURIComponent(r.id), "data-run": r.id,
        title: `run ${r.id} · ${r.task} · ${r.status}\n${r.started_at || ""} → ${r.finished_at || "running"}`,
      });
      bar.style.left = ((start - from) / width * 100).toFixed(3) + "%";
      bar.style.width = (Math.max(end - start, 0) / width * 100).toFixed(3) + "%";
      return bar;
    });
    return el("div", { class: "tl-row" }, el("span", { class: "tl-label", title: key }, key), el("div", { class: "tl-track" }, bars));
  });
  const track = Math.max(120, (container.clientWidth || 600) - (container.clientWidth < 560 ? 0 : 250));
  const { ticks, step } = timeTicks(from, until, track, 80);
  const axis = el("div", { class: "tl-axis" }, ticks.filter((t) => (t - from) / width > 0.04 && (t - from) / width < 0.96).map((t) => {
    const mark = el("span", { class: "tl-tick" }, label(t, step));
    mark.style.left = ((t - from) / width * 100).toFixed(3) + "%";
    return mark;
  }));
  return [el("div", { class: "tl" }, rows, el("div", { class: "tl-row tl-axis-row" }, el("span", { class: "tl-label" }), axis))];
}

// A run's attempts on one small track: queued, each attempt (coloured by how it ended), the
// backoff between attempts, and the wait for the next one when a retry is pending.
export function attemptTimeline(run, now) {
  const segs = [];
  // a held run's loss (no start recorded) has no span on the track
  const created = Date.parse(run.created_at), attempts = (run.attempts || []).filter((a) => a.started_at);
  let cursor = created;
  const due = run.scheduled_for ? Date.parse(run.scheduled_for) : created;
  if (due > created && (attempts.length || run.status !== "pending")) {  // enqueued ahead of its time
    segs.push({ kind: "waiting", from: created, to: due, text: "not due yet" });
    cursor = due;
  }
  attempts.forEach((a, i) => {
    const start = Date.parse(a.started_at), end = a.finished_at ? Date.parse(a.finished_at) : now;
    if (!Number.isNaN(start)) {
      if (start > cursor) segs.push({ kind: i === 0 ? "queued" : "backoff", from: cursor, to: start, text: i === 0 ? "queued" : "backoff before attempt " + a.attempt });
      segs.push({ kind: "s-" + String(a.status).replace(/\s+/g, "-"), from: start, to: end, text: "attempt " + a.attempt + " " + a.status });
      cursor = end;
    }
  });
  if (!attempts.length && run.status === "pending") {
    if (due > created) segs.push({ kind: "waiting", from: created, to: due, text: "not due yet" });
    if (now > due) segs.push({ kind: "queued", from: Math.max(created, due), to: now, text: "queued" });
  }
  else if (run.status === "pending" && run.due_at) {
    const next = Date.parse(run.due_at);
    segs.push({ kind: "backoff", from: cursor, to: Math.max(next, cursor), text: "backoff until " + run.due_at });
  }
  if (!segs.length) return empty("No attempt has run.");
  const lo = Math.min(...segs.map((s) => s.from)), hi = Math.max(...segs.map((s) => s.to), lo + 1);
  const W = 600, chart = svg("svg", { viewBox: `0 0 ${W} 24`, width: "100%", height: 24, preserveAspectRatio: "none", class: "chart attempts", role: "img", "aria-label": "attempts timeline" });
  for (const s of segs) {
    const x = ((s.from - lo) / (hi - lo)) * W, w = Math.max(2, ((s.to - s.from) / (hi - lo)) * W);
    chart.append(svg("rect", { x, y: 4, width: w, height: 16, rx: 2, class: "seg " + s.kind, "data-kind": s.kind },
      svg("title", {}, `${s.text}: ${span((s.to - s.from) / 1000)}`)));
  }
  return el("div", { class: "attempts-box" }, chart, el("div", { class: "ends muted" }, el("span", {}, label(lo, 1000)), el("span", {}, span((hi - lo) / 1000)), el("span", {}, label(hi, 1000))));
}
