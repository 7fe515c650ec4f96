// Shared helpers of the dashboard page: building DOM and SVG from data, the API, formats, routes.
//
// Everything the API returns is user data (run arguments, results, error messages, names).
// It reaches the page only as text: el() and svg() build nodes with createTextNode and
// setAttribute and never parse HTML; nothing here assigns HTML strings to the DOM.
"use strict";

export const $ = (id) => document.getElementById(id);
export const FINAL = new Set(["succeeded", "failed", "skipped", "cancelled"]);
export const enc = encodeURIComponent;
const SVG_NS = "http://www.w3.org/2000/svg";

function build(node, props, children) {
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.setAttribute("class", value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));  // attribute values are never parsed as HTML
  }
  return fill(node, ...children);
}

export function el(tag, props, ...children) { return build(document.createElement(tag), props, children); }
export function svg(tag, props, ...children) { return build(document.createElementNS(SVG_NS, tag), props, children); }

// Replace node's children: nodes as they are, anything else as text; null/false are skipped.
export function fill(node, ...children) {
  node.replaceChildren();
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function json(value) { return JSON.stringify(value, null, 2); }
export function short(value, n) {
  const s = typeof value === "string" ? value : JSON.stringify(value);
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
}
export function badge(text, kind) { return el("span", { class: "badge " + (kind || text) }, text); }
export function empty(text) { return el("div", { class: "empty" }, text); }

// -- time and numbers ------------------------------------------------------------------
export function span(seconds) {
  const a = Math.abs(seconds);
  if (a < 1) return Math.round(a * 1000) + " ms";
  if (a < 60) return (a < 10 ? a.toFixed(1) : Math.round(a)) + " s";
  if (a < 3600) return (a / 60).toFixed(a < 600 ? 1 : 0) + " min";
  if (a < 86400) return (a / 3600).toFixed(1) + " h";
  return (a / 86400).toFixed(1) + " d";
}
export function ago(iso) {
  if (!iso) return "–";
  const seconds = (Date.parse(iso) - Date.now()) / 1000;
  return seconds >= 0 ? "in " + span(seconds) : span(seconds) + " ago";
}
export function when(iso) { return el("time", { datetime: iso || "", title: iso || "" }, ago(iso)); }
export function took(run) {
  if (!run.started_at || !run.finished_at) return "";
  return span((Date.parse(run.finished_at) - Date.parse(run.started_at)) / 1000);
}
export function every(seconds) {
  return seconds % 3600 === 0 ? seconds / 3600 + "h" : seconds % 60 === 0 ? seconds / 60 + "m" : seconds + "s";
}
export function clock(ms, withDay) {
  const d = new Date(ms);
  const hm = String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0");
  return withDay ? d.toLocaleDateString(undefined, { weekday: "short", day: "numeric" }) + " " + hm : hm;
}

// -- the API ---------------------------------------------------------------------------
export class ApiError extends Error {
  constructor(message, status) { super(message); this.status = status; }
}

export async function api(path, options) {
  const response = await fetch(path, Object.assign({ headers: { Accept: "application/json" }, cache: "no-store" }, options));
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (response.status === 401) { location.reload(); throw new ApiError("signed out", 401); }
  if (!response.ok) throw new ApiError(body && body.error ? body.error : response.status + " " + response.statusText, response.status);
  return body;
}

let toastTimer = null;
export function toast(text) {
  const box = $("toast");
  box.textContent = text;
  box.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { box.hidden = true; }, 4000);
}

// A POST action; `done` turns its answer into the toast's text. `after` runs either way.
export async function act(path, done, after) {
  try {
    toast(done(await api(path, { method: "POST" })));
  } catch (e) {
    toast(e.message);
  }
  if (after) after();
}

// A bulk action on every run `filter` matches (POST api/runs/bulk): counts first, asks for a
// confirmation that says how many, then acts on exactly that many (the server refuses if the
// count changed meanwhile). `after` runs either way.
export async function bulkAct(action, filter, after) {
  const post = (body) => api("api/runs/bulk", { method: "POST", headers: { Accept: "application/json", "Content-Type": "application/json" }, body: JSON.stringify(body) });
  try {
    const counted = await post({ action, filter, dry_run: true });
    const what = Object.entries(filter).filter(([, v]) => v).map(([k, v]) => k + " " + v).join(", ") || "no filter";
    if (!counted.matched) { toast("No runs match (" + what + ")."); return; }
    const verb = action === "retry" ? "Retry" : "Cancel";
    if (!confirm(`${verb} ${counted.matched} run${counted.matched === 1 ? "" : "s"} matching ${what}? (${action === "retry" ? "finished runs only" : "pending and running runs only"})`)) return;
    const done = await post({ action, filter, expect: counted.matched });
    toast(`${action === "retry" ? "retried" : "cancelled"} ${done.done} of ${done.matched} runs` + (done.skipped ? ` (${done.skipped} skipped)` : ""));
  } catch (e) {
    toast(e.message);
  } finally {
    if (after) after();
  }
}

// -- routes: #/view/arg?params (every view, filter, page and selected item is in the URL) --
export function parseHash(hash) {
  let h = (hash || "").replace(/^#/, "");
  const legacy = /^run\/(\d+)$/.exec(h);  // the first dashboard's #run/ID links
  if (legacy) h = "/run/" + legacy[1];
  if (!h.startsWith("/")) h = "/" + h;
  const cut = h.indexOf("?");
  const path = cut < 0 ? h : h.slice(0, cut);
  const params = new URLSearchParams(cut < 0 ? "" : h.slice(cut + 1));
  const parts = path.split("/").filter(Boolean).map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } });
  return { view: parts[0] || "overview", arg: parts.length > 1 ? parts.slice(1).join("/") : null, params };
}

export function href(view, arg, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  const qs = q.toString();
  return "#/" + (view === "overview" ? "" : view) + (arg !== null && arg !== undefined ? "/" + enc(arg) : "") + (qs ? "?" + qs : "");
}

export function link(text, view, arg, params, props) {
  return el("a", Object.assign({ href: href(view, arg, params) }, props || {}), text);
}
export function runLink(id) { return link(String(id), "run", id); }

// Go to a route: a new history entry (back returns here), or a replacement of this one.
export function go(target, replace) {
  if (location.hash === target) return;
  if (replace) { history.replaceState(null, "", target); window.dispatchEvent(new HashChangeEvent("hashchange")); }
  else location.hash = target;
}

// A "no such ..." page: never a stale panel of another item.
export function missing(root, what, text, back) {
  fill(root, el("section", { class: "missing", role: "alert" }, el("h2", {}, "No such " + what), el("p", {}, text), back));
}

export function paramsOf(route, names) {
  const out = {};
  for (const n of names) out[n] = route.params.get(n) || "";
  return out;
}
