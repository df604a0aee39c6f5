"""Paired differences between run folders' evaluations on the same items: a run against the base and against its
random-reward control (issue 30). Reads each folder's eval_samples/<benchmark>-step<N>.jsonl (what
``benchmarks/gpu/spice_eval.py`` and ``learn_run.py`` write, and ``manage.py import_run`` reads) and prints one
JSON line per benchmark: the run's and the control's last step, each against the base (step 0 of the run), and
the run against the control, with 95% bootstrap intervals of the mean per-item difference
(``trainer.evaluate.paired_difference``), then a table.

    python benchmarks/paired_runs.py examples/runs/spice-gate-wiki-qwen15 --control examples/runs/spice-gate-wiki-qwen15-control

Several seeds at once: give the runs, then their controls in the same order. Each pair gets its lines, then one
"pooled" line per benchmark: each item's score averaged over the seeds (the runs and the controls at their last
steps, the base at step 0), then the same paired differences over the items all of them scored. Its interval is over items only:
with a handful of seeds it does not cover the spread between seeds, which the per-seed lines show. A second pooled
line ("seeds and items") resamples both, seeds with replacement and then items (``two_level_interval``): with three
seeds it is wide, and it is the honest one for a claim about the config rather than about these seeds.

    python benchmarks/paired_runs.py RUN_SEED0 RUN_SEED1 RUN_SEED2 --control CONTROL0 CONTROL1 CONTROL2
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.evaluate import paired_difference  # noqa: E402

_NAME = re.compile(r"(?P<bench>.+)-step(?P<step>\d+)\.jsonl$")


def scores(run: Path) -> dict[str, dict[int, dict[str, float]]]:
    """{benchmark: {step: {item id: score}}} of a run folder's kept evaluation samples."""
    out: dict = {}
    for path in sorted((run / "eval_samples").glob("*.jsonl")):
        m = _NAME.match(path.name)
        if not m:
            continue
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out.setdefault(m["bench"], {})[int(m["step"])] = {str(r.get("id", r.get("index"))): float(r["score"])
                                                          for r in rows}
    return out


def compare(run: Path, control: Path | None) -> list[dict]:
    mine, theirs = scores(run), scores(control) if control else {}
    rows = []
    for bench, by_step in sorted(mine.items()):
        if 0 not in by_step or len(by_step) < 2:
            continue
        last = max(by_step)
        row = {"benchmark": bench, "step": last, "n": len(by_step[0]),
               "base": sum(by_step[0].values()) / len(by_step[0]),
               "run": sum(by_step[last].values()) / len(by_step[last]),
               "run_vs_base": paired_difference(by_step[0], by_step[last])}
        other = theirs.get(bench, {})
        if len(other) >= 1 and max(other) > 0:
            c = max(other)
            row.update({"control_step": c, "control": sum(other[c].values()) / len(other[c]),
                        "control_vs_base": paired_difference(by_step[0], other[c]),
                        "run_vs_control": paired_difference(other[c], by_step[last])})
        rows.append(row)
    return rows


def _mean_scores(dicts: list[dict[str, float]]) -> dict[str, float]:
    """Each item's score averaged over the dicts, on the items every dict scored."""
    keys = set(dicts[0]).intersection(*dicts[1:])
    return {k: sum(d[k] for d in dicts) / len(dicts) for k in sorted(keys)}


