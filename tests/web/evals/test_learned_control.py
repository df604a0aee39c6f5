"""The dashboard's "runs that learned" also shows the gain over a linked control (issue 32 item 2 of "what to
build" 1, with Run.control_of): paired on the same items with its interval; the control itself is never listed."""
from __future__ import annotations

import pytest
from django.utils import timezone

from apps.evals.learned import runs_that_learned
from apps.evals.models import Benchmark, EvalJob, EvalResult, EvalSample
from apps.runs.models import Run
from trainer.evaluate import paired_difference

pytestmark = pytest.mark.django_db
N = 100


def _result(bench, spec, right: set[int], run=None, step=None):
    job = EvalJob.objects.create(model_spec=spec, run=run, step=step, status="finished", finished_at=timezone.now())
    r = EvalResult.objects.create(job=job, benchmark=bench, scoring="math", n=N, correct=len(right),
                                  score=len(right) / N, complete=True)
    EvalSample.objects.bulk_create([EvalSample(result=r, index=i, item_id=f"q{i}", question="?", score=float(i in right),
                                               correct=i in right) for i in range(N)])
    return r


def _scores(right):
    return {f"q{i}": float(i in right) for i in range(N)}


def test_the_learned_card_shows_the_gain_over_the_linked_control(client, researcher):
    bench = Benchmark.objects.create(name="gsm8k", title="GSM8K", kind="builtin", scoring="math", size=N)
    run = Run.objects.create(method="spice", model_name="qwen", config={}, owner=researcher, status="finished",
                             name="spice gate")
    control = Run.objects.create(method="spice", model_name="qwen", config={"train": {"control": "random-reward"}},
                                 owner=researcher, status="finished", name="spice gate control", control_of=run)
    base, mine, theirs = set(range(30)), set(range(5, 60)), set(range(0, 45))  # the control gains less
    _result(bench, "base:qwen", base)
    _result(bench, "/ckpt/run", mine, run, 10)
    _result(bench, "/ckpt/control", theirs, control, 10)
    (row,) = runs_that_learned()  # the control (a bigger gain would not matter) is not a candidate
    assert row["run"] == run.pk and row["text"] == "+25.0"
    expected = paired_difference(_scores(theirs), _scores(mine))
    c = row["vs_control"]
    assert (c["control"], c["step"], c["same_step"], c["n"]) == (control.pk, 10, True, N)
    assert c["diff"] == pytest.approx(expected["diff"]) and c["low"] == pytest.approx(expected["low"])
    assert c["text"] == "+10.0" and c["interval"] == f"[{100 * expected['low']:+.1f}, {100 * expected['high']:+.1f}]"
    client.force_login(researcher)
    page = client.get("/").content.decode()
    cell = page[page.index('id="runs-that-learned"'):].split('class="vs-control">', 1)[1].split("</td>", 1)[0]
    assert "+10.0" in cell and c["interval"] in cell and f'href="/runs/{control.pk}/"' in cell and "spice gate control" in cell


def test_a_run_without_a_control_or_with_an_unevaluated_one_shows_none(client, researcher):
    bench = Benchmark.objects.create(name="gsm8k", title="GSM8K", kind="builtin", scoring="math", size=N)
    run = Run.objects.create(method="grpo", model_name="qwen", config={}, owner=researcher, status="finished")
    Run.objects.create(method="grpo", model_name="qwen", config={}, owner=researcher, status="finished", control_of=run)
    _result(bench, "base:qwen", set(range(30)))
    _result(bench, "/ckpt/run", set(range(40)), run, 5)
    (row,) = runs_that_learned()
    assert row["run"] == run.pk and row["vs_control"] is None
    client.force_login(researcher)
    page = client.get("/").content.decode()
    cell = page[page.index('id="runs-that-learned"'):].split('class="vs-control">', 1)[1].split("</td>", 1)[0]
    assert "—" in cell
