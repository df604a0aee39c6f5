"""Every URL pattern of the project x every persona -> the status it must answer; never a 500.

The resolver is walked, so a new route fails ``test_every_route_has_an_access_rule`` until it is
given a rule in ``RULES`` (route name -> access class). Each access class says, per persona, what
a GET must answer; anonymous users always get the login redirect (pages) or 401/403 JSON (API).
POSTs with an empty body are sent too: nobody without the role may get past the check (403, or
405 where the route takes no POST; anonymous: the login redirect / 401), and nobody gets a 500.
Reading is open to every logged-in user (apps/accounts/roles.py), so the review API's GETs are
"open" while its POSTs need the reviewer role (or the run's owner, for a harness edit).

Personas (tests/web/conftest.py): anonymous, viewer (logged in, no role), researcher (owns the
run), reviewer, admin (the admin role; not Django staff).
"""
from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from apps.corpora.models import Corpus, Document
from apps.episodes.models import Attempt, Task
from apps.evals.models import CrossPlay, EvalJob
from apps.review.models import ReviewItem
from apps.runs.models import Run

pytestmark = pytest.mark.django_db

PERSONAS = ("anonymous", "viewer", "researcher", "reviewer", "admin")
LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/"

ALL = ("viewer", "researcher", "reviewer", "admin")


def _get(viewer, researcher, reviewer, admin):
    return dict(viewer=viewer, researcher=researcher, reviewer=reviewer, admin=admin)


# access class -> (GET status per logged-in persona, personas whose POST must be refused)
ACCESS = {
    "open": (_get(200, 200, 200, 200), ()),  # any logged-in user may read
    "launch": (_get(403, 200, 403, 200), ("viewer", "reviewer")),  # the researcher role
    "review": (_get(403, 403, 200, 200), ("viewer", "researcher")),  # the reviewer role
    "corpus_admin": (_get(403, 403, 403, 200), ("viewer", "researcher", "reviewer")),  # upload_corpus: admin
    # POST-only actions (GET: 405 for everyone)
    "post_launch": (_get(405, 405, 405, 405), ("viewer", "reviewer")),
    "post_review": (_get(405, 405, 405, 405), ("viewer", "researcher")),
    "post_corpus_admin": (_get(405, 405, 405, 405), ("viewer", "researcher", "reviewer")),
    "owner_post": (_get(405, 405, 405, 405), ("viewer", "reviewer")),  # the run's owner or an admin
    # anyone reads; a POST changes something and needs the role
    "read_owner_post": (_get(200, 200, 200, 200), ("viewer", "reviewer")),
    "read_review_post": (_get(200, 200, 200, 200), ("viewer", "researcher")),
    "staff": (_get(*["staff"] * 4), ALL),  # Django admin / RQ dashboard: none of our personas is staff
    "logout": (_get(405, 405, 405, 405), ()),
}

