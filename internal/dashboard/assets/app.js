// kvroute dashboard: polls ../api/history and draws SVG line charts. No external assets.
"use strict";
const PALETTE = ["#56b4e9", "#e69f00", "#009e73", "#f0e442", "#cc79a7", "#d55e00", "#0072b2", "#999999",
  "#a6d854", "#fc8d62", "#8da0cb", "#e78ac3"];
const colors = new Map();
function colorOf(id) {
  if (!colors.has(id)) colors.set(id, PALETTE[colors.size % PALETTE.length]);
  return colors.get(id);
}
const SVGNS = "http://www.w3.org/2000/svg";
function el(name, attrs, parent) {
  const e = document.createElementNS(SVGNS, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
function fmt(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  return Number(v).toFixed(digits);
}
function fmtSeconds(s) {
  if (s === null || s === undefined || s <= 0) return "–";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  return s.toFixed(2) + " s";
}
function pct(v) { return (v === null || v === undefined || v < 0) ? "–" : (v * 100).toFixed(1) + "%"; }

// axisLabel prints a tick value with two significant digits (0.0042, 0.31, 12, 1400).
function axisLabel(v) {
  if (v === 0) return "0";
  if (Math.abs(v) >= 100) return v.toFixed(0);
  return String(Number(v.toPrecision(2)));
}

// drawChart draws series [{name, color, dashed, points: [[t, v], ...]}] into svg.
function drawChart(svg, series, opts) {
  opts = opts || {};
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const w = svg.clientWidth || 400, h = svg.clientHeight || 200;
  const m = { l: 44, r: 8, t: 8, b: 20 };
  let tmin = Infinity, tmax = -Infinity, vmax = opts.max || 0;
  for (const s of series) for (const [t, v] of s.points) {
    if (v === null || v === undefined || Number.isNaN(v)) continue;
    tmin = Math.min(tmin, t); tmax = Math.max(tmax, t);
    if (!opts.max) vmax = Math.max(vmax, v);
  }
  svg.dataset.points = String(series.reduce((n, s) => n + s.points.filter(p => p[1] !== null).length, 0));
  if (!isFinite(tmin)) {
    el("text", { x: w / 2, y: h / 2, "text-anchor": "middle" }, svg).textContent = "waiting for data…";
    return;
  }
  if (tmax === tmin) tmax = tmin + 1;
  if (vmax <= 0) vmax = 1;
  vmax *= opts.max ? 1 : 1.1;
  const x = t => m.l + (t - tmin) / (tmax - tmin) * (w - m.l - m.r);
  const y = v => h - m.b - v / vmax * (h - m.t - m.b);
  for (let i = 0; i <= 4; i++) {
    const v = vmax * i / 4;
    el("line", { x1: m.l, x2: w - m.r, y1: y(v), y2: y(v), class: "gridline" }, svg);
    el("text", { x: m.l - 4, y: y(v) + 3, "text-anchor": "end" }, svg).textContent = opts.percent ? (v * 100).toFixed(0) + "%" : axisLabel(v);
  }
  const span = (tmax - tmin) / 1000;
  el("text", { x: m.l, y: h - 4 }, svg).textContent = "−" + span.toFixed(0) + " s";
  el("text", { x: w - m.r, y: h - 4, "text-anchor": "end" }, svg).textContent = "now";
  for (const s of series) {
    let d = "", pen = false;
    for (const [t, v] of s.points) {
      if (v === null || v === undefined || Number.isNaN(v)) { pen = false; continue; }
      d += (pen ? "L" : "M") + x(t).toFixed(1) + " " + y(v).toFixed(1);
      pen = true;
    }
    if (d) el("path", { d, fill: "none", stroke: s.color, "stroke-width": s.width || 1.6, "stroke-dasharray": s.dashed ? "5 3" : "none" }, svg).dataset.series = s.name;
  }
}

// instanceSeries makes one series per instance; negative values mean "no data" (a gap).
function instanceSeries(history, field) {
  const ids = new Set();
  for (const h of history) for (const id of Object.keys(h.instances || {})) ids.add(id);
  const value = (h, id) => {
    const v = h.instances && h.instances[id] ? h.instances[id][field] : null;
    return v === null || v === undefined || v < 0 ? null : v;
  };
  return [...ids].sort().map(id => ({ name: id, color: colorOf(id), points: history.map(h => [h.t, value(h, id)]) }));
}

function render(data) {
  const f = data.fleet || {};
  document.getElementById("t-rps").textContent = fmt(f.req_per_s, 1);
  document.getElementById("t-hit").textContent = pct(f.hit_rate);
  document.getElementById("t-overflow").textContent = pct(f.overflow_ratio);
  document.getElementById("t-ttft").textContent = fmtSeconds(f.ttft_p50_s) + " / " + fmtSeconds(f.ttft_p90_s);
  document.getElementById("t-lag").textContent = fmtSeconds(f.event_lag_s);
  document.getElementById("t-inst").textContent = String((data.instances || []).length);

  const hist = data.history || [];
  const hit = instanceSeries(hist, "hit_rate");
  hit.push({ name: "fleet", color: "#ffffff", dashed: true, width: 2, points: hist.map(h => [h.t, h.fleet && h.fleet.hit_rate > 0 ? h.fleet.hit_rate : null]) });
  drawChart(document.getElementById("c-hit"), hit, { max: 1, percent: true });
  drawChart(document.getElementById("c-blocks"), instanceSeries(hist, "cached_blocks"));
  drawChart(document.getElementById("c-inflight"), instanceSeries(hist, "in_flight"));
  const pos = v => (v > 0 ? v : null);
  drawChart(document.getElementById("c-ttft"), [
    { name: "p50", color: "#56b4e9", points: hist.map(h => [h.t, h.fleet ? pos(h.fleet.ttft_p50_s) : null]) },
    { name: "p90", color: "#e69f00", dashed: true, points: hist.map(h => [h.t, h.fleet ? pos(h.fleet.ttft_p90_s) : null]) },
  ]);
  const kinds = ["cache_hit", "affinity", "overflow"];
  const kcol = { cache_hit: "#009e73", affinity: "#56b4e9", overflow: "#d55e00" };
  drawChart(document.getElementById("c-decisions"), kinds.map(k => ({
    name: k, color: kcol[k], points: hist.map(h => [h.t, h.fleet && h.fleet.decision_rate ? (h.fleet.decision_rate[k] || 0) : null]),
  })));
  drawChart(document.getElementById("c-lag"), [
    { name: "lag", color: "#cc79a7", points: hist.map(h => [h.t, h.fleet ? h.fleet.event_lag_s : null]) },
  ]);

  const tbody = document.querySelector("#instances tbody");
  tbody.innerHTML = "";
  for (const i of data.instances || []) {
    const tr = document.createElement("tr");
    const joined = i.joined_at_ms ? Math.round((data.t - i.joined_at_ms) / 1000) + " s ago" : "–";
    const warm = i.warm ? fmtSeconds(i.warmup_s) : (i.state === "ready" ? "warming…" : "–");
    const cells = [i.id, i.state, joined, i.cached_blocks, pct(i.hit_rate), i.in_flight, i.requests,
      fmtSeconds(i.ttft_p50_s), fmtSeconds(i.ttft_p90_s), warm];
    cells.forEach((c, n) => {
      const td = document.createElement("td");
      if (n === 0) {
        const sw = document.createElement("span");
        sw.className = "swatch"; sw.style.background = colorOf(i.id);
        td.appendChild(sw);
      }
      td.appendChild(document.createTextNode(String(c)));
      tr.appendChild(td);
    });
    tbody.appendChild(tr);
  }
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const r = await fetch("../api/history", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    const data = await r.json();
    render(data);
    status.textContent = "live · " + new Date(data.t).toLocaleTimeString();
    status.className = "status live";
  } catch (e) {
    status.textContent = "no data: " + e.message;
    status.className = "status down";
  }
}
poll();
setInterval(poll, 1000);
