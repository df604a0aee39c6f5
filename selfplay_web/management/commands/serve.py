"""`manage.py serve [--port 8000] [--workers N]`: the ASGI server (pages, API and websockets) via daphne.

One daphne process runs Python on one core. With ``--workers N`` (default: ``SELFPLAY_WEB_WORKERS``,
else the number of CPUs this process may use, at most 8) this command opens the listening socket and
then becomes (``os.execv``, same pid) the small supervisor in selfplay_web/serve_supervisor.py, which
starts N daphne processes that all accept on that socket (the kernel hands each connection to one of
them); the Redis channel layer carries every run's live messages to all of them. A worker that exits
is started again, SIGTERM / SIGINT (Ctrl-C) stop the workers, and a worker dies with the supervisor
even when it is SIGKILLed, so nothing is left holding the port. ``--workers 1`` serves in this
process, as before.

benchmarks/load.py: one process could not keep 200 live viewers at 1,000 metric values/s (see
benchmarks/RESULTS.md, "Load").
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

MAX_DEFAULT_WORKERS = 8
POOL_MAX_SIZE = 16  # Postgres connections per server process at most (requests beyond wait for one)
# Pooled connections of all server processes together: well under Postgres' default max_connections
# (100), which the RQ workers, their runs and the reaper share with the web.
POOL_BUDGET = 48
PROCESSES_ENV = "SELFPLAY_SERVE_PROCESSES"  # set by the supervisor for its workers


def default_workers() -> int:
    """SELFPLAY_WEB_WORKERS, else one worker per usable CPU (at most 8)."""
    raw = os.environ.get("SELFPLAY_WEB_WORKERS", "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise CommandError(f"SELFPLAY_WEB_WORKERS must be a whole number of processes, got {raw!r}") from None
        if value < 1:
            raise CommandError(f"SELFPLAY_WEB_WORKERS must be at least 1, got {value}")
        return value
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_DEFAULT_WORKERS))


def daphne_argv(host: str, port: int, fd: int | None) -> list[str]:
    """daphne's command line: on ``fd`` (a socket opened by the supervisor) or on host:port."""
    where = ["--fd", str(fd)] if fd is not None else ["-b", host, "-p", str(port)]
    # daphne's --proxy-headers makes the first X-Forwarded-For entry the client address (REMOTE_ADDR),
    # trusting whoever sent it: only behind the TLS proxy (SELFPLAY_BEHIND_PROXY), else any client could
    # pick its address and step around the login throttle (apps/accounts/throttle.py)
    proxy = ["--proxy-headers"] if getattr(settings, "SECURE_PROXY_SSL_HEADER", None) else []
    # a websocket handshake may wait longer than daphne's 5 s default while many pages connect at once
    # on a busy machine (benchmarks/load.py: most of 200 viewers were dropped with 5 s)
    return ["daphne", *where, *proxy, "--websocket_connect_timeout", "30", "selfplay_web.asgi:application"]


class Command(BaseCommand):
    help = "Serve pages, the API and websockets (daphne, ASGI; several worker processes on one port)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--workers", type=int, default=None,
                            help="server processes (default: SELFPLAY_WEB_WORKERS, else the CPU count, at most 8)")
        parser.add_argument("--fd", type=int, default=None, help=argparse.SUPPRESS)  # a worker's inherited socket

    def handle(self, port, host, workers, fd, **options):
        if fd is not None:  # a worker started by the supervisor below
            return run_daphne(host, port, fd)
        workers = default_workers() if workers is None else workers
        if workers < 1:
            raise CommandError(f"--workers must be at least 1, got {workers}")
        if workers == 1:
            return run_daphne(host, port, None)
        supervise(listen(host, port), host, port, workers)


def pool_database_connections() -> bool:
    """Requests share pooled Postgres connections (psycopg_pool) instead of opening one each.

    Daphne runs every request's sync code in a thread of its own, so persistent connections
    (CONN_MAX_AGE) cannot help there; without a pool each API call paid a new connection (a
    Postgres backend process started and authenticated). Set here, for the server only; a
    DATABASES entry that already configures ``pool`` or CONN_MAX_AGE is left as it is.
    """
    from django.conf import settings

    db = settings.DATABASES["default"]
    options = db.setdefault("OPTIONS", {})
    if "postgresql" not in db.get("ENGINE", "") or "pool" in options or db.get("CONN_MAX_AGE"):
        return False
    try:
        import psycopg_pool  # noqa: F401
    except ImportError:
        return False
    processes = max(1, int(os.environ.get(PROCESSES_ENV) or 1))
    options["pool"] = {"min_size": 2, "max_size": pool_size(processes), "timeout": 60}
    return True


def pool_size(processes: int) -> int:
    """Connections one server process may pool: POOL_BUDGET shared by all, 2..POOL_MAX_SIZE each
    (1 process -> 16, 4 -> 12, 8 -> 6)."""
    return max(2, min(POOL_MAX_SIZE, POOL_BUDGET // processes))


WARM_EMBEDDER_ENV = "SELFPLAY_WARM_EMBEDDER"  # "0": a server process starts without loading the embedders


def warm_embedders():
    """In the background: load the corpora's embedders before the first search asks (apps/corpora/embedder.py).
    Returns the thread doing it, or None when ``SELFPLAY_WARM_EMBEDDER=0`` turns the warm-up off."""
    import threading

    if os.environ.get(WARM_EMBEDDER_ENV, "1") == "0":
        return None

    def warm():
        from django.db import connection

        from apps.corpora.embedder import warm_up

        try:
            warm_up()
        except Exception as exc:  # noqa: BLE001  a server starts whatever the database says
            print(f"embedder warm-up skipped: {exc}", file=sys.stderr)
        finally:
            connection.close()

    thread = threading.Thread(target=warm, name="warm-embedders", daemon=True)
    thread.start()
    return thread


def run_daphne(host: str, port: int, fd: int | None) -> None:
    from daphne.cli import CommandLineInterface

    pool_database_connections()
    warm_embedders()
    sys.argv = daphne_argv(host, port, fd)
    CommandLineInterface.entrypoint()


def listen(host: str, port: int) -> socket.socket:
    """The listening socket the workers share, inheritable across exec."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CommandError(f"cannot listen on {host}:{port} ({exc.strerror}); "
                           "is another server on that port? Pick another with --port") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def supervise(sock: socket.socket, host: str, port: int, workers: int) -> None:
    """Become the Django-free supervisor (same pid): it keeps ``sock`` and starts the workers."""
    import selfplay_web

    script = Path(selfplay_web.__file__).with_name("serve_supervisor.py")
    manage = Path(sys.argv[0]).resolve()
    sys.stdout.flush()
    sys.stderr.flush()
    os.environ[PROCESSES_ENV] = str(workers)  # inherited by the workers: their share of POOL_BUDGET
    os.execv(sys.executable, [sys.executable, str(script), "--fd", str(sock.fileno()), "--host", host,
                              "--port", str(port), "--workers", str(workers), "--manage", str(manage)])
