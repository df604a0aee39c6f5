"""A dead worker leaves its evaluation failed with a clear error (apps/jobs/).

A real ``manage.py rqworker`` (in its own process group, on the test database) runs an eval of a
tiny checkpoint; while its heartbeat thread beats, the periodic reaper job leaves it running;
after the whole worker is SIGKILLed mid-evaluation, the reaper fails it with an error that names
the worker and says what to do.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from apps.evals import benchmarks as bench_service
from apps.evals.launch import launch_eval
from apps.evals.models import EvalJob
from apps.jobs.reaper import REAPER_KEY, reap_job
from tests.fault.conftest import wait_for_other_sessions_to_close
from tests.web.evals.test_jobs import run_with_checkpoints, trained  # noqa: F401  (fixtures)
from tests.web.runs.test_live_page_browser import _database_url

pytestmark = pytest.mark.django_db(transaction=True)
HEARTBEAT = 6  # seconds: the worker beats every 1.5 s (Heartbeat: a quarter of it), slack for a loaded CI box
# Long enough that the worker is still answering when it is killed: 300 questions, 256 new tokens each.
LONG = "".join(json.dumps({"question": f"What is {a} + 1? Explain step by step.", "answer": a + 1}) + "\n"
               for a in range(300))


def _wait(what: str, predicate, seconds: float, log) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; worker log:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


def _kill_tree(worker: subprocess.Popen) -> None:
    """SIGKILL the worker process and every process below it, as a dying machine would."""
    try:
        tree = [*psutil.Process(worker.pid).children(recursive=True), psutil.Process(worker.pid)]
    except psutil.NoSuchProcess:
        tree = []
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(tree, timeout=30)
    worker.wait(timeout=30)


def test_an_eval_whose_worker_is_killed_is_failed_by_the_periodic_reaper(
        roles, run_with_checkpoints, researcher, data_dir, private_redis, settings, tmp_path):  # noqa: F811
    settings.RUN_HEARTBEAT_SECONDS = HEARTBEAT
    bench_service.upload("long-arith", io.BytesIO(LONG.encode()), "math")
    ckpt = run_with_checkpoints.checkpoints.get(step=2)
    job = launch_eval(benchmarks=["long-arith"], checkpoint=ckpt.pk, max_new_tokens=256, user=researcher, queue="cpu",
                      limit=300)  # every item: a CPU evaluation takes 10 unless asked (apps/evals/estimate.py)
    import django_rq

    assert django_rq.get_connection("default").get(REAPER_KEY) is not None  # launching scheduled the reaper

    env = {**os.environ, "DATABASE_URL": _database_url(), "REDIS_URL": private_redis,
           "SELFPLAY_DATA_DIR": str(settings.MODELS_DIR.parent), "SELFPLAY_HEARTBEAT_SECONDS": str(HEARTBEAT),
           "SELFPLAY_TORCH_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen([sys.executable, "manage.py", "rqworker", "evals"], env=env, cwd=settings.BASE_DIR,
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def answering() -> bool:
            job.refresh_from_db()
            assert job.status in ("queued", "running"), job.error
            return job.status == "running" and job.done > 0  # the model is loaded and scoring

        _wait("the worker to start answering", answering, 240, log)
        started = job.started_at
        _wait("a heartbeat older than the limit would allow without the thread",
              lambda: time.time() - started.timestamp() > HEARTBEAT + 1, 30, log)
        assert reap_job()["evals"] == [] and EvalJob.objects.get(pk=job.pk).status == "running"  # alive: beating

        _kill_tree(worker)  # the worker and its work horse (RQ gives the horse a session of its own)
        time.sleep(HEARTBEAT + 1.5)
        reap_job()
    finally:
        _kill_tree(worker)
        wait_for_other_sessions_to_close()
    job.refresh_from_db()
    assert job.status == "failed" and job.finished_at is not None, log.read_text(errors="replace")[-3000:]
    assert job.error.startswith("worker stopped responding") and job.worker_name in job.error
    assert "launch it again" in job.error
    assert 0 < job.done < job.total  # it died mid-way, and the partial samples stay readable
