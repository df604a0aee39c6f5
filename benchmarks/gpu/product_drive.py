"""Drive a running Selfplay server through its API the way a researcher would (issue 34, items 2a and 2c).

Used by benchmarks/gpu/session_product.sh once the services, `manage.py serve` and the RQ workers are up:

  1. upload a benchmark (``POST evals/benchmarks/``, a JSONL file, ``--scoring``);
  2. launch a GRPO run (``POST runs/``): the config file's sections as the ``config`` body, the model by name,
     ``--set`` overrides, ``--queue``;
  3. record the run's websocket (``/ws/runs/<id>/``, logged in through the login form as a browser is) from
     before its first step to its end, every message with its arrival time (``ws.jsonl``);
  4. pause it at a step boundary once it has reached ``--pause-at`` (``POST runs/<id>/pause/``), wait until it is
     paused, resume it (``POST runs/<id>/resume/``) and check that it continued after the paused step;
  5. evaluate its last checkpoint and the base model on the benchmark on ``--eval-queue`` (``POST evals/``), then
     read the per-item samples and the paired difference (``GET evals/compare/``).

Everything goes to ``--out``: ``drive.json`` (every answer that matters, timings, the checks), ``ws.jsonl``.
Exit 0 when every check passed, 1 otherwise (the failed checks are in drive.json and on stderr).

    python benchmarks/gpu/product_drive.py --url http://127.0.0.1:8000 --token TOKEN --password PW \\
        --config benchmarks/gpu/learn_grpo_gsm8k.yaml --model qwen2.5-coder-0.5b-instruct \\
        --set data.path=/tmp/sp/datasets/gsm8k_train.jsonl --set train.steps=24 --pause-at 8 \\
        --bench .gpu_assets/gsm8k_heldout.jsonl --bench-name gsm8k-heldout --out /tmp/drive
"""
from __future__ import annotations

import argparse
import http.cookiejar
import json
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import yaml


class Api:
    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/")
        self.token = token

    def call(self, method: str, path: str, body=None, *, data: bytes | None = None, ctype: str | None = None,
             ok=(200, 201)) -> dict:
        headers = {"Authorization": f"Token {self.token}", "Accept": "application/json"}
        if body is not None:
            data, ctype = json.dumps(body).encode(), "application/json"
        if ctype:
            headers["Content-Type"] = ctype
        req = urllib.request.Request(f"{self.url}/api/v1/{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode(errors="replace")
        if status not in ok:
            raise RuntimeError(f"{method} {path} -> {status}: {text[:2000]}")
        return json.loads(text) if text else {}

    def upload(self, path: str, fields: dict, file: Path) -> dict:
        boundary = uuid.uuid4().hex
        parts = []
        for key, value in fields.items():
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode())
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{file.name}"\r\n'
                     f"Content-Type: application/octet-stream\r\n\r\n".encode() + file.read_bytes() + b"\r\n")
        parts.append(f"--{boundary}--\r\n".encode())
        return self.call("POST", path, data=b"".join(parts), ctype=f"multipart/form-data; boundary={boundary}",
                         ok=(200, 201, 202))  # 202: a corpus upload queued for ingestion


