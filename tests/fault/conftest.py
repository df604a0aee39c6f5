"""Fault-injection fixtures: a Redis server of our own, real `manage.py rqworker` subprocesses,
and the tiny grpo run of the run tests.

- ``fault_redis``: a ``redis-server`` this session starts on a spare port (never the system one on
  6379), without persistence; ``stop()`` / ``start()`` simulate an outage and a restart. RQ queues
  and the channel layer of the test process point at it (settings override).
- ``worker(*queues, **env)``: a real ``manage.py rqworker`` in its own process group, connected to
  the test database (``application_name=selfplay-fault-worker``, so a test can find and terminate
  its Postgres sessions) and to ``fault_redis``; killed at the end of the test.
- personas (researcher) and roles, from the web tests.

Tests here run the real trainer on a tiny random-init model (tests/trainer/conftest.py) and are
marked ``fault``; each takes a few seconds to a minute.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.db import connection

from tests.web.conftest import researcher  # noqa: F401  (fixtures)
from tests.web.runs.conftest import roles, run_env, tiny_grpo, web_dirs  # noqa: F401  (fixtures)
from tests.trainer.conftest import smollm2_tokenizer, tiny_model_dir, tiny_prompts_path  # noqa: F401

APP_NAME = "selfplay-fault-worker"
HEARTBEAT_SECONDS = 6  # the worker's heartbeat window in these tests (settings default: 30)


def pytest_configure(config):
    config.addinivalue_line("markers", "fault: fault-injection test against real services (tests/fault)")


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/fault/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.fault)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server on 127.0.0.1:<port> that a test may stop and start again (same port)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture(scope="session")
def _redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("fault-redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def fault_redis(_redis_server, settings):
    """Queues and channel layer of this process on our own Redis, running and empty at the start."""
    if _redis_server.proc is None or _redis_server.proc.poll() is not None:
        _redis_server.start()
    url = _redis_server.url
    settings.RQ_QUEUES = {name: {**cfg, "URL": url} for name, cfg in settings.RQ_QUEUES.items()}
    layers = {**settings.CHANNEL_LAYERS["default"]}
    layers["CONFIG"] = {**layers["CONFIG"], "hosts": [url]}
    settings.CHANNEL_LAYERS = {"default": layers}
    settings.RUN_HEARTBEAT_SECONDS = HEARTBEAT_SECONDS
    import django_rq

    django_rq.get_connection("default").flushdb()
    yield _redis_server
    if _redis_server.proc is None:
        _redis_server.start()


def test_database_url() -> str:
    """DATABASE_URL of the test database (this process is connected to it), tagged for pg_stat_activity."""
    from selfplay_web import config

    parts = urlsplit(config.database_url())
    query = "&".join(q for q in (parts.query, f"application_name={APP_NAME}") if q)
    return urlunsplit(parts._replace(path="/" + settings.DATABASES["default"]["NAME"], query=query))


test_database_url.__test__ = False  # a helper, not a test


class Worker:
    def __init__(self, proc: subprocess.Popen, log: Path):
        self.proc, self.log = proc, log

    def kill(self, sig=signal.SIGKILL) -> None:
        """Signal the RQ parent and every descendant (the work horse calls setsid: not in our group)."""
        if self.proc.poll() is None:
            for pid in [*_descendants(self.proc.pid), self.proc.pid]:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            self.proc.wait(timeout=30)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _descendants(pid: int) -> list[int]:
    """Child processes of ``pid``, recursively, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


@pytest.fixture
def worker(fault_redis, web_dirs, tmp_path):  # noqa: F811
    """Start real rqworker subprocesses: ``worker("cpu", scheduler=True, **extra_env)``."""
    started: list[Worker] = []

    def start(*queues: str, scheduler: bool = False, **extra_env) -> Worker:
        env = {**os.environ, "DATABASE_URL": test_database_url(), "REDIS_URL": fault_redis.url,
               "SELFPLAY_DATA_DIR": str(web_dirs), "SELFPLAY_DATASETS_DIR": str(web_dirs / "prompts"),
               "SELFPLAY_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
               "SELFPLAY_TORCH_THREADS": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
               "PYTHONUNBUFFERED": "1", **{k: str(v) for k, v in extra_env.items()}}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        log = tmp_path / f"worker-{len(started)}.log"
        args = [sys.executable, "manage.py", "rqworker", *queues, "--worker-class", "apps.runs.workers.SelfplayWorker"]
        if scheduler:
            args.append("--with-scheduler")
        with open(log, "wb") as out:
            proc = subprocess.Popen(args, env=env, cwd=settings.BASE_DIR, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        started.append(Worker(proc, log))
        return started[-1]

    yield start
    for w in started:
        w.kill(signal.SIGKILL)
    wait_for_other_sessions_to_close()


def wait_for_other_sessions_to_close(seconds: float = 20) -> None:
    """Killed workers' and servers' database sessions end a moment after the processes (the test db is flushed /
    dropped later). This process's own sessions (TEST_PROCESS_APP, tests/conftest.py) are not waited for."""
    from tests.conftest import TEST_PROCESS_APP

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND pid <> pg_backend_pid() AND application_name IS DISTINCT FROM %s", [TEST_PROCESS_APP])
            if cur.fetchone()[0] == 0:
                return
        time.sleep(0.2)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05, on_timeout=None):
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` (and a worker log) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    detail = on_timeout() if on_timeout else ""
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{detail[-4000:]}")
