"""Live run page benchmark: websocket latency under load, and opening a run with 1M metric points.

Against the real stack: the embedded Postgres and Redis (selfplay_web.services), the ASGI
server (``manage.py serve``: daphne, Channels with the Redis channel layer) in a subprocess,
and a websocket client logged in with a real session cookie. Prints one JSON line per part:

  * "latency"  metric messages published to the run's Channels group at ``--rate`` events/s
               for ``--seconds``; each carries its send time; the websocket client records
               receive - send (same machine, same clock). Two publishers:
               ``async``  one event loop calling ``channel_layer.group_send`` (the transport:
                          Redis channel layer -> consumer -> websocket);
               ``sink``   the production path: ``DjangoSink.metrics()`` in a process of its own,
                          flushed every ``--flush`` s (one transaction of upserts, then one
                          ``publish()`` per (step, role)); latency includes the buffering wait.
  * "ledger"   a run with ``--task-steps`` x ``--tasks-per-step`` tasks (~300-character questions,
               every 7th a near copy): GET /runs/<id>/ledger/ (histogram, invalid share, per-step
               series, near duplicates among the newest 400), best of ``--reps``.
  * "open"     a run holding ``--points`` metric points (``--names`` names x 2 roles x steps,
               inserted with generate_series); the time of what opening the page costs:
               the HTML of /runs/<id>/ and the JSON the page fetches on load (the reward
               chart's metrics API call, the first metric tab's), each best of ``--reps``;
               then headless Chromium from navigation to the reward chart drawn, and to all
               charts drawn (metric tab, ledger), when /usr/bin/chromium and playwright are there.

    .venv/bin/python benchmarks/live.py [--parts latency,open,ledger] [--rate 1000] [--seconds 10]
        [--flush 0.1] [--points 1000000] [--reps 3] [--keep]

Everything lives in a database of its own (``--database``, created and migrated on first use);
the benchmark runs and user are deleted at the end unless ``--keep``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "selfplay_web.settings")
USER = "bench-live"
SERVER_LOG = os.environ.get("BENCH_LIVE_SERVER_LOG", "/tmp/bench_live_server.log")


def setup(database: str):
    """Services up; this process and the server on a database of the benchmark's own (migrated here)."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    from selfplay_web import config, services

    services.start_all()
    parts = urlsplit(config.database_url())
    with psycopg.connect(urlunsplit(parts), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone():
            conn.execute(f'CREATE DATABASE "{database}"')
    os.environ["DATABASE_URL"] = urlunsplit(parts._replace(path="/" + database))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least q% of the values at or below it."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return ordered[int(rank) - 1]


# ---- the server and the logged-in client -----------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    log = open(SERVER_LOG, "w")  # noqa: SIM115  (the server's output, for when a part fails)
    proc = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2)
            return proc
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise SystemExit("the ASGI server did not answer within 120 s")


def session_cookie() -> tuple[object, str]:
    """A benchmark user (researcher) and a real session for it."""
    from django.contrib.auth.models import Group, User
    from django.test import Client

    user, _ = User.objects.get_or_create(username=USER)
    group = Group.objects.filter(name="researcher").first()
    if group:
        user.groups.add(group)
    client = Client()
    client.force_login(user)
    return user, client.cookies["sessionid"].value


def make_run(user):
    from apps.runs.models import Run

    run = Run.objects.create(method="grpo", model_name="benchmark", config={}, owner=user, total_steps=0)
    run.mark_running("bench")
    return run


# ---- part 1: latency -------------------------------------------------------------------------

