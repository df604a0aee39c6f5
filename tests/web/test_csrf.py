"""CSRF: every state-changing request needs the token, and every page that makes one provides it.

With ``Client(enforce_csrf_checks=True)`` (the test client skips the check otherwise):
- every page route (the URL resolver is walked, as in test_url_access.py) refuses a logged-in
  POST without the token with Django's CSRF 403;
- for each state-changing page route (``ACTIONS``), the page that offers the action (a form with
  ``{% csrf_token %}``, or an htmx ``hx-post`` that sends the ``X-CSRFToken`` header set on
  <body> by base.html) is fetched, the token is taken from it as the browser would, and the POST
  with it gets past the check and does its work;
- the API: a session-authenticated POST needs the token (DRF's SessionAuthentication); a
  token-authenticated one does not (no cookie, nothing a third-party page can forge).
"""
from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.authtoken.models import Token

from apps.corpora.models import Corpus
from apps.evals.models import EvalJob
from apps.review.models import ReviewItem
from apps.runs.models import Run
from tests.web.test_url_access import _url, routes

pytestmark = pytest.mark.django_db

FORM_TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
HTMX_TOKEN = re.compile(r"<body[^>]*hx-headers='\{\"X-CSRFToken\": \"([^\"]+)\"\}'")
CSRF_PAGE = b"CSRF verification failed"


@pytest.fixture
def boss(db):
    """Every role and superuser: a 403 can then only be the CSRF check."""
    user = User.objects.create_user("boss", password="pw-boss", is_superuser=True, is_staff=True)
    user.groups.add(*Group.objects.all())
    return user


@pytest.fixture
def world(boss):
    run = Run.objects.create(method="score", model_name="tiny", config={}, owner=boss, status="running")
    corpus = Corpus.objects.create(name="csrf-corpus")
    item = ReviewItem.objects.create(run=run, run_number=run.pk, kind="task", key="1:t0",
                                     snapshot={"question": "q?", "answer": "a"})
    return {"run": run, "corpus": corpus, "item": item}


def _client(user=None) -> Client:
    client = Client(enforce_csrf_checks=True)
    if user is not None:
        client.force_login(user)
    return client


def _token(page, via: str) -> str:
    html = page.content.decode()
    found = (FORM_TOKEN if via == "form" else HTMX_TOKEN).search(html)
    assert found, f"{page.request['PATH_INFO']} provides no CSRF token ({via})"
    return found.group(1)


# ---- every page route: no token -> 403 -------------------------------------------------------

# Pages served by DRF views (the API docs, apps/api/docs_urls.py): DRF exempts them from Django's
# middleware check and makes its own (SessionAuthentication), whose 403 is not Django's CSRF page.
DRF_PAGES = {"api-docs", "api-redoc"}


def test_every_page_route_refuses_a_post_without_the_token(world, boss):
    client = _client(boss)
    ids = {"run_id": world["run"].pk, "pk": world["corpus"].pk, "item_id": world["item"].pk, "doc_id": 1,
           "job_id": 1, "crossplay_id": 1, "action": "pause", "key": "1:0", "object_id": 1, "content_type_id": 1,
           "id": boss.pk, "app_label": "runs", "url": "nowhere/", "queue_index": 0, "scheduler_index": 0,
           "connection_index": 0, "scheduler_name": "none", "cron_job_name": "none", "job_id_str": "x",
           "default": 1}
    problems, checked = [], 0
    for pattern, key in routes():
        if pattern.startswith("api/"):
            continue
        url = _url(pattern, ids)
        response = client.post(url, {"verdict": "approve", "name": "x"})
        checked += 1
        if key in DRF_PAGES:  # DRF's SessionAuthentication refuses it (test_the_api_docs_pages_take_no_post)
            if response.status_code != 403:
                problems.append(f"POST {url} ({key}) without a token: {response.status_code}")
        elif response.status_code != 403 or CSRF_PAGE not in response.content:
            problems.append(f"POST {url} ({key}) without a token: {response.status_code}")
    assert checked > 30
    assert not problems, "\n".join(problems)
    world["run"].refresh_from_db()
    assert world["run"].requested == "" and world["item"].status == "pending"


# ---- each state-changing page action: the page's token works ---------------------------------

def _pause(client, w):
    page = client.get(f"/runs/{w['run'].pk}/")
    assert f'hx-post="/runs/{w["run"].pk}/pause/"'.encode() in page.content
    response = client.post(f"/runs/{w['run'].pk}/pause/", HTTP_HX_REQUEST="true",
                           HTTP_X_CSRFTOKEN=_token(page, "htmx"))
    w["run"].refresh_from_db()
    assert response.status_code == 200 and w["run"].requested == "pause", response.content[:300]


