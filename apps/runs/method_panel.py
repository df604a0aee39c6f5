"""The run page's method panel: what SPICE, SCOPE, SCORE and pi-Play report beyond rewards, per step.

Read from what the recipes send to the sink (trainer/methods/scope.py, score.py, piplay.py):

- SCOPE: per step the iteration and stage (role ``schedule``), the Challenger's gate pass rates
  (entity, relevance), parse rate, mean rubric score and the share inside the difficulty window,
  the Solver's pool; the latest tasks with their two gate verdicts, the pool decision (gates
  passed and mean rubric score inside [filter_low, filter_high]) and their rubrics with the mean
  strict grade each got.
- SCORE: the harness versions (events whose data holds ``harness``: driver, reason, the
  harness itself), per step consistency / depth-zeroed / evaluator searches; the latest tasks'
  rubric (dimensions and weights, whether the evaluator followed the harness).
- SPICE: the task gate's collapse view, per step: each rule's share of the tasks refused (stacked), the
  largest answer share and template cluster of the valid tasks, the guess probe's pass rate (``collapse_view``).
- pi-Play: per step the iteration and stage, the Examiner's valid rate, Student pass rate (the
  difficulty signal), hop mix, the Student's exact match, distillation divergence to the teacher
  and lambda; the latest questions with hops, difficulty reward and the QCP the teacher reads.

A method has a panel when its template ``runs/_method_<method>.html`` exists; the per-step table
shows the metrics its config section names (``panel_metrics``, trainer/method_configs.py), and
``EXTRAS`` adds what a panel shows beyond that. ``panel(run)`` returns None for a method without a
template (the page shows nothing then).
"""
from __future__ import annotations

from django.db.models import Avg
from django.template import TemplateDoesNotExist
from django.template.loader import get_template

from apps.episodes.models import Grade, Rubric, Task
from apps.runs.models import Metric
from trainer.method_configs import SECTIONS

STEPS = 20  # newest steps in the per-step table
TASKS = 6  # newest tasks shown in detail



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


COLLAPSE_STEPS = 500  # newest steps drawn by the collapse charts
FAMILY_METRICS = ("answer_share_max", "template_cluster_max", "guess_pass_rate")


def collapse_view(run) -> dict:
    """The collapse charts' data, from the method's ``panel_metrics``: ``gates`` (each ``gate_<rule>_rate``, a stacked
    bar per step), ``family`` (the largest answer share and template cluster of the valid tasks, the guess probe's
    pass rate), each {role, name, label, steps, values} over the newest COLLAPSE_STEPS steps, and ``threshold``: the
    watchdog's collapse_share (the dashed line). The page extends them live from the run's metric messages."""
    section = SECTIONS.get(run.method)
    columns = section.panel_metrics if section else ()
    gates = [c for c in columns if c[1].startswith("gate_")]
    family = [c for name in FAMILY_METRICS for c in columns if c[1] == name]
    wanted = gates + family
    points: dict[tuple[str, str], list] = {(role, name): [] for role, name, _ in wanted}
    newest = Metric.objects.filter(run=run, name__in={n for _, n, _ in wanted}).order_by("-step").values_list(
        "step", flat=True).first()
    if newest is not None:
        rows = (Metric.objects.filter(run=run, name__in={n for _, n, _ in wanted}, step__gt=newest - COLLAPSE_STEPS)
                .order_by("step").values_list("role", "name", "step", "value"))
        for role, name, step, value in rows:
            if (role, name) in points:
                points[(role, name)].append((step, value))
    watchdog = (run.config or {}).get("watchdog") if isinstance(run.config, dict) else None
    threshold = (watchdog or {}).get("collapse_share", 0.5)

    def series(cols):
        return [{"role": role, "name": name, "label": label, "steps": [s for s, _ in points[(role, name)]],
                 "values": [v for _, v in points[(role, name)]]} for role, name, label in cols]

    return {"gates": series(gates), "family": series(family), "threshold": threshold,
            "reported": any(points.values())}


# What a method's panel shows beyond its per-step table: context key -> builder(run).
EXTRAS = {
    "spice": {"collapse": collapse_view},
    "scope": {"tasks": scope_tasks},
    "score": {"harness": score_harness, "tasks": score_tasks},
    "piplay": {"tasks": piplay_tasks},
}


def panel(run) -> dict | None:
    """The method panel's context (``template`` names the include), or None for a method without one."""
    template = f"runs/_method_{run.method}.html"
    try:
        get_template(template)
    except TemplateDoesNotExist:
        return None
    section = SECTIONS.get(run.method)
    out = {"template": template, "steps": steps_table(run, section.panel_metrics if section else ())}
    out.update({key: build(run) for key, build in EXTRAS.get(run.method, {}).items()})
    return out
