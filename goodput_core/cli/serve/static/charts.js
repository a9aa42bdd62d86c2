// Small SVG charts for the goodput dashboard. Written for this dashboard (no
// third-party chart library): a line, a stacked area, a timeline strip and a
// sparkline, with tooltips as SVG <title> elements. Text is only ever set with
// textContent, never parsed as markup.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

// One colour per bucket, stable across pages.
const COLOURS = {
  PRODUCTIVE: "#2e9d4f", IDLE: "#d9d9d9", OTHER: "#9e9e9e",
  TPU_INITIALIZATION: "#8e6bbf", TRAINING_PREP: "#b39ddb", PROGRAM_STARTUP: "#5c6bc0",
  DATA_LOADING_SYNC: "#f2a93b", UNPRODUCTIVE_CHECKPOINT_SAVE_TIME: "#4fa3d9",
  UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME: "#1f77b4", WASTED_PROGRESS_FROM_DISRUPTION: "#d9534f",
  INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION: "#a02c2c", CUSTOM_BADPUT_EVENTS: "#c2185b",
  HANG: "#6d1b1b", INPUT_STALL: "#e6c229", ELASTIC_REINITIALIZATION: "#795548",
};

function colour(label) {
  const base = String(label).split(":")[0];
  if (COLOURS[base]) return COLOURS[base];
  let h = 0;  // any other label: a colour from its name
  for (const ch of String(label)) h = (h * 31 + ch.charCodeAt(0)) % 360;
  return `hsl(${h}, 55%, 55%)`;
}

function el(name, attrs, parent) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (parent) parent.appendChild(node);
  return node;
}

function titled(node, text) {
  el("title", {}, node).textContent = text;
  return node;
}

function svgIn(container, width, height) {
  container.replaceChildren();
  return el("svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img"}, container);
}

function scale(d0, d1, r0, r1) {
  const k = d1 > d0 ? (r1 - r0) / (d1 - d0) : 0;
  return (x) => r0 + (x - d0) * k;
}

function fmtTime(t) {
  return new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19);
}

function axisX(svg, x, t0, t1, y, fmt) {
  for (let i = 0; i <= 4; i++) {
    const t = t0 + (t1 - t0) * i / 4;
    const label = el("text", {x: x(t), y, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle",
                              class: "axis"}, svg);
    label.textContent = fmt(t);
  }
}

// A sparkline of [[t, value|null], ...] (0-100).
function sparkline(container, points, width = 120, height = 24) {
  const svg = svgIn(container, width, height);
  const ok = points.filter((p) => p[1] !== null);
  if (ok.length < 2) return svg;
  const x = scale(ok[0][0], ok[ok.length - 1][0], 1, width - 1);
  const y = scale(0, 100, height - 2, 2);
  el("polyline", {points: ok.map((p) => `${x(p[0])},${y(p[1])}`).join(" "), fill: "none",
                  stroke: COLOURS.PRODUCTIVE, "stroke-width": 1.5}, svg);
  return svg;
}

// Goodput (line over green area) and badput buckets stacked above it, in percent.
function stackedSeries(container, data, width, height) {
  const svg = svgIn(container, width, height);
  const times = data.times;
  if (times.length < 2) return svg;
  const pad = 30;
  const x = scale(times[0], times[times.length - 1], pad, width - 8);
  const y = scale(0, 100, height - 18, 6);
  const layers = [["PRODUCTIVE", data.goodput_percent]];
  for (const [k, v] of Object.entries(data.badput_percent)) layers.push([k, v]);
  const base = times.map(() => 0);
  for (const [label, values] of layers) {
    const top = values.map((v, i) => base[i] + (v || 0));
    const upper = times.map((t, i) => `${x(t)},${y(top[i])}`);
    const lower = times.map((t, i) => `${x(t)},${y(base[i])}`).reverse();
    const last = values.filter((v) => v !== null).pop();
    titled(el("polygon", {points: upper.concat(lower).join(" "), fill: colour(label),
                          class: "layer", "data-label": label}, svg),
           `${label}: ${last === undefined ? "-" : last.toFixed(2)} % (latest)`);
    top.forEach((v, i) => { base[i] = v; });
  }
  for (const v of [0, 50, 100]) {
    el("line", {x1: pad, x2: width - 8, y1: y(v), y2: y(v), class: "grid"}, svg);
    el("text", {x: 2, y: y(v) + 4, class: "axis"}, svg).textContent = `${v}%`;
  }
  axisX(svg, x, times[0], times[times.length - 1], height - 4, fmtTime);
  return svg;
}

