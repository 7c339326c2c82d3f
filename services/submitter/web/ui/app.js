// gpuq dashboard: plain JavaScript on the HTTP API and its live stream
// (GET /v1/events). It decides nothing: what it shows is what the API and
// the advisor's advice say. Every value from the API is put in the page as
// text (textContent), never as markup.
"use strict";

const PAGE = 50;          // queue rows per page
const STALE_MS = 40000;   // no event and no keep-alive for this long: stale
const AUTH = document.body.dataset.auth === "true";

const st = {
  token: sessionStorage.getItem("gpuq-token") || "",
  tasks: [],              // GET /v1/tasks, in queue order
  byId: new Map(),
  advice: new Map(),      // task_id → the latest advice
  nodes: new Map(),       // node → {seq, view}
  seq: 0,                 // the last log sequence seen
  lastEventAt: 0,         // when the last record came (ms)
  lastAliveAt: 0,         // when anything came on the stream (ms)
  connected: false,
  page: 0,
  suffix: 8,
  task: null,             // the task page's id
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v; else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids) {
    if (k === undefined || k === null) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

// ---- API ----------------------------------------------------------------

class AuthError extends Error {}

function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  if (st.token) h.Authorization = "Bearer " + st.token;
  return h;
}

async function api(path) {
  const res = await fetch(path, { headers: headers(), cache: "no-store" });
  if (res.status === 401) throw new AuthError("the token was refused");
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error((body && body.error) || res.status + " " + res.statusText);
  return body;
}

// allTasks reads GET /v1/tasks page by page (?limit=&after=): the server
// names the next page in its Link header (rel="next"), none on the last.
async function allTasks() {
  const out = [], seen = new Set();
  let url = "/v1/tasks?limit=1000";
  for (let i = 0; url && i < 10000; i++) {
    const res = await fetch(url, { headers: headers(), cache: "no-store" });
    if (res.status === 401) throw new AuthError("the token was refused");
    const body = await res.json().catch(() => null);
    if (!res.ok) throw new Error((body && body.error) || res.status + " " + res.statusText);
    const page = Array.isArray(body) ? body : [];
    let fresh = 0;
    for (const t of page) if (!seen.has(t.task_id)) { seen.add(t.task_id); out.push(t); fresh++; }
    const m = /<([^>]*)>\s*;\s*rel="?next"?/.exec(res.headers.get("Link") || "");
    url = m && fresh > 0 && m[1].startsWith("/v1/tasks?") ? m[1] : "";
  }
  return out;
}

// ---- time -----------------------------------------------------------------

function rel(ms) {
  const s = Math.round(Math.abs(ms) / 1000);
  let t;
  if (s < 60) t = s + " s";
  else if (s < 3600) t = Math.round(s / 60) + " min";
  else if (s < 86400) t = Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
  else t = Math.floor(s / 86400) + " d " + Math.round((s % 86400) / 3600) + " h";
  return ms >= 0 ? "in " + t : t + " ago";
}

function abs(d) {
  const now = new Date();
  const same = d.toDateString() === now.toDateString();
  const hm = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  return same ? hm : d.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + hm;
}

function when(iso) {
  if (!iso || iso.startsWith("0001")) return null;
  const d = new Date(iso);
  return isNaN(d) ? null : d;
}

// A start time cell: absolute, relative beneath, the ISO time for machines.
function startCell(iso) {
  const d = when(iso);
  if (!d) return el("td", {}, "—");
  return el("td", {}, el("time", { datetime: d.toISOString() }, abs(d)), el("br"),
    el("small", {}, rel(d.getTime() - Date.now())));
}

// ---- short ids --------------------------------------------------------------

// UUIDv7 ids share their first characters for a minute (a timestamp); their
// last ones are random. The shortest tail (at least 6) that tells every
// loaded task apart is shown.
function suffixLen(ids) {
  for (let n = 6; n < 36; n += 2) {
    const seen = new Set();
    let ok = true;
    for (const id of ids) {
      const t = id.slice(-n);
      if (seen.has(t)) { ok = false; break; }
      seen.add(t);
    }
    if (ok) return n;
  }
  return 36;
}

