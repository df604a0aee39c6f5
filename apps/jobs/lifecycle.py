"""The life of one background job row: ``enqueue`` it, then ``run_job`` it in the worker.

``enqueue(row, func, ...)`` puts ``func(row.pk)`` on the row's queue (a Redis that refuses fails the
row with a message saying what to do) and keeps the periodic reaper scheduled. ``run_job(kind, pk,
body)`` is the whole life of that RQ job:

1. the row is gone -> nothing to do; the atomic claim (a conditional UPDATE queued -> running,
   ``kind.claim``) fails -> another worker has it, or it was cancelled: nothing to do;
2. ``body(row)`` runs while a ``Heartbeat`` thread touches ``heartbeat_at`` every few seconds;
3. an exception is the job's own failure: ``kind.fail`` records its message (one line a person
   can act on; the traceback goes to the worker's log), and the worker never crashes;
   otherwise ``kind.succeed`` records the end.

A worker that dies stops beating; the reaper (reaper.py) fails its row.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import traceback
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from apps.jobs.reaper import RUNNING, ensure_reaper_scheduled

log = logging.getLogger("selfplay.jobs")


class QueueUnavailable(RuntimeError):
    """Redis could not take the job; the row is marked failed with this message."""


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


def cancel_job(job_id: str) -> None:
    """Best effort: take RQ job ``job_id`` off its queue (the row's claim fails anyway once the row
    is no longer queued)."""
    import django_rq
    from rq.job import Job

    try:
        Job.fetch(job_id, connection=django_rq.get_connection("default")).cancel()
    except Exception as exc:  # gone already, or Redis away
        log.info("could not cancel job %s: %s", job_id, exc)


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
