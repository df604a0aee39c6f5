"""The run page in a real browser against the real ASGI server (manage.py serve, daphne):
the chart draws the stored series, then websocket messages from a DjangoSink add points and
sample rows without a reload, model text stays text, and the Pause button works through htmx."""
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from django.conf import settings
from django.db import connection

from apps.runs.models import Metric, Run
from apps.runs.sink import DjangoSink
from tests.fault.conftest import wait_for_other_sessions_to_close

CHROMIUM = shutil.which("chromium")
pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]


def _database_url() -> str:
    """The server's DATABASE_URL with the test database's name (the test process is connected to it)."""
    from urllib.parse import urlsplit, urlunsplit

    from selfplay_web import config

    parts = urlsplit(config.database_url())
    return urlunsplit(parts._replace(path="/" + settings.DATABASES["default"]["NAME"]))


@pytest.fixture
def server(private_redis):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": _database_url(), "REDIS_URL": private_redis}
    proc = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=settings.BASE_DIR)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(url + "/accounts/login/", timeout=2)
                break
            except OSError:
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        wait_for_other_sessions_to_close()


def _report(run_id):
    try:
        sink = DjangoSink(run_id)
        sink.metrics(4, "reasoner", {"reward_mean": 0.9})
        sink.samples(4, [{"kind": "attempt", "key": "4:0", "role": "reasoner", "step": 4,
                          "text": "<b>bold?</b>", "reward": 1.0}])
        sink.control()
        assert sink.publish_failures == 0
    finally:
        connection.close()


CHART_X = "() => { const c = document.getElementById('reward-chart'); return c.data && c.data[0] ? c.data[0].x : []; }"


def running_run(researcher) -> Run:
    """A running SPICE run of ``researcher`` with reward_mean stored for steps 1-3."""
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=researcher, total_steps=10)
    run.mark_running("w")
    Metric.objects.bulk_create([Metric(run=run, step=s, role="reasoner", name="reward_mean", value=s / 10)
                                for s in (1, 2, 3)])
    return run


def logged_in_page(p, server: str, next_path: str, viewport: dict | None = None):
    """(browser, page, page errors): chromium logged in as the researcher rita, landed on ``next_path``."""
    browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
    page = browser.new_page(viewport=viewport) if viewport else browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/accounts/login/?next={next_path}")
    page.fill("#id_username", "rita")
    page.fill("#id_password", "pw-rita")
    page.click("button[type=submit]")
    page.wait_for_url(f"{server}{next_path}")
    return browser, page, errors


def open_run_page(p, server: str, run: Run):
    """``logged_in_page`` on the run's page, with its stored points drawn."""
    browser, page, errors = logged_in_page(p, server, f"/runs/{run.pk}/")
    page.wait_for_function(f"() => ({CHART_X})().length === 3", timeout=30_000)  # the page's own points
    return browser, page, errors


def test_the_run_page_updates_live(roles, researcher, server, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    run = running_run(researcher)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = open_run_page(p, server, run)
        chart_x = CHART_X
        # (a report before the socket is open still arrives: its catch-up reads from the newest step drawn)

        reporter = threading.Thread(target=_report, args=(run.pk,))  # as a worker does: no event loop there
        reporter.start()
        reporter.join()
        page.wait_for_function(f"() => ({chart_x})().includes(4)", timeout=30_000)
        row = page.locator('#samples tr[data-key="attempt:4:0"]')
        row.wait_for(timeout=30_000)
        assert "<b>bold?</b>" in row.inner_text() and row.locator("b").count() == 0
        assert page.locator("#run-step").inner_text() == "4"

        moved = threading.Thread(target=_set_worker, args=(run.pk, "host-9:42"))  # the page still shows the old one
        moved.start()
        moved.join()
        page.click("text=Pause")
        page.wait_for_selector("#run-requested", timeout=30_000)
        assert "pause requested" in page.locator("#run-controls").inner_text()
        # the answer's out-of-band facts reached the page header too (htmx swapped them by id)
        assert page.locator("#run-who").inner_text().endswith("· host-9:42")
        assert not errors, errors
        browser.close()
    assert Run.objects.get(pk=run.pk).requested == "pause"  # outside playwright's loop (its own connection)


def _set_worker(run_id, worker):
    """A claim by another worker, on a connection closed after it (an ORM call inside playwright's event loop opens
    one that nothing closes)."""
    try:
        Run.objects.filter(pk=run_id).update(worker_name=worker)
    finally:
        connection.close()


def _resume_elsewhere(run_id):
    """As a new worker's claim does after a resume: the run runs again, its old failure cleared (mark_running)."""
    try:
        run = Run.objects.get(pk=run_id)
        Run.objects.filter(pk=run_id).update(status="queued")
        run.status = "queued"
        assert run.mark_running("host-2:7")
    finally:
        connection.close()


def test_a_resumed_run_no_longer_shows_its_old_failure(roles, researcher, server, monkeypatch):
    """The page of a run failed by the reaper, then resumed from it, drops the red failure line when the
    run runs again: the live status message carries the cleared error (it kept saying "worker stopped
    responding ... resume to continue" above a running run until a reload)."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = running_run(researcher)
    Run.objects.filter(pk=run.pk).update(status="failed", resumable=True,
                                         error="worker stopped responding (no heartbeat for 103s)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = open_run_page(p, server, run)
        assert page.locator("#run-error").is_visible() and "stopped responding" in page.inner_text("#run-error")
        page.wait_for_function("() => document.getElementById('run-status').dataset.status === 'failed'")
        worker = threading.Thread(target=_resume_elsewhere, args=(run.pk,))
        worker.start()
        worker.join()
        page.wait_for_function("() => document.getElementById('run-status').dataset.status === 'running'",
                               timeout=30_000)
        page.wait_for_function("() => document.getElementById('run-error').hidden", timeout=30_000)
        assert not errors, errors
        browser.close()