def _verdict(client, w):
    page = client.get(f"/review/?item={w['item'].pk}")
    assert f'action="/review/items/{w["item"].pk}/"'.encode() in page.content
    response = client.post(f"/review/items/{w['item'].pk}/",
                           {"csrfmiddlewaretoken": _token(page, "form"), "verdict": "approve"})
    w["item"].refresh_from_db()
    assert response.status_code == 302 and w["item"].status == "approved"


def _harness(client, w):
    page = client.get(f"/runs/{w['run'].pk}/")
    assert f'hx-post="/review/runs/{w["run"].pk}/harness/"'.encode() in page.content
    response = client.post(f"/review/runs/{w['run'].pk}/harness/", {"harness": "not json"}, HTTP_HX_REQUEST="true",
                           HTTP_X_CSRFTOKEN=_token(page, "htmx"))
    assert response.status_code == 200 and b'id="harness-error"' in response.content  # the view judged the text


def _token_rotation(client, w):
    page = client.get("/accounts/token/")
    before = Token.objects.get(user=w["user"]).key
    response = client.post("/accounts/token/", {"csrfmiddlewaretoken": _token(page, "form")})
    assert response.status_code == 200 and Token.objects.get(user=w["user"]).key != before


def _corpus_create(client, w):
    page = client.get("/corpora/")
    assert b'action="/corpora/new/"' in page.content
    response = client.post("/corpora/new/", {"csrfmiddlewaretoken": _token(page, "form"), "name": ""})
    assert response.status_code == 400 and CSRF_PAGE not in response.content  # the form's own error


def _upload(client, w):
    page = client.get(f"/corpora/{w['corpus'].pk}/")
    assert f'action="/corpora/{w["corpus"].pk}/upload/"'.encode() in page.content
    response = client.post(f"/corpora/{w['corpus'].pk}/upload/", {
        "csrfmiddlewaretoken": _token(page, "form"),
        "file": SimpleUploadedFile("notes.txt", b"Some text about owls.\n")})
    assert response.status_code == 302, response.content[:500]


def _launch_form(client, w):
    page = client.get("/runs/new/?method=grpo")
    response = client.post("/runs/new/", {"csrfmiddlewaretoken": _token(page, "form"), "method": "grpo", "model": ""})
    assert response.status_code == 400 and b"errorlist" in response.content  # validated by the form


def _eval_launch(client, w):
    page = client.get(f"/runs/{w['run'].pk}/")
    assert b'hx-post="/evals/launch/"' in page.content
    response = client.post("/evals/launch/", {"run": w["run"].pk, "target": "base:nowhere"}, HTTP_HX_REQUEST="true",
                           HTTP_X_CSRFTOKEN=_token(page, "htmx"))
    assert response.status_code == 200 and b'id="eval-error"' in response.content


def _crossplay_launch(client, w):
    page = client.get(f"/runs/{w['run'].pk}/")
    url = f"/evals/runs/{w['run'].pk}/crossplay/"
    assert f'hx-post="{url}"'.encode() in page.content
    response = client.post(url, {}, HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=_token(page, "htmx"))
    assert response.status_code == 200 and b'id="eval-error"' in response.content


def _benchmark(client, w):
    page = client.get("/evals/")
    assert b'action="/evals/benchmarks/"' in page.content
    response = client.post("/evals/benchmarks/", {"csrfmiddlewaretoken": _token(page, "form"), "name": "b"})
    assert response.status_code == 302 and response["Location"] == "/evals/"


def _estimate(client, w):
    page = client.get("/runs/new/?method=grpo")
    assert b'hx-post="/runs/new/estimate/"' in page.content
    response = client.post("/runs/new/estimate/", {"method": "grpo"}, HTTP_HX_REQUEST="true",
                           HTTP_X_CSRFTOKEN=_token(page, "htmx"))
    assert response.status_code == 200 and b'id="estimate"' in response.content


def _eval_cancel(client, w):
    job = EvalJob.objects.create(model_spec="base:tiny", owner=w["user"], status="queued")
    page = client.get(f"/evals/jobs/{job.pk}/")
    assert f'action="/evals/jobs/{job.pk}/cancel/"'.encode() in page.content
    response = client.post(f"/evals/jobs/{job.pk}/cancel/", {"csrfmiddlewaretoken": _token(page, "form")})
    job.refresh_from_db()
    assert response.status_code == 302 and job.status == "cancelled", response.content[:300]


