"""The Content-Security-Policy (selfplay_web/csp.py): on every response, with a fresh nonce each time, and
no template holds what the policy would refuse (an inline script without the nonce, an inline event
handler, a ``javascript:`` URL). tests/web/test_csp_browser.py checks the pages in chromium."""
from __future__ import annotations

import re

import pytest
from django.conf import settings

from selfplay_web.csp import policy

TEMPLATE_DIRS = [settings.BASE_DIR / "templates"]
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*\bnonce=)[^>]*>", re.I)
HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.I)


def _directives(header: str) -> dict[str, list[str]]:
    return {d.split()[0]: d.split()[1:] for d in header.split("; ")}


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/accounts/login/", "/runs/", "/corpora/", "/api/v1/runs/", "/api/v1/", "/nope/"])
def test_every_response_carries_the_policy_with_a_fresh_nonce(client, reader, path):
    client.force_login(reader)
    first, second = client.get(path), client.get(path)
    a, b = _directives(first["Content-Security-Policy"]), _directives(second["Content-Security-Policy"])
    assert a["default-src"] == ["'self'"] and a["object-src"] == ["'none'"] and a["frame-ancestors"] == ["'none'"]
    assert a["script-src"][0] == "'self'" and a["script-src"][1].startswith("'nonce-")
    assert "'unsafe-inline'" not in a["script-src"] and "'unsafe-eval'" not in a["script-src"]
    assert a["script-src"] != b["script-src"]  # a new nonce per response


@pytest.mark.django_db
def test_the_nonce_on_the_page_is_the_one_in_the_header(rf, reader):
    from django.template import Context, Template

    from selfplay_web.csp import ContentSecurityPolicyMiddleware

    request = rf.get("/")
    request.user = reader

    def view(req):
        from django.http import HttpResponse

        return HttpResponse(Template('<script nonce="{{ request.csp_nonce }}">1</script>').render(
            Context({"request": req})))

    response = ContentSecurityPolicyMiddleware(view)(request)
    nonce = re.search(r'nonce="([^"]+)"', response.content.decode()).group(1)
    assert response["Content-Security-Policy"] == policy(nonce)


def test_no_template_holds_what_the_policy_refuses():
    problems = []
    for folder in TEMPLATE_DIRS:
        for path in folder.rglob("*.html"):
            text = path.read_text()
            for pattern, what in ((INLINE_SCRIPT, "an inline script without the nonce"),
                                  (HANDLER, "an inline event handler"),
                                  (re.compile(r"javascript:", re.I), "a javascript: URL")):
                for m in pattern.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    problems.append(f"{path.relative_to(settings.BASE_DIR)}:{line}: {what}: {m.group(0)[:60]}")
    assert not problems, "move scripts to static/js (or add nonce=\"{{ request.csp_nonce }}\"):\n" + "\n".join(problems)
