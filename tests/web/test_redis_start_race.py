"""`manage.py services start` run by several processes at once starts ONE Redis, and every process gets its URL.

Finding (issue 34, the product on a GPU machine with no Redis running): `scripts/serve.sh web` and `scripts/serve.sh
worker gpu` each begin with `services start`; started together, each saw no Redis and started its own redis-server,
and the state file named whichever wrote last, so the web and a worker could talk to different servers (runs queued
that no worker saw). The Redis start now holds a file lock, as the Postgres start does."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from selfplay_web import services

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs a redis-server binary")

STARTERS = 4

# Each process waits for the go file, then does what `services start` does for Redis; the default port is one where
# nothing listens (this machine's own Redis on 6379 would otherwise be found and used).
CHILD = """
import os, sys, time
from pathlib import Path
from selfplay_web import services
services.DEFAULT_REDIS_URL = sys.argv[2]
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.001)
print(services.redis_start().url)
"""


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _servers_on(urls: set[str]) -> list[psutil.Process]:
    """The redis-servers listening on these URLs' ports (a daemonized redis-server's title is "redis-server HOST:PORT")."""
    ports = {u.rsplit(":", 1)[1].split("/")[0] for u in urls}
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or []).strip()
        except psutil.Error:
            continue
        if "redis-server" in cmd and any(cmd.endswith(f"127.0.0.1:{port}") for port in ports):
            found.append(proc)
    return found


def test_processes_starting_the_services_together_share_one_redis(tmp_path):
    data = tmp_path / "data"
    go = tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(SELFPLAY_DATA_DIR=str(data), PYTHONPATH=str(Path(services.__file__).resolve().parents[1]))
    dead = f"redis://127.0.0.1:{_dead_port()}/0"
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(go), dead], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(STARTERS)]
    urls: set[str] = set()
    try:
        time.sleep(3.0)  # every child imported and waiting
        go.touch()
        outs = [p.communicate(timeout=60) for p in procs]
        assert all(p.returncode == 0 for p in procs), [err[-800:] for _, err in outs]
        urls = {out.strip() for out, _ in outs}
        # without the lock, each of the 4 processes started a server of its own and printed its URL
        assert len(urls) == 1, f"{len(urls)} redis-servers started for one data dir: {sorted(urls)}"
        assert urls == {(data / "redis" / "redis.url").read_text().strip()}
        assert services._redis_ping(next(iter(urls)))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in _servers_on(urls | {f"redis://127.0.0.1:{p}/0" for p in _ports_in(data)}):
            proc.kill()


def _ports_in(data: Path) -> set[str]:
    state = data / "redis" / "redis.url"
    return {state.read_text().strip().rsplit(":", 1)[1].split("/")[0]} if state.exists() else set()
