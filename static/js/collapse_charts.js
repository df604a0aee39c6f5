// The SPICE panel's collapse charts (templates/runs/_method_spice.html): the task gate's refusals by rule
// (stacked bars per step) and the largest answer share / template cluster / guess-probe pass rate (lines, with
// the watchdog's collapse_share dashed). Drawn from the page's data, extended by the run page's "run-metric"
// events (templates/runs/detail.html dispatches one per websocket metric message).
(function () {
  const dataEl = document.getElementById("collapse-data");
  if (!dataEl) return;
  const data = JSON.parse(dataEl.textContent);
  const gatesEl = document.getElementById("collapse-gates"), familyEl = document.getElementById("collapse-family");
  const all = [...data.gates, ...data.family];
  let ready = false;

  function base(ytitle) {
    return {margin: {t: 30, r: 10, b: 40, l: 55}, xaxis: {title: {text: "step"}, tickformat: "d"},
            yaxis: {title: {text: ytitle}, range: [0, 1.02]}, legend: {orientation: "h", y: 1.02, yanchor: "bottom"}};
  }

  function draw() {
    const filled = all.some(s => s.steps.length);
    document.getElementById("collapse-waiting").hidden = filled;
    gatesEl.parentElement.hidden = !filled;
    if (!filled) return;
    const bars = data.gates.filter(s => s.steps.length)
      .map(s => ({type: "bar", name: s.label, x: s.steps, y: s.values}));
    const lines = data.family.filter(s => s.steps.length)
      .map(s => ({type: "scatter", mode: s.steps.length > 200 ? "lines" : "lines+markers", name: s.label, x: s.steps, y: s.values}));
    const gates = {...base("share of the step's tasks refused"), barmode: "stack"};
    const family = base("share");
    if (data.threshold !== null && data.threshold !== undefined)
      family.shapes = [{type: "line", xref: "paper", x0: 0, x1: 1, y0: data.threshold, y1: data.threshold,
                        line: {dash: "dash", color: "#c92a2a", width: 1}}];
    const config = {responsive: true, displaylogo: false};
    Promise.all([Plotly.react(gatesEl, bars, gates, config), Plotly.react(familyEl, lines, family, config)])
      .then(() => { gatesEl.dataset.points = String(bars.reduce((n, t) => n + t.x.length, 0));
                    familyEl.dataset.points = String(lines.reduce((n, t) => n + t.x.length, 0)); });
  }

  window.addEventListener("run-metric", (ev) => {
    const msg = ev.detail;
    let changed = false;
    for (const p of [...(msg.earlier || []), {step: msg.step, values: msg.values}]) {
      for (const s of all) {
        if (s.role !== msg.role || !(s.name in p.values) || p.values[s.name] === null) continue;
        if (s.steps.length && p.step <= s.steps[s.steps.length - 1]) continue;  // drawn already
        s.steps.push(p.step); s.values.push(p.values[s.name]); changed = true;
      }
    }
    if (changed && ready) draw();
  });
  window.addEventListener("load", () => { ready = true; draw(); });
})();
