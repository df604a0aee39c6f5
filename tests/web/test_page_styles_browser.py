"""Page styles in a real browser (chromium) against the real server: an input without a type attribute is a text
box like the others (the users page's Username next to its Password), and a heading's muted aside is small on
every page, the dashboard included (it loads app.css alone)."""
from __future__ import annotations

import pytest

from tests.web.runs.conftest import private_redis, roles  # noqa: F401  (fixtures)
from tests.web.runs.test_live_page_browser import CHROMIUM, server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]

BOX = """sel => { const s = getComputedStyle(document.querySelector(sel)), r = document.querySelector(sel).getBoundingClientRect();
  return {height: Math.round(r.height), radius: s.borderRadius, border: s.borderTopColor, padding: s.paddingLeft}; }"""
FONT = "sel => parseFloat(getComputedStyle(document.querySelector(sel)).fontSize)"


def test_untyped_inputs_are_styled_and_heading_asides_are_small(roles, admin_user, server, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{server}/accounts/login/?next=/accounts/users/")
            page.fill("#id_username", "alice")
            page.fill("#id_password", "pw-alice")
            page.click("button[type=submit]")
            page.wait_for_url(f"{server}/accounts/users/")
            password = page.evaluate(BOX, "#user-create input[name=password]")
            for name in ("username", "email"):
                assert page.evaluate(BOX, f"#user-create input[name={name}]") == password, name

            page.goto(f"{server}/")
            heading = page.evaluate(FONT, "#runs-that-learned h2")
            aside = page.evaluate(FONT, "#runs-that-learned h2 .small")
            assert aside < 0.8 * heading, (aside, heading)
            weight = page.evaluate("sel => getComputedStyle(document.querySelector(sel)).fontWeight",
                                   "#runs-that-learned h2 .small")
            assert weight == "400"
        finally:
            browser.close()
