"""The Content-Security-Policy in a real browser (chromium) against the real server (manage.py serve):
with the policy on, the pages still work and the browser reports no violation.

- the live run page: plotly draws the stored points, websocket messages add a point and a sample row
  without a reload, and Pause works through an htmx swap;
- the main pages (home, runs, compare, corpora with an htmx search, review, evaluations, the API docs)
  load with no CSP violation and no script error; the charts on them render;
- an injected inline script is refused (so the check above can see a violation when there is one).
"""
from __future__ import annotations

import threading

import pytest

from apps.corpora.models import Corpus
from apps.runs.models import Run
from tests.web.runs.test_live_page_browser import (  # noqa: F401  (fixtures)
    CHART_X, CHROMIUM, _report, logged_in_page, running_run, server,
)
from tests.web.runs.conftest import (  # noqa: F401  (fixtures)
    private_redis, roles,
)

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]

# Every violation the page sees, and every console error, collected from the first script on
WATCH = """window.__csp = [];
document.addEventListener('securitypolicyviolation',
  e => window.__csp.push(e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline') + ' at ' + e.sourceFile + ':' + e.lineNumber));"""


def _watch(page) -> list[str]:
    console = []
    page.add_init_script(WATCH)
    page.on("console", lambda m: console.append(f"{page.url}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: console.append(f"{page.url}: {e}"))
    return console


def _violations(page) -> list[str]:
    return page.evaluate("window.__csp || []")


def test_the_pages_work_under_the_policy_and_nothing_is_refused(roles, researcher, server, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    from django.contrib.auth.models import Group

    researcher.groups.add(Group.objects.get(name="reviewer"))  # the review page too
    run, other = running_run(researcher), running_run(researcher)
    corpus = Corpus.objects.create(name="csp-corpus", status="ready")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, "/")
        console = _watch(page)
        seen: dict[str, list[str]] = {}

        # the live run page: plotly, the websocket, htmx
        response = page.goto(f"{server}/runs/{run.pk}/")
        policy = response.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "script-src 'self' 'nonce-" in policy
        page.wait_for_function(f"() => ({CHART_X})().length === 3", timeout=30_000)  # plotly drew the stored points
        assert page.locator("#reward-chart .main-svg").count() > 0
        reporter = threading.Thread(target=_report, args=(run.pk,))  # as a worker does
        reporter.start()
        reporter.join()
        page.wait_for_function(f"() => ({CHART_X})().includes(4)", timeout=30_000)  # a live point, by websocket
        page.locator('#samples tr[data-key="attempt:4:0"]').wait_for(timeout=30_000)
        page.click("text=Pause")
        page.wait_for_selector("#run-requested", timeout=30_000)  # the htmx swap of the controls
        seen[f"/runs/{run.pk}/"] = _violations(page)

        compare = f"/runs/compare/?ids={run.pk},{other.pk}"
        page.goto(server + compare)
        page.wait_for_selector('#compare-chart[data-ready="1"]', timeout=30_000)  # drawn by runs_compare.js
        assert page.locator("#compare-chart .main-svg").count() > 0
        seen[compare] = _violations(page)

        page.goto(f"{server}/corpora/{corpus.pk}/")
        page.fill("#search input[name=q]", "volcano")
        page.select_option("#search select[name=mode]", "lexical")
        page.click("#search button[type=submit]")
        page.wait_for_selector("#results >> text=No results", timeout=30_000)  # swapped in by htmx
        seen[f"/corpora/{corpus.pk}/"] = _violations(page)

        for path in ("/", "/runs/", "/corpora/", "/review/", "/evals/", "/runs/workers/"):
            page.goto(server + path, wait_until="load")
            page.wait_for_timeout(300)
            seen[path] = _violations(page)

        page.goto(server + "/api-docs/")
        page.wait_for_selector(".swagger-ui .information-container", timeout=30_000)  # Swagger UI started
        seen["/api-docs/ (rendered)"] = _violations(page)

        # Redoc renders; the one thing refused there is the Redocly logo it fetches from its CDN (the
        # policy loads nothing from other sites; the page hides the image when it fails)
        page.goto(server + "/api-docs/redoc/")
        page.wait_for_selector("text=API docs by Redocly", timeout=30_000)
        page.wait_for_timeout(300)
        logo = "https://cdn.redoc.ly/redoc/logo-mini.svg"
        seen["/api-docs/redoc/"] = [v for v in _violations(page) if logo not in v]

        refused = {path: v for path, v in seen.items() if v}
        assert not refused, f"CSP violations: {refused}"
        assert not [c for c in console if "Content Security Policy" in c and logo not in c], console
        assert not errors, errors

        # the check sees a violation when there is one: an injected inline script does not run
        page.goto(server + "/runs/")
        ran = page.evaluate("""() => { const s = document.createElement('script'); s.textContent = 'window.__ran = 1';
                                      document.body.appendChild(s); return window.__ran === 1; }""")
        page.wait_for_timeout(200)
        assert not ran and any("script-src" in v for v in _violations(page))
        browser.close()
    assert Run.objects.get(pk=run.pk).requested == "pause"
