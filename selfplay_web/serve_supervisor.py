"""The supervisor of `manage.py serve --workers N` (N > 1): plain Python, no Django.

``manage.py serve`` opens the listening socket (so a busy port is a clear command error) and then
replaces itself with this script (``os.execv``, same pid), which holds nothing but the socket: about
15 MB instead of a ~200 MB Django process. It starts N daphne workers
(``manage.py serve --fd FD``) that accept on the inherited socket, starts again a worker that exits,
stops them all on SIGTERM / SIGINT, and makes the kernel kill them if it is itself killed
(``PR_SET_PDEATHSIG``), so no worker outlives it holding the port.

    python selfplay_web/serve_supervisor.py --fd FD --host H --port P --workers N --manage /path/manage.py
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

RESTART_LIMIT = 5  # a worker that dies this many times within RESTART_WINDOW s stops the server
RESTART_WINDOW = 60.0


def _die_with_parent() -> None:
    """In the forked worker, before exec: the kernel sends SIGKILL when the supervisor dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except OSError:  # not Linux: the SIGTERM handler still stops the workers
        pass


class Supervisor:
    """Starts ``workers`` daphne processes on the listening socket ``fd``, restarts them, stops them."""

    def __init__(self, fd: int, host: str, port: int, workers: int, manage: str):
        self.fd, self.host, self.port, self.workers, self.manage = fd, host, port, workers, manage
        self.procs: list[subprocess.Popen | None] = [None] * workers
        self.deaths: list[float] = []
        self.stopping = False

    def start(self, i: int) -> None:
        cmd = [sys.executable, self.manage, "serve", "--host", self.host, "--port", str(self.port), "--fd", str(self.fd)]
        self.procs[i] = subprocess.Popen(cmd, pass_fds=(self.fd,), preexec_fn=_die_with_parent)

    def stop(self, *_) -> None:
        self.stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        print(f"serving on http://{self.host}:{self.port} with {self.workers} daphne workers (pid {os.getpid()})",
              flush=True)
        for i in range(self.workers):
            self.start(i)
        try:
            while not self.stopping:
                if not self.restart_dead():
                    return 1
                time.sleep(0.5)
            return 0
        finally:
            self.shutdown()

    def restart_dead(self) -> bool:
        for i, proc in enumerate(self.procs):
            if proc is None or proc.poll() is None or self.stopping:
                continue
            now = time.monotonic()
            self.deaths = [t for t in self.deaths if now - t < RESTART_WINDOW] + [now]
            if len(self.deaths) >= RESTART_LIMIT:
                print(f"the web workers died {len(self.deaths)} times within {RESTART_WINDOW:.0f} s (last exit code "
                      f"{proc.returncode}); stopping. See the messages above.", file=sys.stderr, flush=True)
                return False
            print(f"web worker {proc.pid} exited with code {proc.returncode}; starting another", flush=True)
            self.start(i)
        return True

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fd", type=int, required=True, help="the listening socket, inherited")
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--manage", required=True, help="path of manage.py")
    args = ap.parse_args(argv)
    return Supervisor(args.fd, args.host, args.port, args.workers, args.manage).run()


if __name__ == "__main__":
    sys.exit(main())
