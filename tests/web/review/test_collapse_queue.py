"""A collapsed task family goes to the front of the review queue (issue 30): tasks whose template cluster holds
more than the run's watchdog.collapse_share of their step (data.cluster_share, from the task gate) come first,
before the valid-first order; when the watchdog's collapse rule fires, the family's tasks of the steps it judged
(one answer, or one template) join the queue, sampled or not, first."""
import pytest
from django.test import Client
from rest_framework.test import APIClient

from apps.episodes.models import Task
from apps.review.collapse import COLLAPSE_REASON, family_tasks
from apps.review.models import ReviewItem
from apps.runs.models import Metric, RunEvent
from apps.runs.sink import DjangoSink
from apps.runs.watchdog import check_run
from tests.web.review.conftest import records

pytestmark = pytest.mark.django_db


def _queue(reviewer, query=""):
    api = APIClient()
    api.force_authenticate(reviewer)
    return [r["key"] for r in api.get(f"/api/v1/review/queue/?{query}").json()["results"]]


def _write(run, shares, valid=None, step=1):
    recs = [r for r in records(step, n=len(shares)) if r["kind"] == "task"]
    for r, share in zip(recs, shares):
        r["data"] = {"cluster_share": share, "gate_rule": None}
    for i, ok in enumerate(valid or []):
        recs[i]["valid"] = ok
    sink = DjangoSink(run)
    sink.samples(step, recs)
    sink.control()


def test_a_task_of_a_large_template_cluster_comes_first_then_valid_then_invalid(make_run, reviewer):
    run = make_run(review={"tasks": 1.0, "rubrics": 0.0, "grades": 0.0})
    # t0 invalid, t1 valid in a small cluster, t2 valid in a cluster of 80% of its step, t3 valid without a share
    _write(run, [None, 0.1, 0.8, None], valid=[False, True, True, True])
    assert _queue(reviewer, f"run={run.pk}") == ["1:t2", "1:t1", "1:t3", "1:t0"]
    # the page walks the same order, and wraps around
    browser = Client()
    browser.force_login(reviewer)
    items = {i.key: i.pk for i in ReviewItem.objects.filter(run_number=run.pk)}
    walk, at = [], None
    for _ in range(5):
        at = browser.get(f"/review/?run={run.pk}" + (f"&after={at}" if at else "")).context["item"].pk
        walk.append(at)
    assert walk == [items["1:t2"], items["1:t1"], items["1:t3"], items["1:t0"], items["1:t2"]]


def test_the_threshold_is_the_runs_watchdog_collapse_share(make_run, reviewer):
    strict = make_run(review={"tasks": 1.0, "rubrics": 0.0, "grades": 0.0}, watchdog={"collapse_share": 0.9})
    _write(strict, [0.1, 0.8])
    assert _queue(reviewer, f"run={strict.pk}") == ["1:t0", "1:t1"]  # 0.8 is under this run's 0.9: by id
    Task.objects.filter(run=strict, key="1:t0").update(data={"cluster_share": "lots"})  # not a number: no error
    assert _queue(reviewer, f"run={strict.pk}") == ["1:t0", "1:t1"]


def test_when_the_collapse_rule_fires_the_familys_tasks_join_the_queue_first(make_run, reviewer):
    run = make_run(review={"tasks": 0.0, "rubrics": 0.0, "grades": 0.0})  # nothing sampled
    sink = DjangoSink(run)
    for step in (1, 2, 3):
        recs = [r for r in records(step, n=10) if r["kind"] == "task"]
        for i, r in enumerate(recs):  # 9 of 10 answer "1" ("How many continents does Niger lie on?")
            r["answer"] = "1" if i else "Niamey"
            r["data"] = {"cluster_share": 0.2}
        recs[0]["data"] = {"cluster_share": 0.7}  # ... and the odd answer's template is a big cluster
        sink.samples(step, recs)
        Metric.objects.create(run=run, step=step, role="challenger", name="answer_share_max", value=0.9)
    sink.flush()
    assert not ReviewItem.objects.exists()
    assert [t.key for t in family_tasks(run, "challenger", 3, 0.5)] == [f"3:t{i}" for i in range(10)]
    assert [t.key for t in family_tasks(run, "challenger", 3, 0.95)] == []
    ((rule, _, paused),) = check_run(run)
    assert rule == "collapse" and paused
    event = RunEvent.objects.get(run=run, kind=RunEvent.Kind.WATCHDOG)
    assert event.data["steps"] == [1, 2, 3]
    flagged = ReviewItem.objects.filter(run_number=run.pk)
    assert flagged.count() == 30 and all(i.suspicious == [COLLAPSE_REASON] for i in flagged)
    assert _queue(reviewer, f"run={run.pk}&page_size=50")[:3] == ["1:t0", "1:t1", "1:t2"]


def test_an_answer_family_alone_is_flagged_and_other_tasks_stay_behind(make_run, reviewer):
    run = make_run(review={"tasks": 1.0, "rubrics": 0.0, "grades": 0.0})
    recs = [r for r in records(5, n=4) if r["kind"] == "task"]
    for r, answer in zip(recs, ["Paris", "1", "1", "1"]):
        r["answer"] = answer
    sink = DjangoSink(run)
    sink.samples(5, recs)
    sink.control()  # all four sampled, by id
    assert _queue(reviewer, f"run={run.pk}") == ["5:t0", "5:t1", "5:t2", "5:t3"]
    from apps.review.collapse import on_collapse
    from trainer.config import WatchdogConfig

    assert on_collapse(run, "collapse", {"role": "challenger", "steps": [5]}, WatchdogConfig()) == 3
    assert on_collapse(run, "entropy_collapse", {"role": "challenger"}, WatchdogConfig()) == 0
    assert _queue(reviewer, f"run={run.pk}") == ["5:t1", "5:t2", "5:t3", "5:t0"]  # "1" is 3 of 4: first
