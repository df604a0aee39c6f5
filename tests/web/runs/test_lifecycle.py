"""Run status changes: allowed moves write a RunEvent, illegal ones are refused with a clear message."""
import pytest

from apps.runs.models import IllegalTransition, Run, RunEvent, Status
from apps.runs.services import lifecycle

pytestmark = pytest.mark.django_db


def _run(owner=None, status=Status.QUEUED, **fields):
    return Run.objects.create(method="grpo", model_name="tiny", config={"method": "grpo"}, owner=owner,
                              status=status, total_steps=10, **fields)


def _kinds(run):
    return list(run.events.order_by("id").values_list("kind", "data"))


def test_it_claims_a_queued_run_once():
    run = _run()
    assert run.mark_running("worker-1")
    assert not Run.objects.get(pk=run.pk).mark_running("worker-2")
    run.refresh_from_db()
    assert run.status == "running" and run.worker_name == "worker-1" and run.started_at and run.heartbeat_at
    assert [d["to"] for _, d in _kinds(run)] == ["running"]


def test_it_walks_queued_running_paused_queued_running_finished():
    run = _run()
    run.mark_running("w")
    run.request_pause()
    assert run.status == "running" and run.requested == "pause"
    run.mark_paused()
    lifecycle.resume(run)  # a new job on the queue
    assert Run.objects.get(pk=run.pk).status == "queued"
    run.mark_running("w")
    run.mark_finished()
    run.refresh_from_db()
    assert run.status == "finished" and run.finished_at and run.requested == ""
    moves = [d.get("to") for k, d in _kinds(run) if k == "status" and "to" in d]
    assert moves == ["running", "paused", "queued", "running", "finished"]
    assert RunEvent.objects.filter(run=run, data__requested="pause").count() == 1


def test_it_refuses_illegal_transitions_with_a_reason():
    run = _run(status=Status.FINISHED)
    with pytest.raises(IllegalTransition, match=r"Cannot pause run \d+: it is finished; only a running run"):
        run.request_pause()
    with pytest.raises(IllegalTransition, match="Cannot cancel run .* it is finished"):
        run.request_cancel()
    with pytest.raises(IllegalTransition, match="only a paused run"):
        lifecycle.resume(run)
    queued = _run()
    with pytest.raises(IllegalTransition, match="only a running run can be paused"):
        queued.request_pause()
    assert not queued.events.exists()


def test_it_cancels_a_queued_run_at_once_and_a_running_one_at_the_step_boundary():
    queued = _run()
    queued.request_cancel()
    assert Run.objects.get(pk=queued.pk).status == "cancelled"
    running = _run()
    running.mark_running("w")
    running.request_cancel()
    running.refresh_from_db()
    assert running.status == "running" and running.requested == "cancel"
    with pytest.raises(IllegalTransition, match="already stopping"):
        running.request_cancel()


def test_a_stale_status_loses_the_race():
    run = _run()
    other = Run.objects.get(pk=run.pk)
    run.request_cancel()
    with pytest.raises(IllegalTransition, match="is cancelled now"):
        other.transition(Status.RUNNING, "late claim", expect=Status.QUEUED)


def test_a_failed_run_resumes_only_when_its_worker_died():
    crashed = _run(status=Status.FAILED, error="CUDA out of memory", resumable=False)
    with pytest.raises(IllegalTransition, match="fix the config and launch a new run"):
        lifecycle.resume(crashed)
    lost = _run(status=Status.FAILED, error="worker stopped responding", resumable=True)
    lifecycle.resume(lost)
    lost.refresh_from_db()
    assert lost.status == "queued" and lost.job_id.startswith(f"run-{lost.pk}-") and not lost.resumable
