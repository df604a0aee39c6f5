"""The health watchdog: rules over a run's metric series, checked at every step boundary.

Each rule is a small pure function ``(series, cfg) -> message | None`` over one role's series
(a dict name -> values in step order); ``RULES`` maps rule names to them. ``check_run`` reads the
newest metrics, and for every rule that fires for the first time in the run it writes a watchdog
RunEvent, tells the live page, and asks the run to pause when the config's ``pause_on`` says so.
The thresholds are the run config's ``watchdog`` section (trainer.config.WatchdogConfig).
"""
from __future__ import annotations

import logging
import statistics
from collections import defaultdict

from django.db.models import Count

from apps.episodes.models import Task
from apps.runs import hooks
from apps.runs.models import IllegalTransition, Metric, Run, RunEvent
from trainer.config import WatchdogConfig

log = logging.getLogger("selfplay.watchdog")
HISTORY = 200  # newest metric rows read per check; plenty for windows of a few steps


def _tail(values: list[float], n: int) -> list[float] | None:
    return values[-n:] if len(values) >= n else None


def entropy_collapse(series: dict[str, list[float]], cfg: WatchdogConfig) -> str | None:
    tail = _tail(series.get("entropy", []), cfg.window)
    if tail and all(v < cfg.entropy_min for v in tail):
        return (f"entropy collapse: token entropy below {cfg.entropy_min} for {cfg.window} steps "
                f"(last {tail[-1]:.4f}); the policy has stopped exploring")
    return None


def zero_variance(series, cfg) -> str | None:
    tail = _tail(series.get("zero_variance_groups", []), cfg.window)
    if tail and all(v > cfg.zero_variance_max for v in tail):
        return (f"dead groups: {tail[-1]:.0%} of groups had zero reward variance for {cfg.window} steps "
                "(no learning signal); make tasks easier/harder or raise the group size")
    return None


def length_runaway(series, cfg) -> str | None:
    lengths = series.get("response_length", [])
    if len(lengths) < cfg.window + 3:
        return None
    baseline = statistics.median(lengths[:3])
    tail = lengths[-cfg.window:]
    if baseline > 0 and all(v > cfg.length_factor * baseline for v in tail):
        return (f"response length runaway: {tail[-1]:.0f} tokens, over {cfg.length_factor:g}x the first "
                f"steps' {baseline:.0f} for {cfg.window} steps")
    return None


def reward_heldout_divergence(series, cfg) -> str | None:
    """The role's reward rising while the held-out metric falls. The held-out series is a reported
    metric, else the run's evaluations (``heldout_scores``, an ``on_heldout`` hook), whose reward is then read at the
    evaluated steps (``reward_at_heldout``), so both span the same steps."""
    reward = _tail(series.get("reward_at_heldout") or series.get("reward_mean", []), cfg.window)
    heldout = _tail(series.get(cfg.heldout_metric, []), cfg.window)
    if reward and heldout and reward[-1] > reward[0] and heldout[0] - heldout[-1] > cfg.heldout_drop:
        return (f"reward rising ({reward[0]:.3f} -> {reward[-1]:.3f}) while {cfg.heldout_metric} falls "
                f"({heldout[0]:.3f} -> {heldout[-1]:.3f}): likely reward hacking")
    return None


def collapse(series, cfg) -> str | None:
    """A writing role's valid tasks concentrate on one family: at each of the last ``window`` steps with at least
    ``collapse_min_tasks`` valid tasks, the largest answer share or template cluster is above ``collapse_share``
    (the ``family_*`` series: ``_family_series``)."""
    steps = _tail(series.get("family_steps", []), cfg.window)
    if not steps:
        return None
    answer = series["family_answer"][-cfg.window:]
    template = series["family_template"][-cfg.window:]
    tasks = series["family_tasks"][-cfg.window:]
    if not all(n >= cfg.collapse_min_tasks and max(a, t) > cfg.collapse_share
               for a, t, n in zip(answer, template, tasks)):
        return None
    which = [f"{name} {value:.0%}" for name, value in (("one answer", answer[-1]), ("one template", template[-1]))
             if value > cfg.collapse_share]
    return (f"task collapse: the valid tasks concentrate on one family ({' and '.join(which)} of {tasks[-1]} valid "
            f"tasks at step {steps[-1]}; above {cfg.collapse_share:.0%} for {cfg.window} steps, from step {steps[0]}); "
            "the writer has found a task family the solver answers without reading; its tasks are first in the "
            "review queue")


RULES = {
    "entropy_collapse": entropy_collapse,
    "zero_variance": zero_variance,
    "length_runaway": length_runaway,
    "reward_heldout_divergence": reward_heldout_divergence,
    "collapse": collapse,
}
FAMILY_METRICS = ("answer_share_max", "template_cluster_max")  # logged per step by the task gate (trainer/methods/gate.py)