const shortId = (id) => id.slice(-st.suffix);

// blocker names a blocking task by its name and short id when it is loaded.
function blocker(b) {
  const t = st.byId.get(b);
  return t ? t.name + " (" + shortId(b) + ")" : b;
}

function taskLink(id, text) {
  return el("a", { href: "#task/" + encodeURIComponent(id), title: id }, text || shortId(id));
}

// ---- freshness ----------------------------------------------------------------

function badge() {
  const b = $("fresh");
  const now = Date.now();
  const stale = !st.connected || now - st.lastAliveAt > STALE_MS;
  const age = st.lastEventAt ? rel(st.lastEventAt - now) : "none yet";
  b.textContent = (stale ? "stale — " : "live — ") + "log seq " + st.seq + ", last event " + age;
  b.className = "badge " + (stale ? "stale" : "live");
  // screen readers hear when the page goes live or stale, not every tick
  const said = stale ? "The view is stale: the live stream is down; reconnecting." : "The view is live.";
  if ($("fresh-sr").textContent !== said) $("fresh-sr").textContent = said;
}

// ---- the stream ----------------------------------------------------------------

let refreshTimer = null, refreshBusy = false, lastRefreshMs = 0;

// scheduleRefresh reloads the task list soon: at most once a second, and
// never more often than five times its own duration (a big queue).
function scheduleRefresh() {
  if (refreshTimer) return;
  const wait = Math.max(1000, 5 * lastRefreshMs);
  refreshTimer = setTimeout(async () => {
    refreshTimer = null;
    if (refreshBusy) { scheduleRefresh(); return; }
    refreshBusy = true;
    const t0 = performance.now();
    try { await loadTasks(); } catch (e) { if (e instanceof AuthError) askToken(e.message); }
    lastRefreshMs = performance.now() - t0;
    refreshBusy = false;
  }, wait);
}

// A record changes one task: that task is read again (GET
// /v1/tasks/{id}), a few at a time; a burst of many reads the list again.
const dirty = new Set();
let dirtyTimer = null;
function markDirty(id) {
  dirty.add(id);
  if (!dirtyTimer) dirtyTimer = setTimeout(flushDirty, 300);
}

async function flushDirty() {
  dirtyTimer = null;
  const ids = [...dirty];
  dirty.clear();
  if (ids.length > 100) { scheduleRefresh(); return; }
  await Promise.all(ids.map(async (id) => {
    try { upsert(await api("/v1/tasks/" + encodeURIComponent(id))); }
    catch (e) { if (e instanceof AuthError) askToken(e.message); }
  }));
  renderSoon();
}

const ENDED = new Set(["completed", "failed", "cancelled"]);
function upsert(t) {
  const old = st.byId.get(t.task_id);
  if (ENDED.has(t.state)) {
    if (old) { st.tasks = st.tasks.filter((x) => x !== old); st.byId.delete(t.task_id); st.advice.delete(t.task_id); }
    return;
  }
  if (old) st.tasks[st.tasks.indexOf(old)] = t;
  else { st.tasks.push(t); st.suffix = suffixLen(st.tasks.map((x) => x.task_id)); }
  st.byId.set(t.task_id, t);
}

function onEvent(type, data, id) {
  st.lastAliveAt = Date.now();
  let d = null;
  try { d = data ? JSON.parse(data) : null; } catch (e) { return; }
  switch (type) {
    case "hello":
      st.connected = true;
      if (d && d.seq > st.seq) st.seq = d.seq;
      break;
    case "reset":
      st.seq = d ? d.seq : st.seq;
      loadAll();
      break;
    case "advice":
      if (d && d.task_id) { st.advice.set(d.task_id, d); renderSoon(); }
      break;
    case "node":
      if (d && d.node) {
        const old = st.nodes.get(d.node);
        if (!old || old.seq <= d.seq) st.nodes.set(d.node, { seq: d.seq, view: d });
        renderSoon();
      }
      break;
    default:
      if (id) {
        const n = Number(id);
        if (n > st.seq) st.seq = n;
        st.lastEventAt = Date.now();
        if (d && d.task_id) {
          markDirty(d.task_id);
          if (st.task === d.task_id) loadTask(d.task_id);
        }
      }
  }
  badge();
}

