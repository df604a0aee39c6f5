// The run comparison chart (templates/runs/compare.html).
// A static file, not an inline script: the Content-Security-Policy allows scripts from this site only.
// One trace per (run, role) of the chosen metric, from the downsampled metrics API.
(function () {
  const ids = JSON.parse(document.getElementById("compare-ids").textContent);
  const labels = JSON.parse(document.getElementById("compare-labels").textContent);  // "run 10 (folder)" if imported
  const el = document.getElementById("compare-chart");
  const metric = el.dataset.metric;
  window.addEventListener("load", async () => {
    const answers = await Promise.all(ids.map(id =>
      fetch(`/api/v1/runs/${id}/metrics/?name=${encodeURIComponent(metric)}&points=1500`, {credentials: "same-origin"})
        .then(r => r.ok ? r.json() : {series: []})));
    const traces = [];
    let total = 0;
    const colors = ["#3b5bdb", "#e8590c", "#2f9e44", "#c2255c", "#7048e8", "#1098ad", "#f08c00", "#495057"];
    const dashes = ["solid", "dot", "dash", "dashdot"], roles = [];
    answers.forEach((data, i) => {   // one colour per run, one dash style per role
      for (const s of data.series) {
        total += s.total;
        if (!roles.includes(s.role)) roles.push(s.role);
        traces.push({x: s.steps, y: s.values, mode: "lines", name: labels[i] + (s.role ? ` · ${s.role}` : ""),
                     line: {color: colors[i % colors.length], dash: dashes[roles.indexOf(s.role) % dashes.length]}});
      }
    });
    document.getElementById("compare-points").textContent = `${traces.length} curves · ${total} points stored`;
    await Plotly.newPlot(el, traces, {margin: {t: 30, r: 10, b: 45, l: 55}, xaxis: {title: {text: "step"}},
                                      yaxis: {title: {text: metric}}, legend: {orientation: "h", y: 1.02, yanchor: "bottom"}},
                         {responsive: true, displaylogo: false});
    el.dataset.ready = "1";
  });
})();

// Picking another metric reloads the page with it (was an inline onchange handler).
document.getElementById("metric")?.addEventListener("change", (ev) => ev.target.form.submit());
