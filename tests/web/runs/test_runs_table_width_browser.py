"""The runs table fits a 1400 px window (issue 32 item 5): long names, tags, models and imported folder names
wrap inside their cells instead of pushing the page sideways."""
import pytest

from apps.runs.models import Run
from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make browser installs it)")]


def test_the_runs_table_fits_1400_px(roles, researcher, server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    for i in range(6):
        Run.objects.create(method="spice", model_name="/tmp/models/qwen2.5-coder-1.5b-instruct-with-a-long-folder-name",
                           config={}, owner=researcher, status=["running", "finished", "failed"][i % 3],
                           name=f"spice-gate-gsm8kdocs-qwen15-lr2e-6-rules3-control-seed{i}-a-rather-long-name",
                           tags=["gsm8k", "gate", "control", f"group:sweep-{i}", "long-tag-for-wrapping"],
                           corpus_name="wikipedia-simple-english-2026-11-full-dump.jsonl", total_steps=640,
                           current_step=37 * i)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, "/runs/", {"width": 1400, "height": 900})
        try:
            width = page.evaluate("document.documentElement.scrollWidth")
            right = page.evaluate("Math.max(...[...document.querySelectorAll('table')].map(t => "
                                  "t.getBoundingClientRect().right))")
            assert width <= 1400 and right <= 1400, (width, right)
            assert errors == []
        finally:
            browser.close()
