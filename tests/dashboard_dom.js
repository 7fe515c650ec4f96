// Runs the dashboard page's script under Node against recorded API responses, with a
// minimal DOM that keeps text and elements apart, and prints what the page built as HTML.
// Used by tests/test_web.py (skipped where Node is not installed); no browser needed.
//
//   node dashboard_dom.js SCRIPT.js RESPONSES.json RUN_ID
"use strict";
const fs = require("fs");
const [script, responsesFile, runId] = process.argv.slice(2);
const responses = JSON.parse(fs.readFileSync(responsesFile, "utf8"));

const escape = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
class FakeNode {}
class Text extends FakeNode {
  constructor(data) { super(); this.data = data; }
  get html() { return escape(this.data); }
}
class Element extends FakeNode {
  constructor(tag) { super(); Object.assign(this, { tag, kids: [], attrs: {}, style: {}, className: "", hidden: false, title: "" }); }
  append(...nodes) { for (const n of nodes) this.kids.push(n instanceof FakeNode ? n : new Text(String(n))); }  // as the DOM does
  replaceChildren(...nodes) { this.kids = []; this.append(...nodes); }
  setAttribute(name, value) { this.attrs[name] = String(value); }
  addEventListener() {}
  set textContent(value) { this.kids = [new Text(String(value))]; }
  get textContent() { return this.kids.map((k) => (k instanceof Text ? k.data : k.textContent)).join(""); }
  get html() {
    const attrs = Object.entries({ class: this.className, ...this.attrs }).filter(([, v]) => v).map(([k, v]) => ` ${k}="${escape(v)}"`).join("");
    return `<${this.tag}${attrs}>${this.kids.map((k) => k.html).join("")}</${this.tag}>`;
  }
}

const byId = {};
const form = new Element("form");
form.elements = { status: { value: "" }, task: { value: "" }, schedule: { value: "" }, limit: { value: "50" } };
byId.filters = form;
byId.auto = Object.assign(new Element("input"), { checked: true });
global.Node = FakeNode;
global.document = {
  hidden: false,
  getElementById: (id) => (byId[id] ||= new Element("div")),
  createElement: (tag) => new Element(tag),
  createTextNode: (data) => new Text(data),
  addEventListener() {},
};
global.location = { reload() {}, hash: "", pathname: "/", search: "" };
global.history = { replaceState(state, title, url) { global.location.hash = url.startsWith("#") ? url : ""; } };
global.window = { addEventListener() {} };
global.confirm = () => true;
global.setInterval = () => 0;
global.fetch = async (path) => {
  const found = responses[path];
  if (!found) throw new Error("unexpected request " + path);
  return { ok: found.status < 400, status: found.status, statusText: "", json: async () => found.body };
};

const page = new Function(fs.readFileSync(script, "utf8") + "\n;return { openRun, state };")();
(async () => {
  while (page.state.busy) await new Promise((resolve) => setTimeout(resolve, 5));
  await page.openRun(runId);
  const parts = {};
  for (const id of ["stats", "schedules", "runs", "timeline", "workers", "locks", "detail", "problem", "toast"]) parts[id] = byId[id] ? byId[id].html : "";
  process.stdout.write(JSON.stringify(parts));
})();
