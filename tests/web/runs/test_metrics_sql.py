"""Long series are downsampled by Postgres and the latest values come from a loose index scan:
both checked against plain Python over the same rows."""
import math
import random

import pytest

from apps.runs import metrics as run_metrics
from apps.runs.models import Metric, Run

pytestmark = pytest.mark.django_db


def _reference(steps, values, points):
    """Step-range buckets like _sql_minmax: each bucket's finite min and max (earliest step on ties), plus the last."""
    lo, hi, buckets = steps[0], steps[-1], (points - 1) // 2
    width = (hi + 1 - lo) / buckets
    kept = {}
    for b in range(buckets):
        idx = [i for i, s in enumerate(steps) if lo + b * width <= s < lo + (b + 1) * width and math.isfinite(values[i])]
        if idx:
            low = min(idx, key=lambda i: (values[i], steps[i]))
            high = max(idx, key=lambda i: (values[i], -steps[i]))
            kept[steps[low]], kept[steps[high]] = values[low], values[high]
    kept[steps[-1]] = values[-1]
    order = sorted(kept)
    return order, [kept[s] for s in order]


@pytest.fixture
def long_run(monkeypatch):
    monkeypatch.setattr(run_metrics, "SQL_THRESHOLD", 100)
    run = Run.objects.create(method="grpo", model_name="tiny", config={})
    rng = random.Random(0)
    steps = list(range(1, 1001))
    values = [round(math.sin(s / 40) + rng.random() * 0.1, 3) for s in steps]
    values[500] = 9.0            # a spike
    values[501] = float("nan")   # skipped in its bucket
    values[200] = values[201] = -5.0  # a tie: the earliest step is kept
    values[-1] = float("nan")    # the last point is kept even so (as null)
    Metric.objects.bulk_create([Metric(run=run, step=s, role="policy", name="reward_mean", value=v)
                                for s, v in zip(steps, values)]
                               + [Metric(run=run, step=s, role="ref", name="reward_mean", value=1.0) for s in range(1, 51)])
    return run, steps, values


def test_sql_downsampling_matches_the_python_reference(long_run, reader):
    run, steps, values = long_run
    got = {s["role"]: s for s in run_metrics.series(run, ["reward_mean"], points=41)}
    policy = got["policy"]
    ref_steps, ref_values = _reference(steps, values, 41)
    assert policy["steps"] == ref_steps
    assert policy["values"][:-1] == ref_values[:-1] and policy["values"][-1] is None
    assert policy["total"] == 1000 and policy["downsampled"] and len(policy["steps"]) <= 41
    assert 9.0 in policy["values"] and 201 in policy["steps"] and 202 not in policy["steps"]
    # the short series of the same name still goes through the exact Python path
    assert got["ref"]["total"] == 50
    assert got["ref"]["steps"] == run_metrics.minmax_downsample(list(range(1, 51)), [1.0] * 50, 41)[0]


def test_the_api_serves_the_sql_path_with_since_step(long_run, reader):
    from rest_framework.test import APIClient

    run, steps, values = long_run
    client = APIClient()
    client.force_authenticate(reader)
    body = client.get(f"/api/v1/runs/{run.pk}/metrics/?name=reward_mean&role=policy&since_step=600&points=21").json()
    (policy,) = body["series"]
    assert policy["total"] == 400 and policy["steps"][0] > 600 and policy["steps"][-1] == 1000
    ref_steps, _ = _reference(steps[600:], values[600:], 21)
    assert policy["steps"] == ref_steps


def test_latest_values_by_loose_index_scan_match_a_plain_query():
    run = Run.objects.create(method="spice", model_name="tiny", config={})
    other = Run.objects.create(method="spice", model_name="tiny", config={})
    rows = [Metric(run=run, step=s, role=role, name=name, value=s * 10 + i)
            for s in range(1, 40) for i, (role, name) in enumerate([("a", "x"), ("b", "x"), ("a", "y"), ("", "z")])
            if not (role == "b" and s > 20)]  # role b stopped reporting at step 20
    rows.append(Metric(run=other, step=99, role="a", name="x", value=-1))
    Metric.objects.bulk_create(rows)
    got = run_metrics.latest_values(run)
    expected = list(Metric.objects.filter(run=run).order_by("role", "name", "-step").distinct("role", "name")
                    .values("role", "name", "step", "value"))
    assert got == expected
    assert {(g["role"], g["name"]): g["step"] for g in got} == {("", "z"): 39, ("a", "x"): 39, ("a", "y"): 39,
                                                                 ("b", "x"): 20}
    assert run_metrics.latest_values(Run.objects.create(method="grpo", model_name="t", config={})) == []
