// The live run page (templates/runs/detail.html).
// A static file, not an inline script: the Content-Security-Policy allows scripts from this site only.
// Live updates: websocket /ws/runs/<id>/ -> chart points, sample rows, status; reconnects with
// backoff and catches up from the metrics API (since the last step it has seen).
// The curves are drawn against step, wall time or training time, with smoothing (curve_axes.js, as the
// compare view): window.runCurves holds that choice and the run's step -> time map, which every live step
// extends; run_page.js draws the metric tabs with it too.
(function () {
  const runId = JSON.parse(document.getElementById("run-id").textContent);
  const chartEl = document.getElementById("reward-chart");
  // Every role gets a curve: the first of these names it reports (its reward, else its accuracy)
  const curveNames = JSON.parse(document.getElementById("curve-names").textContent);
  const totalSteps = JSON.parse(document.getElementById("run-total-steps").textContent);
  const curveOf = {};  // role -> the metric name its curve plots
  const traces = {};   // role -> trace index
  const last = {};     // role -> last step drawn
  const raw = {};      // role -> {x: steps, y: values} of every point drawn (redrawn when the view changes)
  let backoff = 1000, opened = false, chartReady = false, pending = [], catching = false, held = [];
  let caughtUp = false, signalled = false, catchChain = Promise.resolve();
  const seen = {};     // role -> newest step received (drawn or waiting for the chart)
  // The run's message counter (apps/runs/consumers.py): every message carries `seq`, the connect
  // snapshot the current one. A skipped number means the channel layer lost a message while the socket
  // stayed open: refetch the gap (metrics API, samples, controls) as a reconnect does.
  let lastSeq = null, pendingCatchUps = 0;

  function addPoints(role, steps, values) { addSeries([[role, steps, values]]); }

  // ---- the curves' view: x axis and smoothing (the controls in the reward card; ?x=wall&smooth=0.6) -------
  const C = window.CurveAxes;
  const xSelect = document.getElementById("curve-x"), smoothInput = document.getElementById("curve-smooth");
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];  // plotly's
  const view = window.runCurves = {
    axis: "step", smooth: 0,
    map: JSON.parse(document.getElementById("run-time-axis").textContent),  // apps/runs/compare.time_axes + wall_start
    plain() { return this.axis === "step" && !this.smooth; },  // points as logged: live points extend the traces
    // x of each step on the chosen axis; a run without step times stays on steps, without wall stamps on training time
    xs(steps) {
      const {x, fellBack} = C.timeOf(this.map, steps, this.axis);
      this.fellBack = fellBack || this.fellBack;
      return x || steps;
    },
    xaxis(xs) {
      if (this.axis === "step" || this.fellBack === "none") return stepAxis(xs.length ? Math.max(...xs) - Math.min(...xs) : 0);
      return {title: {text: C.TITLES[this.fellBack === "wall" ? "train" : this.axis]}, visible: true};
    },
    // [{name, steps, values}] -> plotly traces: with smoothing, each curve smoothed over a faint line of its points
    traces(curves) {
      this.fellBack = null;
      const out = [];
      curves.forEach((c, i) => {
        // copies: plotly's extendTraces appends to a trace's own arrays, which must not be the caller's
        const x = [...this.xs(c.steps)], mode = c.steps.length > 300 ? "lines" : "lines+markers";
        if (this.plain()) { out.push({x, y: [...c.values], mode, name: c.name}); return; }
        const color = COLORS[i % COLORS.length];
        if (this.smooth) out.push({x, y: c.values, mode: "lines", name: c.name + " (raw)", showlegend: false, hoverinfo: "skip",
                                   line: {color: C.fade(color, 0.25), width: 1}});
        out.push({x, y: C.ema(c.values, this.smooth), mode: this.smooth ? "lines" : mode, name: c.name, line: {color}});
      });
      const note = document.getElementById("curve-axis-note");
      note.textContent = this.axis === "step" ? "" : this.fellBack === "none" ? "This run logged no step times yet: drawn against step."
        : this.fellBack === "wall" ? "This run logged no wall-clock stamps (written before the trainer logged them): drawn against its training time." : "";
      note.hidden = !note.textContent;
      return out;
    },
    // a live message's steps extend the step -> time map (every role's metrics carry step_seconds and wall_clock)
    extend(points) {
      let grew = false;
      for (const p of points) grew = C.extend(this.map, p.step, p.values.step_seconds, p.values.wall_clock) || grew;
      return grew;
    },
  };
  const params = new URLSearchParams(location.search);
  if (C.AXES.includes(params.get("x"))) xSelect.value = params.get("x");
  if (params.has("smooth")) smoothInput.value = Math.min(0.99, Math.max(0, Number(params.get("smooth")) || 0));
  function readView() {
    view.axis = xSelect.value; view.smooth = Number(smoothInput.value) || 0;
    document.getElementById("curve-smooth-value").textContent = view.smooth.toFixed(2);
  }
  readView();
  function viewChanged() {
    readView();
    const next = new URLSearchParams(location.search);
    if (view.axis !== "step") next.set("x", view.axis); else next.delete("x");
    if (view.smooth) next.set("smooth", view.smooth.toFixed(2)); else next.delete("smooth");
    history.replaceState(null, "", `${location.pathname}${next.toString() ? "?" + next : ""}`);
    if (chartReady) redraw();
    window.dispatchEvent(new Event("run-curves-view"));  // run_page.js redraws the metric tabs
  }
  xSelect.addEventListener("change", viewChanged);
  smoothInput.addEventListener("input", viewChanged);

  // The whole reward chart from `raw`, in the traces' order (after a view change, or a live point off the plain view).
  let redrawTimer = null;
  function redraw() {
    clearTimeout(redrawTimer); redrawTimer = null;
    const roles = Object.keys(traces).sort((a, b) => traces[a] - traces[b]);
    const data = view.traces(roles.map(role => ({name: `${role || "all"} · ${curveOf[role]}`, steps: raw[role].x, values: raw[role].y})));
    const xs = data.flatMap(t => t.x);
    return Plotly.react(chartEl, data, {...chartLayout(), xaxis: xs.length ? view.xaxis(xs) : {...stepAxis(0), visible: false},
                                        yaxis: {title: {text: "reward / accuracy"}, visible: xs.length > 0}},
                        {responsive: true, displaylogo: false})
      .then(() => { chartEl.dataset.axis = view.axis; chartEl.dataset.smooth = String(view.smooth); showFilled(); });
  }
  function redrawSoon() { if (!redrawTimer) redrawTimer = setTimeout(redraw, 250); }  // at most 4 redraws a second
  function chartLayout() {  // plotly 3 takes axis titles as {text}; the legend (shown even for one role) sits above the plot
    return {margin: {t: 30, r: 10, b: 40, l: 50}, showlegend: true, legend: {orientation: "h", y: 1.02, yanchor: "bottom"}};
  }

  // The role's curve: the name it plots already, else the first curve name among `has` (null: none).
  function curveFor(role, has) {
    if (role === "system") return null;  // the run's own costs, not a player
    if (!(role in curveOf)) { const n = curveNames.find(has); if (n) curveOf[role] = n; }
    return curveOf[role] || null;
  }

  // Series from the metrics API (several names and roles) -> addSeries batch items of each role's curve.
  function curveBatch(series) {
    const byRole = {};
    for (const s of series) (byRole[s.role] = byRole[s.role] || {})[s.name] = s;
    const batch = [];
    for (const [role, named] of Object.entries(byRole)) {
      const name = curveFor(role, n => n in named);
      if (name && named[name]) batch.push([role, named[name].steps, named[name].values]);
    }
    return batch;
  }

  // An empty chart draws no axes (plotly's default -1..6): a note says what it waits for.
  let shownEmpty = true;
  function stepAxis(xmax) {  // whole steps only; one tick per step while there are few
    return {title: {text: "step"}, tickformat: "d", dtick: xmax <= 10 ? 1 : null, visible: true};
  }
  function showFilled() {
    const xs = (chartEl.data || []).flatMap(t => t.x);
    if (!xs.length) return;
    document.getElementById("reward-waiting").hidden = true;
    Plotly.relayout(chartEl, {xaxis: view.xaxis(xs), "yaxis.visible": true});
    shownEmpty = false;
  }

  // Several roles' points in one redraw: new roles become traces with their data, known roles are extended.
  function addSeries(batch) {
    for (const [role, steps] of batch) if (steps.length) seen[role] = Math.max(seen[role] ?? -Infinity, steps[steps.length - 1]);
    if (!chartReady) { pending.push(...batch); return; }
    const fresh = {}, ext = {x: [], y: [], idx: []};
    for (const [role, steps, values] of batch) {
      const from = role in last ? last[role] : -Infinity;
      const keep = steps.map((s, i) => i).filter(i => steps[i] > from && values[i] !== null);
      if (!keep.length) continue;
      const xs = keep.map(i => steps[i]), ys = keep.map(i => values[i]);
      last[role] = xs[xs.length - 1];
      raw[role] = raw[role] || {x: [], y: []};
      raw[role].x.push(...xs); raw[role].y.push(...ys);
      if (role in fresh) { fresh[role].x.push(...xs); fresh[role].y.push(...ys); }
      else if (role in traces) { ext.x.push(xs); ext.y.push(ys); ext.idx.push(traces[role]); }
      else fresh[role] = {x: xs, y: ys, mode: xs.length > 300 ? "lines" : "lines+markers", name: `${role || "all"} · ${curveOf[role]}`};
    }
    const added = Object.keys(fresh);
    added.forEach((role, i) => { traces[role] = Object.keys(traces).length; });
    if (!view.plain()) { if (added.length || ext.idx.length) redrawSoon(); return; }
    if (added.length) Plotly.addTraces(chartEl, added.map(role => fresh[role]));
    if (ext.idx.length) Plotly.extendTraces(chartEl, {x: ext.x, y: ext.y}, ext.idx);
    if (added.length || ext.idx.length) showFilled();
  }

  function chartUp() {  // the first catch-up is drawn: run_page.js draws the other charts now
    if (signalled || !chartReady || !caughtUp) return;
    signalled = true;
    window.dispatchEvent(new Event("run-chart-ready"));
  }

  // One catch-up at a time, each from the newest step seen (the page's own points, then what
  // arrived), queued when the socket opens, so nothing written before it was open is lost.
  // Metric messages that arrive meanwhile are held (drawn after it), so a catch-up reads from the
  // newest step seen before it was asked for.
  function queueCatchUp() { pendingCatchUps++; catching = true; catchChain = catchChain.then(catchUp); }

  function catchUp() {
    catching = true;
    const steps = Object.values(seen);
    const since = steps.length ? "&since_step=" + Math.min(...steps) : "";
    const points = Math.max(200, Math.round(chartEl.clientWidth || 1000));  // about one point per pixel
    const names = [...curveNames, "step_seconds", "wall_clock"];  // the step times extend the time axes
    return fetch(`/api/v1/runs/${runId}/metrics/?name=${names.map(encodeURIComponent).join(",")}${since}&points=${points}`, {credentials: "same-origin"})
      .then(r => r.ok ? r.json() : {series: []})
      .then(data => { extendTimes(data.series); addSeries(curveBatch(data.series)); })
      .finally(() => {
        pendingCatchUps--; catching = pendingCatchUps > 0; caughtUp = true; chartUp();
        if (!catching) for (const m of held.splice(0)) onMetric(m);
      })
      .catch(() => {});  // a failed fetch (server away) must not stop the chain: the next reconnect tries again
  }

  // The metrics API's step_seconds / wall_clock series (any role: a step's are the same for all) -> the time map.
  function extendTimes(series) {
    const at = {};
    for (const s of series) {
      if (s.name !== "step_seconds" && s.name !== "wall_clock") continue;
      s.steps.forEach((step, i) => { (at[step] = at[step] || {})[s.name] = s.values[i]; });
    }
    const steps = Object.keys(at).map(Number).sort((a, b) => a - b);
    if (view.extend(steps.map(step => ({step, values: at[step]}))) && !view.plain() && chartReady) redrawSoon();
  }

  // Within a step: "step 3 of 50: rollout (generating) for 40 s"; hidden once the run is not running.
  let progress = JSON.parse(document.getElementById("run-progress-data").textContent);
  let runStatus = document.getElementById("run-status")?.dataset.status;
  const PHASES = {rollout: "rollout (generating)", update: "update (training on the rollouts)"};
  function drawProgress() {
    const el = document.getElementById("run-progress");
    if (!progress || runStatus !== "running") { el.hidden = true; return; }
    const secs = Math.max(0, Math.round(Date.now() / 1000 - progress.at));
    const took = secs < 90 ? `${secs} s` : `${Math.round(secs / 60)} min`;
    el.textContent = `step ${progress.step} of ${totalSteps}: ${PHASES[progress.phase] || progress.phase} for ${took}`;
    el.hidden = false;
  }
  function onProgress(msg) { progress = msg; drawProgress(); }
  setInterval(drawProgress, 1000);

  function setStatus(msg) {
    const badge = document.getElementById("run-status");
    if (msg.step !== undefined) document.getElementById("run-step").textContent = msg.step;
    if ("error" in msg) {  // the run's error as it is now: a resumed run running again clears the old failure
      const e = document.getElementById("run-error"); e.textContent = msg.error || ""; e.hidden = !msg.error;
    }
    if (msg.checkpoint) document.getElementById("run-checkpoint").textContent = msg.checkpoint;
    if (msg.snapshot && msg.progress !== undefined) progress = msg.progress;
    if (msg.status) { runStatus = msg.status; drawProgress(); }
    if (!badge || (badge.dataset.status === msg.status && !msg.requested)) return;
    if (window.htmx) htmx.ajax("GET", `/runs/${runId}/controls/`, {target: "#run-controls", swap: "outerHTML"});
    if (!msg.snapshot && msg.message) addEvent(msg.message);
  }

  function addEvent(text) {
    const li = document.createElement("li");
    li.textContent = new Date().toISOString().slice(0, 19).replace("T", " ") + " · " + text;
    document.getElementById("run-events").prepend(li);
  }

  function onMetric(msg) {
    window.dispatchEvent(new CustomEvent("run-metric", {detail: msg}));  // run_page.js: metric tabs
    if (catching) { held.push(msg); return; }
    document.getElementById("run-step").textContent = msg.step;
    // a message holds the role's newest step and, from a fast run, the earlier steps of the same flush
    const all = [...(msg.earlier || []), {step: msg.step, values: msg.values}];
    if (view.extend(all) && !view.plain() && chartReady) redrawSoon();
    const name = curveFor(msg.role, n => all.some(p => n in p.values));
    const points = name ? all.filter(p => name in p.values) : [];
    if (points.length) addPoints(msg.role, points.map(p => p.step), points.map(p => p.values[name]));  // skips steps already drawn
    const group = roleGroup(msg.role), body = group.querySelector("tbody");
    for (const [metricName, value] of Object.entries(msg.values)) {
      const key = msg.role + "|" + metricName;
      let row = body.querySelector(`tr[data-metric="${CSS.escape(key)}"]`);
      if (!row) {
        row = document.createElement("tr"); row.dataset.metric = key;
        for (const cls of ["name", "step", "value"]) { const td = document.createElement("td"); td.className = cls; row.appendChild(td); }
        row.children[0].textContent = metricName;
        body.appendChild(row);
      }
      row.querySelector(".step").textContent = msg.step;
      row.querySelector(".value").textContent = value === null ? "—" : Number(value).toPrecision(4);
    }
    group.querySelector(".role-count").textContent = body.children.length;
    group.querySelector(".role-step").textContent = msg.step;
    const headline = group.querySelector(".role-headline");
    if (name && name in msg.values) {
      let h = headline;
      if (!h) {  // the role's curve value, shown on its collapsed line
        group.querySelector("summary").append(" · " + name + " ");
        h = document.createElement("span"); h.className = "role-headline"; h.dataset.name = name;
        group.querySelector("summary").appendChild(h);
      }
      h.textContent = msg.values[name] === null ? "—" : Number(msg.values[name]).toPrecision(4);
    }
  }

  // The Latest metrics block of a role (a collapsed <details>), made when the role first reports.
  function roleGroup(role) {
    const table = document.getElementById("metric-table");
    let group = [...table.querySelectorAll("details.metric-role")].find(d => d.dataset.role === role);
    if (group) return group;
    const placeholder = table.querySelector(".placeholder"); if (placeholder) placeholder.remove();
    group = document.createElement("details"); group.className = "metric-role"; group.dataset.role = role;
    const summary = document.createElement("summary"), strong = document.createElement("strong");
    strong.textContent = role || "all";
    summary.append(strong, " · ");
    const count = document.createElement("span"); count.className = "role-count"; count.textContent = "0";
    const step = document.createElement("span"); step.className = "role-step";
    summary.append(count, " metrics · step ", step);
    const tbl = document.createElement("table"); tbl.className = "list";
    const head = tbl.createTHead().insertRow();
    for (const label of ["Metric", "Step", "Value"]) { const th = document.createElement("th"); th.textContent = label; head.appendChild(th); }
    tbl.createTBody();
    group.append(summary, tbl);
    table.appendChild(group);
    return group;
  }

  function onSample(msg) {
    window.dispatchEvent(new CustomEvent("run-sample", {detail: msg}));  // run_page.js: task ledger
    const body = document.getElementById("sample-rows");
    const placeholder = body.querySelector(".placeholder"); if (placeholder) placeholder.remove();
    const row = document.createElement("tr");
    row.className = "sample " + msg.kind; row.dataset.key = msg.kind + ":" + msg.key;
    const text = msg.kind === "task" ? msg.question : msg.text;
    const score = msg.kind === "task" ? msg.pass_rate : msg.reward;
    const cells = [msg.step, msg.kind + (msg.valid === false ? " (invalid)" : ""), msg.role, null,
                   score === null || score === undefined ? "—" : Number(score).toFixed(3)];
    for (const value of cells) {
      const td = document.createElement("td");
      if (value === null) { const pre = document.createElement("pre"); pre.textContent = text || ""; td.appendChild(pre); }
      else td.textContent = value;   // textContent: model text is never parsed as HTML
      row.appendChild(td);
    }
    // the kind cell links to the turn-by-turn view (attempt) or to the task with its attempts
    const a = document.createElement("a");
    a.className = msg.kind === "attempt" ? "trajectory-link" : "task-link";
    a.href = `/runs/${runId}/${msg.kind === "attempt" ? "attempts" : "tasks"}/${encodeURIComponent(msg.key)}/`;
    a.textContent = row.children[1].textContent; row.children[1].textContent = ""; row.children[1].appendChild(a);
    if (msg.why_invalid) {  // why the task is invalid, as the recipe stored it
      const why = document.createElement("div"); why.className = "invalid-reason";
      why.textContent = "invalid: " + msg.why_invalid; row.children[3].appendChild(why);
    }
    const old = body.querySelector(`tr[data-key="${CSS.escape(row.dataset.key)}"]`); if (old) old.remove();
    body.prepend(row);
    while (body.children.length > 40) body.lastElementChild.remove();
  }

  function refetch() {
    queueCatchUp();
    if (window.htmx) htmx.ajax("GET", `/runs/${runId}/samples/`, {target: "#samples", swap: "outerHTML"});
    if (window.htmx) htmx.ajax("GET", `/runs/${runId}/controls/`, {target: "#run-controls", swap: "outerHTML"});
  }

  function checkSeq(msg) {
    if (typeof msg.seq !== "number") return;
    if (msg.snapshot || lastSeq === null || msg.seq === lastSeq + 1) { lastSeq = msg.seq; return; }
    // late: sent before the snapshot, or published by another process (worker vs web) a moment before
    // the one already here; what it carries is drawn already or by the refetch its gap started
    if (msg.seq <= lastSeq && msg.seq > lastSeq - 1000) return;
    lastSeq = msg.seq;  // a gap, or a counter that restarted with Redis
    refetch();
  }

  function connect() {
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(proto + location.host + `/ws/runs/${runId}/`);
    ws.onopen = () => {
      backoff = 1000;
      queueCatchUp();
      if (opened && window.htmx) htmx.ajax("GET", `/runs/${runId}/samples/`, {target: "#samples", swap: "outerHTML"});
      if (opened && window.htmx) htmx.ajax("GET", `/runs/${runId}/controls/`, {target: "#run-controls", swap: "outerHTML"});
      opened = true;  // a reconnect also refreshes the samples and the status it may have missed
    };
    ws.onmessage = (ev) => {
      const msg = JSON.parse(ev.data);
      checkSeq(msg);
      if (msg.type === "metric") onMetric(msg);
      else if (msg.type === "sample") onSample(msg);
      else if (msg.type === "status") setStatus(msg);
      else if (msg.type === "progress") onProgress(msg);
      else if (msg.type === "checkpoint") document.getElementById("run-checkpoint").textContent = msg.path;
    };
    ws.onclose = () => { setTimeout(connect, backoff); backoff = Math.min(backoff * 2, 30000); };
  }

  // The page brings the reward series (downsampled); the socket opens at once, while
  // plotly.min.js is still loading, and its catch-up fetches only what came after those points.
  // Points that arrive before the chart exists wait in `pending`.
  const initial = JSON.parse(document.getElementById("reward-series").textContent);
  addSeries(curveBatch(initial));
  drawProgress();
  caughtUp = true;  // the page's own points count as the first catch-up
  connect();
  window.addEventListener("load", () => {
    // plotly 3 takes axis titles as {text}; the legend (shown even for one role) sits above the plot
    Plotly.newPlot(chartEl, [], {...chartLayout(), xaxis: {...stepAxis(0), visible: false},
                                 yaxis: {title: {text: "reward / accuracy"}, visible: false}}, {responsive: true, displaylogo: false})
      .then(() => {
        chartReady = true;
        addSeries(pending.splice(0));
        chartUp();
      });
  });
})();
