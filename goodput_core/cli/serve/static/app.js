// The goodput dashboard's pages: runs, one run, a group side by side.
// Every figure comes from the JSON API; store text (run names, groups, event
// types) is shown with textContent only. Live: a server-sent event stream says
// when new events were stored and the page fetches again (no reload).
"use strict";

const C = window.GoodputCharts;
const $ = (id) => document.getElementById(id);

function h(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function pct(v) { return v === null || v === undefined ? "-" : `${v.toFixed(2)} %`; }
function secs(v) { return v === null || v === undefined ? "-" : `${v.toFixed(3)} s`; }
function ago(t) {
  if (t === null || t === undefined) return "-";
  const d = Date.now() / 1000 - t;
  if (d < 90) return `${Math.max(0, Math.round(d))} s ago`;
  if (d < 5400) return `${Math.round(d / 60)} min ago`;
  if (d < 172800) return `${Math.round(d / 3600)} h ago`;
  return C.fmtTime(t);
}

// A run name as one path segment. Browsers drop "." and ".." segments from an
// address, even percent-encoded, so those names get a "~" before them, and so
// does a name that starts with "~"; the server drops one leading "~".
function runSegment(name) {
  return encodeURIComponent(name === "." || name === ".." || name.startsWith("~") ? `~${name}` : name);
}
function runFromSegment(segment) {
  const name = decodeURIComponent(segment);  // URIError: not percent-encoded UTF-8
  return name.startsWith("~") ? name.slice(1) : name;
}

async function api(path) {
  const resp = await fetch(path, {headers: {Accept: "application/json"}});
  if (!resp.ok) {
    let msg = `${resp.status}`;
    try { msg = (await resp.json()).error || msg; } catch (e) { /* not JSON */ }
    throw new Error(msg);
  }
  return resp.json();
}

function showError(err) {
  const box = $("error");
  if (box) { box.textContent = String(err.message || err); box.hidden = false; }
}

// Fetch again when the server says something changed; at most one fetch at a time.
function live(streamPath, refresh) {
  let busy = false, again = false;
  const run = async () => {
    if (busy) { again = true; return; }
    busy = true;
    try { await refresh(); $("error").hidden = true; } catch (e) { showError(e); }
    busy = false;
    if (again) { again = false; run(); }
  };
  const source = new EventSource(streamPath);
  source.addEventListener("change", () => {
    // counted where tests (and curious users) can see the stream at work
    document.body.dataset.changes = String(Number(document.body.dataset.changes || 0) + 1);
    run();
  });
  run();
  setInterval(run, 10000);  // the clock moves even when no event arrives (running time)
  return run;
}

// ------------------------------------------------------------------ runs page
function runsPage() {
  const params = new URLSearchParams(location.search);
  const select = $("group");
  let group = params.get("group") || "";
  select.addEventListener("change", () => {
    group = select.value;
    const q = group ? `?group=${encodeURIComponent(group)}` : "";
    history.replaceState(null, "", `/${q}`);
    refresh();
  });
  async function refresh() {
    const all = await api("/api/runs");
    $("store").textContent = all.store;
    const groups = [...new Set(all.runs.map((r) => r.group).filter((g) => g))].sort();
    select.replaceChildren(h("option", "all runs"));
    select.firstChild.value = "";
    for (const g of groups) { const o = h("option", g); o.value = g; select.appendChild(o); }
    select.value = group;
    const link = $("compare-link");
    link.hidden = !group;
    link.href = `/compare?group=${encodeURIComponent(group)}`;
    const body = $("runs-body");
    body.replaceChildren();
    for (const r of all.runs.filter((x) => !group || x.group === group)) {
      const tr = h("tr");
      tr.dataset.run = r.run;
      const name = h("td");
      const a = h("a", r.run, "run-link");
      a.href = `/run/${runSegment(r.run)}`;
      name.appendChild(a);
      tr.append(name, h("td", r.group || "-", "group"),
                h("td", r.state || "…", `state state-${(r.state || "").replace(/ /g, "-")}`), h("td", pct(r.goodput_percent), "goodput"),
                h("td", ago(r.last_activity), "activity"));
      const spark = h("td", null, "spark");
      C.sparkline(spark, r.sparkline);
      tr.appendChild(spark);
      body.appendChild(tr);
    }
    $("count").textContent = `${body.children.length} run(s)` +
      (all.pending ? `, ${all.pending} still being read` : "");
    if (all.pending) setTimeout(again, 500);  // a big store: the rest comes in parts
  }
  const again = live("/api/stream", refresh);
}

// ------------------------------------------------------------------- run page
function runPage() {
  let run;
  try {
    run = runFromSegment(location.pathname.slice("/run/".length));
  } catch (e) {
    showError(new Error("this address names no run: it is not percent-encoded UTF-8"));
    return;
  }
  const base = `/api/runs/${runSegment(run)}`;
  document.title = `${run} - goodput`;
  $("run-name").textContent = run;
  const view = {start: null, end: null, life: null};
  const windowSel = $("window");

  function headline(rep, ser) {
    $("goodput").textContent = pct(rep.goodput_percent);
    // MPG from submission (scheduling x runtime x program) where the run has
    // scheduling events, else runtime x program
    const lc = rep.lifecycle || {};
    const prog = rep.program_goodput;
    const mpg = lc.available && lc.mpg !== null && lc.mpg !== undefined ? lc.mpg
      : prog ? prog.ml_productivity_goodput : null;
    $("mpg").textContent = mpg === null ? "" : `MPG ${(100 * mpg).toFixed(2)} %`;
    const st = $("state");
    st.className = `state state-${ser.state.replace(/ /g, "-")}`;
    st.textContent = ser.state === "stopped" ? `stopped (last sign of life ${C.fmtTime(ser.state_since)})`
      : ser.state === "ended" ? `ended ${C.fmtTime(ser.state_since)}` : ser.state;
    $("total").textContent = secs(rep.total_seconds);
    $("disruptions").textContent = String(rep.disruptions);
    $("last-step").textContent = String(rep.last_step);
  }

  function breakdown(rep) {
    const body = $("breakdown-body");
    body.replaceChildren();
    const row = (name, s, p, shown) => {
      const tr = h("tr");
      tr.dataset.bucket = name;
      const sw = h("span", null, "swatch");
      sw.style.background = C.colour(name);
      const td = h("td", null, shown ? "sub" : "");
      td.append(sw, document.createTextNode(shown || name));
      tr.append(td, h("td", secs(s), "secs"), h("td", pct(p), "pct"));
      body.appendChild(tr);
    };
    row("PRODUCTIVE", rep.productive_seconds, rep.goodput_percent);
    for (const [k, v] of Object.entries(rep.badput_seconds)) {
      if (v > 0) row(k, v, rep.badput_percent[k]);
      if (k !== "CUSTOM_BADPUT_EVENTS") continue;
      for (const [t, x] of Object.entries(rep.custom_badput_seconds)) {
        row(`CUSTOM_BADPUT_EVENTS:${t}`, x, rep.custom_badput_percent[t], t);  // parts of the row above
      }
    }
  }

  function insights(rep) {
    const list = $("insights");
    list.replaceChildren();
    const ins = rep.insights || {};
    const open = (ins.hangs || []).filter((x) => x.end === null);
    for (const x of open) list.appendChild(h("li", `Hang open now at step ${x.step} since ${C.fmtTime(x.start)}`, "alert"));
    const closed = (ins.hangs || []).length - open.length;
    if (closed) list.appendChild(h("li", `${closed} hang(s) so far`));
    const inc = rep.incidents || {};
    for (const x of inc.incidents || []) {
      list.appendChild(h("li", `Incident: ${x.cause} at ${C.fmtTime(x.detected)}; ` +
        `${secs(x.lost_seconds)} of progress lost, restarted after ${secs(x.time_to_restart)}`));
    }
    if ((inc.incidents || []).length) {
      list.appendChild(h("li", `MTBF ${secs(inc.mtbf_seconds)}, MTTR ${secs(inc.mttr_seconds)}`, "muted"));
    }
    const ck = ins.checkpoint;
    if (ck && ck.available) {
      list.appendChild(h("li", `Checkpoint every ${secs(ck.recommended_interval_seconds)} ` +
        `(now ${secs(ck.current_interval_seconds)}): +${(ck.goodput_gain_points || 0).toFixed(2)} goodput points`));
    } else if (ck) {
      list.appendChild(h("li", `Checkpoint advice: ${ck.reason}`, "muted"));
    }
    const hosts = ins.hosts;
    for (const o of (hosts && hosts.outliers) || []) {
      list.appendChild(h("li", `Host ${o.process_index} is an outlier: +${secs(o.excess_seconds)} of ${o.bucket}`, "alert"));
    }
    const table = $("hosts-body");
    table.replaceChildren();
    $("hosts-section").hidden = !hosts;
    for (const x of (hosts && hosts.hosts) || []) {
      const tr = h("tr");
      tr.append(h("td", x.process_index), h("td", secs(x.host_local_seconds)),
                h("td", secs(x.total_seconds)), h("td", secs(x.median_step_seconds)));
      table.appendChild(tr);
    }
  }

  // the ML-diagnostics SDK's system metrics (log_system_metrics, GOODPUT_SYSTEM_METRICS)
  const SYSTEM = ["host_cpu_utilization", "host_memory_utilization", "tpu_duty_cycle",
    "tpu_tensorcore_utilization", "hbm_utilization", "gpu_duty_cycle",
    "gpu_tensorcore_utilization", "vram_utilization"];
  function system(rep) {
    const body = $("system-body");
    body.replaceChildren();
    const metrics = rep.metrics || {};
    const shown = SYSTEM.filter((n) => metrics[n]);
    $("system-section").hidden = !shown.length;
    for (const n of shown) {
      const tr = h("tr");
      tr.dataset.metric = n;
      tr.append(h("td", n), h("td", pct(metrics[n].value), "pct"), h("td", C.fmtTime(metrics[n].time)));
      body.appendChild(tr);
    }
  }

  async function drawTimeline() {
    const box = $("timeline");
    const width = Math.max(200, Math.floor(box.clientWidth || 800));
    const q = new URLSearchParams({width: String(width)});
    if (view.start !== null) { q.set("start", String(view.start)); q.set("end", String(view.end)); }
    const data = await api(`${base}/timeline?${q}`);
    view.life = view.life || [data.start, data.end];
    if (view.start === null) view.life = [data.start, data.end];
    C.timelineStrip(box, data, width, 70);
    box.dataset.start = data.start;
    box.dataset.end = data.end;
  }

  async function refresh() {
    const w = windowSel.value;
    const [rep, ser] = await Promise.all([
      api(`${base}/report`), api(`${base}/series?points=120${w ? `&window=${w}` : ""}`)]);
    headline(rep, ser);
    breakdown(rep);
    insights(rep);
    system(rep);
    const width = Math.max(300, $("series").clientWidth || 800);
    C.stackedSeries($("series"), ser, width, 180);
    C.stepChart($("steps"), ser.steps, width, 140);
    await drawTimeline();
    document.body.dataset.version = String(ser.version);
  }

  // zoom (wheel, buttons) and pan (drag) over the timeline; double-click resets
  const box = $("timeline");
  const current = () => (view.start === null && view.life ? view.life : [view.start, view.end]);
  function zoom(factor, centre) {
    const [a, b] = current();
    if (a === null || a === undefined) return;
    const c = centre === undefined ? (a + b) / 2 : centre;
    const span = Math.max((b - a) * factor, 1e-3);
    view.start = c - (c - a) * span / (b - a);
    view.end = view.start + span;
    drawTimeline().catch(showError);
  }
  box.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const [a, b] = current();
    const r = box.getBoundingClientRect();
    zoom(ev.deltaY < 0 ? 0.5 : 2, a + (b - a) * (ev.clientX - r.left) / r.width);
  }, {passive: false});
  let drag = null;
  box.addEventListener("mousedown", (ev) => { drag = {x: ev.clientX, range: current()}; });
  window.addEventListener("mouseup", (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x;
    const [a, b] = drag.range;
    drag = null;
    if (Math.abs(dx) < 3 || a === null) return;
    const shift = -dx / box.getBoundingClientRect().width * (b - a);
    view.start = a + shift; view.end = b + shift;
    drawTimeline().catch(showError);
  });
  box.addEventListener("dblclick", () => { view.start = view.end = null; drawTimeline().catch(showError); });
  $("zoom-in").addEventListener("click", () => zoom(0.5));
  $("zoom-out").addEventListener("click", () => zoom(2));
  $("zoom-reset").addEventListener("click", () => { view.start = view.end = null; drawTimeline().catch(showError); });
  const again = live(`/api/stream?run=${encodeURIComponent(run)}`, refresh);
  windowSel.addEventListener("change", again);
}

