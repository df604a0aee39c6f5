"""Export streaming benchmark: synthetic attempt rows COPYed into a benchmark database, streamed
through the real export view by the real server (``manage.py serve``: daphne, ASGI, token auth).

1. creates the database ``selfplay_bench_export`` on the same Postgres server (the embedded one
   by default), migrates it, and COPYs ``--rows`` attempt rows of one run, shaped like SPICE
   Reasoner attempts (a ~300-character answer in one turn, 96 token ids and their loss mask, a
   small ``data`` dict, three passages on every 10th row);
2. starts ``manage.py serve`` on that database (DEBUG off) and, per format, downloads
   ``GET /api/v1/runs/<id>/export/attempts.<format>`` in 1 MB reads, counting rows (JSONL lines;
   Parquet row count from the file's footer) while a thread samples the server's RSS;
3. prints one JSON line per format: rows, seconds, rows/s, MB, the server's RSS before the
   request and its peak during it (VmRSS sampled every 50 ms, and VmHWM, the kernel's high-water
   mark since the server started), the CPU seconds the server process and its Postgres backend
   spent (rows per CPU second of each: what the pipeline does on cores of its own, since the two
   processes work in parallel) and the machine's load average, then drops the database unless
   ``--keep``.

The server runs one web worker (``SELFPLAY_WEB_WORKERS=1`` unless ``--web-workers N``); where
``manage.py serve`` supervises worker processes, RSS and CPU are those of the process tree: the
peak RSS of its largest process (the one serving the download) and the CPU seconds of all of them.

    .venv/bin/python benchmarks/export.py [--rows 1000000] [--formats jsonl,parquet] [--port 8765] [--keep] [--reuse]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "selfplay_web.settings")
DB_NAME = "selfplay_bench_export"
WORDS = ("the answer follows from adding both numbers so we get a total which we box as the final result "
         "after checking each step of the reasoning carefully").split()


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def server_urls() -> tuple[str, str]:
    """(admin URL of the server's postgres database, URL of the benchmark database)."""
    from selfplay_web import config as envcfg

    url = envcfg.database_url()
    head, _, tail = url.partition("?")
    base = head.rsplit("/", 1)[0]
    query = f"?{tail}" if tail else ""
    return f"{base}/postgres{query}", f"{base}/{DB_NAME}{query}"


def create_database(admin_url: str, reuse: bool) -> bool:
    """True when the database already holds the rows (``--reuse``)."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone()
        if exists and reuse:
            return True
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME}")
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    return False


def drop_database(admin_url: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")


def _copy_text(value: str) -> str:
    """A value in COPY's text format (backslash, tab, newline and carriage return escaped)."""
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def copy_blocks(run_id: int, n: int, seed: int = 0, variants: int = 1000, block: int = 5000):
    """COPY text-format blocks of ``n`` attempt rows, cycling through ``variants`` precomputed bodies."""
    rng = random.Random(seed)
    passages = [{"document_id": str(i), "chunk_id": f"{i}-0", "title": f"Doc {i}", "text": " ".join(WORDS[:30]),
                 "score": 0.5 + i / 10} for i in range(3)]
    bodies = []
    for v in range(variants):
        text = " ".join(rng.choice(WORDS) for _ in range(50)) + f" \\boxed{{{v % 97}}}"
        ids = [rng.randrange(49152) for _ in range(96)]
        data = {"boxed": str(v % 97), "trained": v % 3 == 0, "finish_reason": "eos"}
        bodies.append("\t".join([
            _copy_text(text), str(float(v % 2)), _copy_text(json.dumps([{"role": "assistant", "text": text}])),
            _copy_text(json.dumps(passages if v % 10 == 0 else [])), "{" + ",".join(map(str, ids)) + "}",
            "{" + ",".join("1" * len(ids)) + "}", _copy_text(json.dumps(data))]))
    lines = []
    for i in range(n):
        lines.append(f"{run_id}\t{i // 8}:{i % 8}:r\t{i // 8}:{i % 8}\treasoner\t{i // 1000}\t{bodies[i % variants]}\n")
        if len(lines) == block:
            yield "".join(lines).encode()
            lines = []
    if lines:
        yield "".join(lines).encode()


def fill(n: int) -> tuple[int, str]:
    """(run id, API token) of a run holding ``n`` attempts, COPYed in."""
    from django.contrib.auth.models import User
    from django.db import connection
    from rest_framework.authtoken.models import Token

    from apps.runs.models import Run

    user, _ = User.objects.get_or_create(username="bench")
    token, _ = Token.objects.get_or_create(user=user)
    run = Run.objects.create(method="spice", model_name="bench", config={"method": "spice"}, status="finished")
    t0 = time.perf_counter()
    with connection.cursor() as cur:
        raw = cur.cursor
        with raw.copy("COPY episodes_attempt (run_id, key, task_key, role, step, text, reward, turns, passages, "
                      "token_ids, loss_mask, data) FROM STDIN") as copy:
            for block in copy_blocks(run.pk, n):
                copy.write(block)
        raw.execute("ANALYZE episodes_attempt")
    emit({"part": "fill", "rows": n, "seconds": round(time.perf_counter() - t0, 1)})
    return run.pk, token.key


def existing(n: int) -> tuple[int, str]:
    from django.db.models import Count

    from apps.runs.models import Run
    from rest_framework.authtoken.models import Token

    run = Run.objects.annotate(n=Count("attempts")).filter(n=n).order_by("-id").first()
    if run is None:
        raise SystemExit(f"--reuse: no run with {n} attempts in {DB_NAME}; run without --reuse")
    return run.pk, Token.objects.get(user__username="bench").key


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the server's worker processes, where it has any)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


def _rss_one(pid: int, field: str) -> float:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def rss_mb(pids: list[int], field: str = "VmRSS") -> float:
    """The largest RSS (or VmHWM) among the server's processes ``pids``."""
    return max(_rss_one(p, field) for p in pids)


def _cpu_one(pid: int) -> float:
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the server's processes ``pids`` have used (0 when gone)."""
    return sum(_cpu_one(p) for p in pids)


def postgres_backends() -> list[int]:
    """Pids of the Postgres backends connected to the benchmark database (by their process title)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                title = open(f"/proc/{entry}/cmdline", "rb").read()
            except OSError:
                continue
            if title.startswith(b"postgres:") and DB_NAME.encode() in title:
                found.append(int(entry))
    return found


class Sampler(threading.Thread):
    """Peak RSS of the server, and the CPU seconds of the Postgres backends serving it."""

    def __init__(self, pids: list[int]):
        super().__init__(daemon=True)
        self.pids, self.peak, self.stop = pids, 0.0, threading.Event()
        self.backend_cpu: dict[int, float] = {}
        self.backend_start = {b: _cpu_one(b) for b in postgres_backends()}

    def run(self):
        backends, tick = [], 0
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, rss_mb(self.pids))
            if tick % 10 == 0:  # new connections (the export's reader thread opens one): every 0.5 s
                backends = postgres_backends()
            tick += 1
            for b in backends:
                self.backend_cpu[b] = max(self.backend_cpu.get(b, 0.0), _cpu_one(b))

    @property
    def postgres_cpu(self) -> float:
        return sum(cpu - self.backend_start.get(b, 0.0) for b, cpu in self.backend_cpu.items())


def start_server(bench_url: str, port: int, workers: int) -> subprocess.Popen:
    env = dict(os.environ, DATABASE_URL=bench_url, DEBUG="0", ALLOWED_HOSTS="127.0.0.1",
               SELFPLAY_WEB_WORKERS=str(workers),
               SECRET_KEY=os.environ.get("SECRET_KEY", "bench-export-not-secret-" + "x" * 40),
               SESSION_COOKIE_SECURE="0", CSRF_COOKIE_SECURE="0")
    return subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def get(port: int, path: str, token: str):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("GET", path, headers={"Authorization": f"Token {token}"})
    return conn, conn.getresponse()


def wait_ready(proc: subprocess.Popen, port: int, token: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            conn, response = get(port, "/api/v1/me/", token)
            response.read()
            conn.close()
            if response.status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("the server did not answer in time")


def stream(port: int, run_id: int, token: str, fmt: str, pid: int) -> dict:
    pids = tree(pid)
    before, cpu_before = rss_mb(pids), cpu_seconds(pids)
    sampler = Sampler(pids)
    sampler.start()
    t0 = time.perf_counter()
    conn, response = get(port, f"/api/v1/runs/{run_id}/export/attempts.{fmt}", token)
    if response.status != 200:
        raise SystemExit(f"export answered {response.status}: {response.read()[:500]}")
    size, rows, first = 0, 0, None
    sink = tempfile.NamedTemporaryFile(suffix=f".{fmt}") if fmt == "parquet" else None
    while chunk := response.read(1 << 20):
        first = first or time.perf_counter() - t0
        size += len(chunk)
        if sink is None:
            rows += chunk.count(b"\n")
        else:
            sink.write(chunk)
    seconds = time.perf_counter() - t0
    server_cpu = cpu_seconds(pids) - cpu_before
    sampler.stop.set()
    sampler.join()
    conn.close()
    if sink is not None:
        import pyarrow.parquet as pq

        sink.flush()
        rows = pq.read_metadata(sink.name).num_rows
        sink.close()
    return {"part": "export", "format": fmt, "rows": rows, "seconds": round(seconds, 2),
            "rows_per_s": round(rows / seconds), "mb": round(size / 2**20, 1), "first_byte_s": round(first or 0, 3),
            "server_rss_before_mb": round(before, 1), "server_peak_rss_mb": round(max(sampler.peak, before), 1),
            "server_vmhwm_mb": round(rss_mb(pids, "VmHWM"), 1), "server_cpu_s": round(server_cpu, 2),
            "postgres_cpu_s": round(sampler.postgres_cpu, 2),
            "rows_per_server_cpu_s": round(rows / max(server_cpu, 1e-9)),
            "rows_per_postgres_cpu_s": round(rows / max(sampler.postgres_cpu, 1e-9)),
            "load_average": os.getloadavg()[0], "last_id": response.getheader("X-Export-Last-Id")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="attempt rows to insert and export")
    parser.add_argument("--formats", default="jsonl,parquet", help="comma-separated: jsonl, parquet")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--keep", action="store_true", help="keep the benchmark database")
    parser.add_argument("--reuse", action="store_true", help="reuse the rows of a kept benchmark database")
    parser.add_argument("--web-workers", type=int, default=1, help="server processes (manage.py serve's workers)")
    args = parser.parse_args()
    admin_url, bench_url = server_urls()
    reused = create_database(admin_url, args.reuse)
    os.environ["DATABASE_URL"] = bench_url
    import django
    from django.core.management import call_command

    django.setup()
    if not reused:
        call_command("migrate", verbosity=0)
    run_id, token = existing(args.rows) if reused else fill(args.rows)
    from django.db import connections

    connections.close_all()
    server = start_server(bench_url, args.port, args.web_workers)
    try:
        wait_ready(server, args.port, token)
        for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
            record = stream(args.port, run_id, token, fmt, server.pid)
            record.update(ok=record["rows"] == args.rows and record["rows_per_s"] >= 20_000
                          and record["server_peak_rss_mb"] < 300)
            emit(record)
    finally:
        server.terminate()
        server.wait(timeout=30)
        if not args.keep:
            drop_database(admin_url)


if __name__ == "__main__":
    main()
