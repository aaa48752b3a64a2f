// trainready explorer: a canvas timeline over the server's level-of-detail API (no dependencies).
"use strict";

const LABEL_W = 230;     // left column with group and row titles, css px
const AXIS_H = 22;       // time ruler
const LANE_H = 16;       // one lane of a row
const ROW_PAD = 4;
const GROUP_H = 18;
const MEM_H = 64;        // memory counter track
const DEP_COLORS = {     // one colour per dependency type (the legend lists those present)
  launch: "#e6550d", stream: "#6a51a3", fwdbwd: "#31a354", sync: "#d6273b",
  critical: "#111111", host: "#3182bd", enclosing: "#8c6d31",
};
const FALLBACK = ["#17becf", "#bcbd22", "#7f7f7f", "#e377c2", "#8c564b"];
const KIND_HUES = { kernel: 210, memcpy: 35, memset: 50, sync: 0, runtime: 280, cpu_op: 140,
  user_annotation: 190, gpu_annotation: 190, python: 95, profiler: 0, other: 0 };

const $ = (sel) => document.querySelector(sel);
const canvas = $("#canvas");
const ctx = canvas.getContext("2d");

const state = {
  traces: [], uploads: false, id: null, meta: null, layout: [], contentH: 0,
  t0: 0, t1: 1, scrollY: 0, data: null, memory: null, query: "",
  selected: null, details: null, fetchTimer: 0, controller: null, painted: false, width: 1, height: 1,
};

// -- helpers ---------------------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "style") Object.assign(node.style, v);  // CSSOM, allowed by the page's CSP
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function showError(message) {
  const box = $("#error");
  box.textContent = message || "";
  box.hidden = !message;
}

