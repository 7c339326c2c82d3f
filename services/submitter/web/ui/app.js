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
  plan: null,             // GET /v1/plan: the policy's next hours
  planOffset: 0,
  teams: null,            // GET /v1/teams
  stats: null,            // GET /v1/stats: the estimates' calibration
};

const PLAN_NODES = 20;    // nodes per page of the plan
const planHours = () => Number($("plan-hours").value) || 6; // the plan's horizon
const SVGNS = "http://www.w3.org/2000/svg";

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
        planSoon();
        teamsSoon();
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
  else if (v === "cluster") { renderCluster(); renderPlan(); }
  else if (v === "teams") renderTeams();
  else if (v === "calibration") renderCalibration();
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
  const v = st.teams;
  const tb = el("tbody");
  for (const r of (v && v.teams) || []) {
    tb.append(el("tr", {}, el("th", { scope: "row" }, r.team),
      el("td", { class: "num" }, r.has_guarantee ? r.guarantee : "none"),
      el("td", { class: "num" }, r.used),
      el("td", { class: "num" }, r.borrowed),
      el("td", { class: "num" }, r.running), el("td", { class: "num" }, r.queued),
      el("td", { class: "num" }, r.waiting_gpu_hours.toFixed(1))));
  }
  $("teams").replaceChild(tb, $("teams").tBodies[0]);
  $("teams-sum").textContent = v ? v.healthy_gpus + " healthy GPUs. Borrowed: GPUs held beyond the guarantee, which a team under its own may reclaim. Waiting GPU-hours: queued GPUs × predicted run." : "";
}

async function loadTeams() {
  try { st.teams = await api("/v1/teams"); if (view() === "teams") renderTeams(); }
  catch (e) { if (e instanceof AuthError) askToken(e.message); else $("teams-sum").textContent = "Could not load: " + e.message; }
}

// ---- the plan: every node's next hours, as one pass of the policy holds them ----

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  for (const k of kids) if (k !== undefined && k !== null) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

let planBusy = false, planTimer = null;
async function loadPlan() {
  if (planBusy) return;
  planBusy = true;
  try {
    st.plan = await api("/v1/plan?hours=" + planHours() + "&limit=" + PLAN_NODES + "&offset=" + st.planOffset);
    if (view() === "cluster") renderPlan();
  } catch (e) {
    if (e instanceof AuthError) askToken(e.message);
    else $("plan-sum").textContent = "No plan: " + e.message;
  } finally { planBusy = false; }
}

// planSoon reloads the plan after a record, at most every 3 s, while the
// cluster is shown.
let teamsTimer = null;
function teamsSoon() {
  if (teamsTimer || view() !== "teams") return;
  teamsTimer = setTimeout(() => { teamsTimer = null; loadTeams(); }, 2000);
}

function planSoon() {
  if (planTimer || view() !== "cluster") return;
  planTimer = setTimeout(() => { planTimer = null; loadPlan(); }, 3000);
}

const BAR_WORDS = { running: "running", starting: "starting", yielding: "yielding", dispatch: "starting now",
  reserved: "reserved for", backfill: "backfill gap" };

function barText(b) {
  const who = b.task_id ? (b.name || "a task of team " + b.team) + " (" + shortId(b.task_id) + ")" : "";
  return BAR_WORDS[b.kind] + (who ? " " + who : "") + ", " + abs(new Date(b.from)) + "–" + abs(new Date(b.to)) +
    (b.clipped ? " and on" : "") + (b.backfill ? " (backfilled)" : "");
}

