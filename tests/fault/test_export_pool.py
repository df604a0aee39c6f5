"""Many concurrent export downloads against the real server (``manage.py serve --workers 1``: daphne with
its pooled database connections) leave it answering.

Three times as many ``GET /api/v1/runs/<id>/export/attempts.jsonl`` as the process has pooled connections
are sent at once. Each one is either a complete file (200) or a clear "too many exports" (429 with
``Retry-After``): no 500, no request left hanging. Afterwards an ordinary API request and another export
still answer (well within the pool's 60 s wait for a connection), and the server holds no more database
sessions than its pool allows.

(Before exports released the request's connection and were capped per process, every export held two
pooled connections at once; with 48 of them the pool ran dry, the downloads failed or hung, and the error
path never gave the request's connection back: every later database request of that process failed.)
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings
from django.db import connection

from apps.runs.models import Run
from apps.runs.sink import DjangoSink
from selfplay_web.management.commands.serve import pool_size
from tests.fault.conftest import APP_NAME, free_port, test_database_url, wait_for_other_sessions_to_close
from tests.web.export.conftest import NO_REVIEW, records

pytestmark = pytest.mark.django_db(transaction=True)

POOL = pool_size(1)  # pooled connections of a single server process
CONCURRENT = 3 * POOL


class OneProcessServer:
    """``manage.py serve --workers 1`` on a spare port, its output in ``log``."""

    def __init__(self, redis_url: str, log):
        self.port, self.log = free_port(), log
        self.env = {**os.environ, "DATABASE_URL": test_database_url(), "REDIS_URL": redis_url}
        self.env.pop("DJANGO_SETTINGS_MODULE", None)
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "manage.py", "serve", "--workers", "1", "--port",
                                          str(self.port)], env=self.env, cwd=settings.BASE_DIR, stdout=out,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.base + "/accounts/login/", timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        self.kill()
        raise RuntimeError("manage.py serve did not answer within 90 s:\n" + self.output())

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=20)


@pytest.fixture
def server(fault_redis, tmp_path):
    srv = OneProcessServer(fault_redis.url, tmp_path / "serve.log")
    yield srv
    srv.kill()
    wait_for_other_sessions_to_close()


def _get(url: str, token: str, timeout: float = 45):
    """(status, headers, body) of a GET, or ("timeout", {}, b"") when no complete answer came in time."""
    request = urllib.request.Request(url, headers={"Authorization": f"Token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()
    except (OSError, http_client_errors()) as exc:
        return f"failed: {type(exc).__name__}: {exc}", {}, b""


def http_client_errors():
    import http.client

    return http.client.HTTPException


def _server_sessions() -> int:
    """Database sessions the server holds on the test database (tagged with the fault tests' application name)."""
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
                    [APP_NAME])
        return cur.fetchone()[0]


def test_three_times_the_pool_of_concurrent_exports_leave_the_server_answering(roles, researcher, server):
    from rest_framework.authtoken.models import Token

    run = Run.objects.create(method="spice", model_name="tiny", config=NO_REVIEW, owner=researcher, status="running",
                             total_steps=3)
    sink = DjangoSink(run)
    for step in (1, 2, 3):
        sink.samples(step, records(step))
    sink.close()
    attempts = run.attempts.count()
    token = Token.objects.create(user=researcher).key
    url = f"{server.base}/api/v1/runs/{run.pk}/export/attempts.jsonl"

    with ThreadPoolExecutor(CONCURRENT) as pool:
        answers = list(pool.map(lambda _: _get(url, token), range(CONCURRENT)))

    statuses = [status for status, _, _ in answers]
    assert set(statuses) <= {200, 429}, f"answers to {CONCURRENT} concurrent exports: {statuses}\n{server.output()}"
    assert 200 in statuses
    for status, headers, body in answers:
        if status == 200:  # a complete file
            assert [json.loads(line)["run_id"] for line in body.splitlines()] == [run.pk] * attempts
        else:  # a clear refusal that says when to try again
            assert int(headers["Retry-After"]) >= 1
            assert "export" in json.loads(body)["error"]

    # then they still answer: a request that found the pool dry would wait out the pool's 60 s for a
    # connection (serve's pool "timeout") and come back as a timeout at half that, not a slow success
    status, _, body = _get(f"{server.base}/api/v1/runs/{run.pk}/", token, timeout=30)
    assert status == 200 and json.loads(body)["id"] == run.pk, f"{status} {body[:300]!r}\n{server.output()}"
    status, _, body = _get(url, token, timeout=30)
    assert status == 200 and len(body.splitlines()) == attempts, f"{status}\n{server.output()}"
    assert _server_sessions() <= POOL
