"""RQ workers as the Workers page shows them: alive, their queues, their GPUs, their job.

`SelfplayWorker` (settings.RQ["WORKER_CLASS"]) records what accelerators it has in a Redis key
next to RQ's own worker key, so the page can show them: per card its name, memory used of total,
utilisation, and whether this worker's job holds it (or some other process does).

It never asks CUDA itself. RQ forks a work horse for each job, and a child forked from a process
that has asked CUDA anything (even ``torch.cuda.is_available()``) fails its first CUDA call
("Cannot re-initialize CUDA in forked subprocess"). So the cards are read by ``nvidia-smi``, a short
process of its own (``query_gpus``), and the worker's parent does not even import torch
(tests/fault/test_worker_cuda_fork.py checks both on a real ``rqworker``).

- at start-up (``register_birth``); a worker that serves the ``gpu`` queue and sees no GPU says so
  in its log and on the page (the note says why: no nvidia-smi, or what nvidia-smi answered);
- again every ``GPU_REFRESH_SECONDS`` from the worker's heartbeat while it has cards (an idle
  GPU worker wakes that often; a busy one beats that often while it watches its work horse);
- its work horse dies with it (``die_with_parent``): a killed worker leaves no job holding GPU memory.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from datetime import datetime, timezone

import django_rq
from rq import Worker
from rq.job import Job

from apps.jobs.processes import descendants, die_with_parent
from apps.jobs.waiting import describe_job

log = logging.getLogger("selfplay.workers")

GPU_KEY = "selfplay:worker-gpus:{name}"
GPU_REFRESH_SECONDS = 10
GPU_FIELDS = ("index", "uuid", "name", "memory.used", "memory.total", "utilization.gpu")
PROCESS_FIELDS = ("pid", "gpu_uuid", "used_memory")
NVIDIA_SMI_TIMEOUT = 15


def _number(text: str) -> float | None:
    """A value of nvidia-smi's CSV (``nounits``); ``[N/A]`` / ``[Not Supported]`` -> None."""
    try:
        return float(text)
    except ValueError:
        return None


def parse_gpus(text: str) -> list[dict]:
    """The cards from ``nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits``."""
    cards = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < len(GPU_FIELDS):
            raise ValueError(f"nvidia-smi answered a line with {len(parts)} fields, expected "
                             f"{len(GPU_FIELDS)} ({', '.join(GPU_FIELDS)}): {line!r}")
        used, total, util = (_number(p) for p in parts[-3:])
        cards.append({"index": int(parts[0]), "uuid": parts[1], "name": ", ".join(parts[2:-3]),
                      "memory_used_mib": used, "memory_total_mib": total, "utilization": util})
    return cards


def parse_processes(text: str) -> list[dict]:
    """Processes on the cards from ``nvidia-smi --query-compute-apps=<PROCESS_FIELDS> --format=csv,noheader,nounits``."""
    procs = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(PROCESS_FIELDS) or not parts[0].isdecimal():
            continue  # "No running processes found" and the like
        procs.append({"pid": int(parts[0]), "uuid": parts[1], "memory_mib": _number(parts[2])})
    return procs


def gpu_state(gpus_csv: str, processes_csv: str = "", note: str = "") -> dict:
    """What ``query_gpus`` stores, from nvidia-smi's two answers (tests feed them as text)."""
    cards = parse_gpus(gpus_csv)
    for card in cards:
        card["processes"] = [p for p in parse_processes(processes_csv) if p["uuid"] == card["uuid"]]
    return {"gpus": cards, "note": note, "checked_at": datetime.now(timezone.utc).isoformat()}


