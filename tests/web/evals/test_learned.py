"""The home page's "runs that learned": each method's best paired gain over its base model, linking to
its run; a method whose best checkpoint gained nothing clear says so."""
from __future__ import annotations

import pytest
from django.utils import timezone

from apps.evals.learned import runs_that_learned
from apps.evals.models import Benchmark, EvalJob, EvalResult, EvalSample
from apps.runs.models import Run

pytestmark = pytest.mark.django_db


def _result(bench, spec, correct: list[int], run=None, step=None):
    job = EvalJob.objects.create(model_spec=spec, run=run, step=step, status="finished", finished_at=timezone.now())
    r = EvalResult.objects.create(job=job, benchmark=bench, scoring="math", n=len(correct), correct=sum(correct),
                                  score=sum(correct) / len(correct), complete=True)
    EvalSample.objects.bulk_create([EvalSample(result=r, index=i, item_id=f"q{i}", question="?", score=float(c),
                                               correct=bool(c)) for i, c in enumerate(correct)])
    return r


def test_the_dashboard_points_to_each_methods_best_gain(client, researcher):
    bench = Benchmark.objects.create(name="gsm8k", title="GSM8K", kind="builtin", scoring="math", size=100)
    grpo = Run.objects.create(method="grpo", model_name="qwen", config={}, owner=researcher, status="finished",
                              name="GRPO lr 1e-6")
    flat = Run.objects.create(method="spice", model_name="qwen", config={}, owner=researcher, status="finished")
    base = [1] * 20 + [0] * 80
    _result(bench, "base:qwen", base)
    _result(bench, "/ckpt/a", [1] * 20 + [1] * 30 + [0] * 50, grpo, 10)  # 30 items gained, none lost
    _result(bench, "/ckpt/b", [1] * 20 + [1] * 5 + [0] * 75, grpo, 5)
    _result(bench, "/ckpt/c", [0, 1] * 10 + [0] * 80, flat, 20)  # 10 lost: no gain
    rows = {r["method"]: r for r in runs_that_learned()}
    assert (rows["grpo"]["run"], rows["grpo"]["step"], rows["grpo"]["text"], rows["grpo"]["learned"]) == \
        (grpo.pk, 10, "+30.0", True)
    assert rows["spice"]["run"] == flat.pk and not rows["spice"]["learned"]
    client.force_login(researcher)
    page = client.get("/").content.decode()
    card = page[page.index('id="runs-that-learned"'):]
    assert f'href="/runs/{grpo.pk}/"' in card and "GRPO lr 1e-6" in card and "+30.0" in card
    assert "no clear gain" in card
