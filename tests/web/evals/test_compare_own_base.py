"""/evals/compare/ when the base model was evaluated more than once (two imported runs of one model, each with its own
base evaluation): the base row shows the newest, and a run whose paired differences start from its own, older
evaluation gets a "step 0" row with it, so "17.7% ... +5.0 vs base" is read against the 12.7% it came from, not
against a 13.0% base row."""
from __future__ import annotations

import pytest
from django.utils import timezone

from apps.evals.compare import comparison
from apps.evals.models import Benchmark, EvalJob, EvalResult, EvalSample
from apps.runs.models import Run

pytestmark = pytest.mark.django_db
N = 300


def _result(bench, spec, right: int, run=None, step=None):
    job = EvalJob.objects.create(model_spec=spec, run=run, step=step, status="finished", finished_at=timezone.now())
    r = EvalResult.objects.create(job=job, benchmark=bench, scoring="exact", n=N, correct=right, score=right / N,
                                  ci_low=0.0, ci_high=1.0, complete=True)
    EvalSample.objects.bulk_create([EvalSample(result=r, index=i, item_id=f"q{i}", question="?", score=float(i < right),
                                               correct=i < right) for i in range(N)])
    return r


def test_a_runs_own_older_base_evaluation_gets_its_own_row(client, researcher):
    bench = Benchmark.objects.create(name="cloze", title="cloze", kind="builtin", scoring="exact", size=N)
    gated = Run.objects.create(method="spice", model_name="qwen", config={}, owner=researcher, status="finished",
                               name="spice-gate")
    other = Run.objects.create(method="spice", model_name="qwen", config={}, owner=researcher, status="finished",
                               name="rules3")
    _result(bench, "base:qwen", 38, gated)  # 12.7%: the gated run's own evaluation of its base model
    _result(bench, "/ckpt/gated", 53, gated, 32)  # 17.7%
    _result(bench, "base:qwen", 39, other)  # 13.0%: evaluated again later, with the other run
    rows = comparison([gated], [bench])["rows"]
    assert [r["label"] for r in rows] == ["base:qwen", f"run {gated.pk} · spice-gate @ step 0 (its own base model "
                                          "evaluation)", f"run {gated.pk} · spice-gate @ step 32"]
    assert [round(100 * r["cells"][0]["score"], 1) for r in rows] == [13.0, 12.7, 17.7]
    assert round(100 * rows[2]["cells"][0]["paired"]["diff"], 1) == 5.0  # from the 12.7% of the row above it
    # a run whose own base evaluation is the newest one gets no extra row
    assert [r["label"] for r in comparison([other], [bench])["rows"]] == ["base:qwen"]
    client.force_login(researcher)
    page = client.get(f"/evals/compare/?run={gated.pk}&benchmark=cloze").content.decode()
    assert "(its own base model evaluation)" in page and "12.7%" in page and "13.0%" in page
