"""/evals/compare/'s chart in a real browser: its legend (one entry per run and benchmark) stays clear of the x
axis title; laid out horizontally under the plot, it covered "step"."""
from __future__ import annotations

import pytest

from apps.evals.models import Benchmark
from apps.runs.models import Run
from tests.web.evals.test_browser import _finished, _session_cookie
from tests.web.runs.conftest import private_redis, roles  # noqa: F401  (fixtures)
from tests.web.runs.test_live_page_browser import CHROMIUM, server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]

BOX = "sel => { const r = document.querySelector(sel).getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }"


def test_the_legend_does_not_cover_the_axis_title(roles, researcher, server, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    bench = Benchmark.objects.create(name="cloze", title="cloze", kind="builtin", scoring="math", size=300)
    run = Run.objects.create(method="spice", model_name="qwen", config={}, owner=researcher, status="finished",
                             name="spice-gate-wiki-qwen15")
    control = Run.objects.create(method="spice", model_name="qwen", config={}, owner=researcher, status="finished",
                                 name="spice-gate-wiki-qwen15-control", control_of=run)
    _finished("base:qwen", bench, 0.127)
    _finished("/a", bench, 0.177, run, 32)
    _finished("/b", bench, 0.117, control, 34)
    cookie = _session_cookie(researcher, server)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            context.add_cookies([cookie])
            page = context.new_page()
            page.goto(f"{server}/evals/compare/?run={run.pk}&run={control.pk}&benchmark=cloze&go=1")
            page.wait_for_function("() => { const c = document.getElementById('compare-chart');"
                                   " return c.data && c.data.length === 2; }", timeout=90_000)
            legend, title = page.evaluate(BOX, "#compare-chart .legend"), page.evaluate(BOX, "#compare-chart .xtitle")
            overlap = legend[0] < title[2] and title[0] < legend[2] and legend[1] < title[3] and title[1] < legend[3]
            assert not overlap, (legend, title)
        finally:
            browser.close()
