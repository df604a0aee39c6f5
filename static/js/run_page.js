// Run page additions: the metric tabs (entropy, length, KL, zero-variance groups, tokens/s) and
// the task ledger (difficulty histogram, invalid share, near-duplicate rate over steps).
// The page's own script owns the websocket and re-dispatches its messages as window events
// "run-metric" and "run-sample"; this file only listens. The metric tabs follow the reward chart's x axis
// and smoothing (window.runCurves, run_live.js; event "run-curves-view" when they change).
(function () {
  "use strict";
  const LAYOUT = {margin: {t: 10, r: 10, b: 40, l: 50}, legend: {orientation: "h"}};
  const CONFIG = {responsive: true, displaylogo: false};
  const json = (id) => JSON.parse(document.getElementById(id).textContent);
  // Steps are whole numbers: integer ticks, one per step while there are few. An empty chart hides
  // its axes (plotly's default -1..6) and says what it waits for.
  const stepAxis = (xs) => ({title: {text: "step"}, tickformat: "d",
                             dtick: xs.length && Math.max(...xs) - Math.min(...xs) <= 10 ? 1 : null, visible: xs.length > 0});
  const waitingNote = () => (document.getElementById("reward-waiting")?.textContent || "").trim();

  // ---- metric tabs -----------------------------------------------------------------------
  function metricTabs(runId) {
    const tabs = json("metric-tab-data");
    const el = document.getElementById("metric-chart");
    const buttons = [...document.querySelectorAll("#metric-tabs button")];
    let tab = null, name = null, traces = {}, last = {}, raw = {}, ready = false, seq = 0, timer = null;
    const view = window.runCurves;

    function title(tab, name, xs) {
      const empty = `${tab.label}: ${name ? "" : "not reported yet"}${!name && waitingNote() ? "; " : ""}${waitingNote()}`;
      return {...LAYOUT, margin: {...LAYOUT.margin, t: 30}, legend: {orientation: "h", y: 1.02, yanchor: "bottom"}, showlegend: true,
              xaxis: view && !view.plain() && xs.length ? view.xaxis(xs) : stepAxis(xs), yaxis: {title: {text: name || tab.label}, visible: xs.length > 0},
              annotations: xs.length ? [] : [{text: empty, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5}]};
    }
    const drawnSteps = () => (el.data || []).flatMap(t => t.x);

    // The whole chart from `raw` on the page's view (x axis, smoothing), traces in their roles' order.
    function redraw() {
      clearTimeout(timer); timer = null;
      const roles = Object.keys(traces).sort((a, b) => traces[a] - traces[b]);
      const curves = roles.map(role => ({name: role || "all", steps: raw[role].x, values: raw[role].y}));
      const data = view ? view.traces(curves)
        : curves.map(c => ({x: c.steps, y: c.values, mode: c.steps.length > 300 ? "lines" : "lines+markers", name: c.name}));
      return Plotly.react(el, data, title(tab, name, data.flatMap(t => t.x)), CONFIG)
        .then(() => { el.dataset.axis = view ? view.axis : "step"; });
    }

    async function show(i) {
      const mine = ++seq;
      ready = false; tab = tabs[i]; name = tab.name; traces = {}; last = {}; raw = {};
      buttons.forEach((b, j) => b.classList.toggle("active", j === i));
      const q = tab.names.map(encodeURIComponent).join(",");
      const points = Math.max(200, Math.round(el.clientWidth || 1000));  // about one point per pixel
      const data = await fetch(`/api/v1/runs/${runId}/metrics/?name=${q}&points=${points}`, {credentials: "same-origin"})
        .then(r => r.ok ? r.json() : {series: []}).catch(() => ({series: []}));
      if (mine !== seq) return;  // another tab was clicked meanwhile
      const present = new Set(data.series.map(s => s.name));
      name = tab.names.find(n => present.has(n)) || null;
      const shown = data.series.filter(s => s.name === name);
      shown.forEach((s, j) => { traces[s.role] = j; last[s.role] = s.steps[s.steps.length - 1]; raw[s.role] = {x: [...s.steps], y: [...s.values]}; });
      await redraw();
      el.dataset.metric = name || "";
      ready = true;
    }

    window.addEventListener("run-metric", (ev) => {
      const msg = ev.detail;
      if (!ready || !tab) return;
      const points = [...(msg.earlier || []), {step: msg.step, values: msg.values}];  // oldest first
      const n = name || tab.names.find(c => points.some(p => c in p.values));
      const from = msg.role in last ? last[msg.role] : -Infinity;
      const fresh = n ? points.filter(p => p.step > from && p.values[n] !== undefined && p.values[n] !== null) : [];
      if (!fresh.length) return;
      if (!name) { name = n; el.dataset.metric = n; }
      raw[msg.role] = raw[msg.role] || {x: [], y: []};
      raw[msg.role].x.push(...fresh.map(p => p.step)); raw[msg.role].y.push(...fresh.map(p => p.values[n]));
      if (!(msg.role in traces)) traces[msg.role] = Object.keys(traces).length;
      if (view && !view.plain()) {  // times or smoothing: the whole chart again, at most 4 times a second
        last[msg.role] = fresh[fresh.length - 1].step;
        if (!timer) timer = setTimeout(redraw, 250);
        return;
      }
      if (traces[msg.role] >= (el.data || []).length) Plotly.addTraces(el, {x: [], y: [], mode: "lines+markers", name: msg.role || "all"});
      Plotly.extendTraces(el, {x: [fresh.map(p => p.step)], y: [fresh.map(p => p.values[n])]}, [traces[msg.role]]);
      Plotly.relayout(el, title(tab, name, drawnSteps()));
      last[msg.role] = fresh[fresh.length - 1].step;
    });
    buttons.forEach((b, i) => b.addEventListener("click", () => show(i)));
    window.addEventListener("run-curves-view", () => { if (ready) redraw(); });
    return show(0);
  }

  // ---- task ledger -----------------------------------------------------------------------
  function pct(part, whole) { return whole ? Math.round(100 * part / whole) + "%" : "\u2014"; }

  function drawLedger(d) {
    document.getElementById("ledger-tasks").textContent = d.tasks;
    document.getElementById("ledger-invalid").textContent = pct(d.invalid, d.tasks);
    document.getElementById("ledger-target").textContent = pct(d.near_target, d.graded);
    document.getElementById("ledger-dups").textContent = pct(d.duplicates.duplicates, d.duplicates.checked);
    document.getElementById("ledger-dups-checked").textContent = d.duplicates.checked;

    const mids = d.bins.map(b => (b.lo + b.hi) / 2);
    const labels = d.bins.map(b => `${Math.round(b.lo * 100)}\u2013${Math.round(b.hi * 100)}%`);
    const recent = !d.recent_steps ? "recent" : d.recent_steps[0] === d.recent_steps[1] ? `step ${d.recent_steps[0]}`
      : `steps ${d.recent_steps[0]}\u2013${d.recent_steps[1]}`;
    const hist = document.getElementById("ledger-histogram");
    Plotly.react(hist, [
      {type: "bar", x: mids, y: d.bins.map(b => b.all), name: "all steps", customdata: labels, hovertemplate: "%{customdata}: %{y}<extra>all</extra>", marker: {color: "#91a7ff"}},
      {type: "bar", x: mids, y: d.bins.map(b => b.recent), name: recent, customdata: labels, hovertemplate: "%{customdata}: %{y}<extra>recent</extra>", marker: {color: "#3b5bdb"}},
    ], {...LAYOUT, margin: {...LAYOUT.margin, t: 24}, barmode: "group", bargap: 0.15,
        xaxis: {title: {text: "solver pass rate"}, range: [0, 1], tickformat: ".0%", dtick: 0.1},
        yaxis: {title: {text: "graded tasks"}, rangemode: "nonnegative"},
        shapes: [{type: "line", x0: d.target, x1: d.target, yref: "paper", y0: 0, y1: 1, line: {color: "#e8590c", dash: "dash", width: 2}}],
        annotations: [{x: d.target, yref: "paper", y: 1, yanchor: "bottom", text: "target 50%", showarrow: false, font: {color: "#e8590c"}}]},
      CONFIG);

    const steps = document.getElementById("ledger-steps");
    Plotly.react(steps, [
      {x: d.steps, y: d.invalid_share_by_step, mode: "lines+markers", name: "invalid share"},
      {x: d.steps, y: d.pass_rate_by_step, mode: "lines+markers", name: "mean pass rate"},
      {x: d.duplicates.steps, y: d.duplicates.rate_by_step, mode: "lines+markers", name: "near-duplicate rate (recent)"},
    ], {...LAYOUT, margin: {...LAYOUT.margin, t: 30}, legend: {orientation: "h", y: 1.02, yanchor: "bottom"},  // legend above: below, it ran into the axis title
        xaxis: stepAxis(d.steps), yaxis: {range: [0, 1.02], tickformat: ".0%", visible: d.steps.length > 0},
        annotations: d.steps.length ? [] : [{text: `no tasks yet${waitingNote() ? "; " + waitingNote() : ""}`, showarrow: false,
                                             xref: "paper", yref: "paper", x: 0.5, y: 0.5}]}, CONFIG);
    hist.dataset.ready = "1";
  }

  function taskLedger(runId) {
    let timer = null;
    drawLedger(json("ledger-data"));
    window.addEventListener("run-sample", (ev) => {
      if (ev.detail.kind !== "task" || timer) return;
      timer = setTimeout(() => {  // at most one refresh per 3 s however fast tasks arrive
        fetch(`/runs/${runId}/ledger/`, {credentials: "same-origin"}).then(r => r.ok ? r.json() : null)
          .then(d => { if (d) drawLedger(d); }).finally(() => { timer = null; });
      }, 3000);
    });
  }

  // After the reward chart (the page's first chart) is up, so the two do not compete for the CPU.
  let started = false;
  function start() {
    if (started || !window.Plotly || !document.getElementById("metric-tab-data")) return;
    started = true;
    const runId = json("run-id");
    metricTabs(runId);
    taskLedger(runId);
  }
  window.addEventListener("run-chart-ready", start);
  window.addEventListener("load", () => setTimeout(start, 3000));  // in case the reward chart never gets ready
})();
