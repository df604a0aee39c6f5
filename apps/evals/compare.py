"""The compare view's data: base model vs checkpoints vs other runs on the same benchmarks.

``comparison(runs, benchmarks)`` reads complete results only. For each run it takes the base model
(``base:<the run's model>``) as step 0: the run's own evaluation of it when it has one (launched from
its page, or imported with its folder), else the newest from any page (``base_results``); and every
evaluated checkpoint by step; when a point was evaluated several times, the newest result wins. It
returns the table rows (one per model, one cell per benchmark; a run whose own base model evaluation is not
the newest one of the base row gets a "step 0" row of its own: the one its differences are from) and the chart
series (one per run and benchmark: steps, scores and the 95% interval as error bars, and each point's
``train_seconds``: the run's training time at that checkpoint, 0 for the base model, None when not recorded).

A checkpoint's cell also carries ``paired``: its score minus that base model's, item by item, with the
95% bootstrap interval of the mean per-item difference (``paired``). Two overlapping intervals of the
scores hide a real gain that the paired interval shows (13.0% [9.3, 17.0] -> 19.0% [14.7, 23.7], paired
+6.0 points [+1.7, +10.0]). None when either result has no samples (an imported folder without
eval_samples/) or they share no item.
"""
from __future__ import annotations

from apps.evals.models import EvalResult, EvalSample
from trainer.evaluate import paired_difference


def _latest(results) -> dict:
    """(model spec, benchmark) -> the newest complete result."""
    out = {}
    for r in results.order_by("job__finished_at", "job_id"):
        out[(r.job.model_spec, r.benchmark.name)] = r
    return out


def _complete(names):
    return EvalResult.objects.filter(complete=True, benchmark__name__in=names).select_related("job", "benchmark")


def base_results(run, names, shared: dict | None = None) -> dict[str, EvalResult]:
    """Benchmark name -> the base model's result ``run``'s checkpoints are measured against (its step 0): the
    run's own evaluation of ``base:<its model>``, else the newest from anywhere (``shared``, when the caller
    has read them: (spec, benchmark) -> result)."""
    return base_results_many([run], names, shared)[run.pk]


def base_results_many(runs, names, shared: dict | None = None) -> dict[int, dict[str, EvalResult]]:
    """``base_results`` of each of ``runs`` (run id -> benchmark name -> result), in two queries for all of them."""
    specs = {run.pk: f"base:{run.model_name}" for run in runs}
    own: dict[tuple, EvalResult] = {}
    for r in (_complete(names).filter(job__run__in=list(specs), job__model_spec__in=set(specs.values()))
              .order_by("job__finished_at", "job_id")):
        own[(r.job.run_id, r.job.model_spec, r.benchmark.name)] = r  # the newest wins
    if shared is None:
        shared = _latest(_complete(names).filter(job__model_spec__in=set(specs.values())))
    out = {}
    for run in runs:
        spec = specs[run.pk]
        found = {n: own.get((run.pk, spec, n)) or shared.get((spec, n)) for n in names}
        out[run.pk] = {n: r for n, r in found.items() if r is not None}
    return out


def _by_item(rows: list[tuple[int, str, float]], by_id: bool) -> dict:
    return {(item if by_id else index): score for index, item, score in rows}


def _ids_usable(rows: list[tuple[int, str, float]]) -> bool:
    ids = [item for _, item, _ in rows]
    return all(ids) and len(set(ids)) == len(ids)


def comparable(base: EvalResult, result: EvalResult) -> bool:
    """Whether two results measure the same thing item by item: the same scoring, and the same answer budget and
    search setting (a base scored ``exact`` against a checkpoint scored ``math`` "gains" what scoring changed)."""
    a, b = base.job, result.job
    return (base.scoring == result.scoring and a.max_new_tokens == b.max_new_tokens and a.search == b.search
            and (not a.search or a.corpus_id == b.corpus_id))


def _sample_rows(result_ids) -> dict[int, list[tuple[int, str, float]]]:
    """result id -> its samples' (index, item id, score) by index, for all ``result_ids`` in one query."""
    out: dict[int, list] = {pk: [] for pk in result_ids}
    rows = EvalSample.objects.filter(result_id__in=out).order_by("index")  # by index: the bootstrap's draws repeat
    for result_id, index, item, score in rows.values_list("result_id", "index", "item_id", "score"):
        out[result_id].append((index, item, score))
    return out