def _describe(client, w):
    run = w["run"]
    page = client.get(f"/runs/{run.pk}/")
    assert f'action="/runs/{run.pk}/describe/"'.encode() in page.content
    response = client.post(f"/runs/{run.pk}/describe/", {"name": "csrf named", "tags": "a, b", "notes": "n",
                                                         "csrfmiddlewaretoken": _token(page, "form")})
    run.refresh_from_db()
    assert response.status_code == 302 and run.name == "csrf named", response.content[:300]


def _bulk(client, w):
    run = w["run"]  # an item of its own: the verdict check before it reviewed the world's
    item = ReviewItem.objects.create(run=run, run_number=run.pk, kind="task", key="1:t9",
                                     snapshot={"question": "q?", "answer": "a"})
    page = client.get("/review/")
    assert b'action="/review/bulk/"' in page.content
    response = client.post("/review/bulk/", {"ids": [item.pk], "verdict": "approve",
                                             "csrfmiddlewaretoken": _token(page, "form")})
    item.refresh_from_db()
    assert response.status_code == 302 and item.status == "approved", response.content[:300]


def _crossplay_cancel(client, w):
    from apps.evals.models import CrossPlay

    job = CrossPlay.objects.create(run=w["run"], owner=w["user"], status="queued")
    page = client.get(f"/evals/crossplay/{job.pk}/")
    assert f'action="/evals/crossplay/{job.pk}/cancel/"'.encode() in page.content
    response = client.post(f"/evals/crossplay/{job.pk}/cancel/", {"csrfmiddlewaretoken": _token(page, "form")})
    job.refresh_from_db()
    assert response.status_code == 302 and job.status == "cancelled", response.content[:300]


def _resume(client, w):
    from apps.corpora.models import Ingest

    corpus = w["corpus"]
    ingest = Ingest.objects.create(corpus=corpus, source=Ingest.Source.WIKIPEDIA, status=Ingest.Status.FAILED,
                                   resumable=True)
    page = client.get(f"/corpora/{corpus.pk}/")
    assert f'action="/corpora/{corpus.pk}/resume/"'.encode() in page.content
    response = client.post(f"/corpora/{corpus.pk}/resume/", {"csrfmiddlewaretoken": _token(page, "form")})
    ingest.refresh_from_db()
    assert response.status_code == 302 and ingest.status == Ingest.Status.QUEUED, response.content[:300]


def _users(client, w):
    page = client.get("/accounts/users/")
    assert b'id="user-create"' in page.content
    response = client.post("/accounts/users/", {"csrfmiddlewaretoken": _token(page, "form"), "action": "create",
                                                "username": "csrf-made", "password": "pw-Long-enough-1"})
    assert response.status_code == 302 and User.objects.filter(username="csrf-made").exists(), response.content[:300]


def _logout(client, w):
    page = client.get("/runs/")
    assert b'action="/accounts/logout/"' in page.content
    response = client.post("/accounts/logout/", {"csrfmiddlewaretoken": _token(page, "form")})
    assert response.status_code == 302 and "_auth_user_id" not in client.session


ACTIONS = {  # route -> the check that fetches the page offering it and posts with the page's token
    "runs:control": _pause,
    "review:item": _verdict,
    "review:harness": _harness,
    "api-token": _token_rotation,
    "corpora:create": _corpus_create,
    "corpora:upload": _upload,
    "runs:new": _launch_form,
    "evals:launch": _eval_launch,
    "evals:crossplay-launch": _crossplay_launch,
    "evals:create-benchmark": _benchmark,
    "evals:cancel": _eval_cancel,
    "runs:estimate": _estimate,
    "runs:describe": _describe,
    "review:bulk": _bulk,
    "evals:crossplay-cancel": _crossplay_cancel,
    "corpora:resume": _resume,
    "users": _users,
    "logout": _logout,  # last: it ends the session
}
READ_ONLY = {"home", "login", "corpora:index", "corpora:detail", "corpora:progress", "corpora:search",
             "corpora:document", "runs:index", "runs:workers", "runs:compare", "runs:detail", "runs:controls",
             "runs:samples", "runs:ledger", "runs:trajectory", "runs:task", "review:index", "review:run-panel",
             "evals:index", "evals:job", "evals:compare", "evals:crossplay", "evals:run-panel",
             "evals:estimate",  # hx-get: the launch forms' estimate
             "runs:when",  # hx-get: the run page's Started / heartbeat line
             *DRF_PAGES}


