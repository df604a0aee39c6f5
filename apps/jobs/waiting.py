"""What a queued job waits for, in a sentence a person can act on (issue 20).

A run, an evaluation or an ingestion that stays "queued" used to say nothing. ``wait_reason(job_id)``
reads RQ itself (the job's queue, its place in line, the live workers serving that queue and what
they hold) and answers, e.g.::

    2nd in line on cpu, behind run 1 on the only cpu worker
    next on short: a free worker takes it in a moment
    no live worker serves gpu: start one with `python manage.py rqworker gpu` on a GPU machine
    (or launch on the CPU: train.device=cpu, queue cpu)

``no_worker_warning(queue)`` is the launch-time form of the last one (None while a live worker
serves the queue). Both say nothing (None / "") when Redis cannot be asked: the page or launch
reports Redis itself. This module knows no app: jobs are named by their RQ function and argument.
"""
from __future__ import annotations

import logging

log = logging.getLogger("selfplay.jobs")

# The RQ function's last name -> what a person calls the job it runs (its first argument is the row's id).
JOB_NOUNS = {"execute_run": "run", "execute_eval": "evaluation", "execute_crossplay": "cross-play matrix",
             "execute_ingest": "ingest", "ingest_upload": "ingestion of corpus",
             "load_wikipedia_job": "Wikipedia load of corpus",
             "reap_job": "the reaper"}


def ordinal(n: int) -> str:
    """1 -> '1st', 2 -> '2nd', 11 -> '11th', 23 -> '23rd'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def describe_job(job) -> str:
    """'run 1', 'evaluation 4', ... from an RQ job."""
    name = (job.func_name or "").rsplit(".", 1)[-1]
    noun = JOB_NOUNS.get(name)
    if noun is None:
        return job.description or job.id
    return f"{noun} {job.args[0]}" if job.args and noun != "the reaper" else noun


def _connection():
    import django_rq

    return django_rq.get_connection("default")


def serving_workers(queue: str, connection=None) -> list:
    """The live RQ workers that take jobs from ``queue`` (RQ forgets a worker whose heartbeat stopped)."""
    from rq import Worker

    return [w for w in Worker.all(connection=connection or _connection()) if queue in w.queue_names()]


def worker_gone(name: str, connection=None) -> bool:
    """True when no live RQ worker has this name (it stopped, e.g. `make demo` was stopped); False when one has
    or Redis cannot say (then only the heartbeat reaper decides)."""
    from rq import Worker

    try:
        return bool(name) and name not in {w.name for w in Worker.all(connection=connection or _connection())}
    except Exception as exc:
        log.info("could not list the workers: %s", exc)
        return False


def start_hint(queue: str) -> str:
    if queue == "gpu":
        return ("start one with `python manage.py rqworker gpu` on a GPU machine (or launch on the CPU: "
                "train.device=cpu, queue cpu)")
    return f"start one with `python manage.py rqworker {queue}`"


def no_worker_warning(queue: str) -> str | None:
    """The launch-time warning: None while a live worker serves ``queue`` (or Redis cannot say)."""
    try:
        if serving_workers(queue):
            return None
    except Exception as exc:  # Redis away: the launch itself says so
        log.info("could not list the workers: %s", exc)
        return None
    return f"no live worker serves the {queue} queue, so this waits until one starts: {start_hint(queue)}"


def launch_warning(queue: str) -> str | None:
    """The launch form's warning: ``no_worker_warning``, else, when every live worker of ``queue`` is busy, what holds
    them and how many jobs already wait there ("the only cpu worker is busy with run 12 (and 1 job waits): this
    starts after them"); None when a worker is free (or Redis cannot say)."""
    missing = no_worker_warning(queue)
    if missing:
        return missing
    try:
        from rq import Queue

        connection = _connection()
        workers = serving_workers(queue, connection)
        busy = [jid for jid in (w.get_current_job_id() for w in workers) if jid]
        waiting = len(Queue(queue, connection=connection).get_job_ids())
        if not workers or (len(busy) < len(workers) and not waiting):
            return None
        holding = ", ".join(_describe_id(jid, connection) for jid in busy) or "other jobs"
    except Exception as exc:
        log.info("could not list the workers: %s", exc)
        return None
    where = f"the only {queue} worker is" if len(workers) == 1 else f"all {len(workers)} {queue} workers are"
    queued = f" (and {waiting} job{'s' if waiting != 1 else ''} already wait{'s' if waiting == 1 else ''} there)" if waiting else ""
    return f"{where} busy with {holding}{queued}: this starts after them"


def wait_reason(job_id: str, queue: str | None = None) -> str:
    """Why the queued job ``job_id`` has not started yet ("" when it cannot be told)."""
    if not job_id:
        return ""
    try:
        return _reason(job_id, queue)
    except Exception as exc:  # Redis away, a job gone mid-read: say nothing rather than break a page
        log.info("could not tell what job %s waits for: %s", job_id, exc)
        return ""


def _reason(job_id: str, queue: str | None) -> str:
    from rq import Queue
    from rq.job import Job

    connection = _connection()
    try:
        queue = Job.fetch(job_id, connection=connection).origin or queue
    except Exception:  # no such job (any more)
        pass
    if not queue:
        return ""
    workers = serving_workers(queue, connection)
    if not workers:
        return f"no live worker serves {queue}: {start_hint(queue)}"
    held = {w.get_current_job_id(): w for w in workers}
    if job_id in held:
        return f"being picked up by {held[job_id].name}"
    ids = Queue(queue, connection=connection).get_job_ids()
    if job_id not in ids:
        return f"its job is not on the {queue} queue any more (Redis lost it?): cancel it and launch it again"
    ahead = ids.index(job_id)
    busy = [jid for jid in held if jid]
    if ahead == 0 and len(busy) < len(workers):
        return f"next on {queue}: a free worker takes it in a moment"
    holding = ", ".join(_describe_id(jid, connection) for jid in busy) or "other jobs"
    where = f"the only {queue} worker" if len(workers) == 1 else f"all {len(workers)} {queue} workers"
    return f"{ordinal(ahead + 1)} in line on {queue}, behind {holding} on {where}"


def _describe_id(job_id: str, connection) -> str:
    from rq.job import Job

    try:
        return describe_job(Job.fetch(job_id, connection=connection))
    except Exception:
        return job_id
