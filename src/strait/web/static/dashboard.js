// Strait dashboard: polls the controller's /observability and redraws charts and tables.
// Charts come from Chart.js (vendored from the npm registry at build time).
"use strict";

const POLL_MS = 2000;
const charts = {};
window.straitCharts = charts; // lets tests and curious operators inspect the plotted data

const palette = ["#2f6fde", "#e0672c", "#1f8a4c", "#a23bcc", "#c8a400", "#17a2b8", "#d6336c", "#5c677d"];

function timeLabel(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour12: false });
}

function makeChart(id, yTitle) {
  const chart = new Chart(document.getElementById(id), {
    type: "line",
    data: { datasets: [] },
    options: {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      parsing: false,
      normalized: true,
      elements: { point: { radius: 0 }, line: { borderWidth: 2 } },
      interaction: { mode: "nearest", intersect: false },
      scales: {
        x: { type: "linear", ticks: { callback: (v) => timeLabel(v), maxTicksLimit: 6 } },
        y: { beginAtZero: true, title: { display: true, text: yTitle } },
      },
      plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
    },
  });
  charts[id] = chart;
  return chart;
}

// A series keeps its colour for the page's lifetime, whatever appears or disappears beside it.
const colours = new Map();
function colourOf(name) {
  if (!colours.has(name)) colours.set(name, palette[colours.size % palette.length]);
  return colours.get(name);
}

function updateChart(chart, series) {
  const names = Object.keys(series || {}).sort();
  chart.data.datasets = names.map((name) => {
    const previous = chart.data.datasets.find((d) => d.label === name);
    const data = series[name].map(([t, v]) => ({ x: t, y: v }));
    if (previous) { previous.data = data; return previous; }
    return { label: name, data, borderColor: colourOf(name), backgroundColor: colourOf(name) };
  });
  chart.update("none");
}

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "–" : String(text);
  if (cls) td.className = cls;
  return td;
}

function fillTable(id, rows, render) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows.map((row) => {
    const tr = document.createElement("tr");
    tr.append(...render(row));
    return tr;
  }));
}

function fmt(n, digits = 0) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString(undefined, { maximumFractionDigits: digits });
}

function render(view) {
  const leader = document.getElementById("leader");
  leader.textContent = view.leader ? `leader ${view.controller}` : `standby ${view.controller} (leader ${view.leader_id || "none"})`;
  leader.className = "pill " + (view.leader ? "leader" : "standby");
  const states = Object.entries(view.workers_by_state || {}).map(([s, n]) => `${n} ${s}`).join(", ") || "no workers";
  document.getElementById("summary").textContent =
    `workers: ${states} · unassigned partitions: ${view.unassigned} · assignment changes: ${view.counters.assignment_changes} · healing moves: ${view.counters.healing_moves}` +
    ((view.routes_without_workers || []).length ? ` · routes waiting for a live worker in their pools: ${view.routes_without_workers.join(", ")}` : "");
  document.getElementById("updated").textContent = `updated ${timeLabel(view.updated)}`;

  updateChart(charts["chart-partitions"], view.charts.partitions_per_worker);
  updateChart(charts["chart-bytes"], view.charts.bytes_per_s);
  updateChart(charts["chart-lag"], view.charts.lag_by_topic);
  updateChart(charts["chart-latency"], view.charts.e2e_latency);

  // What the worker's own watchdog did ("cause/action" -> count): a stuck loop or partition.
  const watchdogCell = (acted) => {
    const text = Object.entries(acted).map(([what, n]) => `${what}: ${n}`).join(", ");
    return text ? cell(text, "warn") : cell(null);
  };
  fillTable("workers", view.workers, (w) => {
    const health = w.hung ? ["hung", "bad"] : w.slow ? ["slow", "warn"] : w.live ? ["ok", "ok"] : ["–", ""];
    return [cell(w.id), cell(w.state, w.state === "dead" ? "bad" : ""), cell(w.pool || "default"), cell(w.partitions.length),
      cell(fmt(w.bytes_per_s)), cell(health[0], health[1]), watchdogCell(w.watchdog || {})];
  });
  fillTable("topics", Object.entries(view.lag_by_topic), ([topic, lag]) => [cell(topic), cell(fmt(lag))]);
  // Partitions per route, copy mode (batch or record) and why (lagging, caught up, a fallback).
  fillTable("copy-modes", view.copy_modes || [], (m) => [cell(m.route), cell(m.mode), cell(m.partitions),
    cell(m.reason || null)]);
  fillTable("stuck", view.stuck, (s) => [cell(s.partition), cell(s.worker), cell(fmt(s.lag)), cell(fmt(s.stalled_s, 1)),
    cell(s.moves), cell(s.flagged ? `needs a person: ${s.flagged}` : s.stuck ? "stuck" : "moved, healthy",
      s.flagged ? "bad" : s.stuck ? "warn" : "ok")]);
  fillTable("stages", Object.entries(view.stages), ([name, s]) => [cell(name), cell(fmt(s.p50_s, 4)),
    cell(fmt(s.p99_s, 4)), cell(s.worker)]);
  renderBalance(view.balance || {}, view.balance_watch || {});
}

// The balance watch mode: an alert line per cluster out of balance for `after_s`, a note while
// it is only out of balance or a person's cancel holds it.
function watchLines(watch) {
  return Object.entries(watch).filter(([, w]) => w.phase !== "standby" && (w.reasons.length || w.error)).map(([cluster, w]) => {
    const p = document.createElement("p");
    const reasons = w.reasons.map((r) => r.replace("_", " ")).join(", ");
    const proposal = w.proposal ? ` · proposal ${w.proposal.id}: ${w.proposal.moves} moves (GET /balance/${cluster}/proposal)` : "";
    const held = w.held ? " · held: a person cancelled the last plan" : "";
    p.textContent = w.error && !w.reasons.length ? `${cluster}: watch error: ${w.error}`
      : `${cluster}: out of balance for ${fmt(w.out_of_balance_s)} s (${reasons})${proposal}${held}`;
    p.className = w.alert ? "bad" : "warn";
    return p;
  });
}

function renderBalance(balance, watch) {
  const box = document.getElementById("balance");
  const clusters = Object.entries(balance);
  const alerts = watchLines(watch);
  if (!clusters.length) {
    box.replaceChildren(...alerts);
    if (!alerts.length) box.innerHTML = '<p class="muted">no balancer execution found</p>';
    return;
  }
  box.replaceChildren(...alerts, ...clusters.map(([cluster, b]) => {
    const div = document.createElement("div");
    const title = document.createElement("p");
    const states = Object.entries(b.by_state).map(([s, n]) => `${n} ${s}`).join(", ");
    title.textContent = `${cluster}: execution ${b.execution} ${b.status} — ${states} (${Math.round(b.progress * 100)}%)`;
    const bar = document.createElement("progress");
    bar.max = 1;
    bar.value = b.progress;
    div.append(title, bar);
    return div;
  }));
}

async function poll() {
  const error = document.getElementById("error");
  try {
    const response = await fetch("/observability", { cache: "no-store" });
    if (!response.ok) throw new Error(`controller answered ${response.status}`);
    const view = await response.json();
    if (view.updated) render(view);
    error.hidden = true;
  } catch (exc) {
    error.textContent = `cannot reach the controller: ${exc.message}`;
    error.hidden = false;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

window.addEventListener("DOMContentLoaded", () => {
  makeChart("chart-partitions", "partitions");
  makeChart("chart-bytes", "bytes/s");
  makeChart("chart-lag", "records");
  makeChart("chart-latency", "seconds");
  poll();
});
