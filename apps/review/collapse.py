"""A collapsed task family goes to the front of the review queue.

When the watchdog's ``collapse`` rule fires (apps/runs/watchdog.py, through the run hook ``on_watchdog``), the
valid tasks of the steps it judged that belong to the family are put in the queue as suspicious
(``COLLAPSE_REASON``): those whose template cluster holds more than ``watchdog.collapse_share`` of their step's
valid tasks (``data.cluster_share``, written by the task gate), and those with their step's most common answer
when that answer's share of the step's valid free-form tasks is above it (``answer_share_max``, compared as the gate
compares: ``trainer.verify.normalize_answer``). The queue's order (apps/review/api.py ``filtered``) puts these
first, and any task whose ``cluster_share`` is above its run's threshold, sampled or not.
"""
from __future__ import annotations

from collections import Counter

from apps.episodes.models import Task
from apps.review.models import Kind
from apps.review.sampling import flag_suspicious
from trainer.verify import normalize_answer

COLLAPSE_REASON = "collapse: in the task family the watchdog flagged (one answer or one template for most of its step)"
PER_STEP = 50  # most tasks of one step sent to the queue


def family_tasks(run, role: str, step: int, share: float) -> list[Task]:
    """The valid tasks of ``role`` at ``step`` in a family above ``share``: a template cluster above it, or the
    step's most common free-form answer when its share is above it."""
    tasks = list(Task.objects.filter(run=run, role=role, step=step, valid=True).order_by("id"))
    free = [t for t in tasks if t.format in ("free_form", "")]
    counts = Counter(normalize_answer(t.answer) for t in free if t.answer)
    top = [a for a, n in counts.items() if n / max(sum(counts.values()), 1) > share]
    out = []
    for t in tasks:
        cluster = (t.data or {}).get("cluster_share") if isinstance(t.data, dict) else None
        in_cluster = isinstance(cluster, (int, float)) and cluster > share
        if in_cluster or (t in free and t.answer and normalize_answer(t.answer) in top):
            out.append(t)
    return out[:PER_STEP]


def on_collapse(run, rule: str, data: dict, cfg) -> int:
    """The watchdog hook: the flagged family's tasks of each judged step join the queue. Returns how many."""
    if rule != "collapse":
        return 0
    flagged = 0
    for step in data.get("steps") or []:
        for task in family_tasks(run, data.get("role") or "", int(step), cfg.collapse_share):
            flagged += flag_suspicious(run, Kind.TASK, task.key, COLLAPSE_REASON) is not None
    return flagged
