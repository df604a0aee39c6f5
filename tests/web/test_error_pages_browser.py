"""What a person sees on the real server (manage.py serve, DEBUG left to its default): a reviewer
on the launch form reads why and how to get access, an unknown run is the site's own 404 with the
navigation (never Django's pattern list), and a queued evaluation is cancelled from its page."""
from __future__ import annotations

import pytest

from tests.web.evals.test_cancel import queued_eval
from tests.web.runs.conftest import private_redis, roles  # noqa: F401  (fixtures)
from tests.web.runs.test_live_page_browser import CHROMIUM, server  # noqa: F401  (fixture: the real server)

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]


def _login(p, server: str, user: str):
    browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
    page = browser.new_page()
    page.goto(f"{server}/accounts/login/")
    page.fill("#id_username", user)
    page.fill("#id_password", f"pw-{user}")
    page.click("button[type=submit]")
    page.wait_for_url(f"{server}/")
    return browser, page


def test_error_pages_say_what_to_do_and_a_queued_evaluation_is_cancelled(roles, reviewer, researcher, server,  # noqa: F811
                                                                         monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    job = queued_eval(researcher)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page = _login(p, server, "vic")
        response = page.goto(f"{server}/runs/new/")
        assert response.status == 403
        assert "This needs the researcher role; ask an admin to add you to it." in page.inner_text("main")
        page.click("nav.mainnav >> text=Runs")  # the navigation works from the error page
        page.wait_for_url(f"{server}/runs/")
        response = page.goto(f"{server}/runs/9999/")
        assert response.status == 404
        assert "Page not found" in page.inner_text("main") and "URLconf" not in page.content()
        browser.close()

        browser, page = _login(p, server, "rita")
        page.goto(f"{server}/evals/jobs/{job.pk}/")
        assert page.inner_text("#eval-status .badge") == "queued"
        page.click("#eval-cancel")
        page.wait_for_selector("#eval-status .badge.cancelled", timeout=30_000)
        assert f"Evaluation {job.pk} cancelled." in page.inner_text("main")
        assert page.locator("#eval-cancel").count() == 0
        browser.close()
    job.refresh_from_db()
    assert job.status == "cancelled"
