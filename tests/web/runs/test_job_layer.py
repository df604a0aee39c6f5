"""apps/jobs/: one job lifecycle for runs, evaluations and cross-play matrices, and one reaper.

An eval job beats like a run while its body computes, and records a failing body's message; a
Redis that refuses the job fails the row with what to do (a run stays resumable).
"""
from __future__ import annotations

import time

import pytest

from apps.evals.jobs import EVAL_JOB
from apps.evals.launch import enqueue as enqueue_eval
from apps.evals.models import EvalJob
from apps.jobs import reaper
from apps.jobs.lifecycle import QueueUnavailable, run_job
from apps.runs.models import Run
from apps.runs.services import lifecycle

# The heartbeat thread has a database connection of its own, and django-rq enqueues on commit.
pytestmark = pytest.mark.django_db(transaction=True)


def test_an_eval_job_beats_while_its_body_runs_and_records_a_failure(roles, settings):
    settings.RUN_HEARTBEAT_SECONDS = 4  # a beat every second
    job = EvalJob.objects.create(model_spec="base:tiny", queue="cpu")
    seen = []

    def body(row):
        claimed_at = EvalJob.objects.get(pk=row.pk).heartbeat_at
        deadline = time.monotonic() + 20
        while EvalJob.objects.get(pk=row.pk).heartbeat_at == claimed_at and time.monotonic() < deadline:
            time.sleep(0.1)
        seen.append(EvalJob.objects.get(pk=row.pk).heartbeat_at > claimed_at)
        raise ValueError("benchmark 'x' has no items")

    assert run_job(EVAL_JOB, job.pk, body) == f"eval {job.pk} failed: benchmark 'x' has no items"
    job.refresh_from_db()
    assert seen == [True]  # the heartbeat thread touched the row while the body ran
    assert (job.status, job.error) == ("failed", "benchmark 'x' has no items") and job.finished_at
    assert run_job(EVAL_JOB, job.pk, body) == f"eval {job.pk} is failed; nothing to do"
    assert run_job(EVAL_JOB, 999_999, body) == "eval 999999 no longer exists"


def test_a_refused_queue_fails_the_row_with_what_to_do(roles, settings):
    dead = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    settings.RQ_QUEUES = {name: {**cfg, "URL": dead} for name, cfg in settings.RQ_QUEUES.items()}
    job = EvalJob.objects.create(model_spec="base:tiny", queue="cpu")
    with pytest.raises(QueueUnavailable, match="Redis is not reachable"):
        enqueue_eval(job, "apps.evals.jobs.execute_eval")
    job.refresh_from_db()
    assert job.status == "failed" and job.error.endswith("start it (manage.py services start) and launch again")
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, queue="cpu")
    with pytest.raises(QueueUnavailable, match="resume the run"):
        lifecycle.enqueue(run)
    run.refresh_from_db()
    assert run.status == "failed" and run.resumable and not run.job_id


def test_reap_runs_also_fails_silent_evaluations(roles, settings, capsys):
    from datetime import timedelta

    from django.core.management import call_command
    from django.utils import timezone

    silent = timezone.now() - timedelta(seconds=settings.RUN_HEARTBEAT_SECONDS + 5)
    job = EvalJob.objects.create(model_spec="base:tiny", status="running", worker_name="gpu-box:7", heartbeat_at=silent)
    call_command("reap_runs")
    assert f"reaped 1 evaluation(s): {job.pk}" in capsys.readouterr().out
    job.refresh_from_db()
    assert job.status == "failed" and "no heartbeat from gpu-box:7" in job.error and "launch it again" in job.error


def test_every_app_registers_its_job_kinds_and_run_hooks():
    """The shared layers know no app: corpora, runs and evals fill them in from their AppConfig.ready()."""
    from apps.evals.launch import on_checkpoint
    from apps.review.feedback import pending_harness, pending_verdicts
    from apps.review.sampling import enqueue_for_review
    from apps.runs import hooks

    assert list(reaper.KINDS) == ["ingests", "runs", "evals", "crossplays"]
    assert (hooks.FLUSH, hooks.CHECKPOINT) == ([enqueue_for_review], [on_checkpoint])
    assert hooks.CONTROL == {"verdicts": pending_verdicts, "harness": pending_harness}


def test_any_active_walks_every_registered_kind(roles):
    assert not reaper.any_active()
    job = EvalJob.objects.create(model_spec="base:tiny", queue="cpu")
    assert reaper.any_active()
    EvalJob.objects.filter(pk=job.pk).update(status="finished")
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, queue="cpu", status="paused")
    assert reaper.any_active()  # a paused run is active: it may be resumed
    Run.objects.filter(pk=run.pk).update(status="finished")
    assert not reaper.any_active()