// nodeTimeline draws one node's GPUs as rows, now → the horizon.
function nodeTimeline(n, p) {
  const W = 720, L = 64, ROW = 18, TOP = 18;
  const t0 = new Date(p.now).getTime(), t1 = new Date(p.until).getTime();
  const x = (iso) => L + ((W - L) * (new Date(iso).getTime() - t0)) / Math.max(1, t1 - t0);
  const H = TOP + ROW * n.gpus.length + 2;
  const said = [];
  const g = svg("g");
  // hour ticks, at most 8
  const span = (t1 - t0) / 3600000, every = Math.max(1, Math.ceil(span / 8));
  for (let h = 0; h <= span + 1e-9; h += every) {
    const xx = L + ((W - L) * h) / span;
    g.append(svg("line", { x1: xx, x2: xx, y1: TOP - 4, y2: H, class: "tick" }),
      svg("text", { x: xx + 2, y: 11, class: "axis" }, h === 0 ? "now" : "+" + h + " h"));
  }
  n.gpus.forEach((gpu, i) => {
    const y = TOP + i * ROW;
    g.append(svg("text", { x: 0, y: y + 13, class: "axis" }, "GPU " + gpu.index + (gpu.healthy ? "" : " ✗")));
    if (!gpu.bars.length) said.push("GPU " + gpu.index + " free");
    for (const b of gpu.bars) {
      const x0 = x(b.from), x1 = x(b.to);
      const r = svg("rect", { x: x0, y: y + 2, width: Math.max(1, x1 - x0), height: ROW - 4, rx: 2, class: "bar " + b.kind + (b.backfill ? " bf" : "") },
        svg("title", {}, "GPU " + gpu.index + ": " + barText(b)));
      said.push("GPU " + gpu.index + " " + barText(b));
      if (b.task_id) {
        g.append(svg("a", { href: "#task/" + encodeURIComponent(b.task_id), "aria-label": "GPU " + gpu.index + ": " + barText(b) }, r));
      } else g.append(r);
      if (x1 - x0 > 24 && b.task_id) {
        g.append(svg("text", { x: x0 + 3, y: y + 13, class: "barlabel" }, (b.name || shortId(b.task_id)).slice(0, Math.floor((x1 - x0 - 4) / 6))));
      }
    }
  });
  const id = "tl-" + n.node.replace(/[^A-Za-z0-9_-]/g, "_");
  return svg("svg", { viewBox: "0 0 " + W + " " + H, class: "timeline-svg", role: "img", "aria-labelledby": id + "-t " + id + "-d", "data-node": n.node },
    svg("title", { id: id + "-t" }, "Node " + n.node + ", the next " + Math.round((t1 - t0) / 3600000) + " hours"),
    svg("desc", { id: id + "-d" }, said.join("; ")), g);
}

function renderPlan() {
  const p = st.plan;
  const box = el("div", { id: "plan", class: "plan" });
  if (!p) { $("plan").replaceWith(box); return; }
  for (const n of p.nodes) {
    box.append(el("section", { class: "plan-node", "aria-label": "plan of node " + n.node },
      el("h4", {}, n.node, " ", el("small", {}, n.state)), nodeTimeline(n, p)));
  }
  $("plan").replaceWith(box);
  const r = p.reservation;
  const at = new Date(p.now);
  $("plan-sum").textContent = "Policy " + p.policy + ", planned at " + abs(at) + " on log seq " + p.seq + ". " +
    (r ? "The head of the queue, " + (r.name || "a task of team " + r.team) + " (" + shortId(r.task_id) + ", " + r.gpus +
      " GPUs), holds a reservation from " + abs(new Date(r.at)) + " (" + rel(new Date(r.at).getTime() - Date.now()) + ")."
      : "No reservation: nothing queued is blocked, or it never fits.");
  const last = Math.min(p.nodes_total, p.offset + p.nodes.length);
  $("plan-info").textContent = p.nodes_total ? "nodes " + (p.offset + 1) + "–" + last + " of " + p.nodes_total : "no nodes";
  $("plan-prev").disabled = p.offset === 0;
  $("plan-next").disabled = last >= p.nodes_total;
}

// ---- calibration ----------------------------------------------------------------

async function loadStats() {
  try {
    st.stats = await api("/v1/stats");
    renderCalib();
    if (view() === "calibration") renderCalibration();
  } catch (e) { if (e instanceof AuthError) askToken(e.message); }
}

const mins = (s) => (s >= 3600 ? (s / 3600).toFixed(1) + " h" : Math.round(s / 60) + " min");

// renderCalib: the estimates' recent coverage beside the queue's P50/P90.
function renderCalib() {
  const l = st.stats && st.stats.latest;
  $("queue-calib").textContent = l && l.n > 0
    ? "Start estimates: " + Math.round(l.p90_coverage * 10) + " in 10 P90s held (" + Math.round(l.p90_coverage * 100) + " % of " +
      l.n + " judged waits, the advisor's figures); the median P50 was off by " + mins(l.p50_median_abs_err_s) + "."
    : "Start estimates: not judged yet" + (st.stats && st.stats.error ? " (" + st.stats.error + ")" : "") + ".";
}