// A line chart of step time (mean per chunk; max as a lighter line).
function stepChart(container, steps, width, height) {
  const svg = svgIn(container, width, height);
  if (steps.steps.length < 1) {
    el("text", {x: 8, y: 20, class: "axis"}, svg).textContent = "no step times yet";
    return svg;
  }
  const pad = 48;
  const hi = Math.max(...steps.max_seconds, steps.ideal_seconds || 0) * 1.05 || 1;
  const s0 = steps.steps[0], s1 = steps.steps[steps.steps.length - 1];
  const x = scale(s0, s1 > s0 ? s1 : s0 + 1, pad, width - 8);
  const y = scale(0, hi, height - 18, 6);
  const line = (vals, cls) => el("polyline", {
    points: steps.steps.map((s, i) => `${x(s)},${y(vals[i])}`).join(" "), class: cls}, svg);
  line(steps.max_seconds, "step-max");
  line(steps.mean_seconds, "step-mean");
  if (steps.ideal_seconds) {
    titled(el("line", {x1: pad, x2: width - 8, y1: y(steps.ideal_seconds), y2: y(steps.ideal_seconds),
                       class: "ideal"}, svg), `ideal step time ${steps.ideal_seconds.toFixed(4)} s`);
  }
  for (const v of [0, hi / 2, hi]) {
    el("text", {x: 2, y: y(v) + 4, class: "axis"}, svg).textContent = `${v.toPrecision(3)} s`;
  }
  axisX(svg, x, s0, s1, height - 4, (s) => `step ${Math.round(s)}`);
  return svg;
}

// The timeline strip: merged spans (one per run of pixels), markers below.
function timelineStrip(container, data, width, height) {
  const svg = svgIn(container, width, height);
  if (data.start === null) return svg;
  const x = scale(data.start, data.end, 0, width);
  const barH = height - 30;
  for (const [a, b, k, share] of data.spans) {
    const label = data.labels[k];
    const mixed = share < 0.999 ? ` (${(share * 100).toFixed(0)} % of this stretch)` : "";
    titled(el("rect", {x: x(a), y: 0, width: Math.max(x(b) - x(a), 0.5), height: barH,
                       fill: colour(label), class: "span", "data-label": label}, svg),
           `${label}${mixed}\n${fmtTime(a)} → ${fmtTime(b)} (${(b - a).toFixed(1)} s)`);
  }
  const marks = data.markers || {};
  for (const t of marks.job_start || []) {
    titled(el("line", {x1: x(t), x2: x(t), y1: 0, y2: barH + 8, class: "marker-attempt"}, svg),
           `an attempt (job start) at ${fmtTime(t)}`);
  }
  for (const t of marks.disruption || []) {
    titled(el("path", {d: `M${x(t)},${barH} l-4,8 h8 z`, class: "marker-disruption"}, svg),
           `disruption at ${fmtTime(t)}`);
  }
  for (const t of marks.duty_cycle_drop || []) {
    titled(el("path", {d: `M${x(t)},${barH + 8} l-4,-8 h8 z`, class: "marker-duty-drop"}, svg),
           `accelerator duty cycle dropped at ${fmtTime(t)}`);
  }
  for (const h of data.hangs || []) {
    const b = h.end === null ? data.end : h.end;
    if (b < data.start || h.start > data.end) continue;
    titled(el("rect", {x: x(Math.max(h.start, data.start)), y: barH + 9,
                       width: Math.max(x(Math.min(b, data.end)) - x(Math.max(h.start, data.start)), 1),
                       height: 4, class: "marker-hang"}, svg),
           `hang at step ${h.step}: ${h.end === null ? "open" : h.seconds.toFixed(1) + " s"}`);
  }
  axisX(svg, x, data.start, data.end, height - 2, fmtTime);
  return svg;
}

window.GoodputCharts = {sparkline, stackedSeries, stepChart, timelineStrip, colour, fmtTime};
