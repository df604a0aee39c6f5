"""schemathesis against the OpenAPI schema at /api/v1/schema/: every generated request to every
operation, sent as an authenticated researcher (token auth) through the real Django WSGI app,
gets no 5xx. Errors that do come back are JSON ``{"error": ...}`` (the contract's error shape).

The schema is the one the server serves (drf-spectacular), fetched once per module. Each
operation runs a few generated cases (positive and negative: wrong types, missing fields, odd
strings); the data the researcher can see (a corpus with documents, a run of their own with a
metric) exists so that ids in the paths sometimes hit real objects.
"""
from __future__ import annotations

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from django.test import Client
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

EXAMPLES = 10


def _served_schema() -> dict:
    """The schema document exactly as /api/v1/schema/ serves it (no database needed to build it)."""
    from django.contrib.auth.models import AnonymousUser
    from drf_spectacular.generators import SchemaGenerator
    from rest_framework.test import APIRequestFactory

    request = APIRequestFactory().get("/api/v1/schema/")
    request.user = AnonymousUser()
    return SchemaGenerator().get_schema(request=None, public=True)


schema = schemathesis.openapi.from_dict(_served_schema())
schema.app = get_wsgi_application()


@pytest.fixture
def keep_test_connection():
    """The WSGI handler closes the database connection after each request (as in production); the
    test's transaction lives on that connection, so keep it open, as django.test.Client does."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def researcher_token(keep_test_connection, researcher, kept_corpus):
    """Token auth for the researcher, and objects for the ids to hit: their run (with a metric) and the corpus."""
    from rest_framework.authtoken.models import Token

    from apps.runs.models import Metric, Run

    run = Run.objects.create(method="spice", model_name="smollm2-135m-instruct", corpus=kept_corpus, corpus_name="kept",
                             config={"method": "spice"}, owner=researcher, total_steps=4, queue="cpu")
    Metric.objects.create(run=run, step=1, name="reward", role="reasoner", value=0.5)
    REAL_IDS.update({"run_id": run.pk, "id": kept_corpus.pk, "pk": kept_corpus.pk})
    return Token.objects.create(user=researcher).key


REAL_IDS: dict[str, int] = {}


def aim_at_real_objects(case) -> None:
    """Every other generated id (the even ones) is replaced by the id of an object that exists, so the
    generated queries and bodies also reach the code behind the 404."""
    for name, value in list((case.path_parameters or {}).items()):
        if name in REAL_IDS and isinstance(value, int) and value % 2 == 0:
            case.path_parameters[name] = REAL_IDS[name]


def test_the_served_schema_matches_the_fuzzed_one(client, researcher):
    client.force_login(researcher)
    served = Client().get("/api/v1/schema/?format=json")
    assert served.status_code in (200, 401, 403)
    response = client.get("/api/v1/schema/?format=json")
    assert response.status_code == 200 and set(response.json()["paths"]) == set(schema.raw_schema["paths"])
    assert len(schema.raw_schema["paths"]) >= 15


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much])
@pytest.mark.django_db
def test_no_generated_request_gets_a_server_error(case, researcher_token):
    aim_at_real_objects(case)
    response = case.call(headers={"Authorization": f"Token {researcher_token}"})
    case.validate_response(response, checks=[not_a_server_error])
    if response.status_code >= 400 and response.headers.get("Content-Type", "").startswith("application/json"):
        assert "error" in response.json(), response.text[:300]


@pytest.fixture
def admin_token(keep_test_connection, admin_user, kept_corpus):
    from rest_framework.authtoken.models import Token

    REAL_IDS.update({"id": kept_corpus.pk, "pk": kept_corpus.pk})
    return Token.objects.create(user=admin_user).key


@schema.include(path_regex="^/api/v1/corpora/").parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much])
@pytest.mark.django_db
def test_corpus_uploads_and_creation_as_an_admin_get_no_server_error(case, admin_token):
    """A researcher may not create corpora or upload: the admin's requests reach the upload and create code."""
    aim_at_real_objects(case)
    response = case.call(headers={"Authorization": f"Token {admin_token}"})
    case.validate_response(response, checks=[not_a_server_error])
    if response.status_code >= 400 and response.headers.get("Content-Type", "").startswith("application/json"):
        assert "error" in response.json(), response.text[:300]
