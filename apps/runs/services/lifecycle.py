"""Controlling runs: queue, pause, resume, cancel, and reap runs whose worker went silent.

The states and allowed moves live on ``Run`` (apps/runs/models.py)::

    queued --claim--> running --(trainer returns)--> finished
                         |--exception------------> failed (error = the exception's message)
                         |--pause request -------> paused    (at the next step boundary)
                         |--cancel request ------> cancelled (at the next step boundary)
                         '--no heartbeat --------> failed, resumable ("worker stopped responding")
    paused | failed(resumable) --resume--> queued (a NEW job; continues from the last checkpoint)
    queued | paused --cancel--> cancelled (at once)

Pause and cancel of a running run only set ``Run.requested``; the worker's DjangoSink reads
it in ``control()`` at the next step boundary and the job records the final state.

Heartbeat: the job touches ``heartbeat_at`` at every flush of its sink and from a background
thread every few seconds. ``reap_stale_runs()`` marks running runs silent for longer than
``settings.RUN_HEARTBEAT_SECONDS`` as failed and resumable. It is the runs' job kind in the
shared reaper (apps/jobs/reaper.py, registered in apps/runs/apps.py): it runs from ``manage.py
reap_runs``, from the periodic reaper job, and whenever the runs list or the runs API is read.
"""
from __future__ import annotations

import logging

from apps.jobs.lifecycle import cancel_job
from apps.jobs.lifecycle import enqueue as enqueue_job
from apps.jobs.reaper import reap
from apps.runs.jobs import execute_run
from apps.runs.models import ACTIVE, IllegalTransition, Run, Status

log = logging.getLogger("selfplay.runs")

JOB_TIMEOUT = 30 * 24 * 3600


def enqueue(run: Run) -> str:
    """Put the run's job on its queue; marks the run failed (resumable) when Redis refuses."""
    return enqueue_job(run, execute_run, "run", _fail_queued, "resume the run", JOB_TIMEOUT)


def _fail_queued(run: Run, error: str) -> None:
    run.mark_failed(error, resumable=True, expect=Status.QUEUED)


def pause(run: Run, user=None) -> Run:
    run.request_pause(user)
    return run


def cancel(run: Run, user=None) -> Run:
    was_queued = run.status == Status.QUEUED
    run.request_cancel(user)
    if was_queued and run.job_id:
        cancel_job(run.job_id)  # best effort: the job's claim fails anyway once the run is cancelled
    return run


def resume(run: Run, user=None) -> Run:
    """Paused (or failed with a dead worker) -> queued, in a NEW job that continues from the last checkpoint."""
    if run.status == Status.FAILED and not run.resumable:
        raise IllegalTransition(f"Cannot resume run {run.pk}: it failed with an error in the run itself "
                                f"({run.error[:200]}); fix the config and launch a new run")
    if not run.can_resume:
        raise IllegalTransition(f"Cannot resume run {run.pk}: it is {run.status}; only a paused run (or a failed "
                                "run whose worker died) can be resumed")
    who = getattr(user, "username", None) or "the system"
    where = f"checkpoint at step {_last_checkpoint_step(run)}" if run.checkpoint_path else "the start (no checkpoint yet)"
    run.transition(Status.QUEUED, f"resumed by {who}; continues from {where}", expect=run.status,
                   requested="", resumable=False, finished_at=None)
    enqueue(run)
    return run


ACTIONS = {"pause": pause, "resume": resume, "cancel": cancel}


def _last_checkpoint_step(run: Run) -> int | None:
    last = run.checkpoints.order_by("-step").first()
    return last.step if last else None


# ---- the reaper ----------------------------------------------------------------------------
def reap_stale_runs(now=None) -> list[int]:
    """Mark running runs without a heartbeat for RUN_HEARTBEAT_SECONDS as failed and resumable."""
    return reap(Run, _fail_silent, "resume to continue from the last checkpoint", now)


def _fail_silent(run: Run, error: str) -> bool:
    try:
        run.mark_failed(error, resumable=True)
    except IllegalTransition:
        return False  # it changed state meanwhile
    return True


def active_runs_exist() -> bool:
    return Run.objects.filter(status__in=ACTIVE).exists()
