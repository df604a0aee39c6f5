"""/evals/ after an import brings dozens of evaluations: the ten newest are listed open, the rest folded under
"N earlier evaluations" (the forms were 50 rows down), and each row and cross-play names its run, not just its
number."""
from __future__ import annotations

import pytest
from django.utils import timezone

from apps.evals.models import Benchmark, CrossPlay, EvalJob, EvalResult
from apps.evals.views import RECENT_SHOWN
from apps.runs.models import Run

pytestmark = pytest.mark.django_db


def test_the_newest_evaluations_are_open_the_rest_folded_and_runs_named(client, researcher):
    bench = Benchmark.objects.create(name="held", title="held", kind="builtin", scoring="math", size=10)
    run = Run.objects.create(method="grpo", model_name="qwen", config={}, owner=researcher, status="finished",
                             name="grpo-gsm8k-seed1")
    jobs = []
    for step in range(RECENT_SHOWN + 3):
        job = EvalJob.objects.create(model_spec=f"/ckpt/{step}", run=run, step=step, status="finished",
                                     finished_at=timezone.now())
        EvalResult.objects.create(job=job, benchmark=bench, scoring="math", n=10, correct=3, score=0.3,
                                  ci_low=0.1, ci_high=0.6, complete=True)
        jobs.append(job)
    CrossPlay.objects.create(run=run, checkpoints=[{"id": 1, "step": 0, "path": "/a"}, {"id": 2, "step": 5, "path": "/b"}],
                             status="finished")
    client.force_login(researcher)
    page = client.get("/evals/").content.decode()
    open_table = page.split('id="eval-jobs"', 1)[1].split("</table>", 1)[0]
    folded = page.split('id="eval-jobs-older"', 1)[1].split("</details>", 1)[0]
    newest, older = jobs[::-1][:RECENT_SHOWN], jobs[::-1][RECENT_SHOWN:]
    assert all(f'href="/evals/jobs/{j.pk}/"' in open_table for j in newest)
    assert not any(f'href="/evals/jobs/{j.pk}/"' in open_table for j in older)
    assert all(f'href="/evals/jobs/{j.pk}/"' in folded for j in older) and "3 earlier evaluations" in folded
    assert f"run {run.pk} · grpo-gsm8k-seed1</a> @ step {jobs[-1].step}" in open_table
    crossplays = page.split("Cross-play matrices", 1)[1].split("</section>", 1)[0]
    assert f'href="/runs/{run.pk}/">run {run.pk} · grpo-gsm8k-seed1</a>' in crossplays