// --------------------------------------------------------------- compare page
function comparePage() {
  const group = new URLSearchParams(location.search).get("group") || "";
  $("group-name").textContent = group;
  async function refresh() {
    const cmp = await api(`/api/compare?group=${encodeURIComponent(group)}`);
    const head = $("compare-head");
    const body = $("compare-body");
    head.replaceChildren(h("th", ""));
    for (const r of cmp.runs) {
      const th = h("th");
      const a = h("a", r.run);
      a.href = `/run/${runSegment(r.run)}`;
      th.appendChild(a);
      head.appendChild(th);
    }
    body.replaceChildren();
    const row = (label, cells) => {
      const tr = h("tr");
      tr.dataset.row = label;
      tr.appendChild(h("th", label));
      for (const c of cells) tr.appendChild(h("td", c));
      body.appendChild(tr);
    };
    row("goodput", cmp.runs.map((r) => pct(r.goodput_percent)));
    row("total time", cmp.runs.map((r) => secs(r.total_seconds)));
    row("PRODUCTIVE", cmp.runs.map((r) => secs(r.productive_seconds)));
    const buckets = [...new Set(cmp.runs.flatMap((r) => Object.keys(r.badput_seconds)))];
    for (const b of buckets) {
      row(b, cmp.runs.map((r) => (b in r.badput_seconds ? `${secs(r.badput_seconds[b])} (${pct(r.badput_percent[b])})` : "-")));
    }
    row("disruptions", cmp.runs.map((r) => String(r.disruptions)));
    row("last step", cmp.runs.map((r) => String(r.last_step)));
    row("median step time", cmp.runs.map((r) => secs(r.step_time.median_seconds)));
    for (const [k, values] of Object.entries(cmp.configs_differ)) {
      row(`config ${k}`, values.map((v) => (v === null ? "-" : JSON.stringify(v))));
    }
  }
  live("/api/stream", refresh);
}

// A token given in the address (?token=T) is now in an HttpOnly cookie: take it
// out of the address bar and the history.
if (new URLSearchParams(location.search).has("token")) {
  const q = new URLSearchParams(location.search);
  q.delete("token");
  history.replaceState(null, "", location.pathname + (q.toString() ? `?${q}` : ""));
}

const pages = {runs: runsPage, run: runPage, compare: comparePage};
pages[document.body.dataset.page]();
