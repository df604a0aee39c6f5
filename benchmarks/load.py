"""Load benchmark: many browser-like viewers on one live run while the run writes metrics.

Real stack: the embedded Postgres and Redis (selfplay_web.services), the ASGI server
(``manage.py serve``: daphne, Channels, Redis channel layer) in a subprocess, on a database of the
benchmark's own (``--database``; setup and helpers from benchmarks/live.py).

* a writer subprocess plays the worker: ``DjangoSink`` reports ``--names`` metric values per step
  (each value is its send time) at ``--rate`` values/s in all, calling ``control()`` at every step
  boundary as the recipes do (flush: one transaction of upserts, then the websocket messages);
* ``--viewers`` clients, each like a browser tab on the run page: GET /runs/<id>/ once, a
  websocket on /ws/runs/<id>/ (real session cookie), and every ``--poll`` s one API call
  (/api/v1/runs/<id>/ and /api/v1/runs/<id>/metrics/?since_step=, alternately).

Reported (one JSON line): websocket delivery latency (receive - send, same machine and clock)
p50/p95/p99 over every (viewer, step); steps never received (dropped; late ones are waited for up
to ``--drain`` s after the writer ends); HTTP latency
p50/p95 and errors; the server's RSS at the start, middle and end (memory stable?); load average.

    .venv/bin/python benchmarks/load.py [--viewers 200] [--rate 1000] [--seconds 20] [--poll 2] [--web-workers N]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.live import emit, free_port, make_run, percentile, session_cookie, setup, start_server  # noqa: E402


# ---- the writer (a subprocess: the worker's side) ---------------------------------------------

def write(run_id: int, rate: float, seconds: float, names: int) -> None:
    """Report ``names`` values per step, ``rate`` values/s, through DjangoSink; print the steps written."""
    from apps.runs.sink import DjangoSink

    sink = DjangoSink(run_id)
    steps_per_s = rate / names
    n_steps = max(1, int(steps_per_s * seconds))
    start = time.monotonic()
    late = 0.0
    for step in range(1, n_steps + 1):
        wait = start + step / steps_per_s - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        else:
            late = max(late, -wait)
        now = time.time()
        sink.metrics(step, "bench", {f"m{j}": now for j in range(names)})
        sink.control()  # the step boundary: flush + publish, as in a real run
    sink.close()
    elapsed = time.monotonic() - start
    print(json.dumps({"steps": n_steps, "values": n_steps * names, "elapsed_s": round(elapsed, 2),
                      "achieved_rate": round(n_steps * names / elapsed, 1), "max_behind_s": round(late, 2)}))


# ---- the viewers ------------------------------------------------------------------------------

class Stats:
    def __init__(self):
        self.ws_latency_ms: list[float] = []
        self.http_ms: list[float] = []
        self.http_errors: dict[str, int] = {}
        self.seen: list[set[int]] = []
        self.ws_errors: dict[str, int] = {}

    def error(self, table: dict, what: str) -> None:
        table[what] = table.get(what, 0) + 1


def _http(url: str, cookie: str) -> tuple[float, int]:
    request = urllib.request.Request(url, headers={"Cookie": f"sessionid={cookie}"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    return (time.perf_counter() - t0) * 1000, status


async def _get(pool, stats: Stats, url: str, cookie: str) -> None:
    try:
        ms, status = await asyncio.get_running_loop().run_in_executor(pool, _http, url, cookie)
    except Exception as exc:
        stats.error(stats.http_errors, type(exc).__name__)
        return
    stats.http_ms.append(ms)
    if status != 200:
        stats.error(stats.http_errors, str(status))


async def viewer(i: int, base: str, run_id: int, cookie: str, stats: Stats, pool, ready, stop, poll: float):
    from websockets.asyncio.client import connect

    seen: set[int] = set()
    stats.seen.append(seen)
    await _get(pool, stats, f"{base}/runs/{run_id}/", cookie)  # the page load
    ws_url = base.replace("http://", "ws://") + f"/ws/runs/{run_id}/"
    try:
        async with connect(ws_url, origin=base, additional_headers={"Cookie": f"sessionid={cookie}"},
                           max_queue=None, open_timeout=60) as ws:
            await ws.recv()  # the status snapshot
            ready.release()
            poller = (asyncio.create_task(_poll(i, base, run_id, cookie, stats, pool, stop, poll, seen)) if poll > 0
                      else asyncio.create_task(stop.wait()))  # --poll 0: what the run page does (websocket only)
            while not stop.is_set():
                try:
                    raw = await asyncio.wait_for(ws.recv(), timeout=0.5)
                except asyncio.TimeoutError:
                    continue
                now = time.time()
                msg = json.loads(raw)
                if msg.get("type") != "metric":
                    continue
                for point in [*(msg.get("earlier") or []), msg]:  # one message may carry a flush's steps
                    seen.add(point["step"])
                    sent = (point.get("values") or {}).get("m0")
                    if sent is not None:
                        stats.ws_latency_ms.append((now - sent) * 1000)
            await poller
    except Exception as exc:
        stats.error(stats.ws_errors, type(exc).__name__)
        ready.release()


async def _poll(i, base, run_id, cookie, stats, pool, stop, poll, seen):
    try:  # spread the viewers over the period (a stop ends the wait)
        await asyncio.wait_for(stop.wait(), timeout=poll * (i % 10) / 10)
    except asyncio.TimeoutError:
        pass
    n = 0
    while not stop.is_set():
        since = max(seen) if seen else 0
        url = (f"{base}/api/v1/runs/{run_id}/" if n % 2 == 0
               else f"{base}/api/v1/runs/{run_id}/metrics/?name=m0&since_step={since}")
        await _get(pool, stats, url, cookie)
        n += 1
        try:
            await asyncio.wait_for(stop.wait(), timeout=poll)
        except asyncio.TimeoutError:
            pass


def rss_mb(pid: int) -> float:
    """Resident memory of the server: ``manage.py serve`` and its worker processes, in MB."""
    total = 0
    for proc in _tree(pid):
        try:
            for line in Path(f"/proc/{proc}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:  # a worker that just exited
            pass
    return round(total / 1024, 1)


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                pass
    return out


async def run_load(args, base: str, run_id: int, cookie: str, server_pid: int) -> dict:
    stats = Stats()
    stop = asyncio.Event()
    ready = asyncio.Semaphore(0)
    pool = ThreadPoolExecutor(max_workers=min(64, args.viewers))
    t0 = time.monotonic()
    tasks = [asyncio.create_task(viewer(i, base, run_id, cookie, stats, pool, ready, stop, args.poll))
             for i in range(args.viewers)]
    for _ in range(args.viewers):
        await asyncio.wait_for(ready.acquire(), timeout=300)
    connect_s = time.monotonic() - t0
    rss = [rss_mb(server_pid)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--writer", str(run_id), "--rate", str(args.rate), "--seconds", str(args.seconds),
        "--names", str(args.names), "--database", args.database, stdout=asyncio.subprocess.PIPE, env=env, cwd=ROOT)
    await asyncio.sleep(args.seconds / 2)
    rss.append(rss_mb(server_pid))
    out, _ = await writer.communicate()
    written = json.loads(out.decode().strip().splitlines()[-1])
    last, drained_at = written["steps"], time.monotonic()
    while time.monotonic() - drained_at < args.drain and not all(last in seen for seen in stats.seen):
        await asyncio.sleep(0.2)  # late is not lost: wait (up to --drain s) for the last step everywhere
    drain_s = time.monotonic() - drained_at
    stop.set()
    await asyncio.gather(*tasks)
    rss.append(rss_mb(server_pid))
    pool.shutdown()
    steps = set(range(1, written["steps"] + 1))
    missed = [len(steps - seen) for seen in stats.seen]
    ws, http = stats.ws_latency_ms, stats.http_ms
    return {
        "viewers": args.viewers, "rate_asked": args.rate, "seconds": args.seconds, "names_per_step": args.names,
        "poll_s": args.poll, "connect_all_s": round(connect_s, 1), "writer": written, "drain_s": round(drain_s, 1),
        "ws_deliveries": len(ws), "ws_p50_ms": _r(statistics.median(ws)) if ws else None,
        "ws_p95_ms": _r(percentile(ws, 95)) if ws else None, "ws_p99_ms": _r(percentile(ws, 99)) if ws else None,
        "viewers_missing_steps": sum(1 for m in missed if m), "steps_missed_total": sum(missed),
        "ws_errors": stats.ws_errors, "http_requests": len(http),
        "http_p50_ms": _r(statistics.median(http)) if http else None,
        "http_p95_ms": _r(percentile(http, 95)) if http else None, "http_errors": stats.http_errors,
        "server_rss_mb_start_mid_end": rss, "server_processes": len(_tree(server_pid)),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def _r(x: float) -> float:
    return round(x, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--viewers", type=int, default=200)
    ap.add_argument("--rate", type=float, default=1000, help="metric values per second, all names together")
    ap.add_argument("--names", type=int, default=10, help="metric names per step")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--poll", type=float, default=2.0,
                    help="seconds between a viewer's API calls (0: none, as the run page itself, which only "
                         "fetches on connect and to fill a gap)")
    ap.add_argument("--drain", type=float, default=60, help="most seconds to wait for late messages after the writer")
    ap.add_argument("--web-workers", type=int, help="server processes (manage.py serve --workers; default: its own)")
    ap.add_argument("--database", default="selfplay_bench_load", help="created and migrated when missing")
    ap.add_argument("--writer", type=int, help=argparse.SUPPRESS)  # internal: the writer subprocess
    args = ap.parse_args()
    if args.writer:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "selfplay_web.settings")
        setup(args.database)
        write(args.writer, args.rate, args.seconds, args.names)
        return
    setup(args.database)
    from django.conf import settings

    # the server and the writer on a Redis db of their own (no run-id clash with the demo's db 0)
    os.environ["REDIS_URL"] = settings.REDIS_URL.rsplit("/", 1)[0] + "/15"
    if args.web_workers:
        os.environ["SELFPLAY_WEB_WORKERS"] = str(args.web_workers)  # read by manage.py serve
    port = free_port()
    server = start_server(port)
    try:
        user, cookie = session_cookie()
        run = make_run(user)
        load_before = [round(x, 2) for x in os.getloadavg()]
        result = asyncio.run(run_load(args, f"http://127.0.0.1:{port}", run.pk, cookie, server.pid))
        emit({"part": "load", "run": run.pk, "loadavg_before": load_before, **result})
        run.delete()
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
