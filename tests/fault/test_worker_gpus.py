"""A real ``rqworker gpu`` keeps its cards on the Workers page fresh, idle and busy.

The device list comes from a stand-in ``nvidia-smi`` (SELFPLAY_NVIDIA_SMI) that prints the text files
this test writes, in nvidia-smi's CSV form: the same path as on a GPU machine from the subprocess on
(``query_gpus``: run, parse, attribute, store; the page reads what the worker stored).
- idle: a changed reading reaches the page within the worker's refresh period (it wakes to beat);
- busy: a process of its job on card 1 shows the card held by that job, read while the job runs.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import django_rq
import pytest

from apps.runs.workers import GPU_REFRESH_SECONDS, workers_overview
from tests.fault.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

FAKE_NVIDIA_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=*) cat "{folder}/gpus.csv" ;;
  --query-compute-apps=*) cat "{folder}/apps.csv" 2>/dev/null ;;
  *) exit 2 ;;
esac
"""


def _gpus(util0: int) -> str:
    return (f"0, GPU-aaaa-0001, NVIDIA H100 80GB HBM3, 1024, 81559, {util0}\n"
            "1, GPU-bbbb-0002, NVIDIA H100 80GB HBM3, 0, 81559, 0\n")


def hold_card(apps_csv: str, seconds: float) -> int:
    """The job: 'allocates' 4 GiB on card 1 (writes itself into the process list), holds it a while."""
    Path(apps_csv).write_text(f"{os.getpid()}, GPU-bbbb-0002, 4096\n")
    time.sleep(seconds)
    Path(apps_csv).write_text("")
    return os.getpid()


def _me(pid: int):
    return next((w for w in workers_overview()["workers"] if w["pid"] == pid), None)


def test_a_gpu_worker_keeps_its_cards_fresh_idle_and_busy(worker, tmp_path):
    (tmp_path / "gpus.csv").write_text(_gpus(3))
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI.format(folder=tmp_path))
    smi.chmod(0o755)
    gpu = worker("gpu", SELFPLAY_NVIDIA_SMI=str(smi))

    row = wait_for(lambda: (w := _me(gpu.proc.pid)) and w["gpus"] and w, 120, "the worker to list its cards",
                   interval=0.2, on_timeout=gpu.output)
    assert [(c["name"], c["utilization"], c["memory"]) for c in row["gpus"]] == [
        ("NVIDIA H100 80GB HBM3", 3.0, "1.0 / 79.6 GiB"), ("NVIDIA H100 80GB HBM3", 0.0, "0.0 / 79.6 GiB")]
    assert "GPUs 0: NVIDIA H100 80GB HBM3, 1: NVIDIA H100 80GB HBM3" in gpu.output()

    (tmp_path / "gpus.csv").write_text(_gpus(97))  # the card got busy; an idle worker reads it again
    changed_at = time.monotonic()
    wait_for(lambda: (w := _me(gpu.proc.pid)) and w["gpus"][0]["utilization"] == 97.0, 3 * GPU_REFRESH_SECONDS,
             "the idle worker to refresh its cards", interval=0.5, on_timeout=gpu.output)
    assert time.monotonic() - changed_at <= 2 * GPU_REFRESH_SECONDS + 5

    job = django_rq.get_queue("gpu").enqueue(hold_card, str(tmp_path / "apps.csv"), 3 * GPU_REFRESH_SECONDS)
    held = wait_for(lambda: (w := _me(gpu.proc.pid)) and w["gpus"][1]["held_by_job"] and w, 3 * GPU_REFRESH_SECONDS,
                    "the busy worker to show the card its job holds", interval=0.5, on_timeout=gpu.output)
    assert held["gpus"][1]["held_by_job"]["id"] == job.id and held["gpus"][1]["others"] == ""
    assert held["gpus"][0]["held_by_job"] is None and held["job"]["id"] == job.id
    wait_for(lambda: job.refresh() or job.get_status() == "finished", 4 * GPU_REFRESH_SECONDS, "the job to end",
             interval=0.5, on_timeout=gpu.output)
    assert job.return_value() not in (None, gpu.proc.pid)  # it ran in a work horse
