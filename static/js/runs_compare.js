// The run comparison chart (templates/runs/compare.html).
// A static file, not an inline script: the Content-Security-Policy allows scripts from this site only.
// One trace per (run, role) of the chosen metric, from the downsampled metrics API, drawn against
// step, wall time or training time (apps/runs/compare.time_axes), smoothed by a debiased exponential
// moving average (W&B's smoothing; both from curve_axes.js, which the run page uses too), and runs that are seeds of one config drawn as one band
// (apps/runs/compare.seed_groups): their mean, with min-max or +- standard error around it.
(function () {
  const read = id => JSON.parse(document.getElementById(id).textContent);
  const ids = read("compare-ids");
  const labels = read("compare-labels");  // "run 10 · name", or "run 10 (folder)" if imported
  const axes = read("compare-axes");      // run id -> {steps, train, wall|null}
  const groups = read("compare-seed-groups");
  const el = document.getElementById("compare-chart");
  const metric = el.dataset.metric;
  const xSelect = document.getElementById("compare-x");
  const smooth = document.getElementById("compare-smooth");
  const smoothShown = document.getElementById("compare-smooth-value");
  const bands = document.getElementById("compare-bands");
  const bandKind = document.getElementById("compare-band");
  const note = document.getElementById("compare-axis-note");
  const colors = ["#3b5bdb", "#e8590c", "#2f9e44", "#c2255c", "#7048e8", "#1098ad", "#f08c00", "#495057"];
  const dashes = ["solid", "dot", "dash", "dashdot"];
  const {TITLES, interp, ema, fade} = window.CurveAxes;  // static/js/curve_axes.js, shared with the run page
  const params = new URLSearchParams(location.search);
  if (params.has("smooth")) smooth.value = Math.min(0.99, Math.max(0, Number(params.get("smooth")) || 0));
  let answers = null;

  // The x of each step on the chosen axis (hours for times); null when the run has no step times at all.
  function xsOf(runId, steps, axis, fallbacks) {
    const {x, fellBack} = window.CurveAxes.timeOf(axes[String(runId)], steps, axis);
    if (fellBack) fallbacks[fellBack].push(runId);
    return x;
  }

  function band(members, kind) {  // members: [{x, y}] -> {x, mean, lo, hi} on their common x grid
    let grid = [...new Set(members.flatMap(m => m.x))].sort((a, b) => a - b);
    if (grid.length > 600) grid = grid.filter((_, i) => i % Math.ceil(grid.length / 600) === 0 || i === grid.length - 1);
    const out = {x: [], mean: [], lo: [], hi: []};
    for (const gx of grid) {
      const vs = members.filter(m => m.x.length && gx >= m.x[0] && gx <= m.x[m.x.length - 1])
                        .map(m => interp(m.x, m.y, gx)).filter(Number.isFinite);
      if (!vs.length) continue;
      const mean = vs.reduce((a, b) => a + b, 0) / vs.length;
      let lo = Math.min(...vs), hi = Math.max(...vs);
      if (kind === "stderr") {
        const sd = vs.length > 1 ? Math.sqrt(vs.reduce((a, v) => a + (v - mean) ** 2, 0) / (vs.length - 1)) : 0;
        lo = mean - sd / Math.sqrt(vs.length); hi = mean + sd / Math.sqrt(vs.length);
      }
      out.x.push(gx); out.mean.push(mean); out.lo.push(lo); out.hi.push(hi);
    }
    return out;
  }

  function draw() {
    const axis = xSelect.value, w = Number(smooth.value), asBands = !!(bands && bands.checked);
    smoothShown.textContent = w.toFixed(2);
    const fallbacks = {wall: [], none: []}, traces = [], roles = [];
    const curves = [];  // {run index, role, x, y}
    let total = 0;
    answers.forEach((data, i) => {
      for (const s of data.series) {
        total += s.total;
        if (!roles.includes(s.role)) roles.push(s.role);
        const x = xsOf(ids[i], s.steps, axis, fallbacks);
        if (x) curves.push({i, role: s.role, x, raw: s.values, y: ema(s.values, w)});
      }
    });
    const grouped = new Map();  // run id -> its group, when drawn as bands
    if (asBands) for (const g of groups) for (const id of g.runs) grouped.set(id, g);
    for (const c of curves) {
      if (grouped.has(ids[c.i])) continue;
      const color = colors[c.i % colors.length], dash = dashes[roles.indexOf(c.role) % dashes.length];
      const name = labels[c.i] + (c.role ? ` · ${c.role}` : "");
      if (w) traces.push({x: c.x, y: c.raw, mode: "lines", name: name + " (raw)", showlegend: false, hoverinfo: "skip",
                          line: {color: fade(color, 0.25), width: 1, dash}});
      traces.push({x: c.x, y: c.y, mode: "lines", name, line: {color, dash}});
    }
    if (asBands) groups.forEach(g => {
      const first = ids.indexOf(g.runs[0]), color = colors[first % colors.length];
      for (const role of roles) {
        const members = curves.filter(c => c.role === role && g.runs.includes(ids[c.i]));
        if (!members.length) continue;
        const b = band(members, bandKind ? bandKind.value : "minmax");
        const name = `${g.label}${role ? ` · ${role}` : ""} (${members.length} runs)`;
        const dash = dashes[roles.indexOf(role) % dashes.length];
        traces.push({x: b.x, y: b.lo, mode: "lines", line: {width: 0, color}, showlegend: false, hoverinfo: "skip",
                     legendgroup: name});
        traces.push({x: b.x, y: b.hi, mode: "lines", line: {width: 0, color}, fill: "tonexty",
                     fillcolor: fade(color, 0.2), showlegend: false, hoverinfo: "skip", legendgroup: name});
        traces.push({x: b.x, y: b.mean, mode: "lines", name: name + " mean", line: {color, dash, width: 2.5},
                     legendgroup: name});
      }
    });
    const notes = [];
    if (fallbacks.wall.length) notes.push(`No wall-clock stamps for run ${[...new Set(fallbacks.wall)].join(", ")} ` +
      "(written before the trainer logged them): drawn against its training time instead.");
    if (fallbacks.none.length) notes.push(`Run ${[...new Set(fallbacks.none)].join(", ")} logged no step times: ` +
      "not drawn against time.");
    note.textContent = notes.join(" ");
    note.hidden = !notes.length;
    document.getElementById("compare-points").textContent = `${curves.length} curves · ${total} points stored`;
    const next = new URLSearchParams(location.search);
    next.set("x", axis);
    if (w) next.set("smooth", w.toFixed(2)); else next.delete("smooth");
    history.replaceState(null, "", `${location.pathname}?${next}`);
    return Plotly.react(el, traces, {margin: {t: 30, r: 10, b: 45, l: 55}, xaxis: {title: {text: TITLES[axis]}},
                                     yaxis: {title: {text: metric}}, legend: {orientation: "h", y: 1.02, yanchor: "bottom"}},
                        {responsive: true, displaylogo: false}).then(() => { el.dataset.axis = axis; });
  }

  window.addEventListener("load", async () => {
    answers = await Promise.all(ids.map(id =>
      fetch(`/api/v1/runs/${id}/metrics/?name=${encodeURIComponent(metric)}&points=1500`, {credentials: "same-origin"})
        .then(r => r.ok ? r.json() : {series: []})));
    await draw();
    el.dataset.ready = "1";
    for (const input of [xSelect, bands, bandKind]) input?.addEventListener("change", draw);
    smooth.addEventListener("input", draw);
  });
})();

// Picking another metric reloads the page with it (was an inline onchange handler); the axis goes with the form.
document.getElementById("metric")?.addEventListener("change", (ev) => ev.target.form.submit());
