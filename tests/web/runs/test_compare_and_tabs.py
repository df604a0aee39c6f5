"""The compare view (runs list checkboxes -> /runs/compare/?ids=1,2) and the run page's metric tabs."""
import pytest

from apps.runs import metrics as run_metrics
from apps.runs.models import Metric, Run

pytestmark = pytest.mark.django_db


def _run(owner, **metrics):
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, owner=owner, current_step=3)
    Metric.objects.bulk_create([Metric(run=run, step=s, role="policy", name=name, value=v * s)
                                for name, v in metrics.items() for s in (1, 2, 3)])
    return run


def test_metric_names_by_loose_index_scan(researcher):
    run = _run(researcher, reward_mean=0.1, entropy=1.0, kl=0.01)
    other = _run(researcher, zzz=1.0)
    assert run_metrics.metric_names(run.pk) == ["entropy", "kl", "reward_mean"]
    assert run_metrics.metric_names(other.pk) == ["zzz"]
    assert run_metrics.metric_names(999999) == []


def test_tabs_pick_the_first_name_a_run_reports():
    tabs = {t["label"]: t["name"] for t in run_metrics.tabs(["entropy_sampled", "response_length", "kl_k3",
                                                              "zero_variance_groups"])}
    assert tabs == {"entropy": "entropy_sampled", "length": "response_length", "KL": "kl_k3",
                    "zero-variance groups": "zero_variance_groups", "tokens/s": None}


def test_the_run_page_has_the_metric_tabs(client, researcher):
    run = _run(researcher, reward_mean=0.1, entropy=1.0, gen_tokens_per_s=50.0)
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="metric-chart"' in html and 'id="metric-tab-data"' in html and "js/run_page.js" in html
    for label in ("entropy", "length", "KL", "zero-variance groups", "tokens/s"):
        assert f">{label}</button>" in html
    assert 'title="gen_tokens_per_s"' in html and "not reported yet (looks for kl" in html


def test_the_runs_list_offers_compare_checkboxes(client, researcher):
    a, b = _run(researcher, reward_mean=0.1), _run(researcher, reward_mean=0.2)
    client.force_login(researcher)
    html = client.get("/runs/").content.decode()
    assert 'action="/runs/compare/"' in html and 'id="compare-button"' in html
    assert f'name="ids" value="{a.pk}"' in html and f'name="ids" value="{b.pk}"' in html


def test_compare_overlays_the_chosen_runs(client, researcher):
    a = _run(researcher, reward_mean=0.1, entropy=1.0)
    b = _run(researcher, reward_mean=0.2, kl=0.5)
    client.force_login(researcher)
    for url in (f"/runs/compare/?ids={a.pk},{b.pk}", f"/runs/compare/?ids={a.pk}&ids={b.pk}"):
        response = client.get(url)
        assert response.status_code == 200
        html = response.content.decode()
        assert 'id="compare-chart" data-metric="reward_mean"' in html
        assert f'<tr data-run="{a.pk}">' in html and f'<tr data-run="{b.pk}">' in html
        assert f"[{a.pk}, {b.pk}]" in html  # the ids the chart fetches
        assert '<option value="entropy">' in html and '<option value="kl">' in html  # the union of names
    html = client.get(f"/runs/compare/?ids={a.pk},{b.pk}&metric=kl").content.decode()
    assert 'data-metric="kl"' in html and '<option value="kl" selected>' in html
    # the series the chart draws come from the downsampled metrics API
    series = client.get(f"/api/v1/runs/{b.pk}/metrics/?name=kl&points=1500").json()["series"]
    assert series[0]["steps"] == [1, 2, 3] and series[0]["values"] == pytest.approx([0.5, 1.0, 1.5])


@pytest.mark.parametrize("query, message", [
    ("", "Pick at least 2 runs"),
    ("?ids=1", "Pick at least 2 runs"),
    ("?ids=1,abc", "ids must be run numbers"),
    ("?ids=1,2,3,4,5,6,7,8,9", "At most 8 runs"),
    ("?ids={a},999999", "No run 999999"),
    ("?ids={a},{b}&metric=nope", "reports a metric named 'nope'"),
])
def test_bad_compare_input_is_explained(client, researcher, query, message):
    a, b = _run(researcher, reward_mean=0.1), _run(researcher, reward_mean=0.2)
    client.force_login(researcher)
    response = client.get("/runs/compare/" + query.format(a=a.pk, b=b.pk))
    assert response.status_code == 400
    html = response.content.decode()
    assert message.replace("'", "&#x27;") in html and 'id="compare-error"' in html


def test_the_run_page_brings_its_reward_points(client, researcher):
    import json
    import re

    run = _run(researcher, reward_mean=0.1, entropy=1.0)
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    embedded = json.loads(re.search(r'<script id="reward-series" type="application/json">(.*?)</script>', html).group(1))
    assert [(s["name"], s["role"], s["steps"]) for s in embedded] == [("reward_mean", "policy", [1, 2, 3])]
    assert embedded[0]["values"] == pytest.approx([0.1, 0.2, 0.3])
