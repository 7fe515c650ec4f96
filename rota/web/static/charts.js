// Hand-written SVG charts (no library): stacked bars by outcome, percentile lines, backlog
// bars and a strip of ticks. Colours come from the style sheet (classes), numbers are drawn
// as text (legends and labels), and every mark carries data-* attributes with its numbers.
"use strict";
import { clock, el, empty, span, svg } from "./core.js";

const PAD = { left: 44, right: 8, top: 10, bottom: 22 };

// A round step for an axis reaching `max` in about `ticks` steps.
export function niceStep(max, ticks) {
  const raw = max / Math.max(ticks, 1), mag = 10 ** Math.floor(Math.log10(raw || 1));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

function widthOf(container) { return Math.max(280, Math.floor(container.clientWidth || 600)); }

function frame(width, height, label) {
  return svg("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", height, role: "img", "aria-label": label, class: "chart" });
}

function yAxis(node, max, height, width, fmt) {
  const step = niceStep(max, 3), inner = height - PAD.top - PAD.bottom;
  for (let v = 0; v <= max + 1e-9; v += step) {
    const y = PAD.top + inner - (v / max) * inner;
    node.append(svg("line", { x1: PAD.left, x2: width - PAD.right, y1: y, y2: y, class: "grid" }));
    node.append(svg("text", { x: PAD.left - 4, y: y + 4, class: "axis", "text-anchor": "end" }, fmt(v)));
  }
}

// Bucket start times as labels far enough apart for the width (no collisions at 390 px).
function xLabels(node, starts, x, bucketMs, width) {
  const room = 64, inner = width - PAD.left - PAD.right;
  const every = Math.max(1, Math.ceil(starts.length / Math.max(1, Math.floor(inner / room))));
  const withDay = bucketMs >= 3600_000;
  for (let i = 0; i < starts.length; i += every) {
    node.append(svg("text", { x: x(i), y: 0, class: "axis", "text-anchor": "start" }, clock(starts[i], withDay)));
  }
}

// Stacked bars: one per bucket, segments by `keys` (each run counted once, by its outcome);
// `apart` keys (retried attempts) are drawn as a narrow bar of their own beside it, from the
// axis, never stacked on the runs. A legend with each key's total.
export function stackedBars(container, data, keys, title, apart = []) {
  const width = widthOf(container), height = 190, inner = width - PAD.left - PAD.right;
  const buckets = data.buckets, n = buckets.length;
  const max = Math.max(1, ...buckets.map((b) => Math.max(keys.reduce((s, k) => s + b[k], 0), ...apart.map((k) => b[k]))));
  const top = niceStep(max, 3) * Math.ceil(max / niceStep(max, 3));
  const chart = frame(width, height, title);
  yAxis(chart, top, height, width, (v) => String(Math.round(v)));
  const bw = inner / n, ih = height - PAD.top - PAD.bottom, side = apart.length ? Math.max(1, bw * 0.3) : 0;
  const x = (i) => PAD.left + i * bw;
  const starts = buckets.map((b) => Date.parse(b.start));
  const mark = (b, i, k, left, w, y, h) => chart.append(svg("rect", {
    x: left, y, width: Math.max(1, w), height: Math.max(h, 0.5),
    class: "mark s-" + k + (apart.includes(k) ? " apart" : ""), "data-start": b.start, "data-key": k, "data-count": b[k],
  }, svg("title", {}, `${clock(starts[i], data.bucket_seconds >= 3600)} · ${k} ${b.estimated ? "≈" : ""}${b[k]}`)));
  buckets.forEach((b, i) => {
    const pad = Math.min(1, bw * 0.1), full = bw - Math.min(2, bw * 0.2) - side;
    let y = PAD.top + ih;
    for (const k of keys) {
      if (!b[k]) continue;
      const h = (b[k] / top) * ih;
      y -= h;
      mark(b, i, k, x(i) + pad, full, y, h);
    }
    apart.forEach((k, j) => {
      if (!b[k]) return;
      const h = (b[k] / top) * ih;
      mark(b, i, k, x(i) + pad + full + (j * side) / apart.length, side / apart.length, PAD.top + ih - h, h);
    });
  });
  const labels = svg("g", { transform: `translate(0 ${height - 6})` });
  xLabels(labels, starts, x, data.bucket_seconds * 1000, width);
  chart.append(labels);
  const legend = el("div", { class: "legend" }, [...keys, ...apart].map((k) => el("span", { class: "key", "data-key": k, "data-total": data.totals[k] },
    el("i", { class: "swatch s-" + k }), (apart.includes(k) ? k + " attempts (beside, not stacked) " : k + " "), el("b", {}, String(data.totals[k])))),
  data.estimated ? el("span", { class: "muted" }, "≈ busy buckets estimated from a sample") : null);
  return [chart, legend];
}

