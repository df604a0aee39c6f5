"""The compare view's x-axis switch, smoothing and seed bands in a real browser against the real ASGI server
(issue 32 item 2; see test_live_page_browser.py for the server fixture)."""
import pytest

from apps.runs.models import Metric, Run
from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make browser installs it)")]

CONFIG = {"seed": 0, "method": "grpo", "train": {"lr": 1e-6}}


def _run(owner, seed, seconds, wall=None):
    run = Run.objects.create(method="grpo", model_name="tiny", config={**CONFIG, "seed": seed}, owner=owner,
                             name=f"tta-seed{seed}", total_steps=4, current_step=4)
    rows = []
    for step, secs in enumerate(seconds, start=1):
        rows += [Metric(run=run, step=step, role="policy", name="reward_mean", value=0.1 * step + 0.05 * seed),
                 Metric(run=run, step=step, role="policy", name="step_seconds", value=secs)]
        if wall:
            rows.append(Metric(run=run, step=step, role="policy", name="wall_clock", value=wall[step - 1]))
    Metric.objects.bulk_create(rows)
    return run


X = "() => document.getElementById('compare-chart').data.map(t => t.x.map(v => Math.round(v * 36000) / 10).join(','))"
TITLE = "() => document.getElementById('compare-chart').layout.xaxis.title.text"


def test_the_compare_axis_switches_between_step_training_and_wall_time(roles, researcher, server,  # noqa: F811
                                                                        monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    # steps of 360 s (0.1 h): training time 360, 720, 1080, 1440 s; run a paused 1800 s before step 3
    a = _run(researcher, 0, [360.0] * 4, wall=[10360.0, 10720.0, 12880.0, 13240.0])
    b = _run(researcher, 1, [720.0] * 4)  # no wall-clock stamps: its wall time falls back to training time
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, f"/runs/compare/?ids={a.pk},{b.pk}")
        try:
            page.wait_for_function("() => document.getElementById('compare-chart').dataset.ready === '1'", timeout=30_000)
            page.uncheck("#compare-bands")  # one line per run, to read each run's x
            page.wait_for_function(f"() => ({X})().length === 2")
            assert page.evaluate(X) == ["3600,7200,10800,14400", "3600,7200,10800,14400"]  # steps 1-4 (x 3600)
            assert page.evaluate(TITLE) == "step"

            page.select_option("#compare-x", "train")
            page.wait_for_function("() => document.getElementById('compare-chart').dataset.axis === 'train'")
            assert page.evaluate(X) == ["360,720,1080,1440", "720,1440,2160,2880"]  # seconds (hours x 3600)
            assert page.evaluate(TITLE).startswith("training time")
            assert page.locator("#compare-axis-note").is_hidden()

            page.select_option("#compare-x", "wall")
            page.wait_for_function("() => document.getElementById('compare-chart').dataset.axis === 'wall'")
            assert page.evaluate(X) == ["360,720,2880,3240", "720,1440,2160,2880"]  # a's pause shows; b falls back
            assert f"No wall-clock stamps for run {b.pk}" in page.inner_text("#compare-axis-note")
            assert "x=wall" in page.url  # a reload keeps the axis

            # smoothing: a faint raw line under each smoothed one; the smoothed start is not pulled towards 0
            page.fill("#compare-smooth", "0.9")
            page.dispatch_event("#compare-smooth", "input")
            page.wait_for_function("() => document.getElementById('compare-chart').data.length === 4")
            first = page.evaluate("() => document.getElementById('compare-chart').data.filter(t => t.showlegend !== false)"
                                  ".map(t => Math.round(t.y[0] * 1000))")
            assert first == [100, 150]

            # the two seeds as one band: lower edge, upper edge (filled), mean
            page.fill("#compare-smooth", "0")
            page.dispatch_event("#compare-smooth", "input")
            page.check("#compare-bands")
            page.wait_for_function("() => document.getElementById('compare-chart').data.length === 3")
            fill = page.evaluate("() => document.getElementById('compare-chart').data.map(t => t.fill || '')")
            assert fill == ["", "tonexty", ""]
            assert "(2 runs) mean" in page.evaluate("() => document.getElementById('compare-chart').data[2].name")
            assert errors == []
        finally:
            browser.close()