# route (namespace:name or the pattern for unnamed ones) -> access class
RULES = {
    "home": "open",
    "login": "open",
    "logout": "logout",
    "api-token": "open",
    "users": "corpus_admin",  # the users page: manage_users, the admin role (as upload_corpus)
    "corpora:index": "open",
    "corpora:create": "post_corpus_admin",
    "corpora:detail": "open",
    "corpora:upload": "post_corpus_admin",
    "corpora:progress": "open",
    "corpora:resume": "post_corpus_admin",
    "corpora:search": "open",
    "corpora:document": "open",
    "runs:index": "open",
    "runs:new": "launch",
    "runs:estimate": "post_launch",
    "runs:workers": "open",
    "runs:compare": "open",
    "runs:detail": "open",
    "runs:controls": "open",
    "runs:samples": "open",
    "runs:ledger": "open",
    "runs:trajectory": "open",
    "runs:task": "open",  # a read: the task, its attempts and source document
    "runs:control": "owner_post",
    "runs:describe": "post_launch",  # name, tags and notes: researchers
    "runs:when": "open",  # the run page's polled "Started · heartbeat" line
    "review:index": "review",
    "review:item": "post_review",
    "review:bulk": "post_review",  # one verdict on the ticked items
    "review:run-panel": "open",
    "review:harness": "owner_post",
    "evals:index": "open",
    "evals:launch": "post_launch",
    "evals:create-benchmark": "post_launch",
    "evals:job": "open",
    "evals:cancel": "owner_post",
    "evals:crossplay-cancel": "owner_post",
    "evals:estimate": "open",  # the eval forms' estimate line (htmx GET): items x tokens and a measured time
    "evals:compare": "open",
    "evals:crossplay": "open",
    "evals:run-panel": "open",
    "evals:crossplay-launch": "post_launch",
    "schema": "open",
    "api-me": "open",
    "api-root": "open",
    "api-docs": "open",
    "api-redoc": "open",
    "api-corpora": "corpus_admin_post_read",
    "api-corpus": "open",
    "api-corpus-documents": "post_corpus_admin",
    "api-corpus-search": "open",
    "api-corpus-resume": "post_corpus_admin",
    "api-models": "open",  # GET only: the model catalog
    "api-runs": "read_launch_post",
    "api-run": "open",
    "api-run-metrics": "open",
    "api-run-action": "owner_post",
    "api-review-queue": "open",
    "api-review-item": "read_review_post",
    "api-review-agreement": "open",
    "api-review-harness": "read_owner_post",
    "api-evals": "read_launch_post",
    "api-eval-benchmarks": "read_launch_post",
    "api-eval-compare": "open",
    "api-eval": "open",
    "api-eval-samples": "open",
    "api-eval-cancel": "owner_post",
    "api-crossplay-cancel": "owner_post",
    "api-review-bulk": "post_review",
    "api-crossplay": "open",
    "api-run-crossplay": "read_launch_post",
    "api-run-export": "open",
}
ACCESS["corpus_admin_post_read"] = (ACCESS["open"][0], ACCESS["corpus_admin"][1])
ACCESS["read_launch_post"] = (ACCESS["open"][0], ACCESS["launch"][1])
# query strings some reads need ({run} and {run2} are filled in)
QUERY = {"runs:compare": "?ids={run},{run2}", "api-corpus-search": "?q=text&mode=lexical", "api-review-agreement": "?run={run}",
         "evals:compare": "?runs={run}", "api-eval-compare": "?runs={run}"}
STAFF_PREFIXES = ("admin/", "django-rq/")  # Django's admin and the RQ dashboard: staff only, whole subtrees


def _walk(patterns, prefix="", namespace=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            ns = f"{namespace}{p.namespace}:" if p.namespace else namespace
            yield from _walk(p.url_patterns, prefix + str(p.pattern), ns)
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), (f"{namespace}{p.name}" if p.name else None)


def routes() -> list[tuple[str, str]]:
    """(pattern, route key) for every URL pattern of the project."""
    return [(pattern, name or pattern) for pattern, name in _walk(get_resolver().url_patterns)]


def _rule(pattern: str, key: str) -> str | None:
    if pattern.startswith(STAFF_PREFIXES):
        return "staff"
    return RULES.get(key)


# ---- a concrete URL for each pattern --------------------------------------------------------
PARAM = re.compile(r"<(?:(\w+):)?(\w+)>|\(\?P<(\w+)>[^)]*\)")


def _url(pattern: str, ids: dict) -> str:
    def value(match):
        name = match.group(2) or match.group(3)
        return str(ids.get(name, ids["default"]))

    path = PARAM.sub(value, pattern)
    path = path.replace("^", "").replace("$", "").replace("\\.", ".").replace("/?", "/")
    path = re.sub(r"\(\?P<token>[^)]*\)\?", "", path)
    return "/" + path


