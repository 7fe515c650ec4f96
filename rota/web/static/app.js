// The dashboard's entry point: navigation, the router (every view, filter, page and selected
// item lives in the URL's hash: back, forward and reload work, links can be shared) and the
// refresh loop.
"use strict";
import { $, api, el, fill, href, parseHash } from "./core.js";
import { LISTS } from "./views.js";
import { DETAILS } from "./details.js";
import { OVERVIEW } from "./overview.js";
import { FLOW } from "./limits.js";

const REFRESH_MS = 5000;
const VIEWS = { ...OVERVIEW, ...LISTS, ...DETAILS, ...FLOW };
// The navigation, in order (limits: concurrency limits and rates, rota/web/static/limits.js).
const NAV = ["overview", "runs", "schedules", "queues", "workers", "locks", "limits"];

let current = null;  // { key, view, handle, route }
let generation = 0;
let inFlight = null;

function drawNav(active) {
  fill($("nav"), NAV.map((id) => el("a", { href: href(id), class: id === active ? "on" : null, "aria-current": id === active ? "page" : null }, VIEWS[id].title)));
}

const unknown = {
  title: "Not found",
  mount(root, route) {
    fill(root, el("section", { class: "missing", role: "alert" }, el("h2", {}, "No such page"),
      el("p", {}, "There is no view called " + JSON.stringify(route.view) + "."), el("p", {}, el("a", { href: href("overview") }, "← overview"))));
    return { async update() {} };
  },
};

function navigate() {
  const route = parseHash(location.hash);
  const view = VIEWS[route.view] || unknown;
  const key = route.view + "\u0000" + (route.arg || "");
  generation += 1;
  if (!current || current.key !== key) {
    const root = $("view");
    fill(root, el("p", { class: "empty" }, "loading…"));  // never the previous page's panel
    current = { key, view, handle: view.mount(root, route), route };
    drawNav(view.nav || route.view);
    document.title = "rota · " + (route.arg ? view.title + " " + route.arg : view.title);
    window.scrollTo(0, 0);
  }
  current.route = route;
  refresh(true);
}

async function refresh(forced) {
  if (!current || (inFlight === generation && !forced)) return;
  const mine = generation, handle = current.handle, route = current.route;
  inFlight = mine;
  try {
    await handle.update(route, () => mine === generation);
    if (mine === generation) {
      $("problem").textContent = "";
      $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    }
  } catch (e) {
    if (mine === generation) $("problem").textContent = e.message;
  } finally {
    if (inFlight === mine) inFlight = null;
  }
}

window.addEventListener("hashchange", navigate);
let resizing = null;
window.addEventListener("resize", () => { clearTimeout(resizing); resizing = setTimeout(() => refresh(false), 250); });
setInterval(() => { if ($("auto").checked && !document.hidden) refresh(false); }, REFRESH_MS);
navigate();
api("api/stats").then((stats) => { $("database").textContent = stats.database; $("database").title = stats.database; }, () => {});
