"""The life of one background job row, shared by runs (apps/runs/jobs.py) and evaluations and
cross-play matrices (apps/evals/jobs.py).

A job row has ``status`` (queued / running / ...), ``queue``, ``job_id``, ``worker_name``,
``started_at``, ``heartbeat_at`` and ``error``. ``enqueue(row, func, ...)`` puts ``func(row.pk)`` on
the row's queue (a Redis that refuses fails the row with a message saying what to do) and keeps
the periodic reaper scheduled. ``run_job(kind, pk, body)`` is the whole life of that RQ job:

1. the row is gone -> nothing to do; the atomic claim (a conditional UPDATE queued -> running,
   ``kind.claim``) fails -> another worker has it, or it was cancelled: nothing to do;
2. ``body(row)`` runs while a ``Heartbeat`` thread touches ``heartbeat_at`` every few seconds;
3. an exception is the job's own failure: ``kind.fail`` records its message (one line a person
   can act on; the traceback goes to the worker's log), and the worker never crashes;
   otherwise ``kind.succeed`` records the end.

A worker that dies (killed, out of memory, machine gone) stops beating: ``reap(model, ...)`` fails
running rows silent for longer than ``settings.RUN_HEARTBEAT_SECONDS`` with an error naming the
worker and how long it was silent. ``reap_all()`` does it for every kind: the periodic reaper job
(``apps.runs.jobs.reap_runs_job``, rescheduled while any job is active) and the pages call it.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import traceback
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Q
from django.utils import timezone

log = logging.getLogger("selfplay.jobs")
RUNNING = "running"


@dataclass(frozen=True)
class JobKind:
    """How one kind of job row is claimed and ended."""

    noun: str  # "run", "eval", "cross-play": the first word of every line the job returns
    model: type  # the row's Django model
    claim: Callable[[Any, str], bool]  # (row, worker) -> won: the atomic queued -> running
    fail: Callable[[Any, str], None]  # (row, message): record a failure (only while it is still running)
    succeed: Callable[[Any, Any], str]  # (row, body's result) -> the job's result line


def enqueue(row, func, prefix: str, fail: Callable[[Any, str], None], advice: str, timeout: int) -> str:
    """Put ``func(row.pk)`` on ``row.queue`` as RQ job ``<prefix>-<pk>-<random>`` and note its id on
    the row. When Redis refuses: ``fail(row, message)``, then QueueUnavailable with the message
    (``advice`` finishes it: what to do once Redis is back)."""
    import django_rq

    from apps.runs.services.launch import QueueUnavailable
    from apps.runs.services.lifecycle import ensure_reaper_scheduled

    job_id = f"{prefix}-{row.pk}-{uuid.uuid4().hex[:8]}"
    try:
        django_rq.get_queue(row.queue).enqueue(func, row.pk, job_id=job_id, job_timeout=timeout,
                                               result_ttl=7 * 24 * 3600, failure_ttl=30 * 24 * 3600)
    except Exception as exc:  # redis.ConnectionError and friends
        message = (f"could not queue the job on {row.queue!r}: Redis is not reachable ({exc}); "
                   f"start it (manage.py services start) and {advice}")
        fail(row, message)
        raise QueueUnavailable(message) from None
    type(row).objects.filter(pk=row.pk).update(job_id=job_id)
    row.job_id = job_id
    ensure_reaper_scheduled()  # fails the row if its worker dies
    return job_id


def worker_name() -> str:
    """The RQ worker's name, or host:pid outside a worker."""
    try:
        from rq import get_current_job

        job = get_current_job()
        if job is not None and job.worker_name:
            return job.worker_name
    except Exception:
        pass
    return f"{socket.gethostname()}:{os.getpid()}"


