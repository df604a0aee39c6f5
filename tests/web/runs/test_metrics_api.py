"""GET /api/v1/runs/<id>/metrics/: range reads and server-side min/max downsampling."""
import math

import pytest
from rest_framework.test import APIClient

from apps.runs.metrics import minmax_downsample, role_curves
from apps.runs.models import Metric, Run


def test_downsampling_keeps_each_buckets_extremes_and_the_last_point():
    # 6 points into 5: buckets [0, 2) and [2, 5) then the forced last point (see the docstring).
    assert minmax_downsample([1, 2, 3, 4, 5, 6], [0, 9, 1, 1, 5, 2], 5) == ([1, 2, 3, 5, 6], [0, 9, 1, 5, 2])
    assert minmax_downsample([1, 2], [3.0, 4.0], 10) == ([1, 2], [3.0, 4.0])  # short series untouched
    steps = list(range(10_000))
    values = [math.sin(s / 50) for s in steps]
    values[5_000] = 42.0  # a spike plain striding would miss
    kept_steps, kept_values = minmax_downsample(steps, values, 100)
    assert len(kept_steps) <= 100 and kept_steps == sorted(kept_steps)
    assert 42.0 in kept_values and kept_steps[-1] == 9_999
    with pytest.raises(ValueError):
        minmax_downsample(steps, values, 1)


@pytest.fixture
def run(db):
    run = Run.objects.create(method="spice", model_name="tiny", config={})
    rows = [Metric(run=run, step=s, role=role, name=name, value=s * k)
            for s in range(1, 3001) for role, k in (("reasoner", 1.0), ("challenger", -1.0))
            for name in ("reward_mean", "loss")]
    rows.append(Metric(run=run, step=3001, role="reasoner", name="reward_mean", value=float("nan")))
    Metric.objects.bulk_create(rows)
    return run


def _get(user, url):
    client = APIClient()
    client.force_authenticate(user)
    return client.get(url)


def test_it_downsamples_long_series_per_role(run, reader):
    body = _get(reader, f"/api/v1/runs/{run.pk}/metrics/?name=reward_mean&points=200").json()
    series = {s["role"]: s for s in body["series"]}
    assert set(series) == {"reasoner", "challenger"}
    reasoner = series["reasoner"]
    assert reasoner["total"] == 3001 and reasoner["downsampled"] and len(reasoner["steps"]) <= 200
    assert reasoner["steps"][-1] == 3001 and reasoner["values"][-1] is None  # NaN comes back as null
    assert max(v for v in reasoner["values"] if v is not None) == 3000.0
    assert min(series["challenger"]["values"]) == -3000.0


def test_it_reads_a_range_by_role_and_since_step(run, reader):
    body = _get(reader, f"/api/v1/runs/{run.pk}/metrics/?name=loss,reward_mean&role=challenger&since_step=2990").json()
    assert {(s["name"], s["role"]) for s in body["series"]} == {("loss", "challenger"), ("reward_mean", "challenger")}
    for s in body["series"]:
        assert s["steps"] == list(range(2991, 3001)) and not s["downsampled"]


def test_bad_parameters_are_400s(run, reader):
    response = _get(reader, f"/api/v1/runs/{run.pk}/metrics/?since_step=yesterday")
    assert response.status_code == 400 and "since_step must be an integer" in response.json()["error"]
    response = _get(reader, f"/api/v1/runs/{run.pk}/metrics/?points=lots")
    assert response.status_code == 400 and "points" in response.json()["error"]
    assert _get(reader, "/api/v1/runs/424242/metrics/").status_code == 404


def test_the_reward_chart_plots_each_players_reward_before_its_scores(db):
    """SCORE's Solver logs its reward (`solver_reward`) and the step's consistency; the chart plots the reward, so
    a run whose reports all earn 0 shows a flat zero (the first GPU run of SCORE plotted consistency instead)."""
    run = Run.objects.create(method="score", model_name="tiny", config={})
    Metric.objects.bulk_create([Metric(run=run, step=1, role=role, name=name, value=0.0) for role, name in (
        ("solver", "solver_reward"), ("solver", "consistency"), ("evaluator", "consistency"),
        ("system", "reward_mean"))])
    assert role_curves(run) == [{"role": "evaluator", "name": "consistency"}, {"role": "solver", "name": "solver_reward"}]
