// The run page's "Evaluations by step" card (templates/evals/_run_evals_chart.html): the checkpoints'
// scores against step with their 95% intervals (one trace per benchmark, plotly error bars), and
// the cross-play heatmap (rows: Challengers, columns: Reasoners). Data: #run-evals-chart-data.
// The runs compare view's "Evaluations by training time" card (templates/evals/_wallclock_chart.html)
// draws the same series against training minutes (one trace per run and benchmark). Data:
// #compare-wallclock-data.
(function () {
  const config = {responsive: true, displaylogo: false};
  const pct = v => v === null ? null : 100 * v;

  // Score traces with asymmetric 95% error bars; x(s) gives a series' x values, label(s) its name.
  function evalChart(el, series, x, label, xTitle, hover) {
    const traces = series.map(s => ({
      x: x(s), y: s.scores.map(pct), name: label(s), mode: "lines+markers", type: "scatter",
      error_y: {type: "data", symmetric: false, visible: true,
                array: s.scores.map((v, i) => s.ci_high[i] === null ? 0 : 100 * (s.ci_high[i] - v)),
                arrayminus: s.scores.map((v, i) => s.ci_low[i] === null ? 0 : 100 * (v - s.ci_low[i]))},
      customdata: s.steps, hovertemplate: label(s) + " " + hover + ": %{y:.1f}%<extra></extra>",
    }));
    return Plotly.newPlot(el, traces, {margin: {t: 10, r: 10, b: 40, l: 50}, xaxis: {title: {text: xTitle}},
                                       yaxis: {title: {text: "score (%)"}, rangemode: "tozero"},
                                       legend: {orientation: "h", y: 1.02, yanchor: "bottom"}, showlegend: true},
                          config);
  }

  function drawWallclock() {
    const node = document.getElementById("compare-wallclock-data");
    const chart = document.getElementById("compare-wallclock-chart");
    if (!node || !chart || !window.Plotly) return;
    const data = JSON.parse(node.textContent);
    if (data.series.length) {
      evalChart(chart, data.series, s => s.minutes, s => s.name, "training time (minutes)",
                "step %{customdata}, %{x:.1f} min").then(() => { chart.dataset.ready = "1"; });
    }
  }

  function draw() {
    drawWallclock();
    const node = document.getElementById("run-evals-chart-data");
    if (!node || !window.Plotly) return;
    const data = JSON.parse(node.textContent);
    const chart = document.getElementById("run-evals-chart");
    if (chart && data.series.length) {
      evalChart(chart, data.series, s => s.steps, s => s.benchmark, "step", "step %{x}");
    }
    const cross = data.crossplay, heatmap = document.getElementById("run-crossplay-heatmap");
    if (cross && heatmap) {
      const text = cross.matrix.map(row => row.map(v => v === null ? "" : v.toFixed(2)));
      const counts = cross.counts && cross.counts.length ? cross.counts : cross.matrix.map(row => row.map(() => ""));
      Plotly.newPlot(heatmap, [{
        z: cross.matrix, x: cross.columns, y: cross.rows, type: "heatmap", colorscale: "Viridis", zmin: 0, zmax: 1,
        text: text, texttemplate: "%{text}", customdata: counts,
        hovertemplate: "challenger %{y}<br>reasoner %{x}<br>pass rate %{z}<br>n %{customdata}<extra></extra>"}],
        {margin: {t: 10, r: 10, b: 50, l: 90}, xaxis: {title: {text: "Reasoner"}, type: "category"},
         yaxis: {title: {text: "Challenger"}, type: "category", autorange: "reversed"}}, config);
    }
  }
  if (document.readyState === "complete") draw(); else window.addEventListener("load", draw);
})();