// follow reads GET /v1/events with fetch (an EventSource cannot send the
// Authorization header) and parses the SSE framing; it reconnects with
// Last-Event-ID, so nothing is missed while it was away.
async function follow() {
  let backoff = 1000;
  for (;;) {
    try {
      const h = headers({ Accept: "text/event-stream" });
      if (st.seq > 0) h["Last-Event-ID"] = String(st.seq);
      const res = await fetch("/v1/events", { headers: h, cache: "no-store" });
      if (res.status === 401) { st.connected = false; badge(); askToken("the token was refused"); return; }
      if (!res.ok || !res.body) throw new Error("stream: " + res.status);
      backoff = 1000;
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "", type = "", data = [], id = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let at = 0, i;
        while ((i = buf.indexOf("\n", at)) >= 0) {
          let line = buf.slice(at, i);
          at = i + 1;
          if (line.endsWith("\r")) line = line.slice(0, -1);
          if (line === "") {
            // A fault in handling one event is reported and the stream
            // goes on: thrown here, it would end the stream (the catch
            // below) and hide the fault behind a reconnect.
            if (data.length || type) {
              try { onEvent(type || "message", data.join("\n"), id); }
              catch (e) { console.error("gpuq: handling a " + (type || "message") + " event:", e); }
            }
            type = ""; data = []; id = "";
          } else if (line[0] === ":") {
            st.lastAliveAt = Date.now(); badge();
          } else {
            const c = line.indexOf(":");
            const f = c < 0 ? line : line.slice(0, c);
            let v = c < 0 ? "" : line.slice(c + 1);
            if (v[0] === " ") v = v.slice(1);
            if (f === "event") type = v; else if (f === "data") data.push(v); else if (f === "id") id = v;
          }
        }
        buf = buf.slice(at);
      }
    } catch (e) { /* reconnect below */ }
    st.connected = false;
    badge();
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 15000);
  }
}

// ---- loading -----------------------------------------------------------------

async function loadTasks() {
  const ts = await allTasks();
  st.tasks = ts;
  st.byId = new Map(ts.map((t) => [t.task_id, t]));
  st.suffix = suffixLen(ts.map((t) => t.task_id));
  fillFilters();
  render();
}

async function loadNodes() {
  const ns = await api("/v1/nodes");
  for (const n of ns || []) {
    const old = st.nodes.get(n.node);
    st.nodes.set(n.node, { seq: old ? old.seq : 0, view: n });
  }
  render();
}

async function loadAll() {
  try {
    await Promise.all([loadTasks(), loadNodes()]);
  } catch (e) {
    if (e instanceof AuthError) askToken(e.message);
    else $("queue-sum").textContent = "Could not load: " + e.message;
  }
}

// ---- rendering -----------------------------------------------------------------

let renderQueued = false;
function renderSoon() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => { renderQueued = false; render(); });
}

function render() {
  const v = view();
  if (v === "queue") renderQueue();
  else if (v === "cluster") renderCluster();
  else if (v === "teams") renderTeams();
  else if (v === "task" && st.task) renderAdvice(st.task);
}

function fillFilters() {
  for (const [sel, key] of [["f-team", "team"], ["f-class", "priority"]]) {
    const s = $(sel);
    const have = new Set([...s.options].map((o) => o.value));
    const vals = [...new Set(st.tasks.map((t) => t[key]))].sort();
    for (const v of vals) if (!have.has(v)) s.append(el("option", { value: v }, v));
  }
}