def heldout_scores(run: Run) -> dict[int, float]:
    """Step -> held-out score of the run, from the first ``on_heldout`` hook with an answer (apps.evals: its
    checkpoint evaluations), else {}."""
    for fn in hooks.HELDOUT:
        scores = fn(run)
        if scores:
            return scores
    return {}


def _heldout(run: Run, cfg: WatchdogConfig, by_role) -> None:
    """Held-out evaluations reach the reward_heldout_divergence rule: without a reported held-out metric,
    the evaluation scores become it for every role, with each role's reward at the evaluated steps."""
    if any(cfg.heldout_metric in names for names in by_role.values()):
        return
    scores = heldout_scores(run)
    if not scores:
        return
    by_role[""][cfg.heldout_metric] = scores
    rewards = Metric.objects.filter(run=run, name="reward_mean", step__in=list(scores)).values_list(
        "role", "step", "value")
    for role, step, value in rewards:
        by_role[role]["reward_at_heldout"][step] = value


def run_config(run: Run) -> WatchdogConfig:
    try:
        return WatchdogConfig.model_validate((run.config or {}).get("watchdog") or {})
    except Exception:  # a config from before the section existed, or edited by hand
        return WatchdogConfig()


def _family_series(run: Run, points: dict[str, dict[int, float]], role: str) -> dict[str, list]:
    """The collapse rule's series of one role, aligned by step: ``family_steps``, ``family_answer`` (its
    answer_share_max), ``family_template`` (template_cluster_max) and ``family_tasks`` (the step's valid tasks of
    the role, counted from the stored tasks). Empty when the role reports neither share."""
    answer, template = points.get(FAMILY_METRICS[0], {}), points.get(FAMILY_METRICS[1], {})
    steps = sorted(set(answer) | set(template))
    if not steps:
        return {}
    counts = dict(Task.objects.filter(run=run, role=role, valid=True, step__in=steps[-HISTORY:])
                  .values_list("step").annotate(n=Count("id")).values_list("step", "n"))
    return {"family_steps": steps, "family_answer": [answer.get(s, 0.0) for s in steps],
            "family_template": [template.get(s, 0.0) for s in steps], "family_tasks": [counts.get(s, 0) for s in steps]}


def _series_by_role(run: Run, cfg: WatchdogConfig) -> dict[str, dict[str, list[float]]]:
    names = {"entropy", "zero_variance_groups", "response_length", "reward_mean", cfg.heldout_metric, *FAMILY_METRICS}
    rows = list(Metric.objects.filter(run=run, name__in=names).order_by("-step")
                .values_list("role", "name", "step", "value")[:HISTORY])
    first = list(Metric.objects.filter(run=run, name="response_length").order_by("step")
                 .values_list("role", "name", "step", "value")[:3 * 8])
    by_role: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for role, name, step, value in rows + first:
        by_role[role][name][step] = value
    _heldout(run, cfg, by_role)
    shared = by_role.pop("", {})  # role-less metrics (e.g. the held-out check) count for every role
    out = {}
    for role, names_ in (by_role or {"": {}}).items():
        merged = {**shared, **names_}
        out[role] = {name: [v for _, v in sorted(points.items())] for name, points in merged.items()}
        out[role].update(_family_series(run, names_, role) if role else {})
    return out


def check_run(run: Run) -> list[tuple[str, str, bool]]:
    """Fire every rule that holds now and has not fired before in this run.

    Returns (rule, message, paused) for each new firing.
    """
    cfg = run_config(run)
    if not cfg.enabled:
        return []
    fired_before = set(RunEvent.objects.filter(run=run, kind=RunEvent.Kind.WATCHDOG, key__startswith="watchdog:")
                       .values_list("key", flat=True))
    firings = []
    for role, series in _series_by_role(run, cfg).items():
        for name, rule in RULES.items():
            key = f"watchdog:{name}:{role}"
            if key in fired_before:
                continue
            message = rule(series, cfg)
            if message is None:
                continue
            pause = name in cfg.pause_on
            text = f"[{role or 'run'}] {message}" + ("; pausing the run" if pause else "")
            data = {"rule": name, "role": role, "pause": pause}
            if name == "collapse":  # the steps it judged: apps.review puts their family's tasks first in the queue
                data["steps"] = series["family_steps"][-cfg.window:]
            run.notable(text, data=data, key=key, kind=RunEvent.Kind.WATCHDOG)
            for hook in hooks.WATCHDOG:
                try:
                    hook(run, name, data, cfg)
                except Exception as exc:  # like the rule itself, a hook never stops training
                    log.warning("watchdog hook %s failed for run %s: %s", getattr(hook, "__name__", hook), run.pk, exc)
            paused = False
            if pause:
                try:
                    run.request_pause(None)
                    paused = True
                except IllegalTransition as exc:  # already pausing or stopping: the event still stands
                    log.info("watchdog could not pause run %s: %s", run.pk, exc)
            run.publish({"type": "status", "status": run.status, "watchdog": {"rule": name, "message": text}})
            firings.append((name, text, paused))
    return firings
