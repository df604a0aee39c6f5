"""No rank of a multi-GPU run outlives its job (here two CPU ranks over gloo, started by a real
``manage.py rqworker`` through torchrun, as on a GPU machine).

- cancel: every rank stops at the next step boundary, torchrun ends, the run is cancelled;
- the worker SIGKILLed alone (its work horse is not in its process group): the work horse dies with
  it, torchrun gets SIGTERM and stops the ranks;
- the job stopped through RQ (``send_stop_job_command``: SIGKILL to the work horse's process group,
  torchrun included): each rank dies with torchrun.
A rank left behind would hold its GPU memory on a GPU machine.
"""
from __future__ import annotations

import signal
from pathlib import Path

import django_rq
import pytest
from rq.command import send_stop_job_command

from apps.runs.models import Run
from apps.runs.services import lifecycle
from apps.runs.services.launch import launch
from tests.fault.conftest import _descendants, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _two_rank_run(tiny_grpo, researcher, worker):
    """A long two-rank grpo run on a real cpu worker, once both ranks have done a step: (run, worker, processes)
    where processes maps the job's pids (work horse, torchrun, ranks) to their command lines."""
    model, config = tiny_grpo
    config["train"] = {**config["train"], "steps": 200, "gpus": 2}
    config["checkpoint"] = {"every": 1000}
    run = launch("grpo", model, None, config=config, user=researcher)
    w = worker("cpu")

    def started():
        procs = {pid: _cmdline(pid) for pid in _descendants(w.proc.pid)}
        ranks = [pid for pid, cmd in procs.items() if "run_rank" in cmd and "torch.distributed.run" not in cmd]
        r = Run.objects.get(pk=run.pk)
        return procs if len(ranks) == 2 and r.status == "running" and r.current_step >= 1 else None

    procs = wait_for(started, 240, "both ranks to finish a step", interval=0.5, on_timeout=w.output)
    assert any("torch.distributed.run" in cmd for cmd in procs.values()), procs
    return run, w, procs


def _all_end(procs: dict[int, str], seconds: float, w) -> None:
    wait_for(lambda: not any(_alive(pid) for pid in procs), seconds, "every process of the job to end",
             interval=0.2, on_timeout=lambda: w.output() + "\nstill alive: " + repr(
                 {pid: cmd for pid, cmd in procs.items() if _alive(pid)}))


def test_cancel_ends_every_rank(roles, researcher, tiny_grpo, worker):
    run, w, procs = _two_rank_run(tiny_grpo, researcher, worker)
    lifecycle.cancel(Run.objects.get(pk=run.pk), researcher)
    done = wait_for(lambda: Run.objects.filter(pk=run.pk).exclude(status="running").first(), 120,
                    "the run to end after cancel", interval=0.2, on_timeout=w.output)
    assert done.status == "cancelled", done.error
    ranks_and_launcher = {pid: cmd for pid, cmd in procs.items() if "run_rank" in cmd}
    _all_end(ranks_and_launcher, 30, w)
    assert w.proc.poll() is None  # the worker goes on


def test_a_worker_killed_alone_takes_its_ranks_with_it(roles, researcher, tiny_grpo, worker):
    run, w, procs = _two_rank_run(tiny_grpo, researcher, worker)
    w.proc.send_signal(signal.SIGKILL)  # the RQ parent only: the work horse is in a process group of its own
    w.proc.wait(timeout=30)
    _all_end(procs, 60, w)


def test_a_stopped_job_takes_its_ranks_with_it(roles, researcher, tiny_grpo, worker):
    run, w, procs = _two_rank_run(tiny_grpo, researcher, worker)
    job_id = Run.objects.get(pk=run.pk).job_id
    send_stop_job_command(django_rq.get_connection("default"), job_id)  # RQ kills the work horse's process group
    _all_end(procs, 60, w)
    assert w.proc.poll() is None  # the worker goes on
