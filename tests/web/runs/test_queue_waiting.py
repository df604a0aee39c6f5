"""Queues that say what they wait for (issue 20, item 2): a queued run, evaluation or ingestion tells
its place in line and what holds the queue's workers, or that no live worker serves its queue; a
launch onto a queue no live worker serves is warned about (API and form); short jobs have their own
queue, so they never wait behind a training run.

Transactional: the real RQ worker runs in a thread with its own database connection.
"""
import threading
import time

import django_rq
import pytest
from django.db import connection
from rest_framework.test import APIClient

from apps.jobs.waiting import ordinal, wait_reason
from apps.runs.models import Run
from apps.runs.services.launch import launch
from tests.web.runs.conftest import burst

pytestmark = pytest.mark.django_db(transaction=True)


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_ordinals():
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"]


def test_a_launch_onto_a_queue_no_worker_serves_is_warned_and_the_run_says_so(roles, researcher, tiny_grpo):
    model, config = tiny_grpo
    config["train"] = {**config["train"], "device": "auto"}  # the defaults: on a GPU-less machine, queued on gpu
    response = _api(researcher).post("/api/v1/runs/", {"method": "grpo", "model": model, "config": config},
                                     format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["queue"] == "gpu"
    assert body["warnings"] == ["no live worker serves the gpu queue, so this waits until one starts: start one with "
                                "`python manage.py rqworker gpu` on a GPU machine (or launch on the CPU: "
                                "train.device=cpu, queue cpu)"]
    assert body["waiting_for"].startswith("no live worker serves gpu: start one with `python manage.py rqworker gpu`")
    detail = _api(researcher).get(f"/api/v1/runs/{body['id']}/").json()
    assert detail["waiting_for"] == body["waiting_for"]


def test_a_queued_run_tells_its_place_behind_the_run_that_holds_the_only_worker(roles, researcher, tiny_grpo):
    model, config = tiny_grpo
    config["train"] = {**config["train"], "steps": 3}
    first, second, third = (launch("grpo", model, None, config=config, user=researcher) for _ in range(3))
    seen: dict[int, str] = {}

    def watch():
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and len(seen) < 2:
                if Run.objects.get(pk=first.pk).status == "running":
                    for run in (second, third):
                        reason = wait_reason(Run.objects.get(pk=run.pk).job_id, "cpu")
                        if "behind" in reason:
                            seen.setdefault(run.pk, reason)
                time.sleep(0.05)
        finally:
            connection.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    burst("cpu")  # one real worker: run 1, then 2, then 3
    watcher.join()
    assert seen[second.pk] == f"1st in line on cpu, behind run {first.pk} on the only cpu worker"
    assert seen[third.pk] == f"2nd in line on cpu, behind run {first.pk} on the only cpu worker"
    ended = [Run.objects.get(pk=r.pk) for r in (first, second, third)]
    assert [r.status for r in ended] == ["finished"] * 3, [r.error for r in ended]


def test_the_next_job_of_a_free_worker_and_a_lost_job_are_told(roles, researcher, tiny_grpo):
    from apps.runs.workers import SelfplayWorker

    model, config = tiny_grpo
    run = launch("grpo", model, None, config=config, user=researcher)
    worker = SelfplayWorker([django_rq.get_queue("cpu")], connection=django_rq.get_connection("default"))
    worker.register_birth()
    try:
        assert wait_reason(run.job_id) == "next on cpu: a free worker takes it in a moment"
        django_rq.get_queue("cpu").remove(run.job_id)
        assert wait_reason(run.job_id, "cpu") == ("its job is not on the cpu queue any more (Redis lost it?): "
                                                  "cancel it and launch it again")
    finally:
        worker.register_death()
    assert wait_reason("") == ""


def test_a_queued_evaluation_and_a_queued_ingestion_say_what_they_wait_for(roles, researcher, admin_user, client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from apps.corpora.models import Corpus
    from tests.web.evals.test_cancel import queued_eval

    job = queued_eval(researcher, queue="evals")
    expected = "no live worker serves evals: start one with `python manage.py rqworker evals`"
    client.force_login(researcher)
    assert expected in client.get(f"/evals/jobs/{job.pk}/").content.decode()
    assert _api(researcher).get(f"/api/v1/evals/{job.pk}/").json()["waiting_for"] == expected

    corpus = Corpus.objects.create(name="waiting")
    upload = _api(admin_user).post(f"/api/v1/corpora/{corpus.pk}/documents/",
                                   {"file": SimpleUploadedFile("owls.txt", b"Owls hunt at night.\n")},
                                   format="multipart")
    assert upload.status_code == 202, upload.content
    # the upload waits for no evaluation: it has the short queue to itself
    assert django_rq.get_queue("short").count == 1 and django_rq.get_queue("evals").count == 1
    assert django_rq.get_queue("cpu").count == 0
    expected = "no live worker serves short: start one with `python manage.py rqworker short`"
    assert _api(admin_user).get(f"/api/v1/corpora/{corpus.pk}/").json()["progress"]["waiting_for"] == expected
    client.force_login(admin_user)
    page = client.get(f"/corpora/{corpus.pk}/").content.decode()
    assert 'id="corpus-waiting-for"' in page and expected in page
