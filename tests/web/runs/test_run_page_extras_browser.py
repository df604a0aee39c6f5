"""The run page's metric tabs and task ledger, the trajectory view and the compare view in a real
browser against the real ASGI server (see test_live_page_browser.py for the server fixture).

SELFPLAY_SCREENSHOTS=DIR keeps a screenshot of each page there (for a person to look at)."""
import os
import threading

import pytest
from django.db import connection

from apps.episodes.models import Attempt, Task
from apps.runs.models import Metric, Run
from apps.runs.sink import DjangoSink
from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]


def _seed(owner, tok, reward_slope):
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=owner, total_steps=20, current_step=5)
    Metric.objects.bulk_create([Metric(run=run, step=s, role=role, name=name, value=v)
                                for s in range(1, 6) for role in ("challenger", "reasoner")
                                for name, v in (("reward_mean", reward_slope * s), ("entropy", 2.0 - 0.1 * s),
                                                ("response_length", 40 + 3 * s))])
    rates = [0.0, 0.25, 0.5, 0.5, 0.75, 1.0, 0.5, 0.25]
    Task.objects.bulk_create([Task(run=run, key=f"{s}:{i}", step=s, role="challenger", pass_rate=rates[(s + i) % 8],
                                   question=f"Question {i} of step {s}: what does passage {s * 10 + i} claim?")
                              for s in range(1, 6) for i in range(4)]
                             + [Task(run=run, key="5:bad", step=5, role="challenger", valid=False, question="???")])
    prompt = tok.encode("Write a question about the passage.", add_special_tokens=False)
    answer = tok.encode("What year was the bridge opened?", add_special_tokens=False)
    Attempt.objects.create(run=run, key="5:0:c", task_key="5:0", role="challenger", step=5, reward=0.8,
                           text="What year was the bridge opened?",
                           turns=[{"role": "assistant", "text": "What year was the bridge opened?"}],
                           passages=[{"document_id": "d1", "chunk_id": "c1", "title": "Bridge", "text": "Opened 1932.",
                                      "score": 0.9}],
                           token_ids=prompt + answer, loss_mask=[0] * len(prompt) + [1] * len(answer))
    return run


def _steps_6_to_8_in_one_flush(run_id):
    try:
        sink = DjangoSink(run_id, flush_seconds=3600)
        for step in (6, 7, 8):  # one websocket message: step 8, with 6 and 7 in "earlier"
            sink.metrics(step, "reasoner", {"entropy": 2.0 - 0.1 * step, "reward_mean": step / 10})
        sink.control()
    finally:
        connection.close()


def _shot(page, name, tmp_path, selector=None):
    folder = os.environ.get("SELFPLAY_SCREENSHOTS") or str(tmp_path)
    os.makedirs(folder, exist_ok=True)
    if selector:
        page.locator(selector).screenshot(path=os.path.join(folder, name))
    else:
        page.screenshot(path=os.path.join(folder, name), full_page=True)


def test_tabs_ledger_trajectory_and_compare_in_a_browser(roles, researcher, server, smollm2_tokenizer,  # noqa: F811
                                                         monkeypatch, tmp_path):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = _seed(researcher, smollm2_tokenizer, 0.1)
    other = _seed(researcher, smollm2_tokenizer, 0.05)
    run.mark_running("w")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, f"/runs/{run.pk}/", {"width": 1280, "height": 900})

        # metric tabs: entropy first, two roles of 5 points; then a live point arrives over the websocket
        traces = "() => (document.getElementById('metric-chart').data || []).map(t => t.x.length)"
        page.wait_for_function(f"() => ({traces})().length === 2", timeout=30_000)
        assert page.evaluate(traces) == [5, 5]
        page.wait_for_function("() => document.getElementById('reward-chart').data?.[0]?.x.length === 5", timeout=30_000)
        reporter = threading.Thread(target=_steps_6_to_8_in_one_flush, args=(run.pk,))
        reporter.start()
        reporter.join()
        page.wait_for_function(f"() => ({traces})().reduce((a, b) => a + b, 0) === 13", timeout=30_000)
        reward_x = "document.getElementById('reward-chart').data.map(t => t.x.join(','))"
        page.wait_for_function(f"() => {reward_x}.includes('1,2,3,4,5,6,7,8')", timeout=30_000)
        page.click("#metric-tabs button:has-text('length')")
        page.wait_for_function("() => document.getElementById('metric-chart').dataset.metric === 'response_length'")
        page.click("#metric-tabs button:has-text('KL')")
        page.wait_for_function("() => document.getElementById('metric-chart').dataset.metric === ''")
        assert "not reported yet" in page.locator("#metric-chart").inner_text()

        # the ledger: 20 graded tasks in the histogram, the dashed line at 50%, 1 invalid of 21
        page.wait_for_function("() => document.getElementById('ledger-histogram').dataset.ready === '1'")
        hist = page.evaluate("(() => { const h = document.getElementById('ledger-histogram');"
                             " return {total: h.data[0].y.reduce((a, b) => a + b, 0), target: h.layout.shapes[0].x0}; })()")
        assert hist == {"total": 20, "target": 0.5}
        assert page.locator("#ledger-invalid").inner_text() == "5%"
        page.click("#metric-tabs button:has-text('entropy')")
        page.wait_for_function("() => document.getElementById('metric-chart').dataset.metric === 'entropy'")
        _shot(page, "run_page.png", tmp_path)
        _shot(page, "run_page_ledger.png", tmp_path, "#task-ledger")
        _shot(page, "run_page_tabs.png", tmp_path, "#metric-tabs-card")

        # the trajectory view, from the samples table
        page.click('#samples tr[data-key="attempt:5:0:c"] a.trajectory-link')
        page.wait_for_url(f"{server}/runs/{run.pk}/attempts/5:0:c/")
        assert page.locator(".turn").count() == 1 and "Bridge" in page.locator("#passages").inner_text()
        assert page.locator(".seg.trained .tok").count() > 0 and page.locator(".seg.masked .tok").count() > 0
        # the server's models dir has no "tiny": tokens show as ids (decoding: test_trajectory.py)
        trained = page.locator(".seg.trained .tok").all_inner_texts()
        assert trained == [f"\u2039{t}\u203a" for t in smollm2_tokenizer.encode("What year was the bridge opened?",
                                                                                   add_special_tokens=False)]
        _shot(page, "trajectory.png", tmp_path)

        # compare: tick both runs in the list, press Compare
        page.goto(f"{server}/runs/")
        page.check(f'input[name="ids"][value="{run.pk}"]')
        page.check(f'input[name="ids"][value="{other.pk}"]')
        page.click("#compare-button")
        page.wait_for_url(f"**/runs/compare/?ids=*")
        assert sorted(page.url.split("ids=")[1].split(",")) == sorted([str(run.pk), str(other.pk)])
        page.wait_for_function("() => document.getElementById('compare-chart').dataset.ready === '1'", timeout=30_000)
        names = page.evaluate("document.getElementById('compare-chart').data.map(t => t.name)")
        assert sorted(names) == sorted(f"run {r.pk} · {role}" for r in (run, other) for role in ("challenger", "reasoner"))
        _shot(page, "compare.png", tmp_path)
        assert not errors, errors
        browser.close()
