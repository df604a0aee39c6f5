"""The run page's curves against step, wall time or training time, with smoothing (issue 32 item 2): the reward
chart and the metric tabs share the compare view's code (static/js/curve_axes.js) and keep updating live on any
axis: a live step's step_seconds / wall_clock extend the page's step -> time map (views.run_time_axis)."""
import threading

import pytest
from django.db import connection

from apps.runs.models import Metric, Run
from apps.runs.sink import DjangoSink
from apps.runs.views import run_time_axis
from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)

# steps of 360 s (0.1 h): training time 360, 720, 1080 s; the run was paused 1800 s before step 3
WALL = [10360.0, 10720.0, 12880.0]


def _run(owner, wall=True) -> Run:
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=owner, total_steps=10)
    run.mark_running("w")
    rows = []
    for step in (1, 2, 3):
        rows += [Metric(run=run, step=step, role="reasoner", name="reward_mean", value=step / 10),
                 Metric(run=run, step=step, role="reasoner", name="entropy", value=1.0 - step / 10),
                 Metric(run=run, step=step, role="reasoner", name="step_seconds", value=360.0)]
        if wall:
            rows.append(Metric(run=run, step=step, role="reasoner", name="wall_clock", value=WALL[step - 1]))
    Metric.objects.bulk_create(rows)
    return run


@pytest.mark.django_db
def test_the_run_page_brings_its_time_axis_and_controls(client, researcher):
    run, bare = _run(researcher), _run(researcher, wall=False)
    assert run_time_axis(run) == {"steps": [1, 2, 3], "train": [360.0, 720.0, 1080.0], "wall": [360.0, 720.0, 2880.0],
                                  "wall_start": 10000.0}
    assert run_time_axis(bare)["wall"] is None and run_time_axis(bare)["wall_start"] is None
    fresh = Run.objects.create(method="spice", model_name="tiny", config={}, owner=researcher, total_steps=10)
    assert run_time_axis(fresh) == {"steps": [], "train": [], "wall": None, "wall_start": None}
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="curve-x"' in html and 'id="curve-smooth"' in html and 'id="run-time-axis"' in html
    assert html.index("js/curve_axes.js") < html.index("js/run_live.js")
    compare = client.get(f"/runs/compare/?ids={run.pk},{bare.pk}").content.decode()
    assert compare.index("js/curve_axes.js") < compare.index("js/runs_compare.js")  # one code for both pages


def _live(run_id, step, wall):
    try:
        sink = DjangoSink(run_id)
        sink.metrics(step, "reasoner", {"reward_mean": step / 10, "entropy": 1.0 - step / 10, "step_seconds": 360.0,
                                        "wall_clock": wall})
        sink.flush()
        assert sink.publish_failures == 0
    finally:
        connection.close()


def _report(run_id, step, wall):  # as a worker does: no event loop in its thread
    t = threading.Thread(target=_live, args=(run_id, step, wall))
    t.start()
    t.join()


SECONDS = ("() => { const c = document.getElementById('{el}'); return (c.data || []).filter(t => t.showlegend !== false)"
           ".map(t => t.x.map(v => Math.round(v * 3600)).join(',')); }")
STEPS = "() => { const c = document.getElementById('{el}'); return (c.data || []).map(t => t.x.join(',')); }"


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make browser installs it)")
def test_the_run_page_curves_switch_axis_smooth_and_stay_live(roles, researcher, server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    run = _run(researcher)
    reward, tab = SECONDS.replace("{el}", "reward-chart"), SECONDS.replace("{el}", "metric-chart")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, f"/runs/{run.pk}/")
        try:
            page.wait_for_function(f"() => ({STEPS.replace('{el}', 'reward-chart')})()[0] === '1,2,3'", timeout=30_000)
            page.wait_for_function("() => document.getElementById('metric-chart').dataset.metric === 'entropy'",
                                   timeout=30_000)

            page.select_option("#curve-x", "train")
            page.wait_for_function("() => document.getElementById('reward-chart').dataset.axis === 'train'")
            assert page.evaluate(reward) == ["360,720,1080"]
            assert page.evaluate("() => document.getElementById('reward-chart').layout.xaxis.title.text").startswith(
                "training time")
            page.wait_for_function("() => document.getElementById('metric-chart').dataset.axis === 'train'")
            assert page.evaluate(tab) == ["360,720,1080"]  # the metric tabs follow the same axis

            page.select_option("#curve-x", "wall")
            page.wait_for_function("() => document.getElementById('reward-chart').dataset.axis === 'wall'")
            assert page.evaluate(reward) == ["360,720,2880"]  # the pause before step 3 shows on the wall clock
            assert "x=wall" in page.url and page.locator("#curve-axis-note").is_hidden()

            _report(run.pk, 4, 13240.0)  # a live step on the wall axis: placed by its own stamp
            page.wait_for_function(f"() => ({reward})()[0] === '360,720,2880,3240'", timeout=30_000)
            page.wait_for_function(f"() => ({tab})()[0] === '360,720,2880,3240'", timeout=30_000)

            # smoothing: a faint raw line under the smoothed one, whose start is not pulled towards 0
            page.fill("#curve-smooth", "0.9")
            page.dispatch_event("#curve-smooth", "input")
            page.wait_for_function("() => document.getElementById('reward-chart').data.length === 2")
            ys = page.evaluate("() => document.getElementById('reward-chart').data.map(t => t.y.map(v => Math.round(v * 1000)))")
            assert ys[0] == [100, 200, 300, 400] and ys[1][0] == 100 and ys[1][-1] < 400  # raw, smoothed
            assert "smooth=0.90" in page.url

            _report(run.pk, 5, 13600.0)  # live while smoothed: the whole chart is drawn again with it
            page.wait_for_function(f"() => ({reward})()[0] === '360,720,2880,3240,3600'", timeout=30_000)

            # back to steps as logged: live points extend the traces again
            page.fill("#curve-smooth", "0")
            page.dispatch_event("#curve-smooth", "input")
            page.select_option("#curve-x", "step")
            page.wait_for_function(f"() => ({STEPS.replace('{el}', 'reward-chart')})().join('|') === '1,2,3,4,5'")
            _report(run.pk, 6, 13960.0)
            page.wait_for_function(f"() => ({STEPS.replace('{el}', 'reward-chart')})()[0] === '1,2,3,4,5,6'",
                                   timeout=30_000)
            page.wait_for_function(f"() => ({STEPS.replace('{el}', 'metric-chart')})()[0] === '1,2,3,4,5,6'",
                                   timeout=30_000)
            assert page.evaluate("() => document.getElementById('reward-chart').layout.xaxis.title.text") == "step"
            assert errors == []
        finally:
            browser.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make browser installs it)")
def test_a_run_without_wall_stamps_is_drawn_on_its_training_time_and_says_so(roles, researcher, server,  # noqa: F811
                                                                            monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = _run(researcher, wall=False)
    reward = SECONDS.replace("{el}", "reward-chart")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, f"/runs/{run.pk}/?x=wall")  # the axis from the address
        try:
            page.wait_for_function("() => document.getElementById('reward-chart').dataset.axis === 'wall'",
                                   timeout=30_000)
            assert page.input_value("#curve-x") == "wall"
            assert page.evaluate(reward) == ["360,720,1080"]
            assert "no wall-clock stamps" in page.inner_text("#curve-axis-note")
            assert errors == []
        finally:
            browser.close()
