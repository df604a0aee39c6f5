"""`manage.py serve [--port 8000] [--workers N]`: the ASGI server (pages, API and websockets) via daphne.

One daphne process runs Python on one core. With ``--workers N`` (default: ``SELFPLAY_WEB_WORKERS``,
else the number of CPUs this process may use, at most 8) this process opens the listening socket
and starts N daphne processes that all accept on it (the kernel hands each connection to one of
them); the Redis channel layer carries every run's live messages to all of them. This process only
supervises: a worker that exits is started again, SIGTERM / SIGINT (Ctrl-C) stop the workers, and a
worker dies with this process even when it is SIGKILLed (Linux ``PR_SET_PDEATHSIG``), so nothing is
left holding the port. ``--workers 1`` serves in this process, as before.

benchmarks/load.py: one process could not keep 200 live viewers at 1,000 metric values/s (see
benchmarks/RESULTS.md, "Load").
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from django.core.management.base import BaseCommand, CommandError

MAX_DEFAULT_WORKERS = 8
RESTART_LIMIT = 5  # a worker that dies this many times within RESTART_WINDOW s stops the server
RESTART_WINDOW = 60.0
POOL_MAX_SIZE = 16  # Postgres connections per server process at most (requests beyond wait for one)


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
    # a websocket handshake may wait longer than daphne's 5 s default while many pages connect at once
    # on a busy machine (benchmarks/load.py: most of 200 viewers were dropped with 5 s)
    return ["daphne", *where, "--proxy-headers", "--websocket_connect_timeout", "30", "selfplay_web.asgi:application"]


class Command(BaseCommand):
    help = "Serve pages, the API and websockets (daphne, ASGI; several worker processes on one port)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--workers", type=int, default=None,
                            help="server processes (default: SELFPLAY_WEB_WORKERS, else the CPU count, at most 8)")
        parser.add_argument("--fd", type=int, default=None, help=argparse_suppress())

    def handle(self, port, host, workers, fd, **options):
        if fd is not None:  # a worker started by the supervisor below
            return run_daphne(host, port, fd)
        workers = default_workers() if workers is None else workers
        if workers < 1:
            raise CommandError(f"--workers must be at least 1, got {workers}")
        if workers == 1:
            return run_daphne(host, port, None)
        Supervisor(host, port, workers, self.stdout).run()


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS  # internal: the inherited listening socket of a worker


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
    options["pool"] = {"min_size": 2, "max_size": POOL_MAX_SIZE, "timeout": 60}
    return True


def run_daphne(host: str, port: int, fd: int | None) -> None:
    from daphne.cli import CommandLineInterface

    pool_database_connections()
    sys.argv = daphne_argv(host, port, fd)
    CommandLineInterface.entrypoint()


def _die_with_parent() -> None:
    """In the forked worker, before exec: the kernel sends SIGKILL when the supervisor dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except OSError:  # not Linux: the SIGTERM handler still stops the workers
        pass


class Supervisor:
    """Opens the port, starts ``workers`` daphne processes on it, restarts them, stops them."""

    def __init__(self, host: str, port: int, workers: int, out):
        self.host, self.port, self.workers, self.out = host, port, workers, out
        self.procs: list[subprocess.Popen | None] = [None] * workers
        self.deaths: list[float] = []
        self.stopping = False

    def listen(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            raise CommandError(f"cannot listen on {self.host}:{self.port} ({exc.strerror}); "
                               "is another server on that port? Pick another with --port") from None
        sock.listen(2048)
        sock.set_inheritable(True)
        return sock

    def start(self, i: int, fd: int) -> None:
        cmd = [sys.executable, sys.argv[0], "serve", "--host", self.host, "--port", str(self.port), "--fd", str(fd)]
        self.procs[i] = subprocess.Popen(cmd, pass_fds=(fd,), preexec_fn=_die_with_parent)

    def stop(self, *_):
        self.stopping = True

    def run(self) -> None:
        sock = self.listen()
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        self.out.write(f"serving on http://{self.host}:{self.port} with {self.workers} daphne workers "
                       f"(pid {os.getpid()})\n")
        self.out.flush()
        for i in range(self.workers):
            self.start(i, sock.fileno())
        try:
            while not self.stopping:
                self.restart_dead(sock.fileno())
                time.sleep(0.5)
        finally:
            self.shutdown()
            sock.close()

    def restart_dead(self, fd: int) -> None:
        for i, proc in enumerate(self.procs):
            if proc is None or proc.poll() is None or self.stopping:
                continue
            now = time.monotonic()
            self.deaths = [t for t in self.deaths if now - t < RESTART_WINDOW] + [now]
            if len(self.deaths) >= RESTART_LIMIT:
                self.stopping = True
                raise CommandError(f"the web workers died {len(self.deaths)} times within {RESTART_WINDOW:.0f} s "
                                   f"(last exit code {proc.returncode}); see the messages above")
            self.out.write(f"web worker {proc.pid} exited with code {proc.returncode}; starting another\n")
            self.out.flush()
            self.start(i, fd)

    def shutdown(self) -> None:
        live = [p for p in self.procs if p is not None and p.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in live:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
