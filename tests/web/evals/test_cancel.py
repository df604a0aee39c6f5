"""An evaluation can be cancelled, from its page and through the API: a queued one's RQ job then finds
nothing to claim on a real worker; a running one stops at its next item and keeps what it scored; an
ended one is refused with the reason."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.evals.launch import enqueue
from apps.evals.models import EvalJob
from tests.web.runs.conftest import burst

pytestmark = pytest.mark.django_db(transaction=True)


def queued_eval(owner, queue: str = "evals") -> EvalJob:
    """A queued evaluation of the base model with its real job on ``queue``."""
    job = EvalJob.objects.create(model_spec="base:smollm2-135m-instruct", label="base", owner=owner, queue=queue,
                                 limit=1)
    enqueue(job, "apps.evals.jobs.execute_eval")
    return job


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _running(execute, pk: int, done, seconds: float):
    """``execute(pk)`` started in a thread (its own DB connection, closed at the end), returned once ``done()`` counts
    a first scored unit (or the thread ended, or ``seconds`` passed): (thread, outcome dict with its "line")."""
    import threading
    import time

    from django.db import connection

    outcome = {}

    def work():
        try:
            outcome["line"] = execute(pk)
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    deadline = time.monotonic() + seconds
    while done() < 1 and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    return worker, outcome


def test_the_api_cancels_a_queued_evaluation_and_its_job_does_nothing(roles, researcher):
    job = queued_eval(researcher)
    response = _api(researcher).post(f"/api/v1/evals/{job.pk}/cancel/")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "cancelled"
    burst("evals")  # a worker that still finds the job claims nothing
    job.refresh_from_db()
    assert job.status == "cancelled" and job.started_at is None
    assert job.error == "cancelled by rita before it started"
    again = _api(researcher).post(f"/api/v1/evals/{job.pk}/cancel/")
    assert again.status_code == 409
    assert "it is cancelled; only a queued or running evaluation can be cancelled" in again.json()["error"]


def test_only_its_launcher_or_an_admin_may_cancel(roles, researcher, reader, admin_user):
    job = queued_eval(researcher)
    refused = _api(reader).post(f"/api/v1/evals/{job.pk}/cancel/")
    assert refused.status_code == 403 and "researcher role" in refused.json()["error"]
    job.refresh_from_db()
    assert job.status == "queued"
    assert _api(admin_user).post(f"/api/v1/evals/{job.pk}/cancel/").status_code == 200


def test_a_running_evaluation_stops_at_the_next_item_and_keeps_what_it_scored(roles, researcher, data_dir,
                                                                              tiny_model_dir, run_env):  # noqa: ARG001
    """A real evaluation (the tiny model, 30 items one at a time on the CPU queue) runs in a worker thread;
    cancelled once it has answered an item, it stops before the next one: the answered items keep
    their samples and a score, marked incomplete, and the job ends cancelled (not finished)."""
    import io
    import json

    from apps.evals import benchmarks as bench_service
    from apps.evals.jobs import execute_eval
    from apps.evals.launch import launch_eval
    from apps.evals.models import EvalResult

    items = "".join(json.dumps({"question": f"What is {a} + 1?", "answer": a + 1}) + "\n" for a in range(30))
    bench_service.upload("arith30", io.BytesIO(items.encode()), "math")
    job = launch_eval(benchmarks=["arith30"], model="base:tiny", max_new_tokens=4, user=researcher,
                      queue="cpu", limit=30, enqueue_job=False)
    worker, outcome = _running(execute_eval, job.pk, lambda: EvalJob.objects.get(pk=job.pk).done, 120)
    response = _api(researcher).post(f"/api/v1/evals/{job.pk}/cancel/")
    assert response.status_code == 200, response.json()
    worker.join(timeout=120)
    job.refresh_from_db()
    assert outcome["line"] == f"eval {job.pk} cancelled"
    assert job.status == "cancelled" and "while running" in job.error
    assert 1 <= job.done < 30  # stopped at an item, far from the end
    result = EvalResult.objects.get(job=job)
    assert result.n == job.done == result.samples.count() and not result.complete
    assert result.score is not None  # the answered items are scored
    again = _api(researcher).post(f"/api/v1/evals/{job.pk}/cancel/")
    assert again.status_code == 409 and "only a queued or running evaluation" in again.json()["error"]


def test_the_page_shows_cancel_for_a_queued_evaluation_only(roles, researcher, reader, client):
    job = queued_eval(researcher)
    client.force_login(reader)
    assert 'id="eval-cancel"' not in client.get(f"/evals/jobs/{job.pk}/").content.decode()
    client.force_login(researcher)
    assert 'id="eval-cancel"' in client.get(f"/evals/jobs/{job.pk}/").content.decode()
    page = client.post(f"/evals/jobs/{job.pk}/cancel/", follow=True).content.decode()
    assert "Evaluation %d cancelled." % job.pk in page and 'id="eval-cancel"' not in page
    job.refresh_from_db()
    assert job.status == "cancelled"


def test_a_running_crossplay_stops_before_its_next_cell_and_keeps_the_cells_it_scored(roles, researcher,
                                                                                     run_env):
    """A real cross-play (three checkpoints of the tiny model, nine cells on the CPU) runs in a worker thread;
    cancelled once it has scored a cell, it stops before the next one: the cells scored so far stay in its matrix
    (row by row of one solver's column at a time), the rest stay empty, and it ends cancelled. The challengers'
    tasks are written in advance (the resume path of apps/evals/jobs.py: an untaught tiny model writes no valid
    task), so every cell is a real solver pass over them."""
    from apps.corpora.models import Corpus, Document
    from apps.evals.jobs import execute_crossplay
    from apps.evals.launch import launch_crossplay
    from apps.evals.models import CrossPlay
    from apps.runs.models import Checkpoint, Run

    corpus = Corpus.objects.create(name="arith-docs", status="ready")
    Document.objects.create(corpus=corpus, title="sums", text="Two plus two is four.", content_hash="h1")
    run = Run.objects.create(method="spice", model_name="tiny", corpus=corpus, owner=researcher, queue="cpu",
                             config={"method": "spice", "rollout": {"max_new_tokens": 16}})
    tiny = str(run_env / "models" / "tiny")
    ckpts = [Checkpoint.objects.create(run=run, step=s, path=tiny) for s in (10, 20, 30)]
    job = launch_crossplay(run, [c.pk for c in ckpts], n_tasks=4, answers_per_task=2, temperature=0.0,
                           max_new_tokens=16, queue="cpu", user=researcher, enqueue_job=False)
    tasks = [{"question": f"What is {a} + {b}?", "answer": str(a + b), "format": "free_form", "answer_type": "integer"}
             for a in range(2) for b in range(2)]
    CrossPlay.objects.filter(pk=job.pk).update(tasks=[{"step": c.step, "tasks": tasks, "attempts": 4} for c in ckpts])
    worker, outcome = _running(execute_crossplay, job.pk, lambda: CrossPlay.objects.get(pk=job.pk).cells_done, 180)
    response = _api(researcher).post(f"/api/v1/evals/crossplay/{job.pk}/cancel/")
    assert response.status_code == 200, response.json()
    at_cancel = CrossPlay.objects.get(pk=job.pk).cells_done
    worker.join(timeout=180)
    assert not worker.is_alive()
    job.refresh_from_db()
    assert outcome["line"] == f"cross-play {job.pk} cancelled", outcome
    assert job.status == "cancelled" and "while running" in job.error
    # it stopped before its next cell: at most the cell in flight when it was cancelled was added, far from nine
    assert 1 <= at_cancel <= job.cells_done <= at_cancel + 1 < 9
    scored = [(i, j) for j in range(3) for i in range(3) if job.matrix[i][j] is not None]
    order = [(i, j) for j in range(3) for i in range(3)]  # column by column: one solver loaded at a time
    assert scored == order[:job.cells_done]  # the cells it scored are kept, every other cell is empty
    assert all(0.0 <= job.matrix[i][j] <= 1.0 for i, j in scored)
    assert [len(t["tasks"]) for t in job.tasks] == [4, 4, 4]
    again = _api(researcher).post(f"/api/v1/evals/crossplay/{job.pk}/cancel/")
    assert again.status_code == 409 and "only a queued or running cross-play" in again.json()["error"]
    assert "nothing to do" in execute_crossplay(job.pk)  # a worker that meets it again does not resume it