async def _receive(url: str, cookie: str, n_expected: int, latencies: list, ready: asyncio.Event, done: asyncio.Event,
                   timeout: float):
    from websockets.asyncio.client import connect

    origin = "http://" + url.split("://", 1)[1].split("/", 1)[0]  # the origin validator wants a page's Origin
    async with connect(url, origin=origin, additional_headers={"Cookie": f"sessionid={cookie}"}, max_queue=None) as ws:
        first = json.loads(await ws.recv())  # the status snapshot the consumer sends on connect
        assert first.get("type") == "status", first
        ready.set()
        deadline = time.monotonic() + timeout
        while len(latencies) < n_expected and time.monotonic() < deadline:
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout=max(0.1, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                break
            now = time.time()
            msg = json.loads(raw)
            if msg.get("type") != "metric":
                continue
            for point in [*(msg.get("earlier") or []), msg]:  # a sink message holds a flush's steps
                for value in (point.get("values") or {}).values():
                    if value is not None:
                        latencies.append(now - value)
    done.set()


async def _publish_async(run_id: int, rate: float, seconds: float) -> int:
    from channels.layers import get_channel_layer

    from apps.runs.live import group_name

    layer = get_channel_layer()
    n = int(rate * seconds)
    start = time.monotonic()
    for i in range(n):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        await layer.group_send(group_name(run_id), {"type": "run.message", "data": {
            "type": "metric", "step": i, "role": "bench", "values": {"sent_at": time.time()}}})
    return n


def _publish_sink(run_id: int, rate: float, seconds: float, flush: float) -> int:
    """DjangoSink.metrics() per event from a plain thread, as a worker calls it."""
    from django.db import connection

    from apps.runs.sink import DjangoSink

    sink = DjangoSink(run_id, flush_seconds=flush, max_buffer=10_000)
    n = int(rate * seconds)
    start = time.monotonic()
    try:
        for i in range(n):
            wait = start + i / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            sink.metrics(i, "bench", {"sent_at": time.time()})
        sink.close()
    finally:
        connection.close()
    return n


def _sink_child(run_id: int, rate: float, seconds: float, flush: float, out) -> None:
    import django

    django.setup()  # DATABASE_URL (the benchmark's database) comes with the environment
    out.put(_publish_sink(run_id, rate, seconds, flush))


def _sink_in_a_process(run_id: int, rate: float, seconds: float, flush: float) -> int:
    """The sink in a process of its own, as in a worker: it shares no GIL with the websocket client."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_sink_child, args=(run_id, rate, seconds, flush, out))
    proc.start()
    sent = out.get(timeout=seconds + 300)
    proc.join(timeout=60)
    return sent


def latency(port: int, cookie: str, run_id: int, publisher: str, rate: float, seconds: float, flush: float) -> dict:
    latencies: list[float] = []
    n_expected = int(rate * seconds)

    async def main():
        ready, done = asyncio.Event(), asyncio.Event()
        receiver = asyncio.create_task(_receive(f"ws://127.0.0.1:{port}/ws/runs/{run_id}/", cookie, n_expected,
                                                latencies, ready, done, timeout=seconds + 60))
        await asyncio.wait_for(ready.wait(), 30)
        t0 = time.monotonic()
        if publisher == "async":
            sent = await _publish_async(run_id, rate, seconds)
        else:
            sent = await asyncio.to_thread(_sink_in_a_process, run_id, rate, seconds, flush)
        send_s = time.monotonic() - t0
        await receiver
        return sent, send_s

    sent, send_s = asyncio.run(main())
    ms = [x * 1000 for x in latencies]
    out = {"part": "latency", "publisher": publisher, "rate": rate, "seconds": seconds, "sent": sent,
           "received": len(ms), "achieved_send_rate": round(sent / send_s, 1)}
    if publisher == "sink":
        out["flush_seconds"] = flush
    if ms:
        out.update({"p50_ms": round(statistics.median(ms), 1), "p95_ms": round(percentile(ms, 95), 1),
                    "p99_ms": round(percentile(ms, 99), 1), "max_ms": round(max(ms), 1)})
    return out


# ---- part 2: opening a run with 1M points ----------------------------------------------------

NAMES = ["reward_mean", "entropy", "response_length", "kl", "zero_variance_groups", "gen_tokens_per_s",
         "loss", "grad_norm", "clip_frac", "lr"]


def fill_points(run_id: int, points: int, names: list[str]) -> dict:
    """``points`` metric rows: each name x 2 roles over consecutive steps (noisy curves)."""
    from django.db import connection

    from apps.runs.models import Metric, Run

    roles = ["challenger", "reasoner"]
    steps = points // (len(names) * len(roles))
    t0 = time.monotonic()
    with connection.cursor() as cur:
        cur.execute(f"""
            INSERT INTO {Metric._meta.db_table} (run_id, step, role, name, value)
            SELECT %s, s, r, n, sin(s / 500.0) + random() * 0.2
            FROM generate_series(1, %s) AS s, unnest(%s::text[]) AS r, unnest(%s::text[]) AS n""",
                    [run_id, steps, roles, names])
    with connection.cursor() as cur:  # what autovacuum does after a big insert: index-only scans need it
        cur.execute(f"VACUUM ANALYZE {Metric._meta.db_table}")
    Run.objects.filter(pk=run_id).update(current_step=steps, total_steps=steps)
    return {"rows": steps * len(names) * len(roles), "steps": steps, "insert_s": round(time.monotonic() - t0, 1)}


def timed_get(url: str, cookie: str) -> tuple[float, int]:
    req = urllib.request.Request(url, headers={"Cookie": f"sessionid={cookie}"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        body = r.read()
        assert r.status == 200, r.status
    return time.perf_counter() - t0, len(body)


def open_page(port: int, cookie: str, run_id: int, reps: int) -> dict:
    base = f"http://127.0.0.1:{port}"
    urls = {
        "html": f"{base}/runs/{run_id}/",
        "reward_api": f"{base}/api/v1/runs/{run_id}/metrics/?name=reward_mean&points=1100",  # ~ the chart's width
        "tab_api": f"{base}/api/v1/runs/{run_id}/metrics/?name=entropy,entropy_sampled&points=1100",
    }
    timed_get(urls["html"], cookie)  # a first request warms the server's imports
    out = {}
    for key, url in urls.items():
        times, size = [], 0
        for _ in range(reps):
            t, size = timed_get(url, cookie)
            times.append(t)
        out[f"{key}_ms"] = round(min(times) * 1000, 1)
        out[f"{key}_median_ms"] = round(statistics.median(times) * 1000, 1)
        out[f"{key}_bytes"] = size
    out["server_total_ms"] = round(sum(out[f"{k}_ms"] for k in urls), 1)
    out.update(browser_open(base, cookie, run_id, reps))
    return out


def browser_open(base: str, cookie: str, run_id: int, reps: int) -> dict:
    """Navigation start -> the reward chart drawn with its points, in headless Chromium."""
    chromium = "/usr/bin/chromium"
    if not os.path.exists(chromium):
        return {"browser": "skipped: no /usr/bin/chromium (make browser)"}
    from playwright.sync_api import sync_playwright

    times, all_times = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context()
        context.add_cookies([{"name": "sessionid", "value": cookie, "url": base}])
        page = context.new_page()
        for i in range(reps + 1):
            t0 = time.perf_counter()
            page.goto(f"{base}/runs/{run_id}/")
            page.wait_for_function("document.getElementById('reward-chart').data?.[0]?.x.length > 0", timeout=60_000)
            drawn_at = time.perf_counter() - t0
            page.wait_for_function("document.getElementById('metric-chart').dataset.metric !== undefined"
                                   " && document.getElementById('ledger-histogram').dataset.ready === '1'", timeout=60_000)
            if i:  # the first load also fills the browser's cache of plotly.min.js
                times.append(drawn_at)
                all_times.append(time.perf_counter() - t0)
        drawn = page.evaluate("document.getElementById('reward-chart').data.map(t => t.x.length)")
        browser.close()
    return {"browser_to_reward_chart_ms": round(min(times) * 1000, 1),
            "browser_to_reward_chart_median_ms": round(statistics.median(times) * 1000, 1),
            "browser_to_all_charts_ms": round(min(all_times) * 1000, 1),
            "browser_to_all_charts_median_ms": round(statistics.median(all_times) * 1000, 1),
            "points_drawn_per_trace": drawn}


# ---- part 3: the task ledger ------------------------------------------------------------------

def fill_tasks(run_id: int, steps: int, per_step: int) -> dict:
    """``steps`` x ``per_step`` tasks: ~300-character questions (every 7th a near copy of the one
    before it), pass rates k/8, one in 10 invalid."""
    from django.db import connection

    from apps.episodes.models import Task

    t0 = time.monotonic()
    with connection.cursor() as cur:
        cur.execute(f"""
            INSERT INTO {Task._meta.db_table} (run_id, key, step, role, question, answer, valid, pass_rate,
                                               document_id, format, data)
            SELECT %s, s || ':' || i, s, 'challenger',
                   'Question about passage ' || (CASE WHEN i %% 7 = 6 THEN i - 1 ELSE i END) || ' of step ' || s || ': '
                     || repeat(md5((s * 1000 + (CASE WHEN i %% 7 = 6 THEN i - 1 ELSE i END))::text) || ' ', 8),
                   '', i %% 10 <> 0, CASE WHEN i %% 10 <> 0 THEN ((s + i) %% 9) / 8.0 END, '', '', '{{}}'::jsonb
            FROM generate_series(1, %s) AS s, generate_series(0, %s - 1) AS i""", [run_id, steps, per_step])
    with connection.cursor() as cur:
        cur.execute(f"VACUUM ANALYZE {Task._meta.db_table}")
    return {"tasks": steps * per_step, "task_insert_s": round(time.monotonic() - t0, 1)}


def ledger_times(port: int, cookie: str, run_id: int, reps: int) -> dict:
    times = [timed_get(f"http://127.0.0.1:{port}/runs/{run_id}/ledger/", cookie)[0] for _ in range(reps + 1)][1:]
    from apps.runs import ledger

    t0 = time.perf_counter()
    data = ledger.duplicates(run_id)
    return {"ledger_ms": round(min(times) * 1000, 1), "ledger_median_ms": round(statistics.median(times) * 1000, 1),
            "duplicates_in_process_ms": round((time.perf_counter() - t0) * 1000, 1),
            "near_duplicate_rate": data["rate"], "checked": data["checked"]}


# ---- main ------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="latency,open,ledger")
    ap.add_argument("--task-steps", type=int, default=200)
    ap.add_argument("--tasks-per-step", type=int, default=100)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--flush", type=float, default=0.1)
    ap.add_argument("--publishers", default="async,sink")
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--database", default="selfplay_bench_live", help="created and migrated when missing")
    args = ap.parse_args()
    setup(args.database)
    from django.contrib.auth.models import User

    parts = args.parts.split(",")
    port = free_port()
    server = start_server(port)
    runs = []
    try:
        user, cookie = session_cookie()
        load = os.getloadavg()
        if "latency" in parts:
            for publisher in args.publishers.split(","):
                run = make_run(user)
                runs.append(run)
                emit({**latency(port, cookie, run.pk, publisher, args.rate, args.seconds, args.flush),
                      "loadavg_before": [round(x, 2) for x in load]})
        if "ledger" in parts:
            run = make_run(user)
            runs.append(run)
            emit({"part": "ledger", "run": run.pk, **fill_tasks(run.pk, args.task_steps, args.tasks_per_step),
                  **ledger_times(port, cookie, run.pk, args.reps), "loadavg": [round(x, 2) for x in os.getloadavg()]})
        if "open" in parts:
            run = make_run(user)
            runs.append(run)
            filled = fill_points(run.pk, args.points, NAMES)
            emit({"part": "open", "run": run.pk, **filled, **open_page(port, cookie, run.pk, args.reps),
                  "loadavg": [round(x, 2) for x in os.getloadavg()]})
    except BaseException:
        print(f"failed; the server's output is in {SERVER_LOG}", file=sys.stderr)
        raise
    finally:
        server.terminate()
        server.wait(timeout=30)
        if not args.keep:
            for run in runs:
                run.delete()
            User.objects.filter(username=USER).delete()


if __name__ == "__main__":
    main()
