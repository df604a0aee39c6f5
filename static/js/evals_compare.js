// The evaluations comparison chart (templates/evals/compare.html): score per step with its 95% interval.
// A static file, not an inline script: the Content-Security-Policy allows scripts from this site only.
// The legend sits above the plot: below it, it covered the x axis title ("step").
window.addEventListener("load", () => {
  const data = JSON.parse(document.getElementById("compare-data").textContent);
  const el = document.getElementById("compare-chart");
  if (!data || !el) return;
  const traces = data.series.map(s => ({
    x: s.steps, y: s.scores.map(v => 100 * v), name: s.name, mode: "lines+markers", type: "scatter",
    error_y: {type: "data", symmetric: false, array: s.ci_high.map((h, i) => 100 * (h - s.scores[i])),
              arrayminus: s.scores.map((v, i) => 100 * (v - s.ci_low[i])), visible: true},
  }));
  Plotly.newPlot(el, traces, {margin: {t: 40, r: 10, b: 40, l: 50}, xaxis: {title: {text: "step"}},
                              yaxis: {title: {text: "score (%)"}, rangemode: "tozero"},
                              legend: {orientation: "h", y: 1.02, yanchor: "bottom"}},
                 {responsive: true, displaylogo: false});
});