def error_message(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


def run_job(kind: JobKind, pk: int, body: Callable[[Any], Any]) -> str:
    """Claim row ``pk`` of ``kind``, run ``body(row)`` with a heartbeat, record how it ended."""
    row = kind.model.objects.filter(pk=pk).first()
    if row is None:
        return f"{kind.noun} {pk} no longer exists"
    if not kind.claim(row, worker_name()):
        status = kind.model.objects.filter(pk=pk).values_list("status", flat=True).first()
        return f"{kind.noun} {pk} is {status}; nothing to do"
    try:
        with Heartbeat(kind.model, pk):
            result = body(row)
    except Exception as exc:  # the job's own failure: record it, never crash the worker
        message = error_message(exc)
        log.warning("%s %s failed: %s\n%s", kind.noun, pk, message, traceback.format_exc())
        kind.fail(row, message)
        return f"{kind.noun} {pk} failed: {message}"
    return kind.succeed(row, result)


class Heartbeat(threading.Thread):
    """Touches ``heartbeat_at`` of a running row every few seconds while the job computes, on its
    own database connection, so that the reaper can tell a slow job from a dead worker."""

    def __init__(self, model: type, pk: int, interval: float | None = None):
        super().__init__(name=f"heartbeat-{model.__name__.lower()}-{pk}", daemon=True)
        self.model, self.pk = model, pk
        self.interval = interval or max(1.0, min(5.0, settings.RUN_HEARTBEAT_SECONDS / 4))
        self._stop_event = threading.Event()
        self.beats = 0

    def run(self):
        try:
            while not self._stop_event.wait(self.interval):
                try:
                    self.model.objects.filter(pk=self.pk, status=RUNNING).update(heartbeat_at=timezone.now())
                    self.beats += 1
                except Exception as exc:  # the database is away for a moment: try again next beat
                    log.warning("heartbeat of %s %s failed: %s", self.model.__name__, self.pk, exc)
                    close_old_connections()
        finally:
            connection.close()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self._stop_event.set()
        self.join(timeout=10)


# ---- reaping --------------------------------------------------------------------------------

def stale(model: type, now=None) -> list[tuple[Any, int]]:
    """(row, seconds silent) for running rows of ``model`` without a heartbeat for RUN_HEARTBEAT_SECONDS."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.RUN_HEARTBEAT_SECONDS)
    rows = model.objects.filter(status=RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff))
    return [(row, int((now - (row.heartbeat_at or row.started_at)).total_seconds())) for row in rows]


def silence_error(row, seconds: int, advice: str) -> str:
    """What a reaped row's ``error`` says: who went silent, for how long, and what to do."""
    return (f"worker stopped responding (no heartbeat from {row.worker_name or 'the worker'} for {seconds}s, "
            f"the limit is {settings.RUN_HEARTBEAT_SECONDS}s); {advice}")


def reap(model: type, fail: Callable[[Any, str], bool], advice: str, now=None) -> list[int]:
    """Fail every silent running row of ``model``: ``fail(row, error)`` returns False when the row
    changed meanwhile (it beat again, or ended). Returns the pks failed."""
    reaped = [row.pk for row, silent in stale(model, now) if fail(row, silence_error(row, silent, advice))]
    if reaped:
        log.warning("reaped %s rows without heartbeat: %s", model.__name__, reaped)
    return reaped


def reap_all(now=None) -> dict[str, list[int]]:
    """Reap silent runs, evaluations and cross-play matrices."""
    from apps.evals.models import CrossPlay, EvalJob
    from apps.runs.services.lifecycle import reap_stale_runs

    return {"runs": reap_stale_runs(now), "evals": EvalJob.reap_stale(now), "crossplays": CrossPlay.reap_stale(now)}


def any_active() -> bool:
    """Is any run, evaluation or cross-play queued or running (so the periodic reaper must go on)?"""
    from apps.evals.models import CrossPlay, EvalJob
    from apps.runs.services.lifecycle import active_runs_exist

    live = ("queued", RUNNING)
    return (active_runs_exist() or EvalJob.objects.filter(status__in=live).exists()
            or CrossPlay.objects.filter(status__in=live).exists())
