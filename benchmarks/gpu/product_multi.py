"""Drive a multi-GPU self-play run through a running Selfplay server (issue 34, item 2b and the cross-play of 2c).

Used by benchmarks/gpu/session_product.sh after product_drive.py, on the same server and workers:

  1. create a corpus and upload its documents (``POST corpora/``, ``POST corpora/<id>/documents/``), wait for the
     ingestion (the ``short`` worker embeds the chunks into pgvector);
  2. **cancel**: launch a SPICE run with ``train.gpus`` = ``--gpus`` on the ``gpu`` queue (the job starts torchrun,
     one ``manage.py run_rank`` per card); once it has reported ``--cancel-after`` steps, cancel it while its next
     step is under way (``POST runs/<id>/cancel/``). Checks: the run is marked cancelled, every rank process and
     torchrun end, and the cards' memory is given back (nvidia-smi: no compute process, memory used back to what it
     was before the launch, within ``--free-mib``);
  3. **kill**: launch the same config again; once it has a checkpoint and has started the step after it, SIGKILL the
     ``gpu`` worker's RQ parent (``manage.py rqworker ... gpu``, not its work horse). Checks: every rank ends and the
     memory is given back; the reaper (the ``short`` worker's scheduler) marks the run failed and resumable; a new
     ``gpu`` worker (``--worker-cmd``) takes the resume (``POST runs/<id>/resume/``), which continues from the
     newest checkpoint to the run's last step, with every step's metrics and tasks present exactly once;
  4. **cross-play** of the resumed run's checkpoints on the ``gpu`` queue (``POST runs/<id>/crossplay/``).

Everything goes to ``--out``: ``multi.json`` (answers, process lists, nvidia-smi readings, timings, checks).
Exit 0 when every check passed, 1 otherwise.

    python benchmarks/gpu/product_multi.py --url http://127.0.0.1:8000 --token TOKEN \\
        --config benchmarks/gpu/learn_spice_qwen.yaml --model qwen2.5-coder-0.5b-instruct --gpus 2 \\
        --docs .gpu_assets/wiki.jsonl --set train.steps=6 --worker-cmd "bash scripts/serve.sh worker gpu" \\
        --out /tmp/multi
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from product_drive import Api, Drive, gpus, wait_for  # noqa: E402


def processes() -> dict[int, tuple[int, str]]:
    """Every process on the machine: pid -> (parent pid, command line)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            out[int(entry.name)] = (int(fields[1]), cmd)
    return out


def rank_processes() -> dict[int, str]:
    """torchrun and the ranks of any multi-GPU run (``manage.py run_rank``)."""
    return {pid: cmd for pid, (_, cmd) in processes().items() if "run_rank" in cmd}


def gpu_worker_parents() -> list[int]:
    """The RQ parents of the ``gpu`` workers: an ``rqworker`` command line naming ``gpu`` whose own parent is not one
    (a work horse is a fork of its worker, with the same command line)."""
    procs = processes()
    workers = {pid for pid, (_, cmd) in procs.items() if "rqworker" in cmd and " gpu" in f" {cmd} "}
    return sorted(pid for pid in workers if procs[pid][0] not in workers)