def session_cookie(url: str, username: str, password: str) -> str:
    """Log in through /accounts/login/ as a browser does; the Cookie header the websocket needs."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{url}/accounts/login/", timeout=60).read()
    csrf = next(c.value for c in jar if c.name == "csrftoken")
    form = urllib.parse.urlencode({"username": username, "password": password, "csrfmiddlewaretoken": csrf}).encode()
    req = urllib.request.Request(f"{url}/accounts/login/", data=form, headers={"Referer": f"{url}/accounts/login/"})
    opener.open(req, timeout=60).read()
    cookies = {c.name: c.value for c in jar}
    if "sessionid" not in cookies:
        raise RuntimeError(f"login as {username} failed (no session cookie)")
    return "; ".join(f"{k}={v}" for k, v in cookies.items())


class Recorder(threading.Thread):
    """The run page's websocket: every message with its arrival time (s since the recorder started); reconnects
    when the server closes the socket (a slow viewer, a restart) until stopped."""

    def __init__(self, url: str, run_id: int, cookie: str, out: Path):
        super().__init__(daemon=True)
        self.ws_url = url.replace("http://", "ws://").replace("https://", "wss://") + f"/ws/runs/{run_id}/"
        self.origin, self.cookie, self.out = url, cookie, out
        self.messages: list[dict] = []
        self.connects = 0
        self.errors: list[str] = []
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()

    def run(self):
        from websockets.sync.client import connect

        with open(self.out, "w") as log:
            while not self.stop_event.is_set():
                try:
                    with connect(self.ws_url, origin=self.origin, additional_headers={"Cookie": self.cookie},
                                 open_timeout=30) as ws:
                        self.connects += 1
                        while not self.stop_event.is_set():
                            try:
                                text = ws.recv(timeout=1.0)
                            except TimeoutError:
                                continue
                            msg = {"t": round(time.monotonic() - self.t0, 3), "msg": json.loads(text)}
                            self.messages.append(msg)
                            log.write(json.dumps(msg) + "\n")
                            log.flush()
                except Exception as exc:  # noqa: BLE001 - recorded, then reconnect
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(1.0)


def workers_page(url: str, cookie: str) -> str:
    """/runs/workers/ as a logged-in browser gets it."""
    req = urllib.request.Request(f"{url}/runs/workers/", headers={"Cookie": cookie})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read().decode()


def gpus() -> list[dict] | None:
    """nvidia-smi's reading of each card (name, memory used in MiB, utilisation) and the compute processes on it;
    None without nvidia-smi."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return None
    cards = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30).stdout
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory",
                           "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30).stdout
    out = []
    for line in cards.strip().splitlines():
        index, uuid, name, used, total, util = [x.strip() for x in line.split(",")]
        procs = [{"pid": int(p.split(",")[1]), "mib": p.split(",")[2].strip()} for p in apps.strip().splitlines()
                 if p.split(",")[0].strip() == uuid]
        out.append({"index": int(index), "name": name, "used_mib": int(used), "total_mib": int(total), "util": util,
                    "processes": procs})
    return out


class Drive:
    """What a drive keeps: its output folder, the API, its deadline, the report (the token and password left out)
    and the marks of time it prints as it goes."""

    def __init__(self, args, tag: str, **report):
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.api = Api(args.url, args.token)
        self.tag = tag
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.timeout
        self.report = {"args": {k: v for k, v in vars(args).items() if k not in ("token", "password")},
                       "times": {}, "checks": {}, **report}

    def left(self) -> float:
        return max(1.0, self.deadline - time.monotonic())

    def mark(self, name: str) -> None:
        self.report["times"][name] = round(time.monotonic() - self.t0, 2)
        print(f"[{self.tag} {self.report['times'][name]:8.1f}s] {name}", file=sys.stderr, flush=True)


