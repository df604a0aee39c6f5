"""The home page's "runs that learned": per method, the run that shows most clearly that it learned, by the
paired difference of a checkpoint from its base model on the items both scored (``compare.paired``; a result
without item samples is compared by its score alone, and says so).

Reads every complete checkpoint result of every run (at most ``MAX_RESULTS``, newest first); a gain
counts as learned when its 95% interval lies above zero. A control run (``Run.control_of``: the same config with a
random reward) is never a method's "run that learned"; a run that has one also shows its gain over that control on
the same benchmark (``compare.control_gains``: paired on the same items, at the latest step both evaluated), and a
run that beat its control is the method's row before any run that only beat its base model.
"""
from __future__ import annotations

from apps.evals.compare import base_results_many, control_gains, pair_all
from apps.evals.models import EvalResult
from apps.runs.models import Run

MAX_RESULTS = 400


def runs_that_learned() -> list[dict]:
    """[{"method", "run", "label", "benchmark", "step", "diff", "low", "high", "n", "paired", "learned", "text",
    "interval", "vs_control", "also"}] in method order: each method's strongest evidence of learning (points as
    fractions).

    Each run's best checkpoint result is its ``headlines`` row. A method's row is then its run that beat its
    random-reward control on that benchmark, if one did, else its run with the highest such bound; ``also`` lists
    the method's other runs that learned (best first), so every run that learned is one click from the dashboard."""
    by_method: dict[str, list[dict]] = {}
    for row in headlines(controls=False).values():
        by_method.setdefault(row["method"], []).append(row)
    shown = []
    for method in sorted(by_method):
        ranked = sorted(by_method[method], reverse=True,
                        key=lambda row: (bool(row["vs_control"] and row["vs_control"]["learned"]), *_key(row)))
        best = ranked[0]
        best["also"] = [row for row in sorted(ranked[1:], key=_key, reverse=True) if row["learned"]]
        shown.append(best)
    return shown


def headlines(runs=None, controls: bool = True, latest: bool = False) -> dict[int, dict]:
    """Run id -> the run's headline result, for ``runs`` (every run when None; ``controls=False`` leaves control runs
    out): {"method", "run", "label", "benchmark", "step", "diff", "low", "high", "n", "paired", "learned", "text",
    "interval", "vs_control"} (points as fractions). A run without a complete checkpoint result with a base model
    result to compare with has none.

    The headline is the run's best checkpoint result: the one that learned (interval above zero), else the one with
    the highest lower bound of its gain (a result without item samples: the unpaired normal bound of the two scores,
    so 15 items never outrank 300), never by the gain alone; ``latest=True`` (what the run ended with, as the runs
    table and the run page show it): its latest evaluated checkpoint, a paired result before one without item
    samples, then as above; ``vs_control`` its gain over its linked control on that
    benchmark (``_over_controls``). A fixed number of queries whatever the number of runs, plus a few per run that
    has a control."""
    results = EvalResult.objects.filter(complete=True, job__run__isnull=False, job__step__isnull=False,
                                        score__isnull=False)
    if not controls:
        results = results.filter(job__run__control_of__isnull=True)
    if runs is not None:
        results = results.filter(job__run__in=[r.pk for r in runs])
    results = list(results.select_related("job__run", "benchmark").order_by("-job__finished_at", "-id")
                   [:MAX_RESULTS if runs is None else MAX_RESULTS * 10])
    by_run: dict[int, list[EvalResult]] = {}
    for r in results:
        by_run.setdefault(r.job.run_id, []).append(r)
    if not by_run:
        return {}
    first = {pk: rs[0].job.run for pk, rs in by_run.items()}
    base = base_results_many(list(first.values()), sorted({r.benchmark.name for r in results}))
    pairs = [(base[pk].get(r.benchmark.name), r) for pk, rs in by_run.items() for r in rs
             if base[pk].get(r.benchmark.name) is not None]
    per_run: dict[int, dict] = {}
    for (b, r), p in zip(pairs, pair_all(pairs)):
        run = first[r.job.run_id]
        if p is not None:
            row = {"diff": p["diff"], "low": p["low"], "high": p["high"], "n": p["n"], "paired": True, "bound": p["low"]}
        else:
            row = {"diff": r.score - b.score, "low": None, "high": None, "n": min(r.n, b.n), "paired": False,
                   "bound": _unpaired_low(b, r)}
        row.update(method=run.method, run=run.pk, label=run.label, benchmark=r.benchmark.name, step=r.job.step,
                   learned=row["low"] is not None and row["low"] > 0)
        key = (lambda x: (x["paired"], x["step"], *_key(x))) if latest else _key
        if run.pk not in per_run or key(row) > key(per_run[run.pk]):
            per_run[run.pk] = row
    for row in per_run.values():  # as the page prints them: "+9.7 [+6.1, +13.4]" points
        row["text"] = _points(row["diff"])
        row["interval"] = f"[{_points(row['low'])}, {_points(row['high'])}]" if row["paired"] else ""
    over = _over_controls([first[pk] for pk in per_run], {pk: row["benchmark"] for pk, row in per_run.items()})
    for pk, row in per_run.items():
        row["vs_control"] = over.get(pk)
    return per_run


def _key(row: dict) -> tuple:
    """How strongly a result shows learning: learned first, then the lower bound of its gain, then the gain."""
    return (row["learned"], row["bound"], row["diff"])


def _unpaired_low(base, result) -> float:
    """The lower end of a normal 95% interval for ``result.score - base.score`` from the two scores alone (no item
    samples to pair): p(1-p)/n bounds the variance of a mean of scores in [0, 1]. -inf without items."""
    if not base.n or not result.n:
        return float("-inf")
    var = sum(min(max(x.score, 0.0), 1.0) * (1 - min(max(x.score, 0.0), 1.0)) / x.n for x in (base, result))
    return result.score - base.score - 1.96 * var ** 0.5


def _over_controls(runs, benchmark: dict[int, str]) -> dict[int, dict]:
    """Run id -> its paired gain over its linked control on ``benchmark[run id]``: {"control", "control_label",
    "step", "control_step", "same_step", "diff", "low", "high", "n", "text", "interval", "learned"}; a run without
    one (no control, or the control's checkpoint not evaluated on it, or no item samples to pair) is left out. One
    query for the controls, then ``compare.control_gains`` of all the pairs at once."""
    by_pk = {r.pk: r for r in runs}
    controls = list(Run.objects.filter(control_of_id__in=by_pk).order_by("pk")) if by_pk else []
    out: dict[int, dict] = {}
    for row in control_gains([(by_pk[c.control_of_id], c) for c in controls]):
        p = row["vs_control"]
        if row["run"] in out or row["benchmark"] != benchmark.get(row["run"]) or p is None:
            continue
        out[row["run"]] = {"control": row["control"], "control_label": row["control_label"], "step": row["step"],
                           "control_step": row["control_step"], "same_step": row["same_step"], "diff": p["diff"],
                           "low": p["low"], "high": p["high"], "n": p["n"], "text": _points(p["diff"]),
                           "interval": f"[{_points(p['low'])}, {_points(p['high'])}]", "learned": p["low"] > 0}
    return out


def _points(fraction: float) -> str:
    return f"{100 * fraction:+.1f}"
