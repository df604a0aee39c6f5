"""Multi-GPU runs from the worker: a run whose config asks for ``train.gpus`` > 1 is trained by
that many processes on the worker's machine, one per GPU, started through torchrun.

``train_ranks(run, run_dir, cfg, stream)`` (called by apps/runs/jobs.py inside the run job, whose
heartbeat keeps beating meanwhile):
1. refuses a machine with fewer GPUs than asked (a clear message, the run fails resumable);
2. writes ``<run_dir>/launch.json`` (the resolved config, the run id, whether to resume) and starts
   ``python -m torch.distributed.run --nproc_per_node N manage.py run_rank launch.json`` (each rank's
   body is in apps/runs/management/commands/run_rank.py) with the
   job's own database (``DATABASE_URL`` of the connection in use) and data directory;
3. waits, copying the ranks' output into ``run.log``; rank 0 reports through a ``DjangoSink``
   (so pause / cancel reach every rank at the next step boundary) and writes ``result.json``;
4. returns that result, or raises with the ranks' last error line.

No rank outlives its job. Cancel and pause are honoured by every rank at the next step boundary
(rank 0 hears them through its sink and tells the others). A job that ends otherwise takes its
ranks with it: torchrun gets SIGTERM when the job's process ends (``die_with_parent``; the RQ work
horse in turn dies with its worker, apps/runs/workers.py), and stops its ranks; RQ's kill of the job's
process group (a stopped job, a timeout) kills torchrun too, and each rank then gets SIGKILL because
its own parent, torchrun, ended (run_rank.py). So a killed worker or job leaves no rank holding GPU
memory (tests/fault/test_rank_cleanup.py).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

from django.conf import settings
from django.db import connection

from apps.jobs.processes import die_with_parent

ERROR_MARK = "RANK-ERROR: "


def database_url() -> str:
    """The connection in use as a URL a child process's settings accept (same database, also
    a test database)."""
    s = connection.settings_dict
    user = quote(s.get("USER") or "", safe="")
    password = quote(str(s.get("PASSWORD") or ""), safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = s.get("HOST") or (s.get("OPTIONS") or {}).get("host") or ""
    port = f":{s['PORT']}" if s.get("PORT") else ""
    if host.startswith("/"):
        return f"postgresql://{auth}{port}/{s['NAME']}?host={host}"
    return f"postgresql://{auth}{host}{port}/{s['NAME']}"


def check_gpus(cfg) -> None:
    """A GPU run needs as many cards as ranks on this worker (CPU ranks, train.device=cpu: any)."""
    if cfg.train.device == "cpu":
        return
    import torch

    have = torch.cuda.device_count()
    if have < cfg.train.gpus:
        raise RuntimeError(f"the run asks for {cfg.train.gpus} GPUs (train.gpus) but this worker has {have}; "
                           "resume it on a worker with enough GPUs, or lower train.gpus")


def train_ranks(run, run_dir: Path, cfg, stream, resume: bool):
    from trainer.launch import child_env

    check_gpus(cfg)
    launch = run_dir / "launch.json"
    launch.write_text(json.dumps({"run_id": run.pk, "config": cfg.model_dump(mode="json"), "run_dir": str(run_dir),
                                  "resume": resume}))
    (run_dir / "result.json").unlink(missing_ok=True)
    env = child_env()
    env.update(DATABASE_URL=database_url(), SELFPLAY_DATA_DIR=str(settings.DATA_DIR), PYTHONUNBUFFERED="1",
               DJANGO_SETTINGS_MODULE=os.environ.get("DJANGO_SETTINGS_MODULE", "selfplay_web.settings"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={cfg.train.gpus}",
           str(Path(settings.BASE_DIR) / "manage.py"), "run_rank", str(launch)]
    errors: list[str] = []
    job = os.getpid()
    proc = subprocess.Popen(cmd, cwd=settings.BASE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1, preexec_fn=lambda: die_with_parent(job, signal.SIGTERM))
    for line in proc.stdout:
        stream.write(line)
        if ERROR_MARK in line:
            errors.append(line.split(ERROR_MARK, 1)[1].strip())
    code = proc.wait()
    result = run_dir / "result.json"
    if code != 0 or not result.is_file():
        why = errors[0] if errors else f"the rank processes exited with status {code}; see {run_dir / 'run.log'}"
        raise RuntimeError(f"multi-GPU run failed: {why}")
    return SimpleNamespace(**json.loads(result.read_text()))

