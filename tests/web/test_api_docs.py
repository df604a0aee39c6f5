"""/api-docs/ and /api-docs/redoc/ show the OpenAPI schema as a page, with Swagger UI and Redoc served
from our own static files (drf-spectacular-sidecar: no CDN, works offline); the schema types every
response (runs, corpora, evals, review, me, every error) instead of ``additionalProperties: {}``."""
import re

import pytest
from django.contrib.staticfiles import finders

from tests.web.runs.conftest import private_redis, roles  # noqa: F401  (fixtures of the browser test)
from tests.web.runs.test_live_page_browser import server  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db

UNTYPED = {"type": "object", "additionalProperties": {}}


def test_the_schema_has_a_page_served_offline(client, reader):
    client.force_login(reader)
    for url, asset in (("/api-docs/", "swagger-ui-dist/swagger-ui-bundle.js"), ("/api-docs/redoc/", "redoc/bundles/redoc.standalone.js")):
        html = client.get(url).content.decode()
        if url == "/api-docs/":  # Swagger UI's start-up script is a file of its own (no inline script: CSP)
            assert '<script src="/api-docs/?script=">' in html
            html += client.get("/api-docs/?script=").content.decode()
        assert "/api/v1/schema/" in html and f"/static/drf_spectacular_sidecar/{asset}" in html
        assert not re.search(r'src="https?://', html)  # nothing from a CDN
        assert finders.find(f"drf_spectacular_sidecar/{asset}")  # and the file is ours to serve
        assert '<nav id="api-docs-nav"' in html and '<a href="/"' in html  # a way back to the app
        assert 'rel="icon"' in html  # else the browser asks for /favicon.ico: a 404 in the console
    assert client.get("/api-docs/").status_code == 200
    # a browser opening the schema's own address gets the page; a client asking for JSON gets JSON
    assert client.get("/api/v1/schema/", HTTP_ACCEPT="text/html,*/*").url == "/api-docs/"
    assert client.get("/api/v1/schema/", HTTP_ACCEPT="*/*").status_code == 200


def test_responses_are_typed(client, reader):
    client.force_login(reader)
    schema = client.get("/api/v1/schema/?format=json").json()
    untyped, errors = [], []
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            for code, response in op.get("responses", {}).items():
                for content in (response.get("content") or {}).values():
                    ref = content.get("schema", {})
                    if ref == UNTYPED:
                        untyped.append((method, path, code))
                    if code.startswith("4") and ref.get("$ref") != "#/components/schemas/Error":
                        errors.append((method, path, code))
    assert not untyped, untyped
    assert not errors, errors
    run = schema["components"]["schemas"]["RunDetail"]["properties"]
    assert run["current_step"]["type"] == "integer" and "checkpoints" in run
    hit = schema["components"]["schemas"]["SearchHit"]["properties"]
    assert set(hit) >= {"title", "matched", "ranks"}


@pytest.mark.django_db(transaction=True)
def test_swagger_ui_draws_the_api_in_a_browser(roles, researcher, server, monkeypatch, tmp_path):  # noqa: F811
    from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page

    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, "/api-docs/", {"width": 1280, "height": 900})
        external = []
        page.on("request", lambda r: external.append(r.url) if not r.url.startswith(server) else None)
        page.reload()
        page.wait_for_selector("#operations-api-runs_list", timeout=30_000)  # drawn from /api/v1/schema/
        assert "Selfplay API" in page.inner_text(".information-container")
        page.screenshot(path=str(tmp_path / "api-docs.png"))
        assert not external, external  # offline: every asset from this server
        assert not errors, errors
        browser.close()
