"""A run page that stays connected but misses a live message notices and refetches the gap.

Real browser, real ``manage.py serve`` (fixtures of test_live_page_browser.py). Every message
``publish()`` sends carries the run's counter ``seq``; here one message is lost the way the channel
layer loses one (counted, never delivered: its step is stored in Postgres, as the sink does, and the
counter moves on). The next message arrives with a number skipped: the page refetches from the
metrics API and draws the lost step too. Without the check the chart would jump from 4 to 6.
"""
import threading

import pytest
from django.db import connection

from apps.runs.live import next_seq
from apps.runs.models import Metric
from apps.runs.sink import DjangoSink
from tests.web.runs.test_live_page_browser import CHART_X, CHROMIUM, open_run_page, running_run, server  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]


def _report(run_id: int, step: int) -> None:
    try:
        sink = DjangoSink(run_id)
        sink.metrics(step, "reasoner", {"reward_mean": step / 10})
        sink.control()
        assert sink.publish_failures == 0
    finally:
        connection.close()


def _in_thread(target, *args):  # as a worker does: no event loop there (playwright runs one here)
    thread = threading.Thread(target=target, args=args)
    thread.start()
    thread.join()


def _lose_a_message(run_id: int, step: int) -> None:
    """What a dropped message leaves behind: the step stored, the counter moved on, nothing delivered."""
    try:
        Metric.objects.create(run_id=run_id, step=step, role="reasoner", name="reward_mean", value=step / 10)
        next_seq(run_id)
    finally:
        connection.close()


def test_a_connected_page_refetches_a_lost_message(roles, researcher, server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    run = running_run(researcher)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = open_run_page(p, server, run)
        metric_requests = []
        page.on("request", lambda r: metric_requests.append(r.url) if "/metrics/" in r.url else None)
        chart_x = CHART_X

        _in_thread(_report, run.pk, 4)  # delivered in order
        page.wait_for_function(f"() => ({chart_x})().includes(4)", timeout=30_000)
        page.wait_for_timeout(500)  # the connect catch-up has finished
        before = len(metric_requests)

        _in_thread(_lose_a_message, run.pk, 5)
        _in_thread(_report, run.pk, 6)  # arrives with a number skipped
        page.wait_for_function(f"() => ({chart_x})().includes(6)", timeout=30_000)
        page.wait_for_function(f"() => ({chart_x})().includes(5)", timeout=30_000)
        assert list(page.evaluate(chart_x)) == [1, 2, 3, 4, 5, 6]
        assert len(metric_requests) > before, "the gap was not refetched from the metrics API"
        assert not errors, errors
        browser.close()
