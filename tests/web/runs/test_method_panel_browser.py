"""The method panel in a real browser: real tiny SCOPE / SCORE / pi-Play runs (launched through the
API, executed by a real RQ worker), each run page opened in Chromium against the real server.

SELFPLAY_SCREENSHOTS=DIR keeps a screenshot of each panel there (for a person to look at)."""
import os

import pytest

from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)
from tests.web.runs.test_method_panel import TITLES, launch

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]


def test_method_panels_render_in_a_browser(roles, researcher, run_env, server, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    runs = {m: launch(m, researcher) for m in ("scope", "score", "piplay")}
    from playwright.sync_api import sync_playwright

    folder = os.environ.get("SELFPLAY_SCREENSHOTS") or str(tmp_path)
    os.makedirs(folder, exist_ok=True)
    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, "/runs/", {"width": 1280, "height": 900})
        for method, run in runs.items():
            page.goto(f"{server}/runs/{run.pk}/")
            panel = page.locator("#method-panel")
            assert panel.is_visible() and TITLES[method] in panel.inner_text()
            # the per-step table: one row per step of the 3-step run
            assert page.locator("#method-panel table.method-steps tbody tr").count() == 3
            assert page.locator("#method-panel table.method-tasks tbody tr").count() >= 1
            if method == "score":
                summaries = page.locator("#method-panel details.harness summary")  # newest first
                assert "v0 · default" in summaries.last.inner_text()
                assert summaries.count() == 1 or "harness v1" in summaries.first.inner_text()
            if method == "piplay":
                qcp = page.locator("#method-panel details.qcp").first
                qcp.locator("summary").click()
                assert qcp.locator("pre").is_visible()
            panel.screenshot(path=os.path.join(folder, f"method_panel_{method}.png"))
        browser.close()
    assert errors == []
