"""Who may pause / resume / cancel, and the heartbeat reaper."""
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from apps.runs.models import Run, Status
from apps.runs.services.lifecycle import reap_stale_runs

pytestmark = pytest.mark.django_db


def _client(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def _running(owner, **fields):
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, owner=owner, total_steps=10, **fields)
    run.mark_running("w")
    return run


def test_the_owner_pauses_and_an_admin_cancels(researcher, admin_user):
    run = _running(researcher)
    response = _client(researcher).post(f"/api/v1/runs/{run.pk}/pause/")
    assert response.status_code == 200 and response.json()["requested"] == "pause"
    response = _client(admin_user).post(f"/api/v1/runs/{run.pk}/cancel/")
    assert response.status_code == 200 and response.json()["requested"] == "cancel"


def test_a_researcher_cannot_cancel_another_researchers_run(researcher, django_user_model):
    from django.contrib.auth.models import Group

    other = django_user_model.objects.create_user("otto", password="x")
    other.groups.add(Group.objects.get(name="researcher"))
    run = _running(other)
    response = _client(researcher).post(f"/api/v1/runs/{run.pk}/cancel/")
    assert response.status_code == 403 and "owner" in response.json()["error"]
    run.refresh_from_db()
    assert run.requested == "" and run.status == "running"


def test_a_reviewer_cannot_control_even_on_the_page(reviewer, client):
    run = _running(reviewer)
    client.force_login(reviewer)
    assert client.post(f"/runs/{run.pk}/pause/").status_code == 403


def test_an_illegal_action_is_a_409_with_the_reason(researcher):
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, owner=researcher)
    response = _client(researcher).post(f"/api/v1/runs/{run.pk}/pause/")
    assert response.status_code == 409
    assert "only a running run can be paused" in response.json()["error"]


def test_the_page_buttons_answer_htmx_with_the_new_controls(researcher, client):
    run = _running(researcher)
    client.force_login(researcher)
    response = client.post(f"/runs/{run.pk}/pause/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="run-status"' in html and "pause requested" in html and ">Pause<" not in html
    again = client.post(f"/runs/{run.pk}/pause/", HTTP_HX_REQUEST="true").content.decode()
    assert "already has a pause request pending" in again


def test_the_refreshed_controls_carry_the_worker_and_start_time_out_of_band(researcher, client):
    """The page refreshes its controls after each status message; the header's worker and start time came with the
    page only, so a run watched from "queued" kept "—" for both until a reload."""
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, owner=researcher, total_steps=10)
    client.force_login(researcher)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert '<span id="run-who">' in page and "hx-swap-oob" not in page.split('id="run-who"')[1][:40]
    assert f"{researcher.username} · gpu · —" in page
    run.mark_running("host-7:123")
    html = client.get(f"/runs/{run.pk}/controls/").content.decode()
    who = html.split('<span id="run-who" hx-swap-oob="true">')[1].split("</span>")[0]
    assert who == f"{researcher.username} · gpu · host-7:123"
    when = html.split('<span id="run-when" hx-swap-oob="true">')[1].split("</span>")[0]
    assert not when.startswith("—")  # started now
    paused = client.post(f"/runs/{run.pk}/pause/", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="run-who" hx-swap-oob="true"' in paused


def test_the_reaper_fails_silent_runs_resumably(researcher, settings):
    settings.RUN_HEARTBEAT_SECONDS = 30
    silent = _running(researcher)
    Run.objects.filter(pk=silent.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=31))
    alive = _running(researcher)
    assert reap_stale_runs() == [silent.pk]
    silent.refresh_from_db()
    assert silent.status == "failed" and silent.resumable
    assert silent.error.startswith("worker stopped responding")
    assert silent.events.filter(data__to="failed").exists()
    assert Run.objects.get(pk=alive.pk).status == "running"


def test_reading_the_runs_list_or_api_reaps(researcher, client, settings):
    settings.RUN_HEARTBEAT_SECONDS = 5
    run = _running(researcher)
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=1))
    assert _client(researcher).get(f"/api/v1/runs/{run.pk}/").json()["status"] == "failed"
    other = _running(researcher)
    Run.objects.filter(pk=other.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=1))
    client.force_login(researcher)
    assert client.get("/runs/").status_code == 200
    assert Run.objects.get(pk=other.pk).status == Status.FAILED


def test_reap_runs_command(researcher, capsys):
    run = _running(researcher)
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(days=1))
    call_command("reap_runs")
    assert f"reaped 1 run(s): {run.pk}" in capsys.readouterr().out


def test_the_periodic_reaper_job_reaps_and_reschedules(researcher):
    import django_rq

    from apps.jobs.reaper import REAPER_KEY, reap_job

    stale = _running(researcher)
    Run.objects.filter(pk=stale.pk).update(heartbeat_at=timezone.now() - timedelta(days=1))
    _running(researcher)  # still active: the job schedules its next pass
    assert reap_job()["runs"] == [stale.pk]
    assert django_rq.get_connection("default").get(REAPER_KEY) is not None
    assert django_rq.get_queue("default").scheduled_job_registry.count == 1
