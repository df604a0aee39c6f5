"""The web server (``manage.py serve``: daphne) is killed and started again while a run reports.

A viewer holds a real websocket to the server; the server is SIGKILLed; the run keeps writing
through its DjangoSink (the worker never needs the web server); the server comes back on the same
port; the viewer reconnects, gets the run's current status, catches up from the metrics API on
the steps reported while the server was down, and live messages flow again. Nothing is lost.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from django.conf import settings
from django.db import connection

from apps.runs.models import Run
from apps.runs.sink import DjangoSink
from tests.fault.conftest import free_port, test_database_url, wait_for_other_sessions_to_close
from tests.web.test_websocket_and_browser import _session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


class Server:
    def __init__(self, redis_url: str):
        self.port = free_port()
        self.env = {**os.environ, "DATABASE_URL": test_database_url(), "REDIS_URL": redis_url}
        self.proc: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(self.port)], env=self.env,
                                     cwd=settings.BASE_DIR, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.base + "/accounts/login/", timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("manage.py serve did not answer within 90 s")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=20)


@pytest.fixture
def server(fault_redis):
    srv = Server(fault_redis.url)
    srv.start()
    yield srv
    srv.kill()
    wait_for_other_sessions_to_close()


def _report(run_id: int, step: int) -> None:
    try:
        sink = DjangoSink(run_id)
        sink.metrics(step, "solver", {"reward_mean": step / 10})
        sink.control()
    finally:
        connection.close()


def _get_json(url: str, cookie: str) -> dict:
    request = urllib.request.Request(url, headers={"Cookie": cookie})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


async def _open(server: Server, run_id: int, cookie: str):
    from websockets.asyncio.client import connect

    ws = await connect(server.base.replace("http", "ws") + f"/ws/runs/{run_id}/", origin=server.base,
                       additional_headers={"Cookie": cookie}, open_timeout=30)
    snapshot = json.loads(await asyncio.wait_for(ws.recv(), 30))
    assert snapshot["type"] == "status" and snapshot.get("snapshot")
    return ws, snapshot


async def _next_metric(ws) -> dict:
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 30))
        if message.get("type") == "metric":
            return message


def test_a_restarted_web_server_loses_nothing_and_viewers_reconnect(roles, researcher, server):
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, owner=researcher, total_steps=6)
    run.mark_running("w")
    cookie = _session_cookie(researcher)

    async def scenario():
        ws, _ = await _open(server, run.pk, cookie)
        await asyncio.to_thread(_report, run.pk, 1)
        assert (await _next_metric(ws))["step"] == 1

        server.kill()
        with pytest.raises(Exception):  # the socket is gone with the server
            await asyncio.wait_for(ws.recv(), 10)
        for step in (2, 3):  # the run goes on meanwhile
            await asyncio.to_thread(_report, run.pk, step)
        await asyncio.to_thread(server.start)

        ws, snapshot = await _open(server, run.pk, cookie)  # the page reconnects
        assert snapshot["status"] == "running" and snapshot["step"] == 3
        missed = await asyncio.to_thread(
            _get_json, f"{server.base}/api/v1/runs/{run.pk}/metrics/?name=reward_mean&since_step=1", cookie)
        assert [s for series in missed["series"] for s in series["steps"]] == [2, 3]
        await asyncio.to_thread(_report, run.pk, 4)
        assert (await _next_metric(ws))["step"] == 4  # live again
        await ws.close()

    asyncio.run(scenario())
    assert sorted(run.metrics.values_list("step", flat=True)) == [1, 2, 3, 4]