def _nvidia_smi(exe: str, query: str, fields) -> subprocess.CompletedProcess:
    return subprocess.run([exe, f"--query-{query}={','.join(fields)}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT)


def query_gpus() -> dict:
    """The NVIDIA cards of this machine, asked of ``nvidia-smi`` in a process of its own (never CUDA
    in this process). No card: ``gpus`` is empty and ``note`` says why."""
    exe = shutil.which(os.environ.get("SELFPLAY_NVIDIA_SMI", "nvidia-smi"))
    if exe is None:
        return gpu_state("", note="no nvidia-smi on this machine's PATH: no NVIDIA GPU or driver")
    try:
        cards = _nvidia_smi(exe, "gpu", GPU_FIELDS)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return gpu_state("", note=f"nvidia-smi did not answer: {exc}")
    if cards.returncode != 0:
        said = (cards.stdout + cards.stderr).strip().splitlines()
        return gpu_state("", note=f"nvidia-smi failed (exit {cards.returncode}): {said[-1] if said else 'no output'}")
    try:
        procs = _nvidia_smi(exe, "compute-apps", PROCESS_FIELDS).stdout
    except (OSError, subprocess.TimeoutExpired):
        procs = ""  # the cards without who holds them
    try:
        state = gpu_state(cards.stdout, procs)
    except ValueError as exc:
        return gpu_state("", note=str(exc))
    if not state["gpus"]:
        state["note"] = "nvidia-smi lists no GPU"
    return state


class SelfplayWorker(Worker):
    gpu_refresh_seconds = GPU_REFRESH_SECONDS

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gpus: dict = {"gpus": [], "note": ""}
        self._gpus_checked = 0.0
        self._watch_gpus = False  # set at birth when it has cards: read them again at every heartbeat

    def register_birth(self, *args, **kwargs):
        super().register_birth(*args, **kwargs)
        state = self.refresh_gpus()
        self._watch_gpus = bool(state["gpus"])  # a later failed reading is shown, and read again
        if state["gpus"]:
            names = ", ".join(f"{c['index']}: {c['name']}" for c in state["gpus"])
            self.log.info("Worker %s: GPUs %s", self.name, names)
            # the horse watcher beats this often too, so the page follows a running job's cards
            self.job_monitoring_interval = min(self.job_monitoring_interval, self.gpu_refresh_seconds)
        elif "gpu" in self.queue_names():
            self.log.warning("Worker %s serves the gpu queue but sees no GPU (%s): a run it takes with "
                             "train.device=cuda fails, one with train.device=auto trains on the CPU. Serve the gpu "
                             "queue from a machine with an NVIDIA GPU and its driver (nvidia-smi works there).",
                             self.name, state["note"])

    def refresh_gpus(self, state: dict | None = None) -> dict:
        """Read the cards (``query_gpus``, or ``state`` as it returns) and store them for the page,
        each card's processes split into this worker's (its job's) and others'."""
        state = query_gpus() if state is None else state
        me = self.pid or os.getpid()
        mine = descendants(me) | {me} if any(c.get("processes") for c in state["gpus"]) else set()
        for card in state["gpus"]:
            procs = card.pop("processes", [])
            card["job_pids"] = sorted(p["pid"] for p in procs if p["pid"] in mine)
            card["other_processes"] = [p for p in procs if p["pid"] not in mine]
        if "gpu" in self.queue_names() and not state["gpus"]:
            state["no_gpu_warning"] = True
        self.gpus = state
        self._gpus_checked = time.monotonic()
        self.connection.set(GPU_KEY.format(name=self.name), json.dumps(state), ex=7 * 24 * 3600)
        return state

    def heartbeat(self, *args, **kwargs):
        super().heartbeat(*args, **kwargs)
        if (self._watch_gpus and not getattr(self, "_is_horse", False)
                and time.monotonic() - self._gpus_checked >= self.gpu_refresh_seconds):
            try:
                self.refresh_gpus()
            except Exception as exc:  # the page shows the last reading; the worker goes on
                log.warning("worker %s could not refresh its GPUs: %s", self.name, exc)

    @property
    def dequeue_timeout(self) -> int:
        """An idle worker with GPUs wakes every ``gpu_refresh_seconds`` to beat (and read its cards)."""
        base = super().dequeue_timeout
        return min(base, self.gpu_refresh_seconds) if getattr(self, "_watch_gpus", False) else base

    def main_work_horse(self, *args, **kwargs):
        die_with_parent(expected_parent=self.pid)  # a worker killed outright takes its job with it
        return super().main_work_horse(*args, **kwargs)

    def register_death(self, *args, **kwargs):
        self.connection.delete(GPU_KEY.format(name=self.name))
        super().register_death(*args, **kwargs)


def _job_summary(connection, job_id: str | None) -> dict | None:
    if not job_id:
        return None
    try:
        job = Job.fetch(job_id, connection=connection)
    except Exception:
        return {"id": job_id, "description": "(job gone)", "run_id": None, "eval_id": None, "crossplay_id": None}
    func, arg = job.func_name, (job.args[0] if job.args else None)
    return {"id": job_id, "description": describe_job(job),  # "evaluation 98", not the function's path
            "run_id": arg if func.endswith("execute_run") else None,
            "eval_id": arg if func.endswith("execute_eval") else None,
            "crossplay_id": arg if func.endswith("execute_crossplay") else None}


def _mib(value) -> str:
    return "?" if value is None else f"{value / 1024:.1f}"


def _cards(state: dict, job: dict | None) -> list[dict]:
    """The stored cards as the page shows them: memory in GiB, and who holds each."""
    cards = []
    for card in state.get("gpus", []):
        others = card.get("other_processes", [])
        cards.append({
            **card,
            "memory": f"{_mib(card.get('memory_used_mib'))} / {_mib(card.get('memory_total_mib'))} GiB",
            "memory_gb": round(card["memory_total_mib"] / 1024, 1) if card.get("memory_total_mib") else None,
            "held_by_job": job if card.get("job_pids") else None,
            "others": ", ".join(f"pid {p['pid']} ({_mib(p.get('memory_mib'))} GiB)" for p in others),
        })
    return cards


def workers_overview() -> dict:
    """Workers alive, their queues, GPUs and current job; queued jobs per queue."""
    connection = django_rq.get_connection("default")
    workers = []
    for worker in Worker.all(connection=connection):
        raw = connection.get(GPU_KEY.format(name=worker.name))
        state = json.loads(raw) if raw else {}
        if isinstance(state, list):  # written by a worker of an earlier version: the cards alone
            state = {"gpus": [], "note": ""}
        job = _job_summary(connection, worker.get_current_job_id())
        workers.append({
            "name": worker.name,
            "hostname": worker.hostname,
            "pid": worker.pid,
            "state": worker.get_state(),
            "queues": worker.queue_names(),
            "gpus": _cards(state, job),
            "gpu_note": state.get("note", ""),
            "no_gpu_warning": bool(state.get("no_gpu_warning")),
            "gpus_checked_at": state.get("checked_at"),
            "last_heartbeat": worker.last_heartbeat,
            "job": job,
        })
    queues = [{"name": name, "queued": django_rq.get_queue(name).count}
              for name in ("gpu", "cpu", "short", "evals", "default")]
    return {"workers": sorted(workers, key=lambda w: w["name"]), "queues": queues}