function filtered() {
  const team = $("f-team").value, cls = $("f-class").value, state = $("f-state").value;
  const text = $("f-text").value.trim().toLowerCase();
  return st.tasks.filter((t) =>
    (!team || t.team === team) && (!cls || t.priority === cls) &&
    (state === "" ? true : state === "waiting" ? t.state === "queued" : t.state !== "queued") &&
    (!text || t.name.toLowerCase().includes(text) || t.task_id.includes(text)));
}

// windowSVG draws now → P50 → P90 on a shared scale (max: the page's
// latest P90).
function windowSVG(a, maxMs) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 100 10");
  svg.setAttribute("width", "100");
  svg.setAttribute("height", "10");
  svg.setAttribute("role", "img");
  const p50 = when(a && a.p50_start), p90 = when(a && a.p90_start);
  if (!p50 || !p90 || maxMs <= 0) { svg.setAttribute("aria-label", "no estimate"); return svg; }
  const now = Date.now();
  const x = (d) => Math.max(0, Math.min(100, (100 * (d.getTime() - now)) / maxMs));
  const rect = (x0, x1, cls) => {
    const r = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    r.setAttribute("x", x0); r.setAttribute("y", 2); r.setAttribute("height", 6);
    r.setAttribute("width", Math.max(1, x1 - x0)); r.setAttribute("class", cls);
    svg.append(r);
  };
  rect(0, x(p50), "w50");
  rect(x(p50), x(p90), "w90");
  svg.setAttribute("aria-label", "P50 " + rel(p50 - now) + ", P90 " + rel(p90 - now));
  return svg;
}

// inOrder: tasks holding GPUs first, then the queue in the advisor's
// order (its position), tasks without advice where the list had them.
function inOrder(ts) {
  const idx = new Map(st.tasks.map((t, i) => [t, i]));
  const group = (t) => (t.state === "queued" ? 1 : 0);
  const pos = (t) => { const a = st.advice.get(t.task_id); return a && a.position ? a.position : Infinity; };
  return ts.slice().sort((a, b) => group(a) - group(b) || pos(a) - pos(b) || idx.get(a) - idx.get(b));
}

function renderQueue() {
  const rows = inOrder(filtered());
  const pages = Math.max(1, Math.ceil(rows.length / PAGE));
  st.page = Math.min(st.page, pages - 1);
  const slice = rows.slice(st.page * PAGE, (st.page + 1) * PAGE);
  const now = Date.now();
  let maxMs = 0;
  for (const t of slice) {
    const d = when((st.advice.get(t.task_id) || {}).p90_start);
    if (d) maxMs = Math.max(maxMs, d.getTime() - now);
  }
  const tb = el("tbody");
  slice.forEach((t, i) => {
    const a = st.advice.get(t.task_id) || null;
    const pos = a && a.position ? a.position : (t.state === "queued" ? "" : "—");
    const reason = a ? [a.reason, (a.blockers || []).map(blocker).join(", ")].filter(Boolean).join(": ") : (t.reason || "");
    tb.append(el("tr", { "data-id": t.task_id, class: a && a.alert ? "alert" : null },
      el("td", {}, pos === "" ? String(st.page * PAGE + i + 1) : String(pos)),
      el("td", {}, taskLink(t.task_id, t.name)),
      el("td", {}, el("code", { title: t.task_id }, shortId(t.task_id))),
      el("td", {}, t.team), el("td", {}, t.priority), el("td", { class: "num" }, t.gpus),
      el("td", {}, t.state),
      startCell(a && a.p50_start), startCell(a && a.p90_start),
      el("td", {}, windowSVG(a, maxMs)),
      el("td", {}, reason),
      el("td", {}, a ? a.action_text || a.action : ""),
      el("td", {}, a && a.alert ? el("strong", {}, a.alert) : "")));
  });
  $("queue").replaceChild(tb, $("queue").tBodies[0]);
  const queued = st.tasks.filter((t) => t.state === "queued").length;
  $("queue-sum").textContent = rows.length + " shown of " + st.tasks.length + " tasks (" + queued + " queued)";
  $("page-info").textContent = "page " + (st.page + 1) + " of " + pages;
  $("prev").disabled = st.page === 0;
  $("next").disabled = st.page >= pages - 1;
}