def pooled(runs: list[Path], controls: list[Path]) -> list[dict]:
    """The seeds' last steps pooled per item (see the module docstring): one row per benchmark every run has, with
    "seeds" and, where every run has a control, the control's rows as in ``compare``."""
    mine = [scores(r) for r in runs]
    theirs = [scores(c) for c in controls] if controls else []
    rows = []
    for bench in sorted(set.intersection(*(set(m) for m in mine))):
        if any(0 not in m[bench] or len(m[bench]) < 2 for m in mine):
            continue
        bases, lasts = [m[bench][0] for m in mine], [m[bench][max(m[bench])] for m in mine]
        base, run = _mean_scores(bases), _mean_scores(lasts)
        row = {"benchmark": bench, "pooled": True, "seeds": len(runs), "steps": [max(m[bench]) for m in mine],
               "n": len(base), "base": sum(base.values()) / len(base), "run": sum(run.values()) / len(run),
               "run_vs_base": paired_difference(base, run)}
        both = {"benchmark": bench, "pooled": "seeds and items", "seeds": len(runs), "n": row["n"],
                "base": row["base"], "run": row["run"], "run_vs_base": two_level_interval(_seed_diffs(bases, lasts))}
        if theirs and all(bench in t and max(t[bench]) > 0 for t in theirs):
            ctls = [t[bench][max(t[bench])] for t in theirs]
            ctl = _mean_scores(ctls)
            row.update({"control_steps": [max(t[bench]) for t in theirs], "control": sum(ctl.values()) / len(ctl),
                        "control_vs_base": paired_difference(base, ctl), "run_vs_control": paired_difference(ctl, run)})
            both.update({"control": row["control"], "control_vs_base": two_level_interval(_seed_diffs(bases, ctls)),
                         "run_vs_control": two_level_interval(_seed_diffs(ctls, lasts))})
        rows += [row, both]
    return rows


def two_level_interval(diffs: list[dict[str, float]], n_resamples: int = 2000, seed: int = 0) -> dict | None:
    """The mean per-item difference over seeds (each dict one seed's item -> after - before) with a 95% percentile
    interval that resamples the seeds with replacement, then the items common to all seeds with replacement, as in
    a hierarchical bootstrap: {"diff", "low", "high", "n", "seeds"}; None without a common item."""
    import numpy as np

    keys = sorted(set(diffs[0]).intersection(*diffs[1:])) if diffs else []
    if not keys:
        return None
    d = np.asarray([[float(x[k]) for k in keys] for x in diffs])  # [S, N]
    rng = np.random.default_rng(seed)
    s, n = d.shape
    rows = rng.integers(0, s, size=(n_resamples, s))  # [R, S] seeds drawn
    cols = rng.integers(0, n, size=(n_resamples, n))  # [R, N] items drawn
    counts = np.zeros((n_resamples, n))  # [R, N] how often each item was drawn
    np.add.at(counts, (np.arange(n_resamples)[:, None], cols), 1)
    means = (d[rows].sum(axis=1) * counts).sum(axis=1) / (s * n)  # [R]: the drawn seeds' rows at the drawn items
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"diff": float(d.mean()), "low": float(lo), "high": float(hi), "n": n, "seeds": s}


def _seed_diffs(before: list[dict], after: list[dict]) -> list[dict[str, float]]:
    return [{k: a[k] - b[k] for k in b if k in a} for b, a in zip(before, after)]


def _cell(d: dict | None) -> str:
    return "-" if d is None else f"{100 * d['diff']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", nargs="+", help="run folders (one per seed)")
    p.add_argument("--control", nargs="*", default=[], help="their random-reward controls, in the same order")
    args = p.parse_args(argv)
    runs, controls = [Path(r) for r in args.run], [Path(c) for c in args.control]
    if controls and len(controls) != len(runs):
        p.error(f"{len(runs)} run(s) but {len(controls)} control(s): give one control per run, in the same order, "
                "or none")
    rows = [r for i, run in enumerate(runs) for r in compare(run, controls[i] if controls else None)]
    if len(runs) > 1:
        rows += pooled(runs, controls)
    for r in rows:
        print(json.dumps(r))
    print(f"{'benchmark':28} {'n':>5} {'base':>6} {'run':>6} {'control':>7}  {'run - base':>22}  "
          f"{'control - base':>22}  {'run - control':>22}")
    for r in rows:
        ctl = f"{100 * r['control']:.1f}" if "control" in r else "-"
        name = r["benchmark"] + {True: " (pooled)", "seeds and items": " (seeds+items)"}.get(r.get("pooled"), "")
        print(f"{name:28} {r['n']:>5} {100 * r['base']:6.1f} {100 * r['run']:6.1f} {ctl:>7}  "
              f"{_cell(r['run_vs_base']):>22}  {_cell(r.get('control_vs_base')):>22}  {_cell(r.get('run_vs_control')):>22}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
