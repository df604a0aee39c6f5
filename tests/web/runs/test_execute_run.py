"""The run job end to end: the real trainer (grpo on a tiny random-init model) on a real RQ worker.

Transactional: the job's heartbeat thread and the pause thread use their own DB connections.
"""
import time
from pathlib import Path

import pytest

from apps.episodes.models import Attempt, Task
from apps.jobs.lifecycle import Heartbeat
from apps.runs.jobs import execute_run
from apps.runs.models import Checkpoint, Metric, Run
from apps.runs.services import lifecycle
from apps.runs.services.launch import launch
from tests.web.runs.conftest import burst, pause_after_step_one

pytestmark = pytest.mark.django_db(transaction=True)


def _launch(user, tiny_grpo, **overrides):
    model, config = tiny_grpo
    config["train"] = {**config["train"], **overrides}
    return launch("grpo", model, None, config=config, user=user)


def _metric_keys(run):
    return list(Metric.objects.filter(run=run).values_list("step", "role", "name"))


def _paused_after_step_one(user, tiny_grpo) -> Run:
    """A 4-step run paused at the step boundary after step 1 (or 2) by a request from another thread."""
    run = _launch(user, tiny_grpo, steps=4)
    pauser = pause_after_step_one(run.pk, seconds=120)
    burst("cpu")
    pauser.join()
    run.refresh_from_db()
    assert run.status == "paused", run.error
    return run


def test_a_launched_run_trains_to_the_end(roles, researcher, tiny_grpo):
    run = _launch(researcher, tiny_grpo)
    burst("cpu")
    run.refresh_from_db()
    assert run.status == "finished", run.error
    assert run.current_step == 4 and run.started_at and run.finished_at and run.worker_name
    steps = sorted({s for s, _, n in _metric_keys(run) if n == "reward_mean"})
    assert steps == [1, 2, 3, 4]
    assert Task.objects.filter(run=run).count() == 4 * 2  # 4 logged attempts = 2 prompts x G=2, per step
    assert Attempt.objects.filter(run=run, task__isnull=False).count() == 4 * 4
    assert list(Checkpoint.objects.filter(run=run).order_by("step").values_list("step", flat=True)) == [2, 4]
    assert Path(run.checkpoint_path).name == "step-000004"
    log = (Path(run.run_dir) / "run.log").read_text()
    assert "[step 4/4" in log
    assert [e.data.get("to") for e in run.events.filter(kind="status").order_by("id")] == ["queued", "running", "finished"]


def test_pause_at_a_step_boundary_then_resume_from_the_checkpoint_without_duplicates(roles, researcher, tiny_grpo):
    run = _paused_after_step_one(researcher, tiny_grpo)
    paused_at = run.current_step
    assert 1 <= paused_at < 4
    assert Path(run.checkpoint_path).name == f"step-{paused_at:06d}"  # the trainer checkpoints when it pauses
    before = _metric_keys(run)

    lifecycle.resume(run, researcher)
    run.refresh_from_db()
    assert run.status == "queued"
    burst("cpu")
    run.refresh_from_db()
    assert run.status == "finished", run.error
    keys = _metric_keys(run)
    assert len(keys) == len(set(keys))
    assert set(before) <= set(keys)
    assert sorted({s for s, _, n in keys if n == "reward_mean"}) == [1, 2, 3, 4]
    assert Attempt.objects.filter(run=run).count() == 4 * 4
    messages = list(run.events.values_list("message", flat=True))
    assert any(m.startswith(f"resuming from step-{paused_at:06d}") for m in messages)
    assert any(m.startswith(f"paused at step {paused_at}") for m in messages)


def test_a_checkpoint_written_but_never_reported_is_listed_when_the_run_resumes_from_it(roles, researcher, tiny_grpo):
    """A background write that finished just before its worker was killed is on disk, whole, but unreported: the
    resume starts from it, and the run's checkpoints (rows and events) list it once (CI saw a run resume from
    such a checkpoint that the run page never showed)."""
    run = _paused_after_step_one(researcher, tiny_grpo)
    paused_at = run.current_step
    Checkpoint.objects.filter(run=run, step=paused_at).delete()  # as if the sink never heard of it
    run.events.filter(message=f"checkpoint at step {paused_at}").delete()

    lifecycle.resume(run, researcher)
    burst("cpu")
    run.refresh_from_db()
    assert run.status == "finished", run.error
    steps = list(Checkpoint.objects.filter(run=run).order_by("step").values_list("step", flat=True))
    assert paused_at in steps and steps == sorted({paused_at, 2, 4})
    assert run.events.filter(message=f"checkpoint at step {paused_at}").count() == 1
    assert run.events.filter(message__startswith=f"resuming from step-{paused_at:06d}").count() == 1


def test_a_failing_run_records_the_message_and_logs_the_traceback(roles, researcher, tiny_grpo, run_env):
    bad = run_env / "prompts" / "bad.jsonl"
    bad.write_text('{"question": "no prompt key here"}\n')
    model, config = tiny_grpo
    config["data"] = {"path": str(bad)}
    run = launch("grpo", model, None, config=config, user=researcher)
    burst("cpu")
    run.refresh_from_db()
    assert run.status == "failed" and not run.resumable
    assert "Traceback" not in run.error and run.error
    assert "Traceback" in (Path(run.run_dir) / "run.log").read_text()


def test_a_job_for_a_run_that_is_not_queued_does_nothing(roles, researcher, tiny_grpo):
    run = _launch(researcher, tiny_grpo)
    run.request_cancel(researcher)
    assert "is cancelled; nothing to do" in execute_run(run.pk)
    assert not Metric.objects.filter(run=run).exists()


def test_the_heartbeat_thread_keeps_a_running_run_alive(roles):
    run = Run.objects.create(method="grpo", model_name="tiny", config={})
    run.mark_running("w")
    Run.objects.filter(pk=run.pk).update(heartbeat_at=None)
    with Heartbeat(Run, run.pk, interval=0.05) as beat:
        deadline = time.monotonic() + 10
        while beat.beats < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    run.refresh_from_db()
    assert beat.beats >= 2 and run.heartbeat_at is not None
