// The run page's "Evaluations by step" card (templates/evals/_run_evals_chart.html): the checkpoints'
// scores against step with their 95% intervals (one trace per benchmark, plotly error bars), and
// the cross-play heatmap (rows: Challengers, columns: Reasoners). Data: #run-evals-chart-data.
(function () {
  function draw() {
    const node = document.getElementById("run-evals-chart-data");
    if (!node || !window.Plotly) return;
    const data = JSON.parse(node.textContent);
    const config = {responsive: true, displaylogo: false};
    const chart = document.getElementById("run-evals-chart");
    if (chart && data.series.length) {
      const pct = v => v === null ? null : 100 * v;
      const traces = data.series.map(s => ({
        x: s.steps, y: s.scores.map(pct), name: s.benchmark, mode: "lines+markers", type: "scatter",
        error_y: {type: "data", symmetric: false, visible: true,
                  array: s.scores.map((v, i) => s.ci_high[i] === null ? 0 : 100 * (s.ci_high[i] - v)),
                  arrayminus: s.scores.map((v, i) => s.ci_low[i] === null ? 0 : 100 * (v - s.ci_low[i]))},
        hovertemplate: s.benchmark + " step %{x}: %{y:.1f}%<extra></extra>",
      }));
      Plotly.newPlot(chart, traces, {margin: {t: 10, r: 10, b: 40, l: 50}, xaxis: {title: {text: "step"}},
                                     yaxis: {title: {text: "score (%)"}, rangemode: "tozero"},
                                     legend: {orientation: "h", y: 1.02, yanchor: "bottom"}, showlegend: true}, config);
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
