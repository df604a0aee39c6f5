"""RQ workers as the Workers page shows them: alive, their queues, their GPUs, their job.

`SelfplayWorker` (settings.RQ["WORKER_CLASS"]) records the accelerators it sees when it
starts, in a Redis hash next to RQ's own worker key, so the page can show them.
"""
from __future__ import annotations

import json

import django_rq
from rq import Worker
from rq.job import Job

GPU_KEY = "selfplay:worker-gpus:{name}"


def detect_gpus() -> list[dict]:
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append({"index": index, "name": props.name, "memory_gb": round(props.total_memory / 2**30, 1)})
    return gpus


class SelfplayWorker(Worker):
    def register_birth(self, *args, **kwargs):
        super().register_birth(*args, **kwargs)
        key = GPU_KEY.format(name=self.name)
        self.connection.set(key, json.dumps(detect_gpus()), ex=7 * 24 * 3600)

    def register_death(self, *args, **kwargs):
        self.connection.delete(GPU_KEY.format(name=self.name))
        super().register_death(*args, **kwargs)


def _job_summary(connection, job_id: str | None) -> dict | None:
    if not job_id:
        return None
    try:
        job = Job.fetch(job_id, connection=connection)
    except Exception:
        return {"id": job_id, "description": "(job gone)", "run_id": None}
    run_id = job.args[0] if job.func_name.endswith("execute_run") and job.args else None
    return {"id": job_id, "description": job.description, "run_id": run_id}


def workers_overview() -> dict:
    """Workers alive, their queues, GPUs and current job; queued jobs per queue."""
    connection = django_rq.get_connection("default")
    workers = []
    for worker in Worker.all(connection=connection):
        raw = connection.get(GPU_KEY.format(name=worker.name))
        workers.append({
            "name": worker.name,
            "hostname": worker.hostname,
            "pid": worker.pid,
            "state": worker.get_state(),
            "queues": worker.queue_names(),
            "gpus": json.loads(raw) if raw else [],
            "last_heartbeat": worker.last_heartbeat,
            "job": _job_summary(connection, worker.get_current_job_id()),
        })
    queues = [{"name": name, "queued": django_rq.get_queue(name).count} for name in ("gpu", "cpu", "short", "default")]
    return {"workers": sorted(workers, key=lambda w: w["name"]), "queues": queues}
