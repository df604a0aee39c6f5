"""Evals pages in a real browser against the real ASGI server (manage.py serve): the compare chart
and the cross-play heatmap draw with plotly, and the run page's panel launches an evaluation
through htmx onto the real queue."""
from __future__ import annotations

import os

import pytest

from apps.evals.models import Benchmark, CrossPlay, EvalJob, EvalResult
from apps.runs.models import Checkpoint, Run
from tests.web.runs.test_live_page_browser import CHROMIUM, server  # noqa: F401  (fixture: the real server)

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]


def _shot(page, name: str) -> None:
    """SELFPLAY_SCREENSHOTS=<dir>: keep full-page screenshots for a look."""
    folder = os.environ.get("SELFPLAY_SCREENSHOTS")
    if folder:
        page.screenshot(path=os.path.join(folder, f"evals-{name}.png"), full_page=True)


def _session_cookie(user, server: str) -> dict:
    """The session cookie of ``user``, made by the test client in the shared test database."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return {"name": settings.SESSION_COOKIE_NAME, "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
            "url": server}


def _finished(spec, bench, score, run=None, step=None):
    job = EvalJob.objects.create(model_spec=spec, run=run, step=step, status="finished")
    EvalResult.objects.create(job=job, benchmark=bench, scoring="math", n=50, correct=int(50 * score), score=score,
                              ci_low=score - 0.05, ci_high=score + 0.05, complete=True)


def test_compare_chart_heatmap_and_run_panel(roles, researcher, server, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    bench = Benchmark.objects.create(name="gsm8k", title="GSM8K", kind="builtin", scoring="math", size=1319)
    run = Run.objects.create(method="spice", model_name="smollm2-135m-instruct", config={}, owner=researcher,
                             queue="cpu", status="finished")
    folder = tmp_path / "step-000010"
    folder.mkdir()
    ckpt = Checkpoint.objects.create(run=run, step=10, path=str(folder))
    _finished("base:smollm2-135m-instruct", bench, 0.2)
    _finished("/a", bench, 0.3, run, 10)
    _finished("/b", bench, 0.35, run, 20)
    cross = CrossPlay.objects.create(run=run, status="finished", cells_done=4, matrix=[[0.5, 0.75], [0.25, 0.5]],
                                     checkpoints=[{"id": 1, "step": 10, "path": "/a"}, {"id": 2, "step": 20,
                                                                                        "path": "/b"}])
    from playwright.sync_api import sync_playwright

    # Made before playwright starts its event loop on this thread: inside it Django's connection is
    # another one (asgiref's Local is per context), which nothing closes (it kept the test database open).
    cookie = _session_cookie(researcher, server)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context()
        context.add_cookies([cookie])  # logged in without hashing a password there
        page = context.new_page()
        page.set_default_timeout(90_000)  # a loaded 2-core machine answers slowly
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{server}/evals/")
        assert page.url == f"{server}/evals/"

        page.goto(f"{server}/evals/compare/?run={run.pk}&benchmark=gsm8k")
        page.wait_for_function("() => { const c = document.getElementById('compare-chart');"
                               " return c.data && c.data.length === 1 && c.data[0].x.length === 3; }", timeout=90_000)
        assert page.evaluate("document.getElementById('compare-chart').data[0].x") == [0, 10, 20]
        assert page.locator("#compare-table tbody tr").count() == 3
        _shot(page, "compare")

        page.goto(f"{server}/evals/crossplay/{cross.pk}/")
        page.wait_for_function("() => { const c = document.getElementById('crossplay-heatmap');"
                               " return c.data && c.data[0].type === 'heatmap'; }", timeout=90_000)
        assert page.evaluate("document.getElementById('crossplay-heatmap').data[0].z") == [[0.5, 0.75], [0.25, 0.5]]
        _shot(page, "crossplay")

        page.goto(f"{server}/runs/{run.pk}/")
        page.wait_for_selector("#eval-estimate .eval-estimate")  # the estimate line loads into its own place
        assert "10 items" in page.inner_text("#eval-estimate") and page.input_value("#eval-limit") == "10"
        page.select_option("#eval-target", f"ckpt:{ckpt.pk}")
        page.select_option("#eval-benchmarks", ["gsm8k"])
        page.fill("#eval-limit", "5")
        page.click("#eval-launch button[type=submit]")
        page.wait_for_selector("#eval-notice", timeout=90_000)
        assert "queued on the CPU (queue evals" in page.locator("#eval-notice").inner_text()
        assert page.locator("#run-evals tbody tr").count() == 3  # the two finished ones and the new one
        page.locator("#evals-panel").screenshot(path=os.path.join(os.environ["SELFPLAY_SCREENSHOTS"],
                                                                  "evals-run-panel.png")) \
            if os.environ.get("SELFPLAY_SCREENSHOTS") else None
        page.goto(f"{server}/evals/")
        _shot(page, "index")
        assert not errors, errors
        browser.close()
    job = EvalJob.objects.get(checkpoint=ckpt)
    assert (job.limit, job.status, job.owner_id) == (5, "queued", researcher.pk)


def test_a_running_evaluation_is_cancelled_from_its_page(roles, researcher, server, data_dir, tiny_model_dir,  # noqa: F811
                                                         run_env, monkeypatch):
    """A real evaluation computes in a worker thread of this process; the researcher presses Cancel on its
    page (the real server records it); the job stops before its next item, and the page then shows the
    score of the items it answered."""
    import io
    import json
    import threading
    import time

    from django.db import connection

    from apps.evals import benchmarks as bench_service
    from apps.evals.jobs import execute_eval
    from apps.evals.launch import launch_eval

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    items = "".join(json.dumps({"question": f"What is {a} + 1?", "answer": a + 1}) + "\n" for a in range(1000))
    bench_service.upload("arith1000", io.BytesIO(items.encode()), "math")
    job = launch_eval(benchmarks=["arith1000"], model="base:tiny", max_new_tokens=8, user=researcher, queue="cpu",
                      limit=1000, enqueue_job=False)
    outcome = {}

    def work():
        try:
            outcome["line"] = execute_eval(job.pk)
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    deadline = time.monotonic() + 120
    while EvalJob.objects.get(pk=job.pk).done < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    cookie = _session_cookie(researcher, server)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        context = browser.new_context()
        context.add_cookies([cookie])
        page = context.new_page()
        page.goto(f"{server}/evals/jobs/{job.pk}/")
        assert page.inner_text("#eval-status .badge") == "running"
        with page.expect_navigation():
            page.click("#eval-cancel")
        assert f"Evaluation {job.pk} cancelled. It stops before its next item" in page.inner_text(".messages")
        assert page.inner_text("#eval-status .badge") == "cancelled"
        worker.join(timeout=120)
        api = page.request.get(f"{server}/api/v1/evals/{job.pk}/").json()
        assert api["status"] == "cancelled" and 1 <= api["done"] < 1000
        [result] = api["results"]
        assert result["n"] == api["done"] and result["score"] is not None
        page.reload()
        assert f"of the {api['done']} answered before the cancel" in page.inner_text("#eval-results")
        _shot(page, "cancelled")
        browser.close()
    assert outcome["line"] == f"eval {job.pk} cancelled"
