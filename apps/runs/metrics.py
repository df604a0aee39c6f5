"""Reading metric series: range queries and server-side downsampling for charts.

``minmax_downsample`` keeps a long series' shape within ``points``: the series is cut into
``points // 2`` buckets of consecutive steps and each bucket keeps its lowest and highest
value (in step order), so spikes survive, which plain striding would drop. The last point is
always kept so the chart ends at the latest value.
"""
from __future__ import annotations

import math

from django.db import connection
from django.db.models import Exists, OuterRef

from apps.runs.models import Metric, Run

DEFAULT_POINTS = 2000
MAX_POINTS = 20000
# What the charts call "reward": the first of these names a run reports.
REWARD_NAMES = ("reward_mean", "reward/mean", "reward")
# What the run page's reward chart plots for each role: its reward, else its score (SCORE's Solver
# logs `solver_reward` beside the step's `consistency`, SPICE's Reasoner `accuracy`, pi-Play's
# Student `exact_match`, SCORE's Evaluator `consistency`).
CURVE_NAMES = (*REWARD_NAMES, "solver_reward", "accuracy", "exact_match", "consistency")
NOT_A_PLAYER = "system"  # the run's own costs (trainer/context.py SYSTEM)
# Not a curve of its own: each step's end on the wall clock (trainer/context.py), the compare view's time axis.
AXIS_ONLY = ("wall_clock",)


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
    """One dict per (name, role): steps, values (non-finite -> None), total, downsampled.

    Series up to ``SQL_THRESHOLD`` points are read whole and downsampled here
    (``minmax_downsample``); longer ones are bucketed by Postgres (``_sql_minmax``), so a run
    with a million points never ships them all to Python.
    """
    where, params = _where(run.pk, names, role, since_step)
    table = Metric._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"SELECT name, role, count(*), min(step), max(step) FROM {table} WHERE {where} "
                    "GROUP BY name, role ORDER BY name, role", params)
        groups = cur.fetchall()
    small = [(n, r) for n, r, total, _, _ in groups if total <= SQL_THRESHOLD]
    raw = _read_small(run.pk, small, since_step) if small else {}
    out = []
    for name, r, total, lo, hi in groups:
        if total <= SQL_THRESHOLD:
            steps, values = raw.get((name, r), ([], []))
            kept_steps, kept_values = minmax_downsample(steps, values, points)
        else:
            kept_steps, kept_values = _sql_minmax(run.pk, name, r, lo, hi, points)
        out.append({"name": name, "role": r, "steps": kept_steps,
                    "values": [v if _finite(v) else None for v in kept_values],
                    "total": total, "downsampled": len(kept_steps) < total})
    return out


SQL_THRESHOLD = 20_000  # longer series are downsampled by Postgres


def _where(run_id: int, names, role, since_step, alias: str = "") -> tuple[str, list]:
    a = f"{alias}." if alias else ""
    where, params = [f"{a}run_id = %s"], [run_id]
    if names:
        where.append(f"{a}name = ANY(%s)")
        params.append(list(names))
    if role is not None:
        where.append(f"{a}role = %s")
        params.append(role)
    if since_step is not None:
        where.append(f"{a}step > %s")
        params.append(since_step)
    return " AND ".join(where), params


def _read_small(run_id: int, pairs: list[tuple[str, str]], since_step: int | None) -> dict:
    qs = Metric.objects.filter(run_id=run_id, name__in={n for n, _ in pairs}, role__in={r for _, r in pairs})
    if since_step is not None:
        qs = qs.filter(step__gt=since_step)
    wanted, grouped = set(pairs), {}
    for name, r, step, value in qs.order_by("name", "role", "step").values_list("name", "role", "step", "value"):
        if (name, r) in wanted:
            steps, values = grouped.setdefault((name, r), ([], []))
            steps.append(step)
            values.append(value)
    return grouped


