"""Reading metric series: range queries and server-side downsampling for charts.

``minmax_downsample`` keeps a long series' shape within ``points``: the series is cut into
``points // 2`` buckets of consecutive steps and each bucket keeps its lowest and highest
value (in step order), so spikes survive, which plain striding would drop. The last point is
always kept so the chart ends at the latest value.
"""
from __future__ import annotations

import math

from apps.runs.models import Metric, Run

DEFAULT_POINTS = 2000
MAX_POINTS = 20000
# What the charts call "reward": the first of these names a run reports.
REWARD_NAMES = ("reward_mean", "reward/mean", "reward")


def minmax_downsample(steps: list[int], values: list[float], points: int) -> tuple[list[int], list[float]]:
    """At most ``points`` (>= 2) of the series, keeping each bucket's min and max and the last point.

    6 points into 5: (5 - 1) // 2 = 2 buckets over indices 0..4, then the last point (index 5).
    Bucket [0, 2) = values 0, 9 keeps both; bucket [2, 5) = 1, 1, 5 keeps min 1 (the first of
    the tie, index 2) and max 5 (index 4)::

    >>> minmax_downsample([1, 2, 3, 4, 5, 6], [0, 9, 1, 1, 5, 2], 5)
    ([1, 2, 3, 5, 6], [0, 9, 1, 5, 2])
    """
    n = len(steps)
    if points < 2:
        raise ValueError("points must be at least 2")
    if n <= points:
        return list(steps), list(values)
    buckets = (points - 1) // 2  # leave room for the forced last point
    keep: set[int] = set()
    for b in range(buckets):
        lo, hi = (b * (n - 1)) // buckets, ((b + 1) * (n - 1)) // buckets
        idx = range(lo, max(hi, lo + 1))
        finite = [i for i in idx if _finite(values[i])] or list(idx)
        keep.add(min(finite, key=lambda i: (values[i] if _finite(values[i]) else math.inf, i)))
        keep.add(max(finite, key=lambda i: (values[i] if _finite(values[i]) else -math.inf, -i)))
    keep.add(n - 1)
    order = sorted(keep)
    return [steps[i] for i in order], [values[i] for i in order]


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def series(run: Run, names: list[str] | None = None, role: str | None = None, since_step: int | None = None,
           points: int = DEFAULT_POINTS) -> list[dict]:
    """One dict per (name, role): steps, values (non-finite -> None), total, downsampled."""
    qs = Metric.objects.filter(run=run)
    if names:
        qs = qs.filter(name__in=names)
    if role is not None:
        qs = qs.filter(role=role)
    if since_step is not None:
        qs = qs.filter(step__gt=since_step)
    grouped: dict[tuple[str, str], tuple[list, list]] = {}
    for name, r, step, value in qs.order_by("name", "role", "step").values_list("name", "role", "step", "value"):
        steps, values = grouped.setdefault((name, r), ([], []))
        steps.append(step)
        values.append(value)
    out = []
    for (name, r), (steps, values) in grouped.items():
        kept_steps, kept_values = minmax_downsample(steps, values, points)
        out.append({"name": name, "role": r, "steps": kept_steps,
                    "values": [v if _finite(v) else None for v in kept_values],
                    "total": len(steps), "downsampled": len(kept_steps) < len(steps)})
    return out


def reward_name(run: Run) -> str | None:
    names = set(Metric.objects.filter(run=run, name__in=REWARD_NAMES).values_list("name", flat=True).distinct())
    return next((n for n in REWARD_NAMES if n in names), None)


def latest_values(run: Run) -> list[dict]:
    """The newest value of every (role, name), for the run page's metric table."""
    rows = (Metric.objects.filter(run=run).order_by("role", "name", "-step")
            .distinct("role", "name").values("role", "name", "step", "value"))
    return list(rows)


# The run page's metric tabs: label -> the names that mean it, first found wins (methods and
# trainer versions spell some differently).
TABS = (
    ("entropy", ("entropy", "entropy_sampled")),
    ("length", ("response_length", "length")),
    ("KL", ("kl", "kl_k3", "kl_k2", "kl_k1")),
    ("zero-variance groups", ("zero_variance_groups", "zero_variance")),
    ("tokens/s", ("gen_tokens_per_s", "tokens_per_s")),
)


def metric_names(run_id: int) -> list[str]:
    """The distinct metric names of a run, by a loose index scan on (run, name, step).

    A plain DISTINCT reads every point of the run (a second per million points); this walks
    the index once per name.
    """
    from django.db import connection

    table = Metric._meta.db_table
    sql = f"""
        WITH RECURSIVE names(name) AS (
            (SELECT name FROM {table} WHERE run_id = %s ORDER BY name LIMIT 1)
            UNION ALL
            SELECT (SELECT m.name FROM {table} m WHERE m.run_id = %s AND m.name > names.name ORDER BY m.name LIMIT 1)
            FROM names WHERE names.name IS NOT NULL)
        SELECT name FROM names WHERE name IS NOT NULL"""
    with connection.cursor() as cur:
        cur.execute(sql, [run_id, run_id])
        return [row[0] for row in cur.fetchall()]


def tabs(names: list[str]) -> list[dict]:
    """Each tab with its candidate names and the one this run reports (None: not reported yet)."""
    have = set(names)
    return [{"label": label, "names": list(candidates), "name": next((n for n in candidates if n in have), None)}
            for label, candidates in TABS]
