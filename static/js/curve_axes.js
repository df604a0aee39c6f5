// Curves against step, wall time or training time, with smoothing: shared by the compare view
// (runs_compare.js) and the run page (run_live.js, run_page.js).
// A run's step -> time map comes from apps/runs/compare.time_axes: {steps, train, wall|null}, train the summed
// step_seconds up to the end of each step (pauses left out), wall the seconds from the first step's start to
// each step's end on the wall clock (pauses included; null for runs logged before the trainer stamped it).
// The run page extends its map as live steps arrive (extend), from the step_seconds and wall_clock every
// role's metrics carry.
window.CurveAxes = (function () {
  "use strict";
  const AXES = ["step", "wall", "train"];
  const TITLES = {step: "step", wall: "wall time (hours since the run's first step began)",
                  train: "training time (hours of steps, pauses left out)"};

  // y at x on the polyline (xs ascending), held flat beyond its ends.
  function interp(xs, ys, x) {
    if (x <= xs[0]) return ys[0];
    if (x >= xs[xs.length - 1]) return ys[ys.length - 1];
    let lo = 0, hi = xs.length - 1;
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (xs[mid] <= x) lo = mid; else hi = mid; }
    return ys[lo] + (ys[hi] - ys[lo]) * (x - xs[lo]) / (xs[hi] - xs[lo] || 1);
  }

  // The x of each step on `axis` (hours for times) -> {x, fellBack}: x null when the run has no step times at
  // all (fellBack "none"); a run without wall-clock stamps is drawn on its training time (fellBack "wall").
  function timeOf(a, steps, axis) {
    if (axis === "step") return {x: steps, fellBack: null};
    if (!a || !a.steps.length) return {x: null, fellBack: "none"};
    let t = axis === "wall" ? a.wall : a.train, fellBack = null;
    if (!t) { t = a.train; fellBack = "wall"; }
    const ks = [a.steps[0] - 1, ...a.steps], ts = [0, ...t];  // the first step starts at 0
    return {x: steps.map(s => interp(ks, ts, s) / 3600), fellBack};
  }

  // A live step's times appended to the map `a` (steps after its last only). `a.wall_start`: the wall clock
  // (unix seconds) at which the run's first step began, null when unknown; set here from the first stamped step.
  function extend(a, step, seconds, wallClock) {
    if (!Number.isFinite(seconds) || (a.steps.length && step <= a.steps[a.steps.length - 1])) return false;
    const first = !a.steps.length;
    a.steps.push(step);
    a.train.push((first ? 0 : a.train[a.train.length - 1]) + seconds);
    if (first && Number.isFinite(wallClock)) { a.wall = []; a.wall_start = wallClock - seconds; }
    if (a.wall) {
      if (Number.isFinite(wallClock) && a.wall_start !== null && a.wall_start !== undefined) a.wall.push(wallClock - a.wall_start);
      else a.wall = null;  // a step without its stamp: this run is drawn on its training time instead
    }
    return true;
  }

  // Debiased exponential moving average (W&B's smoothing): each point is (1 - w) of itself and w of the curve
  // before it, divided by the weight seen so far, so the curve's start is not pulled towards 0.
  function ema(ys, w) {
    if (!w) return ys;
    let last = 0, weight = 0;
    return ys.map(y => {
      if (!Number.isFinite(y)) return y;
      last = last * w + (1 - w) * y; weight = weight * w + (1 - w);
      return last / weight;
    });
  }

  // "rgba(...)" of a "#rrggbb" colour.
  function fade(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }

  return {AXES, TITLES, interp, timeOf, extend, ema, fade};
})();
