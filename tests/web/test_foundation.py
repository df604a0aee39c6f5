import json
import os
import subprocess
import sys

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.utils import timezone

PAGES = ["/", "/runs/", "/corpora/", "/review/", "/evals/", "/accounts/token/"]


def test_it_redirects_anonymous_pages_to_login(client, db):
    for url in PAGES:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/"), url


def test_it_serves_the_login_page(client, db):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b"Log in to Selfplay" in response.content


def test_it_refuses_anonymous_api_with_json(client, db):
    for url in ["/api/v1/me/", "/api/v1/schema/"]:
        response = client.get(url)
        assert response.status_code in (401, 403), url
        assert "error" in json.loads(response.content)


def test_it_shows_home_with_navigation_when_logged_in(client, reader):
    client.force_login(reader)
    response = client.get("/")
    assert response.status_code == 200
    for label in [b"Runs", b"Corpora", b"Review", b"Evals"]:
        assert label in response.content


@pytest.mark.django_db(transaction=True)
def test_the_roles_are_made_again_after_a_flush():
    """`manage.py flush` (and the flush that ends each transactional test) empties auth_group; the roles come back
    with their permissions, so a test or a site after a flush does not find its researchers without a role."""
    from django.contrib.auth.models import Group
    from django.core.management import call_command

    Group.objects.all().delete()
    call_command("flush", interactive=False, verbosity=0)
    perms = {g.name: set(g.permissions.values_list("codename", flat=True)) for g in Group.objects.all()}
    assert set(perms) == {"researcher", "reviewer", "admin"} and perms["reviewer"] == {"review_items"}
    assert "launch_run" in perms["researcher"]


def test_it_creates_roles_with_permissions(db):
    from django.contrib.auth.models import Group

    perms = {g.name: set(g.permissions.values_list("codename", flat=True)) for g in Group.objects.all()}
    assert "launch_run" in perms["researcher"] and "review_items" not in perms["researcher"]
    assert perms["reviewer"] == {"review_items"}
    assert {"upload_corpus", "manage_users"} <= perms["admin"]


def test_it_reports_roles_through_token_auth(client, reviewer):
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=reviewer)
    response = client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert response.status_code == 200
    assert response.json()["permissions"] == ["review_items"]
    bad = client.get("/api/v1/me/", HTTP_AUTHORIZATION="Token nope")
    assert bad.status_code == 401 and "token" in bad.json()["error"].lower()


def test_the_api_root_says_where_to_start(client, reviewer):
    """GET /api/v1/ was a 404: the first URL a researcher tries. It lists the collections (every link answers) and
    sends a browser to the documentation page."""
    from rest_framework.authtoken.models import Token

    auth = {"HTTP_AUTHORIZATION": f"Token {Token.objects.create(user=reviewer).key}"}
    data = client.get("/api/v1/", **auth).json()
    assert data["docs"] == "/api-docs/" and "/api/v1/runs/" in data["endpoints"]
    assert data["endpoints"]["/api/v1/me/"]["what"].startswith("who this token is")
    for url in data["endpoints"]:
        assert client.get(url + ("?format=json" if "schema" in url else ""), **auth).status_code == 200, url
    assert client.get("/api/v1/").status_code in (401, 403)  # no token: the API's refusal, as everywhere
    client.force_login(reviewer)
    assert client.get("/api/v1/", HTTP_ACCEPT="text/html").url == "/api-docs/"


def test_it_has_the_vector_extension(db):
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        assert cur.fetchone()[0].startswith("0.8")


@pytest.mark.django_db(transaction=True)
def test_a_job_enqueued_from_django_runs_on_a_real_worker(rq_queues):
    import django_rq

    from apps.accounts.jobs import clear_expired_sessions

    store = SessionStore()
    store.create()
    Session.objects.filter(session_key=store.session_key).update(expire_date=timezone.now() - timezone.timedelta(days=1))
    job = django_rq.get_queue("default").enqueue(clear_expired_sessions)
    django_rq.get_worker("default").work(burst=True)
    job.refresh()
    assert job.is_finished and job.return_value() >= 1
    assert not Session.objects.filter(session_key=store.session_key).exists()


# The environment as it was at collection: a test elsewhere may point SELFPLAY_DATA_DIR at a temporary dir.
BASE_ENV = dict(os.environ)


def _manage(*args, env=None):
    full_env = {**BASE_ENV, **(env or {})}
    return subprocess.run([sys.executable, "manage.py", *args], capture_output=True, text=True, env=full_env, timeout=60)


def test_services_status_reports_both():
    result = _manage("services", "status")
    assert result.returncode == 0, result.stderr
    assert "postgres" in result.stdout and "redis" in result.stdout
    assert result.stdout.count("running") == 2


@pytest.mark.parametrize("name,value,needle", [
    ("DATABASE_URL", "mysql:/nope", "DATABASE_URL"),
    ("REDIS_URL", "http://x", "REDIS_URL"),
    ("DEBUG", "maybe", "DEBUG"),
    ("SELFPLAY_UPLOAD_MAX_MB", "lots", "SELFPLAY_UPLOAD_MAX_MB"),
    ("SELFPLAY_SEARCH_WORKERS", "0", "SELFPLAY_SEARCH_WORKERS='0' must be at least 1"),
])
def test_bad_settings_give_a_readable_error(name, value, needle):
    result = _manage("check", env={name: value})
    assert result.returncode != 0
    assert needle in result.stderr and "Traceback" not in result.stderr


@pytest.fixture
def empty_database(db):
    """The URL of a fresh, never-migrated database on the same Postgres (dropped afterwards)."""
    from urllib.parse import urlsplit, urlunsplit

    from django.db import connection

    from selfplay_web import config

    name = f"selfplay_unmigrated_{os.getpid()}"
    with connection.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cur.execute(f'CREATE DATABASE "{name}"')
    yield urlunsplit(urlsplit(config.database_url())._replace(path="/" + name))
    with connection.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("args", [("load_wikipedia", "--limit", "1"), ("search", "wikipedia", "mona lisa"),
                                  ("launch", "grpo"), ("reap_runs",), ("ensure_admin",)])
def test_a_command_on_a_database_never_migrated_says_run_migrate(empty_database, args):
    result = _manage(*args, env={"DATABASE_URL": empty_database})
    assert result.returncode != 0
    assert "run `python manage.py migrate` first" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "does not exist" not in result.stderr


def test_no_runtime_dir_warning_without_xdg_runtime_dir():
    env = {k: v for k, v in BASE_ENV.items() if k != "XDG_RUNTIME_DIR"}
    result = subprocess.run([sys.executable, "manage.py", "services", "status"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "RuntimeDirWarning" not in result.stderr and "XDG_RUNTIME_DIR" not in result.stderr
