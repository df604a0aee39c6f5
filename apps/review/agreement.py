"""Judge-vs-human agreement on reviewed grades: raw agreement and Cohen's kappa.

For a reviewed grade the judge's label is ``score >= 0.5`` (pass). The human's label follows
from the verdict: approve = the judge was right (same label), flag = the judge was wrong (the
opposite label). Over n such pairs::

    p_o   = (both pass + both fail) / n                         raw agreement
    p_e   = P(judge pass) * P(human pass) + P(judge fail) * P(human fail)
    kappa = (p_o - p_e) / (1 - p_e)                              undefined (None) when p_e = 1

``run_agreement`` gives the numbers for a run overall, per rubric priority, and per bucket of
steps (the trend).
"""
from __future__ import annotations

import math

from apps.review.models import Kind, ReviewItem, ReviewStatus

TREND_BUCKETS = 10


def human_pass(judge_pass: bool, status: str) -> bool:
    return judge_pass if status == ReviewStatus.APPROVED else not judge_pass


def cohen_kappa(pairs: list[tuple[bool, bool]]) -> dict:
    """(judge pass, human pass) pairs -> n, agreement, kappa, and the 2x2 table."""
    n = len(pairs)
    table = {"both_pass": 0, "both_fail": 0, "judge_pass_human_fail": 0, "judge_fail_human_pass": 0}
    for judge, human in pairs:
        if judge and human:
            table["both_pass"] += 1
        elif not judge and not human:
            table["both_fail"] += 1
        elif judge:
            table["judge_pass_human_fail"] += 1
        else:
            table["judge_fail_human_pass"] += 1
    if n == 0:
        return {"n": 0, "agreement": None, "kappa": None, "judge_pass_rate": None, "human_pass_rate": None,
                "table": table}
    p_o = (table["both_pass"] + table["both_fail"]) / n
    judge_rate = (table["both_pass"] + table["judge_pass_human_fail"]) / n
    human_rate = (table["both_pass"] + table["judge_fail_human_pass"]) / n
    p_e = judge_rate * human_rate + (1 - judge_rate) * (1 - human_rate)
    kappa = None if math.isclose(p_e, 1.0) else (p_o - p_e) / (1 - p_e)
    return {"n": n, "agreement": p_o, "kappa": kappa, "judge_pass_rate": judge_rate, "human_pass_rate": human_rate,
            "table": table}


def reviewed_grades(run_number: int):
    return (ReviewItem.objects.filter(run_number=run_number, kind=Kind.GRADE, judge_score__isnull=False)
            .exclude(status=ReviewStatus.PENDING).order_by("step", "id"))


def run_agreement(run_number: int, bucket: int | None = None) -> dict:
    """Overall, per-priority and per-step-bucket agreement of a run's reviewed grades."""
    rows = [(i.step, i.priority or "overall", i.judge_pass, human_pass(i.judge_pass, i.status))
            for i in reviewed_grades(run_number).only("step", "priority", "judge_score", "status")]
    by_priority: dict[str, list] = {}
    for _, priority, judge, human in rows:
        by_priority.setdefault(priority, []).append((judge, human))
    bucket = bucket or _bucket_size([s for s, *_ in rows])
    trend: dict[int, list] = {}
    for step, _, judge, human in rows:
        trend.setdefault(step // bucket, []).append((judge, human))
    return {
        "run": run_number,
        "overall": cohen_kappa([(j, h) for _, _, j, h in rows]),
        "by_priority": {p: cohen_kappa(pairs) for p, pairs in sorted(by_priority.items(), key=_priority_order)},
        "bucket": bucket,
        "trend": [{"from_step": b * bucket, "to_step": (b + 1) * bucket - 1, **cohen_kappa(pairs)}
                  for b, pairs in sorted(trend.items())],
    }


def _bucket_size(steps: list[int]) -> int:
    """About TREND_BUCKETS buckets over the reviewed steps."""
    if not steps:
        return 1
    return max(1, math.ceil((max(steps) + 1) / TREND_BUCKETS))


def _priority_order(item) -> tuple:
    order = ["critical", "important", "bonus", "overall"]
    return (order.index(item[0]) if item[0] in order else len(order), item[0])
