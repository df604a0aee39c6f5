"""The run page shows every player: SPICE's Reasoner curve (it logs `accuracy`, no reward) next to
the Challenger's reward, an empty chart that says what it waits for instead of drawing axes -1..6,
the phase of a running step, the Latest metrics collapsed by role, and the checkpoint field kept
live, in a real browser against the real ASGI server.

SELFPLAY_SCREENSHOTS=DIR keeps the screenshots there (for a person to look at)."""
import threading

import pytest
from django.db import connection

from apps.runs.models import Metric, Run
from apps.runs.sink import DjangoSink
from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)
from tests.web.runs.test_run_page_extras_browser import _shot

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]

TRACES = "() => (document.getElementById('reward-chart').data || []).map(t => t.name + ':' + t.x.length)"


def _in_a_worker(work):
    """Run ``work()`` as a worker does: another thread, its own database connection, no event loop."""
    def target():
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()


def test_the_reasoner_curve_is_drawn_next_to_the_challenger(roles, researcher, server, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=researcher, total_steps=20)
    run.mark_running("w")
    Metric.objects.bulk_create(
        [Metric(run=run, step=s, role="challenger", name=n, value=v) for s in (1, 2, 3)
         for n, v in (("reward_mean", 0.1 * s), ("valid_rate", 0.9), ("entropy", 1.0))]
        + [Metric(run=run, step=s, role="reasoner", name=n, value=v) for s in (1, 2, 3)
           for n, v in (("accuracy", 0.2 * s), ("boxed_rate", 1.0), ("entropy", 1.1))]
        + [Metric(run=run, step=s, role="system", name="rollout_seconds", value=3.0) for s in (1, 2, 3)])
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, f"/runs/{run.pk}/", {"width": 1280, "height": 900})
        page.wait_for_function(f"() => ({TRACES})().length === 2", timeout=30_000)
        assert sorted(page.evaluate(TRACES)) == ["challenger · reward_mean:3", "reasoner · accuracy:3"]
        assert page.locator("#reward-waiting").is_hidden()
        # whole steps on the x axis, one tick each while there are few
        assert page.evaluate("document.getElementById('reward-chart').layout.xaxis.dtick") == 1

        # the Reasoner's next step arrives live and extends its own curve
        sink = DjangoSink(run.pk)
        _in_a_worker(lambda: (sink.metrics(4, "reasoner", {"accuracy": 0.9, "boxed_rate": 1.0}), sink.flush()))
        page.wait_for_function(f"() => ({TRACES})().includes('reasoner · accuracy:4')", timeout=30_000)

        # Latest metrics: one collapsed block per role, headed by its curve's value
        blocks = page.locator("#metric-table details.metric-role")
        assert blocks.count() == 3
        reasoner = page.locator('#metric-table details[data-role="reasoner"]')
        assert not reasoner.evaluate("d => d.open")
        summary = reasoner.locator("summary").inner_text()
        assert "3 metrics" in summary and "accuracy" in summary and "0.9" in summary and "step 4" in summary
        _shot(page, "run-both-players.png", tmp_path)
        assert not errors, errors
        browser.close()


def test_an_empty_chart_says_what_it_waits_for_and_the_step_shows_its_phase(roles, researcher, server,  # noqa: F811
                                                                            monkeypatch, tmp_path):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    earlier = Run.objects.create(method="grpo", model_name="smollm2", config={}, owner=researcher, queue="cpu",
                                 total_steps=5, status="finished")
    Metric.objects.bulk_create([Metric(run=earlier, step=s, role="system", name="step_seconds", value=240.0 + s)
                                for s in range(1, 6)])
    run = Run.objects.create(method="grpo", model_name="smollm2", config={}, owner=researcher, queue="cpu",
                             total_steps=50)
    run.mark_running("w")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, f"/runs/{run.pk}/", {"width": 1280, "height": 900})
        page.wait_for_function("() => document.getElementById('reward-chart').layout !== undefined", timeout=30_000)
        waiting = page.locator("#reward-waiting")
        assert waiting.is_visible()
        assert waiting.inner_text() == f"waiting for step 1 (a step takes about 4 min here, from run {earlier.pk})"
        layout = page.evaluate("(() => { const l = document.getElementById('reward-chart').layout;"
                               " return [l.xaxis.visible, l.yaxis.visible]; })()")
        assert layout == [False, False]  # no empty axes from -1 to 6
        assert page.locator("#run-progress").is_hidden()
        assert page.locator("#run-checkpoint").inner_text() == "—"

        sink = DjangoSink(run.pk)
        _in_a_worker(lambda: sink.progress(1, "rollout"))
        page.wait_for_function("() => document.getElementById('run-progress').textContent.includes('rollout')", timeout=30_000)
        assert page.locator("#run-progress").inner_text().startswith("step 1 of 50: rollout")
        _shot(page, "run-waiting-rollout.png", tmp_path, "#reward-card")
        _in_a_worker(lambda: sink.progress(1, "update"))
        page.wait_for_function("() => document.getElementById('run-progress').textContent.includes('update')", timeout=30_000)

        _in_a_worker(lambda: sink.checkpoint(1, "/runs/7/checkpoints/step-1"))
        # a researcher's page shows the checkpoint folder's name; its whole path is an admin's (tests/web/test_server_paths.py)
        page.wait_for_function("() => document.getElementById('run-checkpoint').textContent === 'step-1'", timeout=30_000)
        _in_a_worker(lambda: (sink.metrics(1, "policy", {"reward_mean": 0.25}), sink.flush()))
        page.wait_for_function(f"() => ({TRACES})().includes('policy · reward_mean:1')", timeout=30_000)
        assert waiting.is_hidden()
        assert page.evaluate("document.getElementById('reward-chart').layout.xaxis.visible") is True

        # a page opened mid-step shows the phase it missed (kept in Redis)
        page.reload()
        page.wait_for_function("() => !document.getElementById('run-progress').hidden", timeout=30_000)
        assert "update" in page.locator("#run-progress").inner_text()
        assert not errors, errors
        browser.close()