function renderCluster() {
  const box = el("div", { id: "nodes", class: "nodes" });
  let gpus = 0, held = 0, sick = 0;
  const names = [...st.nodes.keys()].sort();
  for (const name of names) {
    const n = st.nodes.get(name).view;
    const ul = el("ul", { class: "gpus", "aria-label": "GPUs of " + name });
    for (const g of n.gpus || []) {
      gpus++;
      const holder = g.task_id ? st.byId.get(g.task_id) : null;
      if (g.task_id) held++;
      if (!g.healthy) sick++;
      ul.append(el("li", { class: "gpu " + (!g.healthy ? "sick" : g.task_id ? "held" : "free") },
        el("span", { class: "idx" }, "GPU " + g.index), " ", el("small", {}, g.model),
        el("br"),
        g.task_id ? taskLink(g.task_id, holder ? holder.name + " · " + shortId(g.task_id) : shortId(g.task_id)) : "free",
        el("br"),
        el("small", {}, (g.healthy ? "healthy" : "unhealthy") + (g.utilization != null ? " · " + g.utilization + "% busy" : ""))));
    }
    box.append(el("section", { class: "node " + n.state, "aria-label": "node " + name },
      el("h3", {}, name, " ", el("small", {}, n.state + (n.reason ? " — " + n.reason : ""))), ul));
  }
  $("nodes").replaceWith(box);
  $("cluster-sum").textContent = names.length + " nodes, " + gpus + " GPUs: " + held + " held, " + (gpus - held) + " free, " + sick + " unhealthy";
}

function renderTeams() {
  const by = new Map();
  for (const t of st.tasks) {
    const r = by.get(t.team) || { run: 0, held: 0, q: 0, qg: 0, gh: 0 };
    if (t.state === "queued") { r.q++; r.qg += t.gpus; r.gh += t.gpus * t.hours; }
    else { r.run++; r.held += t.gpus; }
    by.set(t.team, r);
  }
  const tb = el("tbody");
  for (const [team, r] of [...by.entries()].sort()) {
    tb.append(el("tr", {}, el("th", { scope: "row" }, team), el("td", { class: "num" }, r.run),
      el("td", { class: "num" }, r.held), el("td", { class: "num" }, r.q), el("td", { class: "num" }, r.qg),
      el("td", { class: "num" }, r.gh.toFixed(1))));
  }
  $("teams").replaceChild(tb, $("teams").tBodies[0]);
}

function facts(dl, pairs) {
  const out = el("dl", { id: dl.id, class: dl.className });
  for (const [k, v] of pairs) if (v !== undefined && v !== null && v !== "") out.append(el("dt", {}, k), el("dd", {}, v));
  dl.replaceWith(out);
}

function renderAdvice(id) {
  const a = st.advice.get(id);
  if (!a) { facts($("task-advice"), [["Estimate", "none (not waiting, or no advice yet)"]]); return; }
  const p50 = when(a.p50_start), p90 = when(a.p90_start), now = Date.now();
  facts($("task-advice"), [
    ["Position", a.position], ["Start P50", p50 ? abs(p50) + " (" + rel(p50 - now) + ")" : ""],
    ["Start P90", p90 ? abs(p90) + " (" + rel(p90 - now) + ")" : ""], ["Method", a.method],
    ["Reason", a.reason], ["Blockers", (a.blockers || []).map(blocker).join(", ")],
    ["Next action", a.action_text || a.action], ["Alert", a.alert],
    ["Suggestions", (a.suggestions || []).map((s) => s.text || JSON.stringify(s)).join("; ")]]);
}