def wait_for(what: str, check, timeout: float, every: float = 1.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def steps_of(messages: list[dict]) -> list[int]:
    """The step numbers the websocket reported (metrics / progress / status messages), in arrival order."""
    out = []
    for m in messages:
        step = m["msg"].get("step")
        if isinstance(step, int):
            out.append(step)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--username", default="admin")
    p.add_argument("--password", required=True)
    p.add_argument("--config", required=True, help="a trainer YAML config; its sections become the launch's config")
    p.add_argument("--model", required=True, help="a model name (bundled or a folder of the models dir)")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--queue", default="gpu")
    p.add_argument("--eval-queue", default="gpu")
    p.add_argument("--pause-at", type=int, default=2, help="pause once the run has reported this step")
    p.add_argument("--bench", required=True, help="a JSONL benchmark to upload (question, answer per line)")
    p.add_argument("--bench-name", default="heldout")
    p.add_argument("--scoring", default="math")
    p.add_argument("--eval-limit", type=int, default=None)
    p.add_argument("--eval-max-new-tokens", type=int, default=512)
    p.add_argument("--timeout", type=float, default=3600, help="seconds for the whole drive")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    drive = Drive(args, "drive")
    out, api, report, left, mark, t0 = drive.out, drive.api, drive.report, drive.left, drive.mark, drive.t0

    def save():
        (out / "drive.json").write_text(json.dumps(report, indent=1, default=str))

    recorder = None
    try:
        report["me"] = api.call("GET", "me/")
        existing = {b["name"] for b in api.call("GET", "evals/benchmarks/")["results"]}
        if args.bench_name not in existing:
            report["benchmark"] = api.upload("evals/benchmarks/", {"name": args.bench_name, "scoring": args.scoring},
                                             Path(args.bench))
        mark("benchmark uploaded")

        config = yaml.safe_load(Path(args.config).read_text())
        config.pop("method", None)
        method = yaml.safe_load(Path(args.config).read_text()).get("method", "grpo")
        config.get("model", {}).pop("name_or_path", None)  # the model is given by name (one place)
        launched = api.call("POST", "runs/", {"method": method, "model": args.model, "config": config,
                                              "set": args.overrides, "queue": args.queue})
        run_id = launched["id"]
        report["launch"] = launched
        mark(f"run {run_id} launched on {launched['queue']}")

        cookie = session_cookie(args.url, args.username, args.password)
        recorder = Recorder(args.url, run_id, cookie, out / "ws.jsonl")
        recorder.t0 = t0
        recorder.start()

        def run_state():
            return api.call("GET", f"runs/{run_id}/")

        def failed(state):
            if state["status"] in ("failed", "cancelled"):
                raise RuntimeError(f"run {run_id} {state['status']}: {state.get('error')}")

        def reached_pause_step():
            state = run_state()
            failed(state)
            return state if state["status"] == "running" and state["current_step"] >= args.pause_at else None

        state = wait_for(f"step {args.pause_at}", reached_pause_step, left(), 1.0)
        mark(f"running at step {state['current_step']}")
        # item 3: the workers page while the run trains, as the browser gets it (its cards and who holds them)
        page = workers_page(args.url, cookie)
        (out / "workers.html").write_text(page)
        cards = [c["name"] for c in gpus() or []]
        report["workers_page"] = {"cards_on_machine": cards, "gpu_blocks": page.count('class="gpu"'),
                                  "holders": page.count('class="gpu-holder"')}
        report["checks"]["workers page: the cards, and the run holding one"] = (
            not cards or (page.count('class="gpu"') >= len(cards) and all(n in page for n in set(cards))
                          and page.count('class="gpu-holder"') >= 1 and f"/runs/{run_id}/" in page))
        report["before_pause"] = state
        report["pause"] = api.call("POST", f"runs/{run_id}/pause/")
        mark("pause asked")

        def paused():
            s = run_state()
            failed(s)
            return s if s["status"] == "paused" else None

        state = wait_for("paused", paused, left(), 0.5)
        paused_step = state["current_step"]
        report["paused"] = state
        mark(f"paused at step {paused_step}")
        report["resume"] = api.call("POST", f"runs/{run_id}/resume/")
        mark("resume asked")

        def after_resume():
            s = run_state()
            failed(s)
            return s if s["status"] == "finished" or (s["status"] == "running" and s["current_step"] > paused_step) else None

        state = wait_for("a step after the resume", after_resume, left(), 0.5)
        mark(f"resumed: step {state['current_step']} ({state['status']})")

        def finished():
            s = run_state()
            failed(s)
            return s if s["status"] == "finished" else None

        state = wait_for("the run's end", finished, left(), 2.0)
        report["finished"] = state
        mark(f"run finished at step {state['current_step']}")
        time.sleep(2.0)  # the last websocket messages

        metrics = api.call("GET", f"runs/{run_id}/metrics/?name=step_seconds,rollout_seconds,update_seconds,"
                                  "other_seconds,score_seconds,gc_seconds,graph_capture_seconds,graph_captures,weight_sync_seconds,"
                                  "reward_mean&points=10000")  # the step's parts too, to attribute a slow step
        report["metrics"] = metrics
        events = [m["msg"] for m in recorder.messages]
        ws_steps = steps_of(recorder.messages)
        statuses = [m.get("status") for m in events if m.get("type") == "status"]
        # the trained steps in the order their metrics came: each once, in order, the first after the pause the
        # paused step + 1 (the resume continued from the pause's checkpoint; nothing trained twice or skipped)
        trained = [m["msg"]["step"] for m in recorder.messages if m["msg"].get("type") == "metric"
                   and m["msg"].get("role") != "system"]
        trained = [s for i, s in enumerate(trained) if i == 0 or s != trained[i - 1]]  # one per step (roles)
        at_pause = next((i for i, m in enumerate(recorder.messages) if m["msg"].get("type") == "status"
                         and m["msg"].get("status") == "paused"), None)
        after = [m["msg"]["step"] for m in recorder.messages[at_pause or 0:] if m["msg"].get("type") == "metric"]
        report["trained_steps"] = trained
        report["ws_summary"] = {"messages": len(events), "connects": recorder.connects, "errors": recorder.errors[:5],
                                "types": sorted({str(m.get("type")) for m in events}), "statuses": statuses,
                                "steps_seen": sorted(set(ws_steps))}
        report["checks"]["websocket messages during training"] = len(events) > 3 and len(set(ws_steps)) > 1
        report["checks"]["paused and resumed over the websocket"] = "paused" in statuses and statuses.count("running") >= 2
        report["checks"]["continued after the paused step"] = at_pause is not None and bool(after) and \
            after[0] == paused_step + 1 and trained == sorted(set(trained)) and \
            trained == list(range(trained[0], trained[-1] + 1)) and state["current_step"] > paused_step
        report["checks"]["steps counted once"] = all(
            len(s["steps"]) == len(set(s["steps"])) for s in metrics["series"] if s["name"] == "step_seconds")

        # item 2c: the last checkpoint and the base on the benchmark, on the eval queue, then the paired difference
        checkpoints = state["checkpoints"]
        if not checkpoints:
            raise RuntimeError(f"run {run_id} finished with no checkpoint: {state}")
        last = max(checkpoints, key=lambda c: c["step"])
        body = {"benchmarks": [args.bench_name], "run": run_id, "queue": args.eval_queue,
                "max_new_tokens": args.eval_max_new_tokens}
        if args.eval_limit:
            body["limit"] = args.eval_limit
        jobs = {"base": api.call("POST", "evals/", {**body, "model": f"base:{args.model}"}),
                "checkpoint": api.call("POST", "evals/", {**body, "checkpoint": last["id"]})}
        mark(f"evaluations {jobs['base']['id']} (base) and {jobs['checkpoint']['id']} (step {last['step']}) launched "
             f"on {jobs['base']['queue']}")

        def evals_done():
            now = {k: api.call("GET", f"evals/{j['id']}/") for k, j in jobs.items()}
            for k, j in now.items():
                if j["status"] in ("failed", "cancelled"):
                    raise RuntimeError(f"evaluation {k} {j['status']}: {j.get('error')}")
            return now if all(j["status"] == "finished" for j in now.values()) else None

        report["evals"] = wait_for("the evaluations", evals_done, left(), 2.0)
        mark("evaluations finished")
        report["samples"] = api.call("GET", f"evals/{jobs['checkpoint']['id']}/samples/?limit=3")
        report["compare"] = api.call("GET", f"evals/compare/?run={run_id}&benchmark={args.bench_name}")
        paired = [c for row in report["compare"]["rows"] for c in row.get("cells", []) if c and c.get("paired")]
        report["checks"]["per-item samples"] = report["samples"]["count"] > 0
        report["checks"]["paired difference vs the base"] = bool(paired)
        report["paired"] = [c["paired"] for c in paired]
    except Exception as exc:  # noqa: BLE001 - the report says where it stopped
        report["error"] = f"{type(exc).__name__}: {exc}"
        print(f"[drive] {report['error']}", file=sys.stderr, flush=True)
    finally:
        if recorder is not None:
            recorder.stop_event.set()
            recorder.join(timeout=5)
        report["times"]["total"] = round(time.monotonic() - t0, 2)
        save()
    bad = [k for k, v in report["checks"].items() if not v]
    print(json.dumps({"checks": report["checks"], "times": report["times"], "paired": report.get("paired"),
                      "error": report.get("error")}, indent=1))
    return 1 if bad or report.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
