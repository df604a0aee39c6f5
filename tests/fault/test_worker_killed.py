"""A worker SIGKILLed in the middle of a run.

A real ``manage.py rqworker`` trains a tiny grpo run; after its first checkpoint the whole worker
(RQ parent and work horse) gets SIGKILL. The periodic reaper job, run by a second real worker
(``--with-scheduler``), must mark the run failed and resumable within the heartbeat window; a
resume continues from the newest checkpoint, and at the end every step's rows exist exactly
once, the re-run steps reproduce the values written before the kill, and the whole series
matches an uninterrupted run of the same config.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.db.models import Count

from apps.episodes.models import Attempt, Task
from apps.runs.models import Checkpoint, Metric, Run, RunEvent
from apps.jobs.reaper import reaper_interval
from apps.runs.services import lifecycle
from apps.runs.services.launch import launch
from trainer.checkpoint import latest_checkpoint
from tests.fault.conftest import HEARTBEAT_SECONDS, wait_for
from tests.web.runs.conftest import burst

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = 8
TASKS, ATTEMPTS = 2, 4  # rows per step: 2 prompts, each with G=2 logged attempts


def _config(tiny_grpo):
    model, config = tiny_grpo
    config["train"] = {**config["train"], "steps": STEPS}
    return model, config


TIMINGS = ("seconds", "per_s", "memory", "overhead")  # wall-clock metrics (and overhead_ratio) differ between runs


def _values(run) -> dict[tuple[int, str, str], float]:
    """Every metric of the run but the timings: (step, role, name) -> value."""
    rows = Metric.objects.filter(run=run).values_list("step", "role", "name", "value")
    return {(s, r, n): v for s, r, n, v in rows if not any(t in n for t in TIMINGS)}


def _queue_state() -> str:
    """What the reaper's queue holds (for a timeout message)."""
    import django_rq

    scheduled = django_rq.get_queue("default").scheduled_job_registry.get_job_ids()
    return f"\nscheduled on default: {scheduled}; runs: {list(Run.objects.values('id', 'status', 'heartbeat_at'))}"


def _killable(run_id):
    run = Run.objects.get(pk=run_id)
    # an odd step: past the checkpoint of the step before it (every 2), so the resume most likely re-runs a step
    return run if run.status == "running" and run.checkpoint_path and run.current_step > 2 and run.current_step % 2 \
        else None


def test_a_sigkilled_worker_is_reaped_and_the_resumed_run_loses_and_duplicates_nothing(
        roles, researcher, tiny_grpo, worker):
    model, config = _config(tiny_grpo)
    run = launch("grpo", model, None, config=config, user=researcher)
    ops = worker("default", scheduler=True)  # runs the periodic reaper job scheduled at launch
    first = worker("cpu")
    running = wait_for(lambda: _killable(run.pk), 180, "the run to pass its first checkpoint", on_timeout=first.output)
    first.kill()
    killed_at = time.monotonic()
    assert running.current_step < STEPS, "the run finished before the kill; make it longer"
    before = _values(run)
    # the newest whole checkpoint on disk: a background write may have finished just before the kill, unreported
    newest = latest_checkpoint(Path(Run.objects.get(pk=run.pk).checkpoint_path).parent.parent)
    checkpoint_step = int(newest.name.split("-")[1])

    failed = wait_for(lambda: Run.objects.filter(pk=run.pk, status="failed").first(), HEARTBEAT_SECONDS + 30,
                      "the reaper to mark the run failed", interval=0.2, on_timeout=lambda: ops.output() + _queue_state())
    silent_for = time.monotonic() - killed_at
    assert failed.resumable and failed.error.startswith("worker stopped responding"), failed.error
    # within the heartbeat window plus a reaper period (and the second worker's start-up on a busy machine)
    assert silent_for <= HEARTBEAT_SECONDS + reaper_interval() + 20, silent_for

    lifecycle.resume(failed, researcher)
    resumed = worker("cpu")
    done = wait_for(lambda: Run.objects.filter(pk=run.pk, status__in=["finished", "failed"]).first(), 180,
                    "the resumed run to end", interval=0.2, on_timeout=resumed.output)
    assert done.status == "finished", done.error
    assert done.current_step == STEPS
    assert RunEvent.objects.filter(run=run, message__startswith=f"resuming from step-{checkpoint_step:06d}").count() == 1

    after = _values(run)
    assert sorted({s for s, _, n in after if n == "reward_mean"}) == list(range(1, STEPS + 1))
    assert set(before) <= set(after)
    # steps re-run after the checkpoint (written before the kill, then again) reproduce their values
    rerun = {k: v for k, v in before.items() if k[0] > checkpoint_step}
    # (none when the newest whole checkpoint is the last step recorded before the kill: a background write can finish
    # just before it; the comparison with an uninterrupted run below still checks every value)
    assert {k: after[k] for k in rerun} == pytest.approx(rerun, rel=1e-5, abs=1e-6)

    # exactly one row per step and key: nothing lost, nothing duplicated
    assert Task.objects.filter(run=run).count() == STEPS * TASKS
    assert Attempt.objects.filter(run=run).count() == STEPS * ATTEMPTS
    assert not Attempt.objects.filter(run=run).values("step", "key").annotate(n=Count("id")).filter(n__gt=1).exists()
    steps = list(Checkpoint.objects.filter(run=run).order_by("step").values_list("step", flat=True))
    assert steps == list(range(2, STEPS + 1, 2))
    checkpoint_events = RunEvent.objects.filter(run=run, message__startswith="checkpoint at step")
    assert checkpoint_events.count() == len(steps)
    statuses = [e.data.get("to") for e in run.events.filter(kind="status").order_by("id") if e.data.get("to")]
    assert statuses == ["queued", "running", "failed", "queued", "running", "finished"]

    # the same config, never interrupted, in this process: the same series
    resumed.kill()
    _, config = _config(tiny_grpo)
    baseline = launch("grpo", model, None, config=config, user=researcher)
    burst("cpu")
    baseline.refresh_from_db()
    assert baseline.status == "finished", baseline.error
    expected = _values(baseline)
    assert set(expected) == set(after)
    assert after == pytest.approx(expected, rel=1e-4, abs=1e-5)
