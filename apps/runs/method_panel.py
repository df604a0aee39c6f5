"""The run page's method panel: what SCOPE, SCORE and pi-Play report beyond rewards, per step.

Read from what the recipes send to the sink (trainer/methods/scope.py, score.py, piplay.py):

- SCOPE: per step the iteration and stage (role ``schedule``), the Challenger's gate pass rates
  (entity, relevance), parse rate, mean rubric score and the share inside the difficulty window,
  the Solver's pool; the latest tasks with their two gate verdicts, the pool decision (gates
  passed and mean rubric score inside [filter_low, filter_high]) and their rubrics with the mean
  strict grade each got.
- SCORE: the harness versions (events whose data holds ``harness``: driver, reason, the
  harness itself), per step consistency / depth-zeroed / evaluator searches; the latest tasks'
  rubric (dimensions and weights, whether the evaluator followed the harness).
- pi-Play: per step the iteration and stage, the Examiner's valid rate, Student pass rate (the
  difficulty signal), hop mix, the Student's exact match, distillation divergence to the teacher
  and lambda; the latest questions with hops, difficulty reward and the QCP the teacher reads.

``panel(run)`` returns None for the other methods (the page shows nothing then).
"""
from __future__ import annotations

from django.db.models import Avg

from apps.episodes.models import Grade, Rubric, Task
from apps.runs.models import Metric

STEPS = 20  # newest steps in the per-step table
TASKS = 6  # newest tasks shown in detail

# (role, metric name, column label) per method; a column the run never reported is left out.
COLUMNS = {
    "scope": [("schedule", "iteration", "iteration"), ("schedule", "stage", "stage (1 Challenger, 2 Solver)"),
              ("challenger", "task_parsed", "parsed"), ("challenger", "gate_entity", "gate: entity"),
              ("challenger", "gate_relevance", "gate: relevance"), ("challenger", "gate_pass_rate", "gates passed"),
              ("challenger", "rubrics_per_task", "rubrics / task"), ("challenger", "mean_rubric_score", "mean rubric score"),
              ("challenger", "in_window", "in window"), ("solver", "pool_size", "pool"), ("solver", "tasks", "solver tasks"),
              ("solver", "rubric_score", "solver rubric score")],
    "score": [("solver", "harness_version", "harness v"), ("solver", "solver_reward", "solver reward"),
              ("solver", "consistency", "consistency"), ("evaluator", "rubric_followed", "rubric followed"),
              ("solver", "evaluator_searches", "evaluator searches"), ("solver", "depth_zeroed_rate", "depth zeroed"),
              ("solver", "eval_format_failures", "eval format fails"), ("solver", "valid_report_rate", "valid reports")],
    "piplay": [("schedule", "iteration", "iteration"), ("schedule", "stage", "stage (1 examiner, 2 student)"),
               ("examiner", "valid_rate", "valid questions"), ("examiner", "student_pass_rate", "student pass rate"),
               ("examiner", "reward_mean", "examiner reward"), ("examiner", "format_reward", "format reward"),
               ("examiner", "hops_1", "1-hop"), ("examiner", "hops_2", "2-hop"), ("examiner", "hops_3", "3-hop"),
               ("examiner", "hops_4", "4-hop"), ("student", "exact_match", "student exact match"),
               ("student", "distill", "divergence to teacher"), ("student", "lambda", "lambda")],
}


def steps_table(run, columns) -> dict:
    """{"columns": [labels], "rows": [{"step", "cells": [value or None]}]} for the newest STEPS steps."""
    names = {n for _, n, _ in columns}
    points = list(Metric.objects.filter(run=run, name__in=names).values_list("step", "role", "name", "value"))
    have = {(r, n) for _, r, n, _ in points}
    cols = [c for c in columns if (c[0], c[1]) in have]
    by_step: dict[int, dict] = {}
    for step, role, name, value in points:
        by_step.setdefault(step, {})[(role, name)] = value
    steps = sorted(by_step, reverse=True)[:STEPS]
    rows = [{"step": s, "cells": [by_step[s].get((r, n)) for r, n, _ in cols]} for s in steps]
    return {"columns": [label for _, _, label in cols], "rows": rows}


def _section(run, name: str) -> dict:
    cfg = run.config if isinstance(run.config, dict) else {}
    return cfg.get(name) if isinstance(cfg.get(name), dict) else {}


def scope_tasks(run) -> list[dict]:
    sec = _section(run, "scope")
    low, high = float(sec.get("filter_low", 0.2)), float(sec.get("filter_high", 0.8))
    tasks = list(Task.objects.filter(run=run, role="challenger").order_by("-step", "-id")[:TASKS])
    rubrics = list(Rubric.objects.filter(run=run, task__in=tasks).order_by("id"))
    means = dict(Grade.objects.filter(run=run, rubric__in=rubrics).values_list("rubric_id")
                 .annotate(m=Avg("score")).values_list("rubric_id", "m"))
    out = []
    for t in tasks:
        gates = (t.data or {}).get("gates") or {}
        if not gates:
            decision = "not judged (no parsable task)"
        elif not t.valid:
            decision = "gate failed"
        elif t.pass_rate is None:
            decision = "gates passed, not scored"
        elif low <= t.pass_rate <= high:
            decision = "joins the solver pool"
        else:
            decision = f"outside window [{low:g}, {high:g}]"
        out.append({"task": t, "gates": gates, "decision": decision, "stage": (t.data or {}).get("stage", ""),
                    "rubrics": [{"rubric": r, "mean": means.get(r.id)} for r in rubrics if r.task_id == t.id]})
    return out


def score_harness(run) -> list[dict]:
    events = run.events.filter(data__has_key="harness").order_by("-id")[:10]
    return [{"event": e, "version": e.data.get("version"), "driver": e.data.get("driver", ""),
             "harness": e.data.get("harness") or {}} for e in events]


def score_tasks(run) -> list[dict]:
    tasks = Task.objects.filter(run=run).order_by("-step", "-id")[:TASKS]
    out = []
    for t in tasks:
        rubric = (t.data or {}).get("rubric") or {}
        out.append({"task": t, "dimensions": rubric.get("dimensions") or [], "followed": rubric.get("followed"),
                    "problems": rubric.get("problems") or [], "consistency": (t.data or {}).get("consistency"),
                    "harness_version": (t.data or {}).get("harness_version")})
    return out


def piplay_tasks(run) -> list[dict]:
    tasks = Task.objects.filter(run=run, role="examiner").order_by("-step", "-id")[:TASKS]
    return [{"task": t, "hops": (t.data or {}).get("hops"), "qcp": (t.data or {}).get("qcp", ""),
             "reward": (t.data or {}).get("reward"), "r_fmt": (t.data or {}).get("r_fmt"),
             "stage": (t.data or {}).get("stage", "")} for t in tasks]


def panel(run) -> dict | None:
    """The method panel's context (``template`` names the include), or None for other methods."""
    if run.method not in COLUMNS:
        return None
    out = {"template": f"runs/_method_{run.method}.html", "steps": steps_table(run, COLUMNS[run.method])}
    if run.method == "scope":
        out["tasks"] = scope_tasks(run)
    elif run.method == "score":
        out["harness"] = score_harness(run)
        out["tasks"] = score_tasks(run)
    else:
        out["tasks"] = piplay_tasks(run)
    return out
