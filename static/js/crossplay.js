// The cross-play heatmap (templates/evals/crossplay.html), redrawn after each htmx swap of its data.
// A static file, not an inline script: the Content-Security-Policy allows scripts from this site only.
(function () {
  const el = document.getElementById("crossplay-heatmap");
  function draw() {
    const job = JSON.parse(document.getElementById("crossplay-data").textContent);
    const text = job.matrix.map(row => row.map(v => v === null ? "" : v.toFixed(2)));
    Plotly.react(el, [{z: job.matrix, x: job.column_labels, y: job.labels, type: "heatmap", colorscale: "Viridis", zmin: 0, zmax: 1,
                       text: text, texttemplate: "%{text}", hovertemplate: "challenger %{y}<br>solver %{x}<br>pass rate %{z}<extra></extra>"}],
                 {margin: {t: 10, r: 10, b: 50, l: 80}, xaxis: {title: {text: "solver (Reasoner) checkpoint"}},
                  yaxis: {title: {text: "challenger checkpoint"}, autorange: "reversed"}}, {responsive: true, displaylogo: false});
  }
  window.addEventListener("load", draw);
  document.body.addEventListener("htmx:afterSwap", draw);
})();