def _sql_minmax(run_id: int, name: str, role: str, lo: int, hi: int, points: int) -> tuple[list[int], list[float]]:
    """Min/max buckets computed by Postgres: ``(points - 1) // 2`` equal step ranges over [lo, hi],
    each keeping its lowest and highest finite value (ties: the earliest step), plus the last point.

    ``min(ARRAY[value, step])`` is the lowest value with its step (arrays compare element by
    element); ``max(ARRAY[value, -step])`` the highest with the earliest step. Buckets are step
    ranges, not index ranges as in ``minmax_downsample``: the same thing for a run's dense steps.
    """
    buckets = max(1, (points - 1) // 2)
    table = Metric._meta.db_table
    sql = f"""
        SELECT min(ARRAY[value, step::float8]), max(ARRAY[value, -step::float8])
        FROM {table}
        WHERE run_id = %s AND name = %s AND role = %s AND step >= %s AND step <= %s
          AND value <> 'NaN'::float8 AND value <> 'Infinity'::float8 AND value <> '-Infinity'::float8
        GROUP BY width_bucket(step, %s, %s, %s)"""
    kept: dict[int, float] = {}
    with connection.cursor() as cur:
        cur.execute(sql, [run_id, name, role, lo, hi, lo, hi + 1, buckets])
        for low, high in cur.fetchall():
            kept[int(low[1])] = low[0]
            kept[int(-high[1])] = high[0]
        cur.execute(f"SELECT step, value FROM {table} WHERE run_id = %s AND name = %s AND role = %s "
                    "ORDER BY step DESC LIMIT 1", [run_id, name, role])
        last = cur.fetchone()
    if last is not None:
        kept[last[0]] = last[1]
    order = sorted(kept)
    return order, [kept[st] for st in order]


def role_curves(run: Run) -> list[dict]:
    """One {"role", "name"} per player: the first of ``CURVE_NAMES`` that role reports.

    Every role gets its own curve, so a run with two players shows both (SPICE: the Challenger's
    reward_mean and the Reasoner's accuracy).
    """
    pairs = set(Metric.objects.filter(run=run, name__in=CURVE_NAMES).exclude(role=NOT_A_PLAYER)
                .values_list("role", "name").distinct())
    out = []
    for role in sorted({r for r, _ in pairs}):
        out.append({"role": role, "name": next(n for n in CURVE_NAMES if (role, n) in pairs)})
    return out


def curve_series(run: Run, points: int = DEFAULT_POINTS) -> list[dict]:
    """The reward chart's series: each role's curve (``role_curves``), downsampled."""
    wanted = {(c["role"], c["name"]) for c in role_curves(run)}
    if not wanted:
        return []
    return [s for s in series(run, sorted({n for _, n in wanted}), points=points) if (s["role"], s["name"]) in wanted]


def by_role(rows: list[dict], curves: list[dict]) -> list[dict]:
    """``latest_values`` grouped for the run page's collapsed table: one group per role, with the
    role's curve value (``role_curves``) as its headline.

    >>> groups = by_role([{"role": "a", "name": "x", "step": 2, "value": 1.0},
    ...                   {"role": "a", "name": "reward_mean", "step": 2, "value": 0.5},
    ...                   {"role": "b", "name": "y", "step": 1, "value": 3.0}], [{"role": "a", "name": "reward_mean"}])
    >>> [(g["role"], len(g["rows"]), g["headline"] and g["headline"]["name"]) for g in groups]
    [('a', 2, 'reward_mean'), ('b', 1, None)]
    """
    curve = {c["role"]: c["name"] for c in curves}
    groups: dict[str, dict] = {}
    for row in rows:
        group = groups.setdefault(row["role"], {"role": row["role"], "rows": [], "headline": None, "step": None})
        group["rows"].append(row)
        group["step"] = max(group["step"] or row["step"], row["step"])
        if curve.get(row["role"]) == row["name"]:
            group["headline"] = row
    return list(groups.values())


def step_estimate(run: Run) -> dict | None:
    """How long a step of this kind of run takes on its queue: {"seconds", "run_id"} from the
    newest other run of the same method and model there that reported ``step_seconds`` (else
    this run's own steps), or None.

    The median of that run's last 20 steps, so one slow first step (model load, compile) does
    not set it.
    """
    timed = Exists(Metric.objects.filter(run=OuterRef("pk"), name="step_seconds"))
    other = (Run.objects.filter(timed, method=run.method, model_name=run.model_name, queue=run.queue)
             .exclude(pk=run.pk).order_by("-created_at", "-id").values_list("pk", flat=True).first())
    source = other or run.pk
    values = [v for v in Metric.objects.filter(run_id=source, name="step_seconds").order_by("-step")
              .values_list("value", flat=True)[:20] if _finite(v)]
    if not values:
        return None
    return {"seconds": sorted(values)[len(values) // 2], "run_id": source}


def duration(seconds: float) -> str:
    """A person's rough duration.

    >>> [duration(s) for s in (4.2, 75, 270, 7300)]
    ['4 s', '75 s', 'about 4 min', 'about 2.0 h']
    """
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"about {seconds / 60:.0f} min"
    return f"about {seconds / 3600:.1f} h"


def waiting_note(run: Run) -> str:
    """What an empty chart says instead of drawing empty axes."""
    nxt = run.current_step + 1
    if run.status == "queued":
        return f"waiting for step {nxt}: the run is queued on {run.queue}"
    if run.status != "running":
        return f"no step reported (the run is {run.status})"
    estimate = step_estimate(run)
    if estimate is None:
        return f"waiting for step {nxt} (no earlier {run.method} run of this model on {run.queue} to time a step by)"
    source = "this run" if estimate["run_id"] == run.pk else f"run {estimate['run_id']}"
    return f"waiting for step {nxt} (a step takes {duration(estimate['seconds'])} here, from {source})"


def latest_values(run: Run) -> list[dict]:
    """The newest value of every (role, name), for the run page's metric table.

    A loose index scan on (run, name, role, step): one index probe per (name, role) pair and one
    for its newest step, instead of sorting every point of the run (5 s at a million points).
    """
    table = Metric._meta.db_table
    sql = f"""
        WITH RECURSIVE pairs(name, role) AS (
            (SELECT name, role FROM {table} WHERE run_id = %s ORDER BY name, role LIMIT 1)
            UNION ALL
            SELECT nxt.name, nxt.role FROM pairs, LATERAL (
                SELECT m.name, m.role FROM {table} m
                WHERE m.run_id = %s AND (m.name, m.role) > (pairs.name, pairs.role)
                ORDER BY m.name, m.role LIMIT 1) nxt)
        SELECT p.role, p.name, newest.step, newest.value FROM pairs p, LATERAL (
            SELECT m.step, m.value FROM {table} m WHERE m.run_id = %s AND m.name = p.name AND m.role = p.role
            ORDER BY m.step DESC LIMIT 1) newest
        ORDER BY p.role, p.name"""
    with connection.cursor() as cur:
        cur.execute(sql, [run.pk, run.pk, run.pk])
        return [{"role": r, "name": n, "step": st, "value": v} for r, n, st, v in cur.fetchall() if n not in AXIS_ONLY]


# The run page's metric tabs: label -> the names that mean it, first found wins (methods and
# trainer versions spell some differently).
TABS = (
    ("entropy", ("entropy", "entropy_sampled")),
    ("length", ("response_length", "length")),
    ("KL", ("kl", "kl_k3", "kl_k2", "kl_k1")),
    ("zero-variance groups", ("zero_variance_groups", "zero_variance")),
    ("tokens/s", ("gen_tokens_per_s", "rollout_tokens_per_s", "tokens_per_s")),  # rollout_: role "system"
)


def metric_names(run_id: int) -> list[str]:
    """The distinct metric names of a run, by a loose index scan on (run, name, step).

    A plain DISTINCT reads every point of the run (a second per million points); this walks
    the index once per name.
    """
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
