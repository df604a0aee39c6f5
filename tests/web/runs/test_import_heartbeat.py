"""An imported run never ran on this site: its page shows no heartbeat (the metrics sink used to stamp the import's
own time, so a finished GPU run read "Started — · 2 minutes ago" as if a worker had just spoken for it)."""
from __future__ import annotations

import io

import pytest
from django.conf import settings
from django.core.management import call_command

from apps.runs.models import Run

FOLDER = settings.BASE_DIR / "examples" / "runs" / "trl-grpo-gsm8k-qwen05-lr1e-6"


@pytest.mark.skipif(not FOLDER.is_dir(), reason="the shipped example run folder is missing")
def test_an_imported_run_has_no_heartbeat_on_its_page(db, client, researcher):
    call_command("import_run", str(FOLDER), stdout=io.StringIO())
    run = Run.objects.get()
    assert run.metrics.exists() and run.heartbeat_at is None
    client.force_login(researcher)
    when = client.get(f"/runs/{run.pk}/").content.decode().split('id="run-when"', 1)[1].split("</dd>", 1)[0]
    assert "ago" not in when and 'id="run-heartbeat-age"' not in when
    call_command("import_run", str(FOLDER), stdout=io.StringIO())  # importing again in place: still none
    run.refresh_from_db()
    assert run.heartbeat_at is None
