"""The run page's export buttons in a real browser: each kind downloads as JSONL (``data`` an object,
so ``datasets`` gets columns) and as Parquet, with the rows the page counts.

SELFPLAY_SCREENSHOTS=DIR keeps a screenshot of the panel there."""
import io
import json

import pyarrow.parquet as pq
import pytest

from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)
from tests.web.runs.test_run_page_extras_browser import _shot

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]


def test_the_run_page_downloads_tasks_attempts_pairs_and_verdicts(roles, filled_run, server, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, f"/runs/{filled_run.pk}/", {"width": 1280, "height": 900})
        panel = page.locator("#downloads")
        assert [r.get_attribute("data-kind") for r in panel.locator("tbody tr").all()] == \
            ["tasks", "attempts", "pairs", "verdicts"]
        counts = {r.get_attribute("data-kind"): r.locator("td").nth(1).inner_text() for r in panel.locator("tbody tr").all()}
        assert counts["tasks"] == "6" and counts["attempts"] == "24" and counts["verdicts"] == "2"
        _shot(page, "run-export-panel.png", tmp_path, "#downloads")

        got = {}
        for kind in ("tasks", "attempts", "pairs", "verdicts"):
            for fmt in ("jsonl", "parquet"):
                with page.expect_download() as info:
                    panel.locator(f'tr[data-kind="{kind}"] a[data-format="{fmt}"]').click()
                download = info.value
                assert download.suggested_filename.endswith(f".{fmt}")
                got[kind, fmt] = open(download.path(), "rb").read()
        assert not errors, errors
        browser.close()

    tasks = [json.loads(line) for line in got["tasks", "jsonl"].splitlines()]
    assert len(tasks) == 6 and all(isinstance(t["data"], dict) for t in tasks)  # an object, not a JSON string
    assert tasks[0]["data"]["answer_type"] == "integer"
    assert pq.read_table(io.BytesIO(got["attempts", "parquet"])).num_rows == 24
    assert len(got["pairs", "jsonl"].splitlines()) == 12 and pq.read_table(io.BytesIO(got["pairs", "parquet"])).num_rows == 12
    verdicts = [json.loads(line) for line in got["verdicts", "jsonl"].splitlines()]
    assert len(verdicts) == 2 and all(isinstance(v["snapshot"], dict) for v in verdicts)
