"""A GPU worker must never ask CUDA anything before it forks a work horse.

On a GPU (torch 2.11, H100), once a process has asked CUDA anything, even ``torch.cuda.is_available()``,
a child it forks fails its first CUDA call ("Cannot re-initialize CUDA in forked subprocess"); RQ forks
a work horse per job. This machine has no GPU, so the test watches the calls instead: a real
``manage.py rqworker gpu`` starts with a ``sitecustomize`` (tests/fault/cuda_tripwire/) that writes a
line ``<pid> <what>`` whenever a process imports torch or calls a torch.cuda function that asks the
driver. The worker's own process (the RQ parent) must write none; the work horse it forks writes the
calls of its job (the tripwire works inside a real worker).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import django_rq
import pytest
from rq import Worker as RQWorker

from apps.runs.workers import GPU_KEY
from tests.fault.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TRIPWIRE = Path(__file__).parent / "cuda_tripwire"


def touch_cuda() -> dict:
    """The job: what a GPU run does first (asks for CUDA), from the work horse."""
    import torch

    return {"pid": os.getpid(), "available": torch.cuda.is_available()}


def test_the_worker_parent_never_asks_cuda_before_forking_a_job(worker, tmp_path):
    calls = tmp_path / "cuda-calls.txt"
    gpu = worker("gpu", PYTHONPATH=os.pathsep.join(p for p in (str(TRIPWIRE), os.environ.get("PYTHONPATH")) if p),
                 SELFPLAY_CUDA_TRIPWIRE=str(calls))
    connection = django_rq.get_connection("default")

    def registered():
        return [w for w in RQWorker.all(connection=connection) if w.pid == gpu.proc.pid
                and connection.exists(GPU_KEY.format(name=w.name))]

    (me,) = wait_for(registered, 120, "the gpu worker to start and record its GPUs", interval=0.2,
                     on_timeout=gpu.output)
    stored = json.loads(connection.get(GPU_KEY.format(name=me.name)))
    assert stored["gpus"] == [] and stored["no_gpu_warning"]  # no NVIDIA GPU here; the worker said so:
    wait_for(lambda: "serves the gpu queue but sees no GPU" in gpu.output(), 60, "the worker's no-GPU warning",
             interval=0.2, on_timeout=gpu.output)

    job = django_rq.get_queue("gpu").enqueue(touch_cuda)
    wait_for(lambda: job.refresh() or job.get_status() in ("finished", "failed"), 120, "the job to run",
             interval=0.2, on_timeout=gpu.output)
    assert job.get_status() == "finished", gpu.output()
    horse = job.return_value()["pid"]
    time.sleep(0.5)  # the parent's last heartbeat after the job
    lines = [line.split(" ", 1) for line in calls.read_text().splitlines()] if calls.exists() else []
    by_pid: dict[int, list[str]] = {}
    for pid, what in lines:
        by_pid.setdefault(int(pid), []).append(what)

    assert horse != gpu.proc.pid
    assert "torch.cuda.is_available" in by_pid.get(horse, []), f"the tripwire saw nothing in the work horse: {lines}"
    assert by_pid.get(gpu.proc.pid, []) == [], (
        "the worker's parent process imported torch or asked CUDA before forking its jobs; a forked job then "
        f"cannot use the GPU: {by_pid[gpu.proc.pid]}")