def export(api: Api, path: str) -> str:
    """A streamed export (JSONL) as text."""
    import urllib.request

    req = urllib.request.Request(f"{api.url}/api/v1/{path}", headers={"Authorization": f"Token {api.token}"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return resp.read().decode()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--config", required=True, help="a SPICE trainer YAML; its sections become the launch's config")
    p.add_argument("--model", required=True)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--queue", default="gpu")
    p.add_argument("--docs", required=True, help="a JSONL of {title, text} documents for the corpus")
    p.add_argument("--corpus-file", default=None,
                   help="train on this file of the datasets folder (corpus.path) instead of uploading --docs as a "
                        "corpus: no embedder needed, and no cross-play (it writes tasks from a corpus's documents)")
    p.add_argument("--max-docs", type=int, default=400)
    p.add_argument("--cancel-after", type=int, default=1, help="cancel once the run has reported this many steps")
    p.add_argument("--free-mib", type=int, default=1024,
                   help="after a cancel or kill, each card's memory used must come back within this of its reading "
                        "before the launch")
    p.add_argument("--worker-pid", type=int, default=None,
                   help="the gpu worker's RQ parent to SIGKILL (default: found by its command line, which a worker "
                        "renamed by setproctitle no longer shows)")
    p.add_argument("--worker-cmd", required=True, help="the command that starts a gpu worker (after the kill)")
    p.add_argument("--worker-log", default=None)
    p.add_argument("--worker-pid-file", default=None, help="the new worker's process group id goes here")
    p.add_argument("--crossplay-tasks", type=int, default=8)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    drive = Drive(args, "multi", gpus={})
    out, api, report, left, mark, t0 = drive.out, drive.api, drive.report, drive.left, drive.mark, drive.t0

    def reading(name: str):
        report["gpus"][name] = {"t": round(time.monotonic() - t0, 2), "cards": gpus(), "ranks": rank_processes()}
        return report["gpus"][name]

    def run_state(run_id):
        return api.call("GET", f"runs/{run_id}/")

    def freed(before: list[dict] | None):
        """No rank process left, and (with a GPU) no compute process and each card back near its earlier reading."""
        if rank_processes():
            return False
        if before is None:
            return True
        now = gpus()
        by_index = {c["index"]: c for c in before}
        return all(not c["processes"] and c["used_mib"] <= by_index[c["index"]]["used_mib"] + args.free_mib
                   for c in now)

    try:
        config = yaml.safe_load(Path(args.config).read_text())
        method = config.pop("method", "spice")
        config.get("model", {}).pop("name_or_path", None)
        config.pop("corpus", None)  # the product's corpus, or --corpus-file
        sets = [*args.overrides, f"train.gpus={args.gpus}"]
        # 1. the corpus: uploaded and ingested, or a file of the datasets folder
        corpus = None
        if args.corpus_file:
            sets.append(f"corpus.path={args.corpus_file}")
        else:
            docs = [json.loads(line) for line in Path(args.docs).read_text().splitlines() if line.strip()]
            docs = docs[:args.max_docs]
            corpus = api.call("POST", "corpora/", {"name": f"multi-{int(time.time())}",
                                                   "description": "product_multi.py"})
            with tempfile.TemporaryDirectory() as tmp:
                f = Path(tmp) / "docs.jsonl"
                f.write_text("".join(json.dumps({"title": d.get("title", ""), "text": d["text"]}) + "\n"
                                     for d in docs))
                report["upload"] = api.upload(f"corpora/{corpus['id']}/documents/", {}, f)
            mark(f"corpus {corpus['id']}: {len(docs)} documents uploaded")

            def ingested():
                c = api.call("GET", f"corpora/{corpus['id']}/")
                if c["status"] == "failed":
                    raise RuntimeError(f"ingestion failed: {c['progress']}")
                return c if c["status"] == "ready" else None

            report["corpus"] = wait_for("the ingestion", ingested, min(left(), 900), 1.0)
            mark(f"corpus ready: {report['corpus']['doc_count']} documents, {report['corpus']['chunk_count']} chunks")

        def launch(label: str) -> int:
            reading(f"before {label}")
            body = {"method": method, "model": args.model, "config": config, "set": sets, "queue": args.queue}
            if corpus:
                body["corpus"] = corpus["id"]
            launched = api.call("POST", "runs/", body)
            report[f"launch {label}"] = launched
            mark(f"{label}: run {launched['id']} launched on {launched['queue']}")
            return launched["id"]

        def reached(run_id, step: int, need_checkpoint=False):
            def check():
                s = run_state(run_id)
                if s["status"] in ("failed", "cancelled", "finished"):
                    raise RuntimeError(f"run {run_id} {s['status']} before step {step}: {s.get('error')}")
                ok = s["status"] == "running" and s["current_step"] >= step
                return s if ok and (not need_checkpoint or s["checkpoints"]) else None
            return check

        # 2. cancel mid-step
        a = launch("cancel")
        s = wait_for(f"run {a} step {args.cancel_after}", reached(a, args.cancel_after), left(), 0.5)
        mark(f"run {a} at step {s['current_step']}")
        during = reading("cancel: training")
        report["checks"]["cancel: one rank process per GPU while training"] = \
            sum("torch.distributed.run" not in c for c in during["ranks"].values()) == args.gpus
        time.sleep(1.0)  # into the next step
        report["cancel"] = api.call("POST", f"runs/{a}/cancel/")
        mark(f"run {a}: cancel asked at step {s['current_step']}")
        done = wait_for("the cancelled run", lambda: (lambda r: r if r["status"] != "running" else None)(run_state(a)),
                        left(), 0.5)
        mark(f"run {a}: {done['status']} at step {done['current_step']}")
        report["cancelled"] = done
        report["checks"]["cancel: the run is marked cancelled"] = done["status"] == "cancelled"
        before = report["gpus"]["before cancel"]["cards"]
        try:
            wait_for("every rank to end and the memory to be given back", lambda: freed(before), 120, 0.5)
            report["checks"]["cancel: every rank ended and the GPU memory was given back"] = True
        except TimeoutError:
            report["checks"]["cancel: every rank ended and the GPU memory was given back"] = False
        reading("cancel: after")
        mark("after the cancel: ranks and memory read")

        # 3. SIGKILL of the gpu worker after a checkpoint, the reaper, a resume on a new worker
        b = launch("kill")
        s = wait_for(f"run {b}'s first checkpoint", reached(b, 1, need_checkpoint=True), left(), 0.5)
        checkpoint_step = max(c["step"] for c in s["checkpoints"])
        s = wait_for(f"run {b} past its checkpoint", reached(b, checkpoint_step + 1), left(), 0.5)
        time.sleep(1.0)
        reading("kill: training")
        parents = [args.worker_pid] if args.worker_pid else gpu_worker_parents()
        if len(parents) != 1:
            raise RuntimeError(f"expected one gpu worker, found {parents}; pass --worker-pid")
        os.kill(parents[0], signal.SIGKILL)
        killed = time.monotonic()
        report["killed_worker"] = parents[0]
        mark(f"run {b} at step {s['current_step']} (checkpoint {checkpoint_step}): gpu worker {parents[0]} SIGKILLed")
        before = report["gpus"]["before kill"]["cards"]
        try:
            wait_for("every rank to end and the memory to be given back", lambda: freed(before), 120, 0.5)
            report["checks"]["kill: every rank ended and the GPU memory was given back"] = True
            report["times"]["kill: freed after (s)"] = round(time.monotonic() - killed, 1)
        except TimeoutError:
            report["checks"]["kill: every rank ended and the GPU memory was given back"] = False
        reading("kill: after")

        def reaped():
            r = run_state(b)
            return r if r["status"] == "failed" else None

        failed = wait_for("the reaper to mark the run failed", reaped, min(left(), 300), 1.0)
        report["reaped"] = failed
        report["times"]["kill: reaped after (s)"] = round(time.monotonic() - killed, 1)
        mark(f"run {b} failed, resumable={failed['resumable']}: {str(failed.get('error'))[:160]}")
        report["checks"]["kill: the reaper marked the run failed and resumable"] = bool(failed["resumable"])

        log = open(args.worker_log or out / "worker2.log", "ab")
        worker = subprocess.Popen(args.worker_cmd, shell=True, stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        if args.worker_pid_file:
            Path(args.worker_pid_file).write_text(str(worker.pid))
        mark(f"a new gpu worker started ({worker.pid})")
        report["resume"] = api.call("POST", f"runs/{b}/resume/")

        def ended():
            r = run_state(b)
            return r if r["status"] in ("finished", "failed", "cancelled") else None

        end = wait_for(f"run {b} to end after the resume", ended, left(), 2.0)
        report["resumed"] = end
        mark(f"run {b} {end['status']} at step {end['current_step']} of {end.get('total_steps')}")
        metrics = api.call("GET", f"runs/{b}/metrics/?points=10000")
        series = {(s["role"], s["name"]): s["steps"] for s in metrics["series"]}
        report["metric_steps"] = {f"{r}/{n}": steps for (r, n), steps in series.items()
                                  if n in ("step_seconds", "reward_mean", "valid_rate", "samples")}
        total = end["current_step"]
        per_step = [steps for (r, n), steps in series.items() if n == "step_seconds"]
        report["checks"]["kill: the resumed run finished"] = end["status"] == "finished"
        report["checks"]["kill: every step's metrics, none lost"] = bool(per_step) and all(
            steps == list(range(1, total + 1)) for steps in per_step) and all(
            len(steps) == len(set(steps)) for steps in series.values())
        tasks = [json.loads(line) for line in export(api, f"runs/{b}/export/tasks.jsonl").splitlines() if line]
        keys = [t["key"] for t in tasks]
        report["tasks_per_step"] = {s: sum(t["step"] == s for t in tasks) for s in sorted({t["step"] for t in tasks})}
        # every step has its tasks, and the steps trained again after the resume as many as the others (a re-run
        # step with fewer would leave the first attempt's extra rows behind; keys are unique by construction)
        report["checks"]["kill: every step's tasks, as many in each"] = len(keys) == len(set(keys)) and \
            sorted(report["tasks_per_step"]) == list(range(1, total + 1)) and \
            len(set(report["tasks_per_step"].values())) == 1

        # 4. cross-play of the resumed run's checkpoints (it writes tasks from the run's corpus's documents)
        if corpus is None:
            report["crossplay"] = "left out: the run trained on a file (--corpus-file), not a corpus"
        else:
            checkpoints = sorted(end["checkpoints"], key=lambda c: c["step"])[-2:]
            job = api.call("POST", f"runs/{b}/crossplay/", {"checkpoints": [c["id"] for c in checkpoints],
                                                           "n_tasks": args.crossplay_tasks, "queue": args.queue})
            mark(f"cross-play {job['id']} of steps {[c['step'] for c in checkpoints]} launched on {job.get('queue')}")

            def crossplay_done():
                j = api.call("GET", f"evals/crossplay/{job['id']}/")
                if j["status"] in ("failed", "cancelled"):
                    raise RuntimeError(f"cross-play {j['status']}: {j.get('error')}")
                return j if j["status"] == "finished" else None

            report["crossplay"] = wait_for("the cross-play", crossplay_done, left(), 2.0)
            mark(f"cross-play finished: {report['crossplay'].get('matrix')}")
            cp = report["crossplay"]
            report["checks"]["cross-play: every cell played"] = cp["cells_done"] == cp["cells_total"] > 0
            report["crossplay_tasks"] = [len(t["tasks"]) for t in cp.get("tasks", [])]  # valid tasks per checkpoint
    except Exception as exc:  # noqa: BLE001 - the report says where it stopped
        report["error"] = f"{type(exc).__name__}: {exc}"
        print(f"[multi] {report['error']}", file=sys.stderr, flush=True)
    finally:
        report["times"]["total"] = round(time.monotonic() - t0, 2)
        (out / "multi.json").write_text(json.dumps(report, indent=1, default=str))
    bad = [k for k, v in report["checks"].items() if not v]
    print(json.dumps({"checks": report["checks"], "times": report["times"], "error": report.get("error")}, indent=1))
    return 1 if bad or report.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
