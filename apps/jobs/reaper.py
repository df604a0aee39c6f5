"""Reaping: failing job rows whose worker stopped beating (killed, out of memory, machine gone).

``reap(model, fail, advice)`` fails running rows of ``model`` silent for longer than
``settings.RUN_HEARTBEAT_SECONDS`` with an error naming the worker and how long it was silent.

Each app registers its job kinds from its ``AppConfig.ready()``: ``register(name, noun, reap,
active)`` (runs in apps/runs/apps.py; evaluations and cross-play matrices in apps/evals/apps.py).
``reap_all()`` reaps every registered kind; ``any_active()`` says whether any has a queued or
running job. The periodic reaper job (``reap_job``, on the ``default`` queue; it needs an RQ worker
started ``--with-scheduler``, as ``make demo`` does) runs ``reap_all`` and schedules its next pass
while any job is active; ``ensure_reaper_scheduled()`` (called by every enqueue) starts it. The pages
and APIs also reap their own kind when read.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

log = logging.getLogger("selfplay.jobs")
RUNNING = "running"
REAPER_KEY = "selfplay:reaper-scheduled"
REAPER_JOB = "apps.jobs.reaper.reap_job"


@dataclass(frozen=True)
class Reaped:
    """One registered job kind: what it is called and how it is reaped."""

    noun: str  # plural noun for messages: "evaluation(s)"
    reap: Callable[[Any], list[int]]  # (now) -> the pks failed
    active: Callable[[], bool]  # is any job of this kind queued or running?


KINDS: dict[str, Reaped] = {}


def register(name: str, noun: str, reap: Callable[[Any], list[int]], active: Callable[[], bool]) -> None:
    """Add a job kind to what ``reap_all`` / ``any_active`` walk (call it from ``AppConfig.ready()``)."""
    KINDS[name] = Reaped(noun, reap, active)


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
    """Reap every registered kind: {name: pks failed}."""
    return {name: kind.reap(now) for name, kind in KINDS.items()}


def any_active() -> bool:
    """Is any registered kind's job queued or running (so the periodic reaper must go on)?"""
    return any(kind.active() for kind in KINDS.values())


def reaper_interval() -> int:
    return max(2, settings.RUN_HEARTBEAT_SECONDS // 2)


def ensure_reaper_scheduled() -> bool:
    """Schedule the periodic reaper job unless one is pending (needs an RQ worker --with-scheduler)."""
    import django_rq

    try:
        conn = django_rq.get_connection("default")
        if not conn.set(REAPER_KEY, "1", nx=True, ex=reaper_interval() * 3):
            return False
        django_rq.get_queue("default").enqueue_in(timedelta(seconds=reaper_interval()), REAPER_JOB)
        return True
    except Exception as exc:
        log.warning("could not schedule the reaper: %s", exc)
        return False


def reap_job() -> dict[str, list[int]]:
    """Periodic: ``reap_all``, then schedule the next pass while any job is active."""
    import django_rq

    reaped = reap_all()
    django_rq.get_connection("default").delete(REAPER_KEY)
    if any_active():
        ensure_reaper_scheduled()
    return reaped
