// The diffuse dashboard: polls GET /v1/series and GET /v1/status every second with the token in
// an Authorization header, and draws the paper's live figures with uPlot (bundled, no CDN).
// Every value from the dispatcher reaches the page as text (textContent), never as HTML.
"use strict";

const KEY = "diffuse-token";
const WINDOW_S = 600; // seconds of history drawn
let token = null;
let since = 0;
const points = []; // samples from /v1/series, oldest first
let charts = null;
let updates = 0;

function takeToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
    // Out of the address bar and the history.
    history.replaceState(null, "", location.pathname);
  }
  return sessionStorage.getItem(KEY);
}

async function get(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + token } });
  if (r.status === 401) {
    sessionStorage.removeItem(KEY);
    throw new Error("the token was refused");
  }
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

function el(tag, text) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function size(b) {
  const u = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (b >= 1000 && i < u.length - 1) { b /= 1000; i++; }
  return (i ? b.toFixed(1) : b) + " " + u[i];
}

function chart(id, series, yLabel) {
  const node = document.getElementById(id);
  const opts = {
    width: Math.max(520, node.clientWidth || 560),
    height: 220,
    scales: { x: { time: true } },
    axes: [{}, { label: yLabel }],
    series: [{}].concat(series),
  };
  return new uPlot(opts, [[]].concat(series.map(() => [])), node);
}

function makeCharts() {
  return {
    throughput: chart("c-throughput", [
      { label: "demand", stroke: "#999", dash: [4, 4] },
      { label: "local", stroke: "#2a9d4b" },
      { label: "peer", stroke: "#4a7bd0" },
      { label: "storage", stroke: "#d0504a" },
    ], "Gb/s"),
    queue: chart("c-queue", [
      { label: "waiting", stroke: "#d08a1a" },
      { label: "running", stroke: "#4a7bd0" },
    ], "tasks"),
    workers: chart("c-workers", [
      { label: "workers", stroke: "#555" },
      { label: "busy slots", stroke: "#4a7bd0" },
      { label: "slots", stroke: "#aaa", dash: [4, 4] },
    ], ""),
    hits: chart("c-hits", [
      { label: "local", stroke: "#2a9d4b" },
      { label: "peer", stroke: "#4a7bd0" },
      { label: "miss", stroke: "#d0504a" },
    ], "accesses/s"),
  };
}

// Rates between consecutive samples.
function draw() {
  const recent = points.filter((p) => p.t >= points[points.length - 1].t - WINDOW_S);
  const t = [], demand = [], local = [], peer = [], storage = [];
  const waiting = [], running = [], workers = [], busy = [], slots = [];
  const hl = [], hp = [], hm = [];
  for (let i = 1; i < recent.length; i++) {
    const a = recent[i - 1], b = recent[i];
    const dt = Math.max(b.t - a.t, 0.001);
    const gbps = (x) => (x * 8) / 1e9 / dt;
    t.push(b.t);
    demand.push(gbps(b.demand_bytes - a.demand_bytes));
    local.push(gbps(b.bytes_local - a.bytes_local));
    peer.push(gbps(b.bytes_peer - a.bytes_peer));
    storage.push(gbps(b.bytes_storage - a.bytes_storage));
    waiting.push(b.queued);
    running.push(b.running);
    workers.push(b.workers);
    busy.push(b.busy_slots);
    slots.push(b.slots);
    hl.push((b.local - a.local) / dt);
    hp.push((b.peer - a.peer) / dt);
    hm.push((b.storage - a.storage) / dt);
  }
  charts.throughput.setData([t, demand, local, peer, storage]);
  charts.queue.setData([t, waiting, running]);
  charts.workers.setData([t, workers, busy, slots]);
  charts.hits.setData([t, hl, hp, hm]);
  document.body.dataset.points = String(t.length);
}

