"""A run's "Started" keeps its first start across resumes (Run.first_started_at; issue 32 item 5), the run page
shows the latest start beside it, and the "Started · heartbeat" line polls itself while the run is active so the
heartbeat's age stays current (red once the worker is silent past RUN_HEARTBEAT_SECONDS)."""
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.runs.models import Run, Status

pytestmark = pytest.mark.django_db


def test_a_resume_keeps_the_first_start(client, researcher):
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, owner=researcher, total_steps=10)
    assert run.mark_running("w1")
    first = run.first_started_at
    assert first is not None and first == run.started_at
    Run.objects.filter(pk=run.pk).update(first_started_at=first - timedelta(hours=2),
                                         started_at=first - timedelta(hours=2))  # as if started two hours ago
    run.refresh_from_db()
    run.transition(Status.PAUSED)
    run.transition(Status.QUEUED)
    assert run.mark_running("w2")
    run.refresh_from_db()
    assert run.first_started_at == first - timedelta(hours=2) and run.started_at > run.first_started_at
    client.force_login(researcher)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    when = page.split('id="run-when"', 1)[1].split("</dd>", 1)[0]
    assert f'title="first started {run.first_started_at.isoformat()}' in when and 'id="run-resumed"' in when
    assert f'hx-get="/runs/{run.pk}/when/"' in when  # active: polls itself
    api = client.get(f"/api/v1/runs/{run.pk}/").json()
    assert api["first_started_at"] and api["first_started_at"] != api["started_at"]


def test_the_polled_line_shows_a_silent_worker_in_red_and_an_ended_run_stops_polling(client, researcher, settings):
    settings.RUN_HEARTBEAT_SECONDS = 30
    now = timezone.now()
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, owner=researcher, status="running",
                             started_at=now - timedelta(hours=1), first_started_at=now - timedelta(hours=1),
                             heartbeat_at=now - timedelta(minutes=3))
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/when/").content.decode()
    assert 'class="error" id="run-heartbeat-age">3\xa0minutes ago<' in html and 'id="run-resumed"' not in html
    Run.objects.filter(pk=run.pk).update(heartbeat_at=now, status="finished")
    html = client.get(f"/runs/{run.pk}/when/").content.decode()
    assert 'class="error"' not in html and "hx-get" not in html