def paired(base: EvalResult | None, result: EvalResult | None, rows: dict | None = None) -> dict | None:
    """``result`` minus ``base`` on the items both scored (``trainer.evaluate.paired_difference``: diff, low,
    high as fractions, n, gained, lost), or None when either has no sample or they are not ``comparable``. Items
    are matched by their id when every sample of both has a distinct one, else by index. ``rows``: the samples
    already read (``_sample_rows``), else one query."""
    if base is None or result is None or base.pk == result.pk or not comparable(base, result):
        return None
    if rows is None or base.pk not in rows or result.pk not in rows:
        rows = _sample_rows([base.pk, result.pk])
    before, after = rows[base.pk], rows[result.pk]
    if not before or not after:
        return None
    by_id = _ids_usable(before) and _ids_usable(after)
    return paired_difference(_by_item(before, by_id), _by_item(after, by_id))


def pair_all(pairs: list[tuple[EvalResult | None, EvalResult]]) -> list[dict | None]:
    """``paired`` of each (base, result), the samples of all of them read in one query."""
    ids = {r.pk for pair in pairs for r in pair if r is not None}
    rows = _sample_rows(ids) if ids else {}
    return [paired(base, r, rows) for base, r in pairs]


def annotate_paired(run, results) -> None:
    """Set ``r.paired`` (``paired`` with the run's base model on r's benchmark) on each complete result of a
    checkpoint of ``run`` among ``results``; None on the others (base models, unfinished results)."""
    results = list(results)
    for r in results:
        r.paired = None
    todo = [r for r in results if r.complete and r.job.step is not None]
    if run is None or not todo:
        return
    base = base_results(run, sorted({r.benchmark.name for r in todo}))
    for r, p in zip(todo, pair_all([(base.get(r.benchmark.name), r) for r in todo])):
        r.paired = p


def _cell(r: EvalResult | None) -> dict | None:
    if r is None:
        return None
    return {"score": r.score, "ci_low": r.ci_low, "ci_high": r.ci_high, "n": r.n, "job": r.job_id,
            "scoring": r.scoring, "paired": None}


def comparison(runs, benchmarks, pairs: bool = True) -> dict:
    """The rows and series of the module docstring; ``pairs=False`` leaves every cell's ``paired`` None (the
    charts read only the series; the pairs cost one query for all samples and a bootstrap each)."""
    names = [b.name for b in benchmarks]
    base_specs = {f"base:{run.model_name}" for run in runs}
    complete = _complete(names)
    base = _latest(complete.filter(job__model_spec__in=base_specs))
    rows, series, todo = [], [], []  # todo: (cell, base result, result) to pair
    for spec in sorted(base_specs):
        if any((spec, n) in base for n in names):
            rows.append({"label": spec, "run": None, "step": None, "cells": [_cell(base.get((spec, n))) for n in names]})
    for run in runs:
        found = _latest(complete.filter(job__run=run, job__step__isnull=False))
        steps = sorted({r.job.step for r in found.values()})
        by_step = {}
        for (spec, name), r in found.items():
            by_step.setdefault(r.job.step, {})[name] = r  # a step evaluated from two paths: the newest wins
        step0 = base_results(run, names, base)
        base_spec = f"base:{run.model_name}"
        if any(base.get((base_spec, n)) is None or r.pk != base[(base_spec, n)].pk for n, r in step0.items()):
            # the run's own evaluation of its base model, which its series and paired differences start from, is
            # not the newest one in the base row above (another import or page evaluated the model again)
            rows.append({"label": f"{run.label} @ step 0 (its own base model evaluation)", "run": run.pk, "step": 0,
                         "cells": [_cell(step0.get(n)) for n in names]})
        for step in steps:
            cells = [_cell(by_step[step].get(n)) for n in names]
            rows.append({"label": f"{run.label} @ step {step}", "run": run.pk, "step": step, "cells": cells})
            todo += [(c, step0.get(n), by_step[step][n]) for c, n in zip(cells, names) if c is not None]
        for n in names:
            points = [(0, step0.get(n))] + [(s, by_step[s].get(n)) for s in steps]
            points = [(s, r) for s, r in points if r is not None and r.score is not None]
            if points:
                series.append({"name": f"{run.label} · {n}", "run": run.pk, "benchmark": n,
                               "steps": [s for s, _ in points], "scores": [r.score for _, r in points],
                               "ci_low": [r.ci_low for _, r in points], "ci_high": [r.ci_high for _, r in points],
                               "train_seconds": [0.0 if s == 0 else r.train_seconds for s, r in points]})
    if pairs and todo:
        for (cell, _, _), p in zip(todo, pair_all([(b, r) for _, b, r in todo])):
            cell["paired"] = p
    return {"benchmarks": names, "runs": [r.pk for r in runs], "rows": rows, "series": series}