async function loadTask(id) {
  try {
    const [t, hist] = await Promise.all([api("/v1/tasks/" + encodeURIComponent(id)),
      api("/v1/tasks/" + encodeURIComponent(id) + "/history")]);
    if (st.task !== id) return;
    $("task-h").textContent = "Task " + t.name;
    facts($("task-facts"), [["Id", t.task_id], ["Team", t.team], ["Class", t.priority], ["GPUs", t.gpus],
      ["Hours (estimate)", t.hours], ["State", t.state], ["Node", t.node], ["Reason", t.reason],
      ["Hypothesis", t.hypothesis], ["Submitted", t.submitted_at], ["Started", t.started_at], ["Ended", t.ended_at],
      ["Preemptions", t.preemptions], ["Error", t.error]]);
    const ol = el("ol", { id: "task-timeline", class: "timeline" });
    for (const h of hist || []) {
      const d = when(h.time);
      const why = h.data && (h.data.reason || h.data.error || "");
      ol.append(el("li", {}, el("time", { datetime: h.time }, d ? abs(d) : h.time), " ", el("strong", {}, h.type),
        " ", el("small", {}, "seq " + h.seq), why ? " — " + why : ""));
    }
    $("task-timeline").replaceWith(ol);
    renderAdvice(id);
    if (t.log_node) {
      api("/v1/tasks/" + encodeURIComponent(id) + "/logs?tail=40")
        .then((l) => { if (st.task === id) $("task-log").textContent = l.data || "(empty)"; })
        .catch((e) => { if (st.task === id) $("task-log").textContent = "(no output: " + e.message + ")"; });
    } else {
      $("task-log").textContent = "(not started: no output yet)";
    }
  } catch (e) {
    if (e instanceof AuthError) askToken(e.message);
    else $("task-h").textContent = "Task " + id + ": " + e.message;
  }
}

// ---- views -----------------------------------------------------------------

function view() {
  const h = location.hash.slice(1);
  if (h.startsWith("task/")) return "task";
  return ["queue", "cluster", "teams"].includes(h) ? h : "queue";
}

function show() {
  const v = view();
  for (const name of ["queue", "cluster", "teams", "task"]) $("view-" + name).hidden = name !== v;
  for (const name of ["queue", "cluster", "teams"]) {
    const a = $("nav-" + name);
    if (name === v) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  st.task = v === "task" ? decodeURIComponent(location.hash.slice(6)) : null;
  if (st.task) loadTask(st.task);
  render();
}

// ---- the token ----------------------------------------------------------------

let started = false;
function askToken(msg) {
  sessionStorage.removeItem("gpuq-token");
  st.token = "";
  $("login").hidden = false;
  $("login-err").textContent = msg || "";
  $("token").focus();
}

function start() {
  $("login").hidden = true;
  show();
  loadAll();
  if (!started) { started = true; follow(); }
}

// ---- wiring ----------------------------------------------------------------

window.addEventListener("hashchange", show);
for (const id of ["f-team", "f-class", "f-state", "f-text"]) $(id).addEventListener("input", () => { st.page = 0; renderQueue(); });
$("filters").addEventListener("submit", (e) => e.preventDefault());
$("prev").addEventListener("click", () => { st.page--; renderQueue(); });
$("next").addEventListener("click", () => { st.page++; renderQueue(); });
$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  st.token = $("token").value.trim();
  sessionStorage.setItem("gpuq-token", st.token);
  $("token").value = "";
  started = false; // a refused token ended the stream: follow again
  start();
});
setInterval(badge, 1000);
setInterval(() => { if (view() === "queue") renderQueue(); }, 30000); // relative times move
setInterval(() => { if (st.connected) loadNodes().catch(() => {}); }, 30000); // utilisation, heartbeats
setInterval(() => { if (st.connected) scheduleRefresh(); }, 60000); // what a team's token does not stream: other teams' tasks

if (AUTH && !st.token) askToken(""); else start();