def test_the_api_docs_pages_take_no_post(boss):
    """Their 403 without a token is DRF's CSRF check: with the token a POST gets no further than 405."""
    client = _client(boss)
    token = _token(client.get("/"), "htmx")
    for url in ("/api-docs/", "/api-docs/redoc/"):
        assert client.post(url, {}).status_code == 403, url
        assert client.post(url, {}, HTTP_X_CSRFTOKEN=token).status_code == 405, url


def test_every_page_route_is_either_an_action_or_read_only():
    pages = {key for pattern, key in routes() if not pattern.startswith(("api/", "admin/", "django-rq/"))}
    assert pages == set(ACTIONS) | READ_ONLY, (
        f"new page routes need a CSRF check in ACTIONS or a READ_ONLY entry: {pages - set(ACTIONS) - READ_ONLY}")


def test_each_action_works_with_the_token_its_page_provides(world, boss, rq_queues):
    client = _client(boss)
    for route, check in ACTIONS.items():
        try:
            check(client, {**world, "user": boss})
        except AssertionError as exc:
            raise AssertionError(f"{route}: {exc}") from exc


def test_login_needs_the_token_of_the_login_page(boss):
    client = _client()
    refused = client.post("/accounts/login/", {"username": "boss", "password": "pw-boss"})
    assert refused.status_code == 403 and CSRF_PAGE in refused.content
    page = client.get("/accounts/login/")
    response = client.post("/accounts/login/", {"username": "boss", "password": "pw-boss",
                                                "csrfmiddlewaretoken": _token(page, "form")})
    assert response.status_code == 302 and client.session["_auth_user_id"] == str(boss.pk)


def test_full_pages_give_htmx_the_token_header(world, boss):
    client = _client(boss)
    for url in ("/", "/runs/", f"/runs/{world['run'].pk}/", "/corpora/", "/review/", "/evals/"):
        page = client.get(url)
        assert page.status_code == 200, url
        assert _token(page, "htmx"), url


# ---- the API ---------------------------------------------------------------------------------

def test_api_posts_with_a_session_need_the_token_and_token_auth_does_not(world, boss):
    run = world["run"]
    client = _client(boss)
    problems = []
    for pattern, key in routes():
        if not pattern.startswith("api/"):
            continue
        url = _url(pattern, {"run_id": run.pk, "pk": world["corpus"].pk, "item_id": world["item"].pk,
                             "action": "pause", "fmt": "jsonl", "kind": "attempts", "job_id": 1, "default": 1})
        response = client.post(url, {}, content_type="application/json")
        if response.status_code != 403 or "CSRF" not in response.json().get("error", ""):
            problems.append(f"session POST {url} ({key}) without a token: {response.status_code} {response.content[:120]}")
    assert not problems, "\n".join(problems)
    run.refresh_from_db()
    assert run.requested == ""

    page = client.get(f"/runs/{run.pk}/")
    ok = client.post(f"/api/v1/runs/{run.pk}/pause/", {}, content_type="application/json",
                     HTTP_X_CSRFTOKEN=_token(page, "htmx"))
    assert ok.status_code == 200, ok.content
    run.refresh_from_db()
    assert run.requested == "pause"

    token = Token.objects.create(user=boss)
    api = Client(enforce_csrf_checks=True)  # no session, no cookie: the token alone
    verdict = api.post(f"/api/v1/review/items/{world['item'].pk}/", {"verdict": "approve"},
                       content_type="application/json", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert verdict.status_code == 200, verdict.content
    world["item"].refresh_from_db()
    assert world["item"].status == "approved"


# ---- the websocket: a third-party page cannot open it with the visitor's cookie --------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.parametrize("origin, accepted", [(b"http://127.0.0.1", True), (b"http://evil.example", False),
                                              (b"null", False), (None, False)])
async def test_the_run_websocket_refuses_other_origins(reader, origin, accepted):
    """Cross-site websocket hijacking: the browser sends the session cookie whichever page opens
    the socket, so the server checks the Origin against ALLOWED_HOSTS (asgi.py)."""
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from selfplay_web.asgi import application
    from tests.web.test_websocket_and_browser import _session_cookie

    cookie = await sync_to_async(_session_cookie)(reader)
    headers = [(b"host", b"127.0.0.1"), (b"cookie", cookie.encode())] + ([(b"origin", origin)] if origin else [])
    comm = WebsocketCommunicator(application, "/ws/runs/1/", headers=headers)
    connected, _ = await comm.connect(timeout=10)
    assert connected is accepted
    await comm.disconnect()
