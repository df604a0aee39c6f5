"""The compare view's data: base model vs checkpoints vs other runs on the same benchmarks.

``comparison(runs, benchmarks)`` reads complete results only. For each run it takes the base model
(``base:<the run's model>``) as step 0: the run's own evaluation of it when it has one (launched from
its page, or imported with its folder), else the newest from any page; and every evaluated
checkpoint by step; when a point was evaluated several times, the newest result wins. It returns the table rows
(one per model, one cell per benchmark) and the chart series (one per run and benchmark: steps,
scores and the 95% interval as error bars, and each point's ``train_seconds``: the run's training
time at that checkpoint, 0 for the base model, None when not recorded).
"""
from __future__ import annotations

from apps.evals.models import EvalResult


def _latest(results) -> dict:
    """(model spec, benchmark) -> the newest complete result."""
    out = {}
    for r in results.order_by("job__finished_at", "job_id"):
        out[(r.job.model_spec, r.benchmark.name)] = r
    return out


def _cell(r: EvalResult | None) -> dict | None:
    if r is None:
        return None
    return {"score": r.score, "ci_low": r.ci_low, "ci_high": r.ci_high, "n": r.n, "job": r.job_id,
            "scoring": r.scoring}


def comparison(runs, benchmarks) -> dict:
    names = [b.name for b in benchmarks]
    base_specs = {f"base:{run.model_name}" for run in runs}
    complete = EvalResult.objects.filter(complete=True, benchmark__name__in=names).select_related("job", "benchmark")
    base = _latest(complete.filter(job__model_spec__in=base_specs))
    rows, series = [], []
    for spec in sorted(base_specs):
        if any((spec, n) in base for n in names):
            rows.append({"label": spec, "run": None, "step": None, "cells": [_cell(base.get((spec, n))) for n in names]})
    for run in runs:
        found = _latest(complete.filter(job__run=run, job__step__isnull=False))
        steps = sorted({r.job.step for r in found.values()})
        by_step = {}
        for (spec, name), r in found.items():
            by_step.setdefault(r.job.step, {})[name] = r  # a step evaluated from two paths: the newest wins
        for step in steps:
            rows.append({"label": f"{run.label} @ step {step}", "run": run.pk, "step": step,
                         "cells": [_cell(by_step[step].get(n)) for n in names]})
        spec = f"base:{run.model_name}"
        own = _latest(complete.filter(job__run=run, job__model_spec=spec))
        for n in names:
            points = [(0, own.get((spec, n)) or base.get((spec, n)))] + [(s, by_step[s].get(n)) for s in steps]
            points = [(s, r) for s, r in points if r is not None and r.score is not None]
            if points:
                series.append({"name": f"{run.label} · {n}", "run": run.pk, "benchmark": n,
                               "steps": [s for s, _ in points], "scores": [r.score for _, r in points],
                               "ci_low": [r.ci_low for _, r in points], "ci_high": [r.ci_high for _, r in points],
                               "train_seconds": [0.0 if s == 0 else r.train_seconds for s, r in points]})
    return {"benchmarks": names, "runs": [r.pk for r in runs], "rows": rows, "series": series}