function showStatus(s) {
  const c = document.getElementById("counters");
  c.replaceChildren();
  const add = (label, v) => {
    const span = el("span", label + " ");
    span.append(el("b", v));
    c.append(span);
  };
  add("waiting", s.queued);
  add("running", s.running);
  if (s.held_ready) add("held ready", s.held_ready);
  add("succeeded", s.succeeded);
  if (s.reused) add("of which reused", s.reused);
  add("failed", s.failed);
  add("workers", s.workers);
  const t = s.traffic;
  const n = t.local + t.peer + t.storage;
  add("local hits", n ? Math.round((100 * t.local) / n) + "%" : "-");
  add("read from storage", size(t.bytes_storage));
  document.body.dataset.succeeded = String(s.succeeded);
  document.body.dataset.reused = String(s.reused || 0);
  document.body.dataset.bytesLocal = String(t.bytes_local);

  const wb = document.querySelector("#workers tbody");
  wb.replaceChildren();
  for (const w of s.worker_list || []) {
    const tr = el("tr");
    tr.dataset.worker = w.name;
    tr.append(el("td", w.name), el("td", w.state));
    tr.append(el("td", w.slots ? w.slots[1] + " / " + w.slots[0] : "-"));
    const cache = el("td");
    if (w.cache) {
      const [quota, used] = w.cache;
      const bar = el("span");
      bar.className = "bar";
      const fill = el("i");
      fill.style.width = (quota ? Math.min(100, (100 * used) / quota) : 0) + "%";
      bar.append(fill);
      cache.append(bar, " " + size(used) + " of " + size(quota));
    } else {
      cache.textContent = "-";
    }
    const warm = w.warm
      ? w.warm.processes + " (" + w.warm.calls + " calls, " + size(w.warm.rss) + ")"
      : "-";
    tr.append(cache, el("td", w.cache ? w.cache[2] : "-"), el("td", warm), el("td", w.job || ""));
    wb.append(tr);
  }
  if (s.worker_list_more) {
    // A large pool: the status lists the first workers; the counts above cover all of them.
    const tr = el("tr");
    const td = el("td", "... and " + s.worker_list_more + " more (GET /v1/workers)");
    td.colSpan = 7;
    tr.append(td);
    wb.append(tr);
  }
  const fb = document.querySelector("#failures tbody");
  fb.replaceChildren();
  for (const f of s.recent_failures || []) {
    const tr = el("tr");
    tr.append(el("td", f.id), el("td", f.node || "-"), el("td", f.why),
      el("td", new Date(f.at * 1000).toLocaleTimeString()));
    fb.append(tr);
  }
}

async function tick() {
  try {
    const [fresh, status] = await Promise.all([get("/v1/series?since=" + since), get("/v1/status")]);
    for (const p of fresh) points.push(p);
    if (fresh.length) since = fresh[fresh.length - 1].seq;
    while (points.length > 3600) points.shift();
    if (points.length > 1) draw();
    showStatus(status);
    updates++;
    document.body.dataset.updates = String(updates);
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = String(e.message || e);
    if (!sessionStorage.getItem(KEY)) return login();
  }
  setTimeout(tick, 1000);
}

function login() {
  document.getElementById("main").hidden = true;
  const f = document.getElementById("login");
  f.hidden = false;
  f.onsubmit = (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, document.getElementById("token").value.trim());
    start();
  };
}

function start() {
  token = takeToken();
  if (!token) return login();
  document.getElementById("login").hidden = true;
  document.getElementById("main").hidden = false;
  if (!charts) charts = makeCharts();
  tick();
}

document.getElementById("search").onsubmit = async (ev) => {
  ev.preventDefault();
  const id = document.getElementById("task-id").value.trim();
  const out = document.getElementById("task");
  out.hidden = false;
  try {
    out.textContent = JSON.stringify(await get("/v1/tasks/" + encodeURIComponent(id)), null, 2);
  } catch (e) {
    out.textContent = String(e.message || e);
  }
};

start();