async function api(path, options) {
  const response = await fetch(path, options);
  let body;
  try {
    body = await response.json();
  } catch (e) {
    if (e.name === "AbortError" || response.ok) throw e;  // aborted, or a body cut short
    throw new Error(`HTTP ${response.status}`);
  }
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

const trace = () => `/api/traces/${encodeURIComponent(state.id)}`;

function fmtTime(ns) {
  const a = Math.abs(ns);
  if (a >= 1e9) return (ns / 1e9).toFixed(3) + " s";
  if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
  if (a >= 1e3) return (ns / 1e3).toFixed(2) + " µs";
  return ns.toFixed(0) + " ns";
}
function fmtBytes(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(b) >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return b.toFixed(i ? 1 : 0) + " " + units[i];
}
function fmtNum(x, digits = 3) {
  if (x === null || x === undefined) return "—";
  if (typeof x !== "number") return String(x);
  return Number.isInteger(x) ? x.toLocaleString("en-US") : x.toPrecision(digits);
}
function hash(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}
function nameColor(name, kindName) {
  const base = KIND_HUES[kindName] ?? 0;
  const h = (base + (hash(name) % 50) - 25 + 360) % 360;
  const l = 48 + (hash(name) >> 8) % 18;
  return `hsl(${h} 55% ${l}%)`;
}
const depColor = (() => {
  const extra = {};
  return (type) => DEP_COLORS[type] || (extra[type] ||= FALLBACK[Object.keys(extra).length % FALLBACK.length]);
})();

// -- layout ----------------------------------------------------------------------------------------
function buildLayout() {
  const rows = [];
  let y = 0, group = null;
  for (const r of state.meta.rows) {
    if (r.group !== group) { group = r.group; rows.push({ header: group, y, h: GROUP_H }); y += GROUP_H; }
    const h = r.lanes * LANE_H + ROW_PAD;
    rows.push({ row: r, y, h });
    y += h;
  }
  state.layout = rows;
  state.byRow = new Map(rows.filter((r) => r.row).map((r) => [r.row.id, r]));
  state.contentH = y;
}
const memH = () => (state.meta && state.meta.has_memory ? MEM_H : 0);
const plotW = () => Math.max(1, state.width - LABEL_W);
const plotH = () => Math.max(1, state.height - AXIS_H - memH());
const xOf = (t) => LABEL_W + ((t - state.t0) / (state.t1 - state.t0)) * plotW();
const tOf = (x) => state.t0 + ((x - LABEL_W) / plotW()) * (state.t1 - state.t0);
const yOfRow = (entry) => AXIS_H + entry.y - state.scrollY;

function visibleRows() {
  const top = state.scrollY, bottom = state.scrollY + plotH();
  return state.layout.filter((e) => e.row && e.y + e.h >= top && e.y <= bottom).map((e) => e.row.id);
}

// -- view changes ----------------------------------------------------------------------------------
function clampView() {
  const total = Math.max(1, state.meta.duration_ns);
  const span = Math.min(Math.max(state.t1 - state.t0, 100), total * 4);
  let t0 = Math.min(Math.max(state.t0, -total * 0.5), total * 1.5 - span);
  state.t0 = t0; state.t1 = t0 + span;
  state.scrollY = Math.min(Math.max(0, state.scrollY), Math.max(0, state.contentH - plotH()));
}
function setView(t0, t1) {
  state.t0 = t0; state.t1 = t1;
  $("#tip").hidden = true;  // what it named has moved
  clampView(); draw(); scheduleFetch();
}
function zoom(factor, atX) {
  const t = tOf(atX ?? LABEL_W + plotW() / 2);
  setView(t - (t - state.t0) * factor, t + (state.t1 - t) * factor);
}
function pan(dx) { const dt = (dx / plotW()) * (state.t1 - state.t0); setView(state.t0 + dt, state.t1 + dt); }
function scroll(dy) { state.scrollY += dy; clampView(); draw(); scheduleFetch(); }
function fit() { const d = state.meta.duration_ns || 1; setView(-d * 0.01, d * 1.01); }

function scheduleFetch() {
  state.pending = true;
  clearTimeout(state.fetchTimer);
  state.fetchTimer = setTimeout(fetchWindow, 40);
}

async function fetchWindow() {
  if (!state.meta) return;
  if (state.controller) state.controller.abort();
  const controller = (state.controller = new AbortController());
  const span = state.t1 - state.t0;
  const t0 = state.t0 - span / 2, t1 = state.t1 + span / 2;  // half a screen either side: smooth pans
  const px = Math.round(plotW() * 2);
  const q = encodeURIComponent(state.query);
  const id = state.id;
  try {
    const url = `${trace()}/view?t0=${t0}&t1=${t1}&px=${px}&rows=${visibleRows().join(",")}&q=${q}`;
    const data = await api(url, { signal: controller.signal });
    if (id !== state.id) return;
    data.byRow = new Map(data.rows.map((r) => [r.row, r]));
    state.data = data;
    if (state.meta.has_memory) state.memory = await api(`${trace()}/memory?t0=${t0}&t1=${t1}&px=${px}`, { signal: controller.signal });
    if (controller === state.controller) state.pending = false;
    draw();
    if (!state.painted) {
      state.painted = true;
      performance.mark("timeline-first-paint");
      document.body.dataset.painted = "1";
    }
  } catch (e) {
    if (e.name !== "AbortError") showError(e.message);
  }
}

// -- drawing ---------------------------------------------------------------------------------------
function resize() {
  const rect = canvas.getBoundingClientRect();
  const dpr = window.devicePixelRatio || 1;
  state.width = Math.max(1, rect.width); state.height = Math.max(1, rect.height);
  canvas.width = Math.round(state.width * dpr); canvas.height = Math.round(state.height * dpr);
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  if (state.meta) { clampView(); draw(); scheduleFetch(); }
}

function draw() {
  ctx.clearRect(0, 0, state.width, state.height);
  if (!state.meta) return;
  ctx.save();
  ctx.beginPath(); ctx.rect(0, AXIS_H, state.width, plotH()); ctx.clip();
  for (const entry of state.layout) {
    const y = yOfRow(entry);
    if (y + entry.h < AXIS_H || y > AXIS_H + plotH()) continue;
    if (entry.header) drawGroup(entry, y); else drawRow(entry, y);
  }
  drawDependencies();
  ctx.restore();
  drawAxis();
  if (memH()) drawMemory();
  ctx.fillStyle = "#d9dde5"; ctx.fillRect(LABEL_W - 1, 0, 1, state.height);
}

function drawGroup(entry, y) {
  ctx.fillStyle = "#eef1f6"; ctx.fillRect(0, y, state.width, GROUP_H);
  ctx.fillStyle = "#1d2330"; ctx.font = "600 12px system-ui, sans-serif"; ctx.textBaseline = "middle";
  ctx.fillText(entry.header, 6, y + GROUP_H / 2, state.width - 12);
}

function drawRow(entry, y) {
  const r = entry.row;
  ctx.fillStyle = "#ffffff"; ctx.fillRect(LABEL_W, y, plotW(), entry.h);
  ctx.fillStyle = "#eef0f4"; ctx.fillRect(0, y + entry.h - 1, state.width, 1);
  ctx.fillStyle = "#1d2330"; ctx.font = "12px system-ui, sans-serif"; ctx.textBaseline = "middle";
  ctx.fillText(r.title, 14, y + Math.min(entry.h, LANE_H) / 2 + 1, LABEL_W - 20);
  const d = state.data && state.data.byRow.get(r.id);
  if (!d) return;
  ctx.save();
  ctx.beginPath(); ctx.rect(LABEL_W, y, plotW(), entry.h); ctx.clip();
  // idle gaps (bubbles) of a device stream
  ctx.fillStyle = "rgba(214, 39, 59, 0.10)";
  for (const [a, b] of d.gaps) { const x0 = xOf(a), x1 = xOf(b); ctx.fillRect(x0, y, Math.max(1, x1 - x0), entry.h - 1); }
  // aggregates: what is narrower than a pixel, shaded by how much of the column it covers
  const nsPx = (state.data.t1 - state.data.t0) / state.data.px;
  const kindName = state.meta.kinds;
  const agg = d.agg;
  for (let i = 0; i < agg.x.length; i++) {
    const t = state.data.t0 + agg.x[i] * nsPx;
    const x0 = xOf(t), x1 = xOf(t + nsPx);
    ctx.fillStyle = `rgba(60, 90, 140, ${0.25 + 0.75 * agg.fill[i]})`;
    ctx.fillRect(x0, y + agg.lane[i] * LANE_H + 1, Math.max(1, x1 - x0), LANE_H - 2);
    if (agg.hit.length && agg.hit[i]) { ctx.fillStyle = "#ffb000"; ctx.fillRect(x0, y + agg.lane[i] * LANE_H, Math.max(2, x1 - x0), 3); }
  }
  // events a pixel wide or more
  const ev = d.ev;
  const hits = new Set(ev.hit || []);
  ctx.font = "11px system-ui, sans-serif";
  for (let i = 0; i < ev.id.length; i++) {
    const x0 = Math.max(xOf(ev.ts[i]), LABEL_W - 2), x1 = Math.min(xOf(ev.ts[i] + ev.dur[i]), state.width + 2);
    if (x1 < LABEL_W || x0 > state.width) continue;
    const ly = y + ev.lane[i] * LANE_H + 1, w = Math.max(1, x1 - x0);
    const name = state.data.names[ev.name[i]];
    ctx.fillStyle = nameColor(name, kindName[ev.kind[i]]);
    ctx.fillRect(x0, ly, w, LANE_H - 2);
    if (hits.has(i)) { ctx.strokeStyle = "#ffb000"; ctx.lineWidth = 2; ctx.strokeRect(x0 + 1, ly + 1, w - 2, LANE_H - 4); }
    if (w > 30) {
      ctx.fillStyle = "#ffffff";
      ctx.fillText(name, x0 + 3, ly + LANE_H / 2, w - 6);
    }
  }
  ctx.restore();
}

function rectOf(place) {
  const entry = state.byRow.get(place.row);
  if (!entry) return null;
  const x0 = xOf(place.ts), x1 = xOf(place.ts + place.dur);
  return { x0, x1: Math.max(x1, x0 + 2), y: yOfRow(entry) + place.lane * LANE_H + 1, h: LANE_H - 2 };
}

function drawDependencies() {
  const det = state.details;
  if (!det) return;
  const self = rectOf(det.place);
  for (const dep of det.dependencies.concat(det.dependents)) {
    const other = rectOf(dep.place);
    if (!other || !self) continue;
    const color = depColor(dep.type);
    ctx.strokeStyle = color; ctx.lineWidth = 2;
    ctx.strokeRect(other.x0, other.y, other.x1 - other.x0, other.h);
    const incoming = det.dependencies.includes(dep);
    const [from, to] = incoming ? [other, self] : [self, other];
    const ax = from.x1, ay = from.y + from.h / 2, bx = to.x0, by = to.y + to.h / 2;
    ctx.beginPath(); ctx.moveTo(ax, ay);
    const mid = Math.max(20, Math.abs(bx - ax) / 2);
    ctx.bezierCurveTo(ax + mid, ay, bx - mid, by, bx, by); ctx.stroke();
    ctx.beginPath(); ctx.moveTo(bx, by); ctx.lineTo(bx - 7, by - 4); ctx.lineTo(bx - 7, by + 4); ctx.closePath();
    ctx.fillStyle = color; ctx.fill();
  }
  if (self) {
    ctx.strokeStyle = "#000"; ctx.lineWidth = 2; ctx.setLineDash([4, 2]);
    ctx.strokeRect(self.x0 - 1, self.y - 1, self.x1 - self.x0 + 2, self.h + 2); ctx.setLineDash([]);
  }
}

function niceStep(span, target) {
  const raw = span / target, p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function drawAxis() {
  ctx.fillStyle = "#ffffff"; ctx.fillRect(0, 0, state.width, AXIS_H);
  ctx.fillStyle = "#d9dde5"; ctx.fillRect(0, AXIS_H - 1, state.width, 1);
  const step = niceStep(state.t1 - state.t0, Math.max(2, plotW() / 110));
  ctx.fillStyle = "#6b7385"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
  for (let t = Math.ceil(state.t0 / step) * step; t <= state.t1; t += step) {
    const x = xOf(t);
    ctx.fillRect(x, AXIS_H - 6, 1, 6);
    ctx.fillText(fmtTime(t), x + 3, AXIS_H / 2 - 1);
  }
  ctx.fillStyle = "#1d2330";
  ctx.fillText(`${state.meta.events.toLocaleString("en-US")} events · ${fmtTime(state.t1 - state.t0)} visible`, 6, AXIS_H / 2);
}

function drawMemory() {
  const top = state.height - MEM_H;
  ctx.fillStyle = "#fafbfd"; ctx.fillRect(0, top, state.width, MEM_H);
  ctx.fillStyle = "#d9dde5"; ctx.fillRect(0, top, state.width, 1);
  ctx.fillStyle = "#1d2330"; ctx.font = "12px system-ui, sans-serif"; ctx.textBaseline = "top";
  ctx.fillText("memory allocated", 6, top + 4);
  const m = state.memory;
  if (!m) return;
  const peak = Math.max(1, ...m.series.map((s) => s.peak));
  ctx.fillStyle = "#6b7385"; ctx.fillText(`peak ${fmtBytes(peak)}`, 6, top + 20);
  const yOf = (v) => top + MEM_H - 4 - (v / peak) * (MEM_H - 10);
  const nsPx = (m.t1 - m.t0) / m.px;
  ctx.save(); ctx.beginPath(); ctx.rect(LABEL_W, top, plotW(), MEM_H); ctx.clip();
  m.series.forEach((s, k) => {
    ctx.strokeStyle = ["#2f6fde", "#e6550d", "#31a354", "#6a51a3"][k % 4]; ctx.lineWidth = 1.5;
    ctx.beginPath();
    let v = s.start; ctx.moveTo(LABEL_W, yOf(v));
    for (let i = 0; i < s.x.length; i++) {
      const x = xOf(m.t0 + s.x[i] * nsPx);
      ctx.lineTo(x, yOf(v)); ctx.lineTo(x, yOf(s.max[i])); ctx.lineTo(x, yOf(s.min[i]));
      v = s.last[i]; ctx.lineTo(x, yOf(v));
    }
    ctx.lineTo(state.width, yOf(v)); ctx.stroke();
  });
  ctx.restore();
}

// -- picking and details -----------------------------------------------------------------------
function pick(x, y) {
  if (!state.data || x < LABEL_W || y < AXIS_H || y > AXIS_H + plotH()) return null;
  const entry = state.layout.find((e) => e.row && y >= yOfRow(e) && y < yOfRow(e) + e.h);
  if (!entry) return null;
  const d = state.data.byRow.get(entry.row.id);
  if (!d) return null;
  const lane = Math.floor((y - yOfRow(entry)) / LANE_H);
  const t = tOf(x), slack = (2 / plotW()) * (state.t1 - state.t0);
  let best = null;
  for (let i = 0; i < d.ev.id.length; i++) {
    if (d.ev.lane[i] === lane && d.ev.ts[i] - slack <= t && t <= d.ev.ts[i] + d.ev.dur[i] + slack) {
      if (best === null || d.ev.dur[i] < d.ev.dur[best]) best = i;
    }
  }
  if (best !== null) return d.ev.id[best];
  const nsPx = (state.data.t1 - state.data.t0) / state.data.px;
  const col = Math.floor((t - state.data.t0) / nsPx);
  for (let i = 0; i < d.agg.x.length; i++) {
    if (d.agg.lane[i] === lane && Math.abs(d.agg.x[i] - col) <= 1) return d.agg.rep[i];
  }
  return null;
}

async function select(id) {
  state.selected = id;
  try {
    state.details = await api(`${trace()}/events/${id}`);
  } catch (e) { showError(e.message); return; }
  renderDetails(state.details);
  showTab("event");
  draw();
}

function kv(rows) {
  return el("table", {}, ...rows.filter(([, v]) => v !== undefined && v !== null && v !== "")
    .map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", { class: "mono" }, v))));
}

function depList(title, deps) {
  const box = el("div", {}, el("h3", {}, `${title} (${deps.length})`));
  if (!deps.length) { box.append(el("p", { class: "muted" }, "none")); return box; }
  const ul = el("ul", { class: "deps" });
  for (const dep of deps) {
    ul.append(el("li", { "data-type": dep.type, onclick: () => goTo(dep.place) },
      el("span", { class: "swatch", style: { background: depColor(dep.type) } }),
      `${dep.label}: ${dep.place.name} (${fmtTime(dep.place.dur)})`));
  }
  box.append(ul);
  return box;
}

function flopsRows(f) {
  if (!f) return [];
  const whose = f.of_this_event ? "" : ` (of ${f.op}, which launched it)`;
  return [
    ["FLOPs", `${fmtNum(f.flops)} ${f.dtype}${whose}`],
    ["achieved", f.tflops_per_s != null ? `${f.tflops_per_s.toFixed(2)} TFLOP/s (timed on ${f.timed_on})` : null],
    ["MFU", f.mfu != null ? `${(f.mfu * 100).toFixed(2)} % ${f.peak}` : f.peak],
  ];
}

function renderDetails(det) {
  const e = det.event, box = $("#event");
  box.replaceChildren(
    el("h2", { id: "event-name" }, e.name),
    kv([
      ["kind", e.kind], ["row", e.track], ["source", det.source], ["start", fmtTime(det.place.ts)], ["duration", fmtTime(e.dur_ns)],
      ["input shapes", e.input_dims ? JSON.stringify(e.input_dims) : null],
      ["input types", e.input_types ? JSON.stringify(e.input_types) : null],
      ["grid / block", e.grid ? `${JSON.stringify(e.grid)} / ${JSON.stringify(e.block)}` : null],
      ["bytes", e.nbytes !== undefined ? fmtBytes(e.nbytes) : null],
      ...flopsRows(det.flops),
      ["correlation", e.correlation], ["sequence #", e.seq], ["external id", e.external_id],
    ]),
  );
  if (det.note) box.append(el("p", { class: "muted" }, det.note));
  if (det.stack.length) {
    box.append(el("h3", {}, "stack"), el("ul", { class: "stack" }, ...det.stack.map((s) => el("li", {}, s))));
  }
  box.append(depList("depends on", det.dependencies), depList("dependents", det.dependents));
  renderLegend(det.types);
}

function renderLegend(types) {
  const box = $("#legend");
  box.replaceChildren(el("strong", {}, "dependencies "));
  for (const t of types) {
    box.append(el("span", { class: "item", "data-type": t.type },
      el("span", { class: "swatch", style: { background: depColor(t.type) } }), t.label));
  }
  box.append(el("span", { class: "item" }, el("span", { class: "swatch", style: { background: "rgba(214,39,59,0.25)" } }), "idle gap"));
}

function reveal(place) {
  const span = Math.max(place.dur * 8, 2000);
  const mid = place.ts + place.dur / 2;
  const entry = state.byRow.get(place.row);
  if (entry) state.scrollY = entry.y - plotH() / 3;
  setView(mid - span / 2, mid + span / 2);
}

function goTo(place) {
  reveal(place);
  if (place.id !== state.selected) select(place.id);
}

// -- panels ------------------------------------------------------------------------------------------
function showTab(name) {
  for (const b of document.querySelectorAll("#side nav button")) b.classList.toggle("active", b.dataset.tab === name);
  for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t.id === name);
}

function renderSummary(s) {
  const box = $("#summary");
  const pct = (x) => (x === null || x === undefined ? "—" : `${(x * 100).toFixed(1)} %`);
  box.replaceChildren(
    kv([
      ["device", s.device], ["span", fmtTime(s.span_ns)],
      ["steps", s.steps ? `${s.steps} (${s.step_name})` : "no ProfilerStep markers"],
      ["step time", s.step_time_ns ? fmtTime(s.step_time_ns) : null],
      ["device busy", s.busy_ns !== null ? fmtTime(s.busy_ns) : null],
      ["idle", pct(s.idle_fraction)],
      ["compute/comm overlap", s.overlap_fraction !== null && s.overlap_fraction !== undefined ? pct(s.overlap_fraction) : null],
      ["MFU", s.mfu != null ? `${pct(s.mfu)} (${s.mfu_label})` : `— (${s.mfu_label})`],
    ]),
  );
  if (s.top_ops.length) {
    box.append(el("h3", {}, "ops with counted FLOPs (most time first)"));
    const ops = el("table", {}, el("tr", {}, el("th", {}, "op, shapes"), el("th", { class: "num" }, "calls"),
      el("th", { class: "num" }, "TFLOP/s"), el("th", { class: "num" }, "MFU")));
    for (const o of s.top_ops) {
      ops.append(el("tr", {}, el("td", { class: "name", title: o.peak }, `${o.op} ${JSON.stringify(o.input_dims)} ${o.dtype}`),
        el("td", { class: "num" }, fmtNum(o.calls)), el("td", { class: "num" }, o.tflops != null ? o.tflops.toFixed(2) : "—"),
        el("td", { class: "num" }, o.mfu != null ? pct(o.mfu) : "—")));
    }
    box.append(ops);
  }
  if (s.notes) for (const n of s.notes) box.append(el("p", { class: "muted" }, n));
  box.append(el("h3", {}, "top kernels"));
  if (!s.top_kernels.length) { box.append(el("p", { class: "muted" }, "no device kernels in this trace")); return; }
  const table = el("table", {}, el("tr", {}, el("th", {}, "kernel"), el("th", { class: "num" }, "count"),
    el("th", { class: "num" }, "total"), el("th", { class: "num" }, "share")));
  for (const k of s.top_kernels) {
    table.append(el("tr", {}, el("td", { class: "name", title: k.name }, k.name.length > 90 ? k.name.slice(0, 90) + "…" : k.name),
      el("td", { class: "num" }, fmtNum(k.count)), el("td", { class: "num" }, fmtTime(k.total_ns)),
      el("td", { class: "num" }, pct(k.share))));
  }
  box.append(table);
}

async function runSearch(q) {
  state.query = q;
  scheduleFetch();
  const box = $("#search-results");
  if (!q) { box.replaceChildren(el("p", { class: "muted" }, "Type a name and press Enter.")); return; }
  let r;
  try { r = await api(`${trace()}/search?q=${encodeURIComponent(q)}`); } catch (e) { showError(e.message); return; }
  box.replaceChildren(el("p", {}, `${r.total.toLocaleString("en-US")} events match “${r.query}”`));
  if (r.names.length) {
    const t = el("table", {}, el("tr", {}, el("th", {}, "name"), el("th", { class: "num" }, "count")));
    for (const n of r.names) t.append(el("tr", {}, el("td", { class: "name" }, n.name), el("td", { class: "num" }, fmtNum(n.count))));
    box.append(t);
  }
  const ul = el("ul", { class: "results" });
  for (const e of r.events) {
    const place = { id: e.id, row: e.row, ts: e.ts, dur: e.dur, lane: 0, name: e.name };
    ul.append(el("li", { onclick: () => goTo(place) }, `${fmtTime(e.ts)} · ${e.name} (${fmtTime(e.dur)})`));
  }
  if (r.events.length) box.append(el("h3", {}, `first ${r.events.length} in time`), ul);
  showTab("search-results");
}

async function runCompare(other) {
  const box = $("#comparison");
  if (!other) { box.replaceChildren(el("p", { class: "muted" }, "Pick a second trace under “compare with”.")); return; }
  box.replaceChildren(el("p", { class: "muted" }, "Loading…"));
  showTab("comparison");
  let c;
  try { c = await api(`/api/compare?a=${encodeURIComponent(state.id)}&b=${encodeURIComponent(other)}`); }
  catch (e) { box.replaceChildren(el("p", { class: "muted" }, e.message)); return; }
  const delta = (a, b, fmt) => {
    if (a == null || b == null) return "—";
    const d = b - a, cls = d > 0 ? "worse" : d < 0 ? "better" : "";
    return el("span", { class: cls }, `${d > 0 ? "+" : ""}${fmt(d)}${a ? ` (${d > 0 ? "+" : ""}${((d / a) * 100).toFixed(1)} %)` : ""}`);
  };
  box.replaceChildren(
    el("p", {}, `A = ${state.id}`), el("p", {}, `B = ${other}`),
    el("table", {},
      el("tr", {}, el("th", {}, ""), el("th", { class: "num" }, "A"), el("th", { class: "num" }, "B"), el("th", { class: "num" }, "B − A")),
      el("tr", {}, el("th", {}, "step time"), el("td", { class: "num" }, c.a.step_time_ns ? fmtTime(c.a.step_time_ns) : "—"),
        el("td", { class: "num" }, c.b.step_time_ns ? fmtTime(c.b.step_time_ns) : "—"),
        el("td", { class: "num" }, delta(c.a.step_time_ns, c.b.step_time_ns, fmtTime)))),
    el("h3", {}, "kernels (total time per step, largest change first)"),
  );
  const t = el("table", {}, el("tr", {}, el("th", {}, "kernel"), el("th", { class: "num" }, "A"), el("th", { class: "num" }, "B"), el("th", { class: "num" }, "B − A")));
  for (const k of c.kernels) {
    t.append(el("tr", {}, el("td", { class: "name", title: k.name }, k.name.length > 70 ? k.name.slice(0, 70) + "…" : k.name),
      el("td", { class: "num" }, k.a_ns == null ? "—" : fmtTime(k.a_ns)), el("td", { class: "num" }, k.b_ns == null ? "—" : fmtTime(k.b_ns)),
      el("td", { class: "num" }, delta(k.a_ns ?? 0, k.b_ns ?? 0, fmtTime))));
  }
  box.append(t);
  if (c.note) box.append(el("p", { class: "muted" }, c.note));
}

// -- traces ------------------------------------------------------------------------------------------
async function refreshList(selectId) {
  const list = await api("/api/traces");
  state.traces = list.traces; state.uploads = list.uploads;
  $("#upload-box").hidden = !list.uploads;
  const opts = list.traces.map((t) => el("option", { value: t.id }, `${t.id} (${fmtBytes(t.size)})`));
  $("#trace").replaceChildren(...opts);
  $("#compare").replaceChildren(el("option", { value: "" }, "—"), ...list.traces.map((t) => el("option", { value: t.id }, t.id)));
  const want = selectId || new URLSearchParams(location.search).get("trace") || (list.traces[0] && list.traces[0].id);
  if (!want) { $("#summary").replaceChildren(el("p", { class: "muted" }, "No traces yet: upload one.")); return; }
  $("#trace").value = want;
  await open(want);
}

async function open(id) {
  showError("");
  Object.assign(state, { id, meta: null, data: null, memory: null, details: null, selected: null, scrollY: 0 });
  draw();
  $("#summary").replaceChildren(el("p", { class: "muted" }, "Loading trace…"));
  try {
    state.meta = await api(`${trace()}/meta`);
  } catch (e) { showError(e.message); $("#summary").replaceChildren(el("p", { class: "muted" }, e.message)); return; }
  buildLayout();
  resize();
  fit();
  const summaryFor = id;
  api(`${trace()}/summary`).then((s) => { if (state.id === summaryFor) renderSummary(s); }).catch((e) => showError(e.message));
  renderLegend([]);
  const other = $("#compare").value;
  if (other) runCompare(other);
}

async function upload(file) {
  showError("");
  try {
    const r = await api(`/api/traces?name=${encodeURIComponent(file.name)}`, { method: "POST", body: file });
    await refreshList(r.id);
  } catch (e) { showError(`upload refused: ${e.message}`); }
}

// -- input -----------------------------------------------------------------------------------------
let drag = null;
canvas.tabIndex = 0;
canvas.addEventListener("wheel", (e) => {
  if (!state.meta) return;
  e.preventDefault();
  if (e.shiftKey) scroll(e.deltaY || e.deltaX);
  else if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) pan(e.deltaX);
  else zoom(Math.pow(1.0015, e.deltaY * (e.deltaMode === 1 ? 30 : 1)), e.offsetX);
}, { passive: false });
canvas.addEventListener("mousedown", (e) => {
  canvas.focus();
  drag = { x: e.offsetX, y: e.offsetY, moved: false };
  canvas.classList.add("dragging");
});
function pickInfo(x, y) {
  const id = pick(x, y);
  if (id === null) return null;
  for (const r of state.data.rows) {
    const i = r.ev.id.indexOf(id);
    if (i >= 0) return `${state.data.names[r.ev.name[i]]} · ${fmtTime(r.ev.dur[i])}`;
    const j = r.agg.rep.indexOf(id);
    if (j >= 0) return `${r.agg.n[j].toLocaleString("en-US")} events under a pixel (click: the longest)`;
  }
  return null;
}

canvas.addEventListener("mousemove", (e) => {
  const tip = $("#tip");
  const text = drag ? null : pickInfo(e.offsetX, e.offsetY);
  tip.hidden = !text;
  if (!text) return;
  tip.textContent = text;
  Object.assign(tip.style, { left: `${e.offsetX + 14}px`, top: `${e.offsetY + 12}px` });
});
canvas.addEventListener("mouseleave", () => { $("#tip").hidden = true; });

window.addEventListener("mousemove", (e) => {
  if (!drag) return;
  const rect = canvas.getBoundingClientRect();
  const x = e.clientX - rect.left, y = e.clientY - rect.top;
  const dx = x - drag.x, dy = y - drag.y;
  if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
  drag.moved = true;
  state.scrollY -= dy; drag.x = x; drag.y = y;
  pan(-dx);
});
window.addEventListener("mouseup", (e) => {
  if (!drag) return;
  canvas.classList.remove("dragging");
  const wasClick = !drag.moved;
  drag = null;
  if (!wasClick) return;
  const rect = canvas.getBoundingClientRect();
  const id = pick(e.clientX - rect.left, e.clientY - rect.top);
  if (id !== null) select(id);
});
canvas.addEventListener("keydown", (e) => {
  if (!state.meta) return;
  const keys = {
    w: () => zoom(0.8), "+": () => zoom(0.8), "=": () => zoom(0.8), s: () => zoom(1.25), "-": () => zoom(1.25),
    a: () => pan(-plotW() / 8), ArrowLeft: () => pan(-plotW() / 8), d: () => pan(plotW() / 8), ArrowRight: () => pan(plotW() / 8),
    ArrowUp: () => scroll(-LANE_H * 3), ArrowDown: () => scroll(LANE_H * 3), 0: fit,
    Escape: () => { state.details = null; state.selected = null; draw(); },
  };
  const f = keys[e.key];
  if (f) { e.preventDefault(); f(); }
});
window.addEventListener("resize", resize);
for (const b of document.querySelectorAll("#side nav button")) b.addEventListener("click", () => showTab(b.dataset.tab));
$("#trace").addEventListener("change", (e) => open(e.target.value));
$("#compare").addEventListener("change", (e) => runCompare(e.target.value));
$("#search-form").addEventListener("submit", (e) => { e.preventDefault(); runSearch($("#search").value.trim()); });
$("#upload").addEventListener("click", () => $("#upload-file").click());
$("#upload-file").addEventListener("change", (e) => { const f = e.target.files[0]; if (f) upload(f); e.target.value = ""; });

// A small handle for tests and scripts: where an event is drawn, in page coordinates.
window.explorer = {
  state,
  locate(place) {
    const r = rectOf(place);
    if (!r) return null;
    const box = canvas.getBoundingClientRect();
    return { x: box.left + (Math.max(r.x0, LABEL_W) + Math.min(r.x1, state.width)) / 2, y: box.top + r.y + r.h / 2 };
  },
  reveal,
  settled() {  // the timeline shows data for exactly the current view, nothing in flight
    const d = state.data;
    return !state.pending && !!d && d.t0 <= state.t0 && d.t1 >= state.t1;
  },
};

resize();
refreshList().catch((e) => showError(e.message));
