// Chart labels are data (metric roles, run names, imported labels): Plotly renders trace names, titles and axis
// titles as its pseudo-HTML, so a label holding <a href=...> would become a link. Every chart call on our pages goes
// through Plotly.newPlot / react / addTraces; this wraps them once so the text reaches Plotly escaped (&, <, >).
(function () {
  if (!window.Plotly || window.Plotly.__selfplaySafe) return;
  const esc = (s) => (typeof s === "string" ? s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;") : s);
  const title = (t) => (t && typeof t === "object" ? Object.assign({}, t, {text: esc(t.text)}) : esc(t));
  const trace = (t) => (t && typeof t === "object" ? Object.assign({}, t, {name: esc(t.name),
    legendgrouptitle: t.legendgrouptitle ? title(t.legendgrouptitle) : t.legendgrouptitle}) : t);
  const traces = (d) => (Array.isArray(d) ? d.map(trace) : trace(d));
  const layout = (l) => {
    if (!l || typeof l !== "object") return l;
    const out = Object.assign({}, l, {title: title(l.title)});
    for (const k of Object.keys(l)) {
      if (/^[xy]axis\d*$/.test(k) && l[k] && typeof l[k] === "object") out[k] = Object.assign({}, l[k], {title: title(l[k].title)});
    }
    return out;
  };
  const P = window.Plotly;
  const newPlot = P.newPlot, react = P.react, addTraces = P.addTraces;
  P.newPlot = (el, data, lay, cfg) => newPlot.call(P, el, traces(data), layout(lay), cfg);
  P.react = (el, data, lay, cfg) => react.call(P, el, traces(data), layout(lay), cfg);
  P.addTraces = (el, data, at) => addTraces.call(P, el, traces(data), at);
  P.__selfplaySafe = true;
})();
