"""Every parameter a page or the API parses: a NUL byte or an out-of-range number is a clear 400, never a 500.

Finding: NUL bytes or huge integers in about 15 API and URL parameters gave unhandled 500s (``search?q=owl%00x``,
``review/queue?page=1e20``). This walks every URL pattern of the site (ids filled with real objects) and sends each
parameter name the code reads with hostile values, as an admin (who may see every page).
"""
from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from apps.api.params import LIMIT
from apps.corpora.models import Corpus, Document
from apps.runs.models import Metric, Run

pytestmark = pytest.mark.django_db

NAMES = ("after", "benchmark", "benchmarks", "bucket", "clone", "correct", "focus", "go", "ids", "item", "k", "kind",
         "limit", "max_new_tokens", "method", "metric", "mine", "mode", "name", "offset", "page", "page_size", "preset",
         "q", "queue", "role", "run", "since_step", "status", "target", "valid", "step", "format", "id", "owner",
         "corpus", "search", "sort", "order")
HOSTILE = ["owl\x00x", "1e20", "99999999999999999999", "-9223372036854775809", "1000000000000000000"]


def _patterns(resolver=None, prefix=""):
    resolver = resolver or get_resolver()
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _patterns(entry, route)
        elif isinstance(entry, URLPattern):
            yield route


@pytest.fixture
def objects(admin_user):
    corpus = Corpus.objects.create(name="fuzz", status="ready")
    doc = Document.objects.create(corpus=corpus, title="t", text="owls hunt at night", content_hash="h")
    run = Run.objects.create(method="spice", model_name="m", corpus=corpus, corpus_name="fuzz", config={},
                             owner=admin_user, total_steps=2, queue="cpu")
    Metric.objects.create(run=run, step=1, name="reward", role="reasoner", value=0.5)
    return {"corpus": corpus.pk, "doc": doc.pk, "run": run.pk}


def _urls(objects):
    for route in _patterns():
        route = route.lstrip("^").rstrip("$")
        if any(skip in route for skip in ("admin/", "static", "ws/", "logout", "api-docs", "schema", "redoc", "django-rq")):
            continue
        path = re.sub(r"<(?:int:)?(\w*pk|\w*id)>", lambda m: str(objects["run"]), route)
        path = re.sub(r"<(?:\w+:)?\w+>", "x", path)
        if "(" in path or "?" in path:
            continue  # a regex route
        yield "/" + path


def test_hostile_parameters_get_a_clear_400_not_a_500(client, admin_user, objects):
    client.force_login(admin_user)
    client.raise_request_exception = False  # collect every 500 instead of stopping at the first
    failures = []
    for url in sorted(set(_urls(objects))):
        for value in HOSTILE:  # refused before any view parses it, whichever parameter holds it
            response = client.get(url, {name: value for name in NAMES}, HTTP_ACCEPT="application/json")
            if response.status_code != 400:
                failures.append((url, value, response.status_code))
            elif url.startswith("/api/"):
                assert response.json()["error"], (url, value)
        # what the guard lets through reaches the views' own parsing (an OFFSET, a bigint filter, a link):
        for value in (str(LIMIT), "nan", "\u00b2"):  # the largest number allowed; a word; a digit int() refuses
            response = client.get(url, {name: value for name in NAMES}, HTTP_ACCEPT="application/json")
            if response.status_code >= 500:
                failures.append((url, value, response.status_code))
    assert not failures, failures


@pytest.mark.parametrize("url, params, needle", [
    ("/api/v1/corpora/{corpus}/search/", {"q": "owl\x00x"}, "q"),
    ("/api/v1/review/queue/", {"page": "1e20"}, "page"),
    ("/api/v1/review/queue/", {"page": "99999999999999999999"}, "page"),
    ("/runs/", {"page": "owl\x00"}, "page"),
])
def test_the_400_names_the_parameter(client, admin_user, objects, url, params, needle):
    client.force_login(admin_user)
    response = client.get(url.format(**objects), params, HTTP_ACCEPT="application/json")
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert needle in response.content.decode()


@pytest.mark.parametrize("url, body, needle", [
    ("/api/v1/corpora/", {"name": "a\x00b"}, "name contains a NUL byte"),
    ("/api/v1/corpora/{corpus}/documents/", {"title": "t", "text": "x\x00y"}, "text contains a NUL byte"),
    ("/api/v1/runs/", {"method": "grpo", "config": {"train": {"lr\x00": 1}}}, "config.train.lr%00 contains a NUL"),
])
def test_a_nul_byte_in_an_api_body_is_a_400_naming_the_key(admin_user, objects, url, body, needle):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(admin_user)
    client.raise_request_exception = False
    response = client.post(url.format(**objects), body, format="json")
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert needle in response.json()["error"]


def test_the_guards_400_carries_the_security_headers(client, admin_user):
    """ParamGuardMiddleware answers without calling the view: the middleware outside it still add their headers."""
    client.force_login(admin_user)
    response = client.get("/runs/", {"page": "owl\x00"})
    assert response.status_code == 400
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "Content-Security-Policy" in response