function renderCalibration() {
  const v = st.stats || { samples: [] };
  const l = v.latest;
  const judged = l && l.n > 0;
  facts($("calib-facts"), [["Judged waits", l ? l.n + (judged ? "" : " (a wait is judged once its task starts after 60 s or more)") : "no sample yet"],
    ["P90 coverage", judged ? (l.p90_coverage * 100).toFixed(1) + " % (goal 90 %)" : ""],
    ["Median P50 error", judged ? mins(l.p50_median_abs_err_s) : ""], ["Waits past 2× the P50", judged ? l.alerts : ""],
    ["Samples", v.samples.length], ["Note", v.error]]);
  const W = 720, H = 200, L = 40, R = 56, T = 10, B = 24;
  const ss = v.samples;
  const box = el("div", { id: "calib-chart" });
  if (ss.length > 0) {
    const ta = new Date(ss[0].at).getTime(), tb = Math.max(ta + 60000, new Date(ss[ss.length - 1].at).getTime());
    const emax = Math.max(60, ...ss.map((s) => s.p50_median_abs_err_s));
    const x = (s) => L + ((W - L - R) * (new Date(s.at).getTime() - ta)) / (tb - ta);
    const yc = (c) => T + (H - T - B) * (1 - c);
    const ye = (e) => T + (H - T - B) * (1 - e / emax);
    const pts = (f) => ss.map((s) => x(s).toFixed(1) + "," + f(s).toFixed(1)).join(" ");
    box.append(svg("svg", { viewBox: "0 0 " + W + " " + H, class: "calib-svg", role: "img", "aria-label":
      "P90 coverage from " + (ss[0].p90_coverage * 100).toFixed(0) + " % to " + (ss[ss.length - 1].p90_coverage * 100).toFixed(0) +
      " %; median P50 error from " + mins(ss[0].p50_median_abs_err_s) + " to " + mins(ss[ss.length - 1].p50_median_abs_err_s) },
      svg("line", { x1: L, x2: W - R, y1: yc(0.9), y2: yc(0.9), class: "goal" }),
      svg("text", { x: 0, y: yc(1) + 4, class: "axis" }, "100 %"), svg("text", { x: 0, y: yc(0.9) + 4, class: "axis" }, "90 %"),
      svg("text", { x: 0, y: yc(0) + 4, class: "axis" }, "0 %"),
      svg("text", { x: W - R + 4, y: ye(emax) + 4, class: "axis" }, mins(emax)), svg("text", { x: W - R + 4, y: ye(0) + 4, class: "axis" }, "0"),
      svg("text", { x: L, y: H - 6, class: "axis" }, abs(new Date(ta))), svg("text", { x: W - R - 40, y: H - 6, class: "axis" }, abs(new Date(tb))),
      svg("polyline", { points: pts((s) => yc(s.p90_coverage)), class: "cov" }),
      svg("polyline", { points: pts((s) => ye(s.p50_median_abs_err_s)), class: "err" })));
    box.append(el("p", { class: "legend-line" }, el("span", { class: "k-cov" }, "— P90 coverage (left)"), " ", el("span", { class: "k-err" }, "— median P50 error (right)")));
  } else {
    box.append(el("p", {}, "No samples yet" + (v.error ? ": " + v.error : "") + "."));
  }
  $("calib-chart").replaceWith(box);
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
    renderChecklist(t);
    api("/v1/tasks/" + encodeURIComponent(id) + "/explain")
      .then((ex) => { if (st.task === id) renderExplain(ex); })
      .catch((e) => { if (st.task === id) { $("task-explain-text").textContent = "No breakdown: " + e.message; $("task-explain").replaceChildren(); } });
    api("/v1/tasks/" + encodeURIComponent(id) + "/estimates")
      .then((v) => { if (st.task === id) renderEstimates(v); })
      .catch((e) => { if (st.task === id) $("task-estimates").textContent = "No estimates: " + e.message; });
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

const dur = (s) => (s >= 3600 ? Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min" : s >= 60 ? Math.round(s / 60) + " min" : Math.round(s) + " s");

// renderExplain shows `gpuq explain`'s breakdown: one line per cause.
function renderExplain(ex) {
  ex.parts = ex.parts.filter((p) => p.s >= 0.5); // under a second: nothing to break down
  $("task-explain-text").textContent = ex.parts.length
    ? (ex.waiting ? "Waiting for " : "Waited ") + dur(ex.waited_s) + " up to the log's last record, by cause (the policy's own reason at every record, as `gpuq explain` gives it):"
    : ex.waiting ? "Waiting; no record since its submission yet, so nothing of the wait is broken down (the breakdown runs the policy at every record). Its reason now is the estimate's, above."
    : "It did not wait (it started within a second).";
  const who = (b) => { const d = ex.tasks && ex.tasks[b]; return (d && d.name ? d.name : shortId(b)) + (d ? " (" + d.priority + ", team " + d.team + ")" : ""); };
  const ul = el("ul", { id: "task-explain", class: "parts" });
  for (const p of ex.parts) {
    ul.append(el("li", {}, el("strong", {}, p.cause), " ", dur(p.s),
      p.blocking.length ? el("span", {}, " — behind ", ...p.blocking.slice(0, 5).flatMap((b, i) => [i ? ", " : "", taskLink(b, who(b))])) : ""));
  }
  $("task-explain").replaceWith(ul);
}

// renderEstimates draws each P50/P90 start estimate when it was made, and
// the actual start.
function renderEstimates(v) {
  const box = el("div", { id: "task-estimates" });
  const ps = v.points || [];
  if (!ps.length) {
    box.append(el("p", {}, "No estimates heard by this submitter since it started" + (v.started_at ? "; started " + abs(new Date(v.started_at)) : "") + "."));
    $("task-estimates").replaceWith(box);
    return;
  }
  const W = 720, H = 180, L = 56, T = 8, B = 22;
  const t = (iso) => new Date(iso).getTime();
  const xs = ps.map((p) => t(p.at)).concat([t(v.submitted_at)]);
  const ys = ps.flatMap((p) => [t(p.p50_start), t(p.p90_start)]);
  if (v.started_at) { xs.push(t(v.started_at)); ys.push(t(v.started_at)); }
  if (!v.started_at) xs.push(Date.now());
  const xa = Math.min(...xs), xb = Math.max(xa + 60000, ...xs), ya = Math.min(...ys, xa), yb = Math.max(ya + 60000, ...ys);
  const x = (ms) => L + ((W - L - 8) * (ms - xa)) / (xb - xa);
  const y = (ms) => T + (H - T - B) * (1 - (ms - ya) / (yb - ya));
  const g = svg("g");
  g.append(svg("text", { x: 0, y: y(yb) + 10, class: "axis" }, abs(new Date(yb))), svg("text", { x: 0, y: y(ya), class: "axis" }, abs(new Date(ya))),
    svg("text", { x: L, y: H - 4, class: "axis" }, "estimated at " + abs(new Date(xa))), svg("text", { x: W - 120, y: H - 4, class: "axis" }, abs(new Date(xb))));
  for (const p of ps) {
    g.append(svg("line", { x1: x(t(p.at)), x2: x(t(p.at)), y1: y(t(p.p50_start)), y2: y(t(p.p90_start)), class: "p90" }));
  }
  g.append(svg("polyline", { points: ps.map((p) => x(t(p.at)).toFixed(1) + "," + y(t(p.p50_start)).toFixed(1)).join(" "), class: "p50" }));
  for (const p of ps) {
    g.append(svg("circle", { cx: x(t(p.at)), cy: y(t(p.p50_start)), r: 3, class: "p50" },
      svg("title", {}, "at " + abs(new Date(p.at)) + ": P50 " + abs(new Date(p.p50_start)) + ", P90 " + abs(new Date(p.p90_start)))));
  }
  if (v.started_at) {
    g.append(svg("line", { x1: L, x2: W - 8, y1: y(t(v.started_at)), y2: y(t(v.started_at)), class: "actual" }),
      svg("text", { x: L + 4, y: y(t(v.started_at)) - 3, class: "axis" }, "started " + abs(new Date(v.started_at))));
  }
  const last = ps[ps.length - 1];
  box.append(svg("svg", { viewBox: "0 0 " + W + " " + H, class: "est-svg", role: "img", "aria-label":
    ps.length + " estimates; the last, at " + abs(new Date(last.at)) + ": P50 " + abs(new Date(last.p50_start)) + ", P90 " + abs(new Date(last.p90_start)) +
    (v.started_at ? "; started " + abs(new Date(v.started_at)) : "; not started yet") }, g));
  box.append(el("p", { class: "legend-line" }, "Dots joined: the P50 start as estimated at each time; bars: up to the P90; dashed: the actual start."));
  $("task-estimates").replaceWith(box);
}

// renderChecklist ticks the playbook's items; with a token they can be
// ticked (POST /v1/tasks/{id}/checklist, the token in the Authorization
// header, never a cookie: no other site can make the browser send it).
function renderChecklist(t) {
  const can = AUTH && !!st.token && !ENDED.has(t.state);
  for (const box of $("checklist").querySelectorAll("input[type=checkbox]")) {
    box.checked = !!(t.checklist && t.checklist[box.name]);
    box.disabled = !can;
    box.dataset.task = t.task_id;
  }
  $("checklist-note").textContent = can ? "Ticking records the item in the log (as `gpuq checklist` does)."
    : !AUTH ? "Read-only: this gpuq runs without tokens; tick items with `gpuq checklist ID --done ITEM`."
    : ENDED.has(t.state) ? "The task has ended." : "Log in with a token to tick items.";
}

async function tick(box) {
  const id = box.dataset.task;
  box.disabled = true;
  try {
    const res = await fetch("/v1/tasks/" + encodeURIComponent(id) + "/checklist", { method: "POST", cache: "no-store",
      headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify({ item: box.name, done: box.checked }) });
    if (res.status === 401) throw new AuthError("the token was refused");
    const body = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error((body && body.error) || res.status + " " + res.statusText);
    $("checklist-note").textContent = box.name + (box.checked ? " ticked." : " unticked.");
  } catch (e) {
    box.checked = !box.checked;
    if (e instanceof AuthError) askToken(e.message);
    else $("checklist-note").textContent = "Not recorded: " + e.message;
  } finally { box.disabled = false; }
}

// ---- views -----------------------------------------------------------------

function view() {
  const h = location.hash.slice(1);
  if (h.startsWith("task/")) return "task";
  return ["queue", "cluster", "teams", "calibration"].includes(h) ? h : "queue";
}

function show() {
  const v = view();
  for (const name of ["queue", "cluster", "teams", "calibration", "task"]) $("view-" + name).hidden = name !== v;
  for (const name of ["queue", "cluster", "teams", "calibration"]) {
    const a = $("nav-" + name);
    if (name === v) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  st.task = v === "task" ? decodeURIComponent(location.hash.slice(6)) : null;
  if (st.task) loadTask(st.task);
  if (v === "cluster") loadPlan();
  if (v === "teams") loadTeams();
  if (v === "calibration") loadStats();
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
  loadStats();
  if (!started) { started = true; follow(); }
}

// ---- wiring ----------------------------------------------------------------

window.addEventListener("hashchange", show);
for (const id of ["f-team", "f-class", "f-state", "f-text"]) $(id).addEventListener("input", () => { st.page = 0; renderQueue(); });
$("filters").addEventListener("submit", (e) => e.preventDefault());
$("prev").addEventListener("click", () => { st.page--; renderQueue(); });
$("plan-hours").addEventListener("change", loadPlan);
$("plan-hours").closest("form").addEventListener("submit", (e) => e.preventDefault());
$("plan-prev").addEventListener("click", () => { st.planOffset = Math.max(0, st.planOffset - PLAN_NODES); loadPlan(); });
$("plan-next").addEventListener("click", () => { st.planOffset += PLAN_NODES; loadPlan(); });
$("checklist").addEventListener("change", (e) => { if (e.target.type === "checkbox") tick(e.target); });
$("checklist").addEventListener("submit", (e) => e.preventDefault());
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
setInterval(() => { if (view() === "cluster") loadPlan(); }, 30000); // predicted ends move with the clock
setInterval(() => { if (!AUTH || st.token) loadStats(); }, 60000); // the calibration, sampled each minute

if (AUTH && !st.token) askToken(""); else start();
