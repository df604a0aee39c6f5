"""`manage.py serve --workers 2`: two daphne processes on one port, live messages reach viewers on
every process, and the workers never outlive the command (SIGTERM stops them; so does a SIGKILL of
the command, through PR_SET_PDEATHSIG), so the port is free again at once."""
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest
from django.conf import settings

from selfplay_web.management.commands.serve import default_workers
from apps.runs.live import publish
from apps.runs.models import Run
from tests.fault.conftest import free_port, test_database_url, wait_for_other_sessions_to_close
from tests.web.test_websocket_and_browser import _session_cookie

pytestmark = pytest.mark.django_db(transaction=True)
VIEWERS = 8


def _start(port: int, redis_url: str, workers: int) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": test_database_url(), "REDIS_URL": redis_url}
    proc = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port), "--workers", str(workers)],
                            env=env, cwd=settings.BASE_DIR, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2)
            return proc
        except OSError:
            assert proc.poll() is None, f"manage.py serve exited with {proc.returncode}"
            time.sleep(0.3)
    proc.kill()
    raise AssertionError("manage.py serve --workers 2 did not answer within 120 s")


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


async def _viewers_all_get_one_message(port: int, run_id: int, cookie: str) -> list[dict]:
    from websockets.asyncio.client import connect

    base = f"http://127.0.0.1:{port}"
    sockets = []
    for _ in range(VIEWERS):
        ws = await connect(f"ws://127.0.0.1:{port}/ws/runs/{run_id}/", origin=base,
                           additional_headers={"Cookie": cookie}, open_timeout=30)
        assert json.loads(await asyncio.wait_for(ws.recv(), 30))["snapshot"]
        sockets.append(ws)
    assert await asyncio.to_thread(publish, run_id, {"type": "status", "status": "running", "message": "hello"})
    got = [json.loads(await asyncio.wait_for(ws.recv(), 30)) for ws in sockets]
    for ws in sockets:
        await ws.close()
    return got


def test_workers_share_the_port_relay_live_messages_and_die_with_the_command(roles, researcher, private_redis):
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, owner=researcher, total_steps=3)
    cookie = _session_cookie(researcher)
    port = free_port()
    proc = _start(port, private_redis, workers=2)
    try:
        workers = psutil.Process(proc.pid).children()
        assert len(workers) == 2 and all("--fd" in " ".join(w.cmdline()) for w in workers)
        got = asyncio.run(_viewers_all_get_one_message(port, run.pk, cookie))
        assert [m["message"] for m in got] == ["hello"] * VIEWERS
        assert len({m["seq"] for m in got}) == 1  # one message, one number, every viewer

        proc.send_signal(signal.SIGKILL)  # the command dies without a chance to clean up
        proc.wait(timeout=20)
        gone, alive = psutil.wait_procs(workers, timeout=20)
        assert not alive, f"workers outlived a killed manage.py serve: {[p.pid for p in alive]}"
        assert _port_is_free(port)

        proc = _start(port, private_redis, workers=2)  # the same port again at once
        workers = psutil.Process(proc.pid).children()
        proc.send_signal(signal.SIGTERM)  # Ctrl-C / make demo's stop
        assert proc.wait(timeout=30) == 0
        gone, alive = psutil.wait_procs(workers, timeout=20)
        assert not alive
    finally:
        if proc.poll() is None:
            proc.kill()
        wait_for_other_sessions_to_close()


def test_the_default_worker_count_follows_the_cpus_or_the_environment(monkeypatch):
    monkeypatch.delenv("SELFPLAY_WEB_WORKERS", raising=False)
    assert default_workers() == max(1, min(len(os.sched_getaffinity(0)), 8))
    monkeypatch.setenv("SELFPLAY_WEB_WORKERS", "3")
    assert default_workers() == 3
    from django.core.management.base import CommandError

    monkeypatch.setenv("SELFPLAY_WEB_WORKERS", "many")
    with pytest.raises(CommandError, match="SELFPLAY_WEB_WORKERS must be a whole number"):
        default_workers()


def test_the_workers_pools_together_stay_within_the_budget(monkeypatch):
    from django.conf import settings

    from selfplay_web.management.commands import serve

    assert [serve.pool_size(n) for n in (1, 2, 4, 8, 64)] == [16, 16, 12, 6, 2]
    assert all(n * serve.pool_size(n) <= serve.POOL_BUDGET for n in (3, 4, 5, 8))
    # a copy of the entry, put back afterwards (the test's own connection keeps its settings)
    monkeypatch.setitem(settings.DATABASES, "default", {**settings.DATABASES["default"], "OPTIONS": {}, "CONN_MAX_AGE": 0})
    monkeypatch.setenv(serve.PROCESSES_ENV, "8")  # what the supervisor hands its 8 workers
    assert serve.pool_database_connections()
    assert settings.DATABASES["default"]["OPTIONS"]["pool"]["max_size"] == 6