def control_pairs(run) -> list[tuple]:
    """(run, control) of every control linked with ``run`` (``Run.control_of``): its own controls, or, for a control,
    the run it controls. The run page of either side shows the same pairs."""
    if run.control_of_id:
        return [(run.control_of, run)]
    return [(run, c) for c in run.controls.order_by("pk")]


def _checkpoint_results(run, names) -> dict[str, dict[int, EvalResult]]:
    """Benchmark name -> step -> the newest complete result of that checkpoint of ``run``."""
    out: dict[str, dict[int, EvalResult]] = {}
    for r in _complete(names).filter(job__run=run, job__step__isnull=False).order_by("job__finished_at", "job_id"):
        out.setdefault(r.benchmark.name, {})[r.job.step] = r
    return out


def control_gains(pairs) -> list[dict]:
    """For each (run, control) and each benchmark the run has an evaluated checkpoint on: the run's gain over the
    base model and over its control, each paired on the same items with its 95% interval (``paired``).

    The run's checkpoint is the latest step evaluated for both runs (``same_step``), else each one's latest (the
    control's evaluation may still be to come: ``control`` None). A row: benchmark, run, control, step,
    control_step, same_step, score / base / control (each {score, ci_low, ci_high, n} or None), and the paired
    ``vs_base`` (run - base), ``control_vs_base`` (control - base) and ``vs_control`` (run - control)."""
    rows, todo = [], []
    for run, control in pairs:
        names = sorted(set(_complete_names([run, control])))
        if not names:
            continue
        mine, theirs = _checkpoint_results(run, names), _checkpoint_results(control, names)
        base = base_results(run, names)
        for name in names:
            ours, other = mine.get(name) or {}, theirs.get(name) or {}
            if not ours:
                continue
            common = sorted(set(ours) & set(other))
            step = common[-1] if common else max(ours)
            control_step = step if common else (max(other) if other else None)
            r, c, b = ours[step], other.get(control_step), base.get(name)
            rows.append({"benchmark": name, "run": run.pk, "run_label": run.label, "control": control.pk,
                         "control_label": control.label, "control_kind": ((control.config or {}).get("train") or {})
                         .get("control", "control"), "step": step, "control_step": control_step,
                         "same_step": bool(common), "score": _score(r), "base": _score(b), "control_score": _score(c),
                         "vs_base": None, "control_vs_base": None, "vs_control": None, "pairs": []})
            todo.append((rows[-1], b, r, c))
    if todo:  # every pair's samples in one query; a missing side (no base, no control yet) pairs to None
        found = iter(pair_all([pair for _, b, r, c in todo for pair in ((b, r), (b, c), (c, r))]))
        for row, *_ in todo:
            row["vs_base"], row["control_vs_base"], row["vs_control"] = next(found), next(found), next(found)
            row["pairs"] = [(key, row[key]) for key in ("vs_base", "control_vs_base", "vs_control")]  # the table's order
    return rows


def _complete_names(runs) -> list[str]:
    return list(EvalResult.objects.filter(job__run__in=runs, complete=True, job__step__isnull=False)
                .values_list("benchmark__name", flat=True).distinct())


def _score(r: EvalResult | None) -> dict | None:
    return None if r is None else {"score": r.score, "ci_low": r.ci_low, "ci_high": r.ci_high, "n": r.n}
