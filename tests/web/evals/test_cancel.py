"""A queued evaluation can be cancelled, from its page and through the API (issue 20): its RQ job
then finds nothing to claim on a real worker; a running or ended one is refused with the reason."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.evals.launch import enqueue
from apps.evals.models import EvalJob
from tests.web.runs.conftest import burst

pytestmark = pytest.mark.django_db(transaction=True)


def queued_eval(owner, queue: str = "short") -> EvalJob:
    """A queued evaluation of the base model with its real job on ``queue``."""
    job = EvalJob.objects.create(model_spec="base:smollm2-135m-instruct", label="base", owner=owner, queue=queue,
                                 limit=1)
    enqueue(job, "apps.evals.jobs.execute_eval")
    return job


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_api_cancels_a_queued_evaluation_and_its_job_does_nothing(roles, researcher):
    job = queued_eval(researcher)
    response = _api(researcher).post(f"/api/v1/evals/{job.pk}/cancel/")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "cancelled"
    burst("short")  # a worker that still finds the job claims nothing
    job.refresh_from_db()
    assert job.status == "cancelled" and job.started_at is None
    assert job.error == "cancelled by rita before it started"
    again = _api(researcher).post(f"/api/v1/evals/{job.pk}/cancel/")
    assert again.status_code == 409
    assert "it is cancelled; only a queued evaluation can be cancelled" in again.json()["error"]


def test_only_its_launcher_or_an_admin_may_cancel(roles, researcher, reader, admin_user):
    job = queued_eval(researcher)
    refused = _api(reader).post(f"/api/v1/evals/{job.pk}/cancel/")
    assert refused.status_code == 403 and "researcher role" in refused.json()["error"]
    job.refresh_from_db()
    assert job.status == "queued"
    assert _api(admin_user).post(f"/api/v1/evals/{job.pk}/cancel/").status_code == 200


def test_a_running_evaluation_is_not_cancelled(roles, researcher):
    job = queued_eval(researcher)
    assert job.claim("worker-1")
    response = _api(researcher).post(f"/api/v1/evals/{job.pk}/cancel/")
    assert response.status_code == 409
    assert "it is running and finishes on its own" in response.json()["error"]


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