// Lines of percentiles (seconds) over buckets: [{name, key, values}], gaps where no sample.
export function lines(container, data, series, title) {
  const width = widthOf(container), height = 160, inner = width - PAD.left - PAD.right, ih = height - PAD.top - PAD.bottom;
  const all = series.flatMap((s) => s.values).filter((v) => v !== null);
  const max = Math.max(0.001, ...all);
  const step = niceStep(max, 3), top = step * Math.ceil(max / step);
  const chart = frame(width, height, title);
  yAxis(chart, top, height, width, (v) => (v === 0 ? "0" : span(v)));
  const n = data.buckets.length, bw = inner / n;
  const x = (i) => PAD.left + i * bw + bw / 2, y = (v) => PAD.top + ih - (v / top) * ih;
  for (const s of series) {
    let points = [];
    const flush = () => { if (points.length > 1) chart.append(svg("polyline", { points: points.join(" "), class: "line s-" + s.key })); points = []; };
    s.values.forEach((v, i) => {
      if (v === null) { flush(); return; }
      points.push(`${x(i).toFixed(1)},${y(v).toFixed(1)}`);
      chart.append(svg("circle", { cx: x(i), cy: y(v), r: n > 60 ? 1.6 : 2.4, class: "dot s-" + s.key, "data-start": data.buckets[i].start, "data-key": s.key, "data-value": v },
        svg("title", {}, `${clock(Date.parse(data.buckets[i].start), data.bucket_seconds >= 3600)} · ${s.name} ${span(v)}`)));
    });
    flush();
  }
  const labels = svg("g", { transform: `translate(0 ${height - 6})` });
  xLabels(labels, data.buckets.map((b) => Date.parse(b.start)), (i) => PAD.left + i * bw, data.bucket_seconds * 1000, width);
  chart.append(labels);
  return chart;
}

// Backlog by queue: due now, due later and running, as bars with their numbers written out.
export function backlogBars(container, data) {
  if (!data.queues.length) return empty("No pending or running runs.");
  const max = Math.max(1, ...data.queues.map((q) => q.due + q.later + q.running));
  const rows = data.queues.map((q) => {
    const width = 200, bar = svg("svg", { viewBox: `0 0 ${width} 14`, class: "bk-bar", preserveAspectRatio: "none", role: "img", "aria-label": "backlog of " + q.queue });
    let x = 0;
    for (const k of ["running", "due", "later"]) {
      const w = (q[k] / max) * width;
      if (w > 0) bar.append(svg("rect", { x, y: 0, width: w, height: 14, class: "mark s-" + k, "data-key": k, "data-count": q[k] }));
      x += w;
    }
    return el("div", { class: "bk-row", "data-queue": q.queue },
      el("span", { class: "bk-label", title: q.queue }, q.queue), bar,
      el("span", { class: "bk-nums" }, el("b", {}, q.due), " due now · ", el("b", {}, q.later), " later · ", el("b", {}, q.running), " running"));
  });
  return el("div", {}, rows, el("div", { class: "legend" },
    ["due", "later", "running"].map((k) => el("span", { class: "key" }, el("i", { class: "swatch s-" + k }), k === "due" ? "due now" : k === "later" ? "due later" : "running")),
    data.truncated ? el("span", { class: "muted", id: "backlog-note" }, `split by queue over the first ${data.cap} pending runs by due time, of ${data.pending_estimated ? "about " : ""}${data.pending} pending`) : null));
}

// A schedule's recent ticks, oldest first, one square each coloured by outcome (skipped too).
export function tickStrip(runs, onPick) {
  if (!runs.length) return empty("No ticks yet.");
  const size = 14, gap = 3, width = runs.length * (size + gap);
  const strip = svg("svg", { viewBox: `0 0 ${width} ${size}`, width, height: size, class: "strip", role: "img", "aria-label": "recent ticks by outcome" });
  runs.forEach((r, i) => {
    const rect = svg("rect", { x: i * (size + gap), y: 0, width: size, height: size, rx: 2, class: "mark s-" + r.status, "data-run": r.id, "data-status": r.status, tabindex: 0 },
      svg("title", {}, `run ${r.id} · ${r.status} · ${r.scheduled_for || ""}`));
    rect.addEventListener("click", () => onPick(r.id));
    rect.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); onPick(r.id); } });
    strip.append(rect);
  });
  const counts = {};
  for (const r of runs) counts[r.status] = (counts[r.status] || 0) + 1;
  return el("div", { class: "strip-box" }, el("div", { class: "strip-scroll" }, strip),
    el("div", { class: "legend" }, Object.entries(counts).map(([k, v]) => el("span", { class: "key", "data-key": k }, el("i", { class: "swatch s-" + k }), k + " ", el("b", {}, v)))));
}