@pytest.fixture
def world(researcher, reviewer, admin_user, reader):
    run = Run.objects.create(method="score", model_name="tiny", config={}, owner=researcher, status="finished")
    task = Task.objects.create(run=run, key="1:0", role="challenger", step=1, question="a question", answer="4")
    Attempt.objects.create(run=run, key="1:0", role="solver", step=1, text="an answer", task=task, task_key=task.key)
    other = Run.objects.create(method="grpo", model_name="tiny", config={}, owner=admin_user, status="finished")
    corpus = Corpus.objects.create(name="access-corpus")
    doc = Document.objects.create(corpus=corpus, title="d", content_hash="h", text="some text")
    item = ReviewItem.objects.create(run=run, run_number=run.pk, kind="task", key="1:t0")
    job = EvalJob.objects.create(model_spec="base:tiny", owner=researcher, status="finished")
    crossplay = CrossPlay.objects.create(run=run, owner=researcher, status="finished")
    ids = {"run_id": run.pk, "pk": corpus.pk, "doc_id": doc.pk, "item_id": item.pk, "job_id": job.pk,
           "crossplay_id": crossplay.pk, "action": "pause", "fmt": "jsonl",
           "queue_index": 0, "key": "1:0", "result_id": "none", "object_id": run.pk, "content_type_id": 1,
           "id": researcher.pk, "kind": "attempts", "app_label": "runs", "url": "nowhere/", "scheduler_index": 0,
           "connection_index": 0, "scheduler_name": "none", "cron_job_name": "none", "run2": other.pk, "default": 1}
    users = {"viewer": reader, "researcher": researcher, "reviewer": reviewer, "admin": admin_user}
    return ids, users


def _client(users, persona) -> Client:
    client = Client()
    if persona != "anonymous":
        client.force_login(users[persona])
    return client


def test_every_route_has_an_access_rule():
    missing = [(pattern, key) for pattern, key in routes() if _rule(pattern, key) is None]
    assert not missing, f"routes without an access rule in tests/web/test_url_access.py RULES: {missing}"


def _check_anonymous(url: str, response) -> str | None:
    if url.startswith("/api/"):
        if response.status_code not in (401, 403) or "json" not in response.get("Content-Type", ""):
            return f"anonymous API got {response.status_code} {response.get('Content-Type')}"
        return None
    if url.startswith(LOGIN):
        return None if response.status_code in (200, 405) else f"the login page answered {response.status_code}"
    location = response.get("Location", "")
    if response.status_code != 302 or not location.startswith(LOGIN):
        return f"anonymous page got {response.status_code} -> {location!r} (expected the login redirect)"
    return None


def _check(expected, response) -> str | None:
    if expected == "staff":  # the admin login (directly or via /admin/), or 401/403 from a token-checked view
        location = response.get("Location", "")
        ok = response.status_code == 302 and location.startswith(("/admin/login/", "/admin/"))
        ok = ok or response.status_code in (401, 403)
        ok = ok or response.status_code == 200 and response.request["PATH_INFO"].startswith(ADMIN_LOGIN)
        return None if ok else f"got {response.status_code} -> {location!r}, expected the admin login"
    if response.status_code != expected:
        return f"got {response.status_code}, expected {expected}"
    return None


def test_every_route_answers_every_persona_as_its_rule_says(world):
    ids, users = world
    problems = []
    for persona in PERSONAS:
        client = _client(users, persona)
        for pattern, key in routes():
            rule = _rule(pattern, key)
            url = _url(pattern, ids) + QUERY.get(key, "").format(run=ids["run_id"], run2=ids["run2"])
            response = client.get(url)
            if response.status_code >= 500:
                problems.append(f"GET {url} as {persona}: {response.status_code}")
                continue
            if persona == "anonymous":
                problem = _check_anonymous(url, response)
            else:
                problem = _check(ACCESS[rule][0][persona], response)
            if problem:
                problems.append(f"GET {url} ({key}, {rule}) as {persona}: {problem}")
    assert not problems, "\n".join(problems)


REFUSED = (403, 405)  # 405: the route takes no POST at all


def test_posts_are_refused_without_the_role_and_never_fail(world):
    ids, users = world
    problems = []
    for persona in PERSONAS:
        client = _client(users, persona)
        for pattern, key in routes():
            rule = _rule(pattern, key)
            if rule in ("staff", "logout"):
                continue  # Django's own admin (covered by its GET rule); logging out would end the persona
            url = _url(pattern, ids)
            response = client.post(url, {})
            if response.status_code >= 500:
                problems.append(f"POST {url} as {persona}: {response.status_code}")
            elif persona == "anonymous" and not url.startswith(LOGIN):
                problem = _check_anonymous(url, response)
                if problem:
                    problems.append(f"POST {url} as anonymous: {problem}")
            elif persona in ACCESS[rule][1] and response.status_code not in REFUSED:
                problems.append(f"POST {url} ({key}) as {persona}: got {response.status_code}, expected 403")
    assert not problems, "\n".join(problems)
