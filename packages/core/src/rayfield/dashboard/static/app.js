// rayfield dashboard: one page, one tab per view, refreshed from /api every second.
// Data is only ever put into the page as text (textContent), never as HTML.
"use strict";

const REFRESH_MS = 1000;
const TIMELINE_EVENTS = 2000;
const LOG_KEEP_CHARS = 256 * 1024;
const PHASE_COLORS = {
  queued: "#c9d3e6", "fetching arguments": "#f2c14e", running: "#3d6fd8",
  "storing results": "#7bc47f", profile: "#b07cc6",
};

let activeTab = "nodes";
let busy = false;
let log = null; // {node, name, next} of the followed log file
let timelineDrawnAt = 0;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
}

function fmtBytes(n) {
  if (n === undefined || n === null) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

function fmtNum(x) { return String(Number(Number(x).toFixed(4))); }

function bar(fraction) {
  const inner = el("span");
  inner.style.width = `${Math.max(0, Math.min(1, fraction || 0)) * 100}%`;
  return el("span", { class: "bar" }, inner);
}

function fill(tableId, rows) {
  const body = document.querySelector(`#${tableId} tbody`);
  body.replaceChildren(...rows);
}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  if (response.status === 401) { window.location.assign("/login"); throw new Error("logged out"); }
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// ---- views ------------------------------------------------------------------------

function renderNodes(nodes) {
  const alive = nodes.filter((n) => n.alive);
  let cpuUsed = 0, cpuTotal = 0, storeUsed = 0, storeCap = 0;
  for (const n of alive) {
    cpuTotal += n.resources_total.CPU || 0;
    cpuUsed += (n.resources_total.CPU || 0) - (n.resources_available.CPU || 0);
    storeUsed += n.store_used || 0;
    storeCap += n.store_capacity || 0;
  }
  document.getElementById("summary").textContent =
    `${alive.length} node${alive.length === 1 ? "" : "s"} alive · CPU ${fmtNum(cpuUsed)}/${fmtNum(cpuTotal)} in use · ` +
    `store ${fmtBytes(storeUsed)} / ${fmtBytes(storeCap)}`;
  fill("nodes-table", nodes.map((n) => {
    const state = n.alive ? (n.reachable ? "alive" : "unreachable") : "dead";
    const resources = Object.keys(n.resources_total).sort().map((k) => {
      const total = n.resources_total[k];
      const used = total - (n.resources_available[k] ?? total);
      return `${k} ${fmtNum(used)}/${fmtNum(total)}`;
    }).join(", ");
    const live = n.reachable;
    return el("tr", { "data-node": n.address, "data-node-id": n.node_id },
      el("td", { class: "c-address" }, n.address),
      el("td", { class: "id" }, n.node_id.slice(0, 12)),
      el("td", { class: `c-state state-${n.alive ? "alive" : "dead"}`, title: n.death_reason || n.error || "" }, state),
      el("td", { class: "c-cpu" }, live ? bar(n.cpu_percent / 100) : "", live ? `${n.cpu_percent.toFixed(1)}%` : "-"),
      el("td", { class: "c-memory" }, live ? bar(n.memory_used / n.memory_total) : "",
        live ? `${fmtBytes(n.memory_used)} / ${fmtBytes(n.memory_total)}` : "-"),
      el("td", { class: "c-store" }, live ? bar(n.store_used / n.store_capacity) : "",
        live ? `${fmtBytes(n.store_used)} / ${fmtBytes(n.store_capacity)}` : "-"),
      el("td", { class: "c-objects" }, live ? n.num_objects : "-"),
      el("td", { class: "c-resources" }, resources),
      el("td", { class: "c-workers" }, live ? n.num_workers : "-"),
      el("td", { class: "c-tasks" }, live ? `${n.tasks_running} / ${n.tasks_queued}` : "-"));
  }));
}

function renderActors(actors) {
  actors.sort((a, b) => (a.class_name + a.actor_id).localeCompare(b.class_name + b.actor_id));
  fill("actors-table", actors.map((a) => el("tr", { "data-actor": a.actor_id },
    el("td", { class: "c-class" }, a.class_name),
    el("td", { class: `c-state state-${a.state}` }, a.state),
    el("td", { class: "id" }, a.actor_id),
    el("td", {}, a.name || ""),
    el("td", {}, a.node || ""),
    el("td", { class: "c-pid" }, a.pid ?? ""))));
}

function renderJobs(jobs) {
  const now = Date.now() / 1000;
  fill("jobs-table", jobs.map((j) => el("tr", { "data-job": j.job_id },
    el("td", { class: "id" }, j.job_id),
    el("td", { class: `c-state state-${j.state}` }, j.state),
    el("td", { class: "c-pid" }, j.driver_pid),
    el("td", {}, j.node),
    el("td", {}, new Date(j.start_s * 1000).toLocaleString()),
    el("td", {}, `${Math.round((j.end_s || now) - j.start_s)} s`),
    el("td", { class: "c-entrypoint" }, j.entrypoint))));
}

function renderTasks(summary) {
  const states = Object.keys(summary.counts).sort();
  document.getElementById("task-counts").replaceChildren(
    el("div", { class: "count-card" }, el("span", { class: "count", "data-state": "ALL" }, summary.total), "all"),
    ...states.map((s) => el("div", { class: "count-card" },
      el("span", { class: `count state-${s}`, "data-state": s }, summary.counts[s]), s)));
  fill("tasks-table", summary.recent.map((t) => el("tr", { "data-task": t.task_id },
    el("td", { class: "c-name" }, t.name || "(running)"),
    el("td", { class: `c-state state-${t.state}` }, t.state),
    el("td", {}, t.node),
    el("td", {}, t.pid ?? ""),
    el("td", {}, t.duration_s !== undefined ? `${(t.duration_s * 1000).toFixed(1)} ms` : ""),
    el("td", { class: "id" }, t.task_id))));
}

function renderObjects(objects) {
  fill("objects-table", objects.map((o) => el("tr", { "data-object": o.object_id },
    el("td", { class: "id" }, o.object_id),
    el("td", { class: "c-size" }, fmtBytes(o.size_bytes)),
    el("td", {}, o.node),
    el("td", { class: "c-owner" }, o.owner_pid ?? ""),
    el("td", {}, o.ref_count),
    el("td", {}, o.reason))));
}

function renderLogFiles(files) {
  const box = document.getElementById("log-files");
  const byNode = new Map();
  for (const f of files) {
    if (!byNode.has(f.node)) byNode.set(f.node, []);
    byNode.get(f.node).push(f);
  }
  const parts = [];
  for (const [node, list] of [...byNode.entries()].sort()) {
    parts.push(el("h3", {}, node));
    list.sort((a, b) => a.name.localeCompare(b.name));
    for (const f of list) {
      const active = log && log.node === node && log.name === f.name;
      const button = el("button", { class: active ? "log-file active" : "log-file", "data-node": node, "data-name": f.name },
        `${f.name} (${fmtBytes(f.size)})`);
      button.addEventListener("click", () => openLog(node, f.name));
      parts.push(button);
    }
  }
  box.replaceChildren(...parts);
}

function openLog(node, name) {
  log = { node, name, next: null };
  document.getElementById("log-title").textContent = `${name} on ${node}`;
  document.getElementById("log-view").textContent = "";
  for (const b of document.querySelectorAll("#log-files button")) {
    b.classList.toggle("active", b.dataset.node === node && b.dataset.name === name);
  }
  followLog();
}

async function followLog() {
  if (!log) return;
  const current = log;
  if (current.next !== null && !document.getElementById("log-follow").checked) return;
  const params = new URLSearchParams({ node: current.node, name: current.name });
  if (current.next !== null) params.set("offset", current.next);
  const part = await api(`/api/log?${params}`);
  if (log !== current) return; // another file was chosen meanwhile
  const view = document.getElementById("log-view");
  const atBottom = view.scrollTop + view.clientHeight >= view.scrollHeight - 4;
  if (current.next !== null && part.size < current.next) view.textContent = ""; // rotated
  let text = view.textContent + part.data;
  if (text.length > LOG_KEEP_CHARS) text = text.slice(text.length - LOG_KEEP_CHARS);
  if (part.data || current.next === null) view.textContent = text;
  current.next = part.next_offset;
  if (atBottom) view.scrollTop = view.scrollHeight;
}

function drawTimeline(trace) {
  const svgNs = "http://www.w3.org/2000/svg";
  const box = document.getElementById("timeline");
  const spans = trace.filter((e) => e.ph === "X");
  document.getElementById("timeline-info").textContent = `${spans.length} spans`;
  if (spans.length === 0) { box.replaceChildren(el("p", {}, "No task has finished yet.")); return; }
  const rowKeys = [...new Set(spans.map((e) => `${e.pid}\u0000${e.tid}`))].sort();
  const rowOf = new Map(rowKeys.map((k, i) => [k, i]));
  const start = Math.min(...spans.map((e) => e.ts));
  const end = Math.max(...spans.map((e) => e.ts + e.dur));
  const labelW = 230, width = Math.max(900, box.clientWidth - 20), rowH = 20;
  const scale = (width - labelW - 10) / Math.max(end - start, 1);
  const svg = document.createElementNS(svgNs, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", rowKeys.length * rowH + 24);
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(svgNs, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  rowKeys.forEach((key, i) => {
    const [node, worker] = key.split("\u0000");
    add("text", { x: 4, y: i * rowH + 14, class: "row-label", "font-size": 12 }, `${node} pid ${worker}`);
    add("line", { x1: labelW, x2: width, y1: (i + 1) * rowH, y2: (i + 1) * rowH, stroke: "#eee" });
  });
  // Waiting in the queue is drawn thin and first, so the work on a worker stays visible.
  const phaseOf = (e) => (e.args && e.args.phase) || e.cat;
  spans.sort((a, b) => (phaseOf(b) === "queued") - (phaseOf(a) === "queued"));
  for (const e of spans) {
    const phase = phaseOf(e);
    const thin = phase === "queued";
    const rect = add("rect", {
      class: "span", x: labelW + (e.ts - start) * scale,
      y: rowOf.get(`${e.pid}\u0000${e.tid}`) * rowH + (thin ? rowH / 2 - 2 : 3),
      width: Math.max(1, e.dur * scale), height: thin ? 4 : rowH - 6, fill: PHASE_COLORS[phase] || "#999",
      "data-name": e.name,
    });
    const title = document.createElementNS(svgNs, "title");
    title.textContent = `${e.name} (${phase}): ${(e.dur / 1000).toFixed(2)} ms`;
    rect.append(title);
  }
  add("text", { x: labelW, y: rowKeys.length * rowH + 18, "font-size": 11 },
    `${((end - start) / 1e6).toFixed(3)} s from ${new Date(start / 1000).toLocaleTimeString()}`);
  box.replaceChildren(svg);
}

function drawLegend() {
  document.getElementById("timeline-legend").replaceChildren(...Object.entries(PHASE_COLORS).map(([name, color]) => {
    const swatch = el("i");
    swatch.style.background = color;
    return el("span", {}, swatch, name);
  }));
}

// ---- refresh loop -------------------------------------------------------------------

const VIEWS = {
  nodes: async () => {},
  actors: async () => renderActors(await api("/api/actors")),
  jobs: async () => renderJobs(await api("/api/jobs")),
  tasks: async () => renderTasks(await api("/api/tasks")),
  objects: async () => renderObjects(await api("/api/objects")),
  logs: async () => { renderLogFiles(await api("/api/logs")); await followLog(); },
  timeline: async () => {
    if (Date.now() - timelineDrawnAt < 3 * REFRESH_MS) return; // heavier: every 3 s
    timelineDrawnAt = Date.now();
    drawTimeline(await api(`/api/timeline?limit=${TIMELINE_EVENTS}`));
  },
};

// ---- pages of other packages (rayfield.dashboard.pages) ------------------------------

const pageRefresh = {}; // page name -> refresh(section, tools), set by the page's script

window.rayfieldDashboard = {
  addPage(name, refreshPage) { pageRefresh[name] = refreshPage; if (activeTab === name) refresh(); },
};

function pageTools(name) {
  return {
    api, el, fmtNum, fmtBytes,
    dataUrl: (params) => `/api/pages/${encodeURIComponent(name)}?${new URLSearchParams(params || {})}`,
  };
}

async function loadPages() {
  const pages = await api("/api/pages");
  const nav = document.getElementById("tabs");
  const main = document.querySelector("main");
  for (const page of pages) {
    nav.append(el("a", { href: `#${page.name}`, "data-tab": page.name }, page.title));
    const section = el("section", { id: `tab-${page.name}`, class: "page", hidden: true });
    main.append(section);
    VIEWS[page.name] = async () => {
      const draw = pageRefresh[page.name];
      if (draw) await draw(section, pageTools(page.name));
    };
    const script = el("script", { src: `/static/pages/${encodeURIComponent(page.name)}.js` });
    document.head.append(script);
  }
}

async function refresh() {
  if (busy) return;
  busy = true;
  const status = document.getElementById("status");
  try {
    renderNodes(await api("/api/nodes"));
    await VIEWS[activeTab]();
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    status.className = "";
  } catch (err) {
    status.textContent = `error: ${err.message}`;
    status.className = "error";
  } finally {
    busy = false;
  }
}

function showTab() {
  const name = window.location.hash.slice(1);
  activeTab = name in VIEWS ? name : "nodes";
  for (const section of document.querySelectorAll("main > section")) {
    section.hidden = section.id !== `tab-${activeTab}`;
  }
  for (const link of document.querySelectorAll("#tabs a")) {
    link.classList.toggle("active", link.dataset.tab === activeTab);
  }
  timelineDrawnAt = 0;
  refresh();
}

window.addEventListener("hashchange", showTab);
document.addEventListener("DOMContentLoaded", () => {
  drawLegend();
  loadPages().catch((err) => {
    const status = document.getElementById("status");
    status.textContent = `error: pages of other packages: ${err.message}`;
    status.className = "error";
  }).finally(() => {
    showTab();
    setInterval(refresh, REFRESH_MS);
  });
});
