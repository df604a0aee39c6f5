"""DjangoSink: batched idempotent writes, key links, checkpoints, control, and Redis outages."""
import pytest

from apps.episodes.models import Attempt, Grade, Rubric, Task
from apps.runs.models import Checkpoint, Metric, Run, RunEvent, Status
from apps.runs.sink import DjangoSink
from trainer.sink import Sink
from trainer.tools.retriever import Passage

pytestmark = pytest.mark.django_db


@pytest.fixture
def run():
    run = Run.objects.create(method="spice", model_name="tiny", config={}, total_steps=5)
    run.mark_running("w")
    return run


def _records(step):
    return [
        {"kind": "task", "key": f"{step}:t0", "role": "challenger", "step": step, "question": "Q?\x00", "answer": "A",
         "valid": True, "pass_rate": 0.5, "document_id": "7", "format": "mcq", "data": {"type": "mcq"}},
        {"kind": "attempt", "key": f"{step}:0", "task_key": f"{step}:t0", "role": "reasoner", "step": step,
         "text": "<b>A</b>", "reward": 1.0, "turns": [{"role": "assistant", "text": "A"}],
         "passages": [Passage(document_id="7", chunk_id="70", title="T", text="x", score=float("nan"))],
         "token_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "data": {}},
        {"kind": "rubric", "key": f"{step}:r0", "task_key": f"{step}:t0", "step": step, "text": "mentions A",
         "priority": "critical", "data": {}},
        {"kind": "grade", "key": f"{step}:g0", "attempt_key": f"{step}:0", "rubric_key": f"{step}:r0", "step": step,
         "score": 1.0, "judge_text": "yes", "data": {}},
        {"kind": "event", "key": f"{step}:e0", "step": step, "message": "gate failure streak", "data": {"n": 3}},
    ]


def test_it_implements_the_trainer_protocol(run):
    assert isinstance(DjangoSink(run), Sink)


def test_it_writes_rows_linked_by_key_and_rewrites_them_idempotently(run):
    sink = DjangoSink(run)
    for attempt in range(2):  # a resumed run re-reports the same step
        sink.metrics(1, "reasoner", {"reward_mean": 0.25 + attempt, "loss": 1.5})
        sink.metrics(1, "challenger", {"reward_mean": 0.1})
        sink.samples(1, _records(1))
        sink.control()
    assert Metric.objects.filter(run=run).count() == 3
    assert Metric.objects.get(run=run, role="reasoner", name="reward_mean").value == 1.25
    assert (Task.objects.count(), Attempt.objects.count(), Rubric.objects.count(), Grade.objects.count()) == (1, 1, 1, 1)
    attempt = Attempt.objects.get()
    assert attempt.passages == [{"document_id": "7", "chunk_id": "70", "title": "T", "text": "x", "score": None}]
    assert attempt.task.key == "1:t0" and attempt.token_ids == [1, 2, 3] and attempt.loss_mask == [0, 1, 1]
    assert Task.objects.get().question == "Q?"  # NUL dropped: Postgres refuses it
    grade = Grade.objects.get()
    assert grade.attempt == attempt and grade.rubric.task == attempt.task
    assert RunEvent.objects.filter(run=run, key="1:e0").count() == 1
    run.refresh_from_db()
    assert run.current_step == 1 and sink.flushes >= 2


def test_it_buffers_until_a_step_boundary(run):
    sink = DjangoSink(run, flush_seconds=3600)
    sink.metrics(2, "solver", {"reward_mean": 1.0})
    assert not Metric.objects.filter(run=run).exists()
    sink.control()
    assert Metric.objects.filter(run=run).count() == 1


def test_it_records_checkpoints(run):
    sink = DjangoSink(run)
    sink.checkpoint(3, "/tmp/ckpt/step-000003")
    sink.checkpoint(3, "/tmp/ckpt/step-000003")
    assert Checkpoint.objects.filter(run=run).count() == 1
    run.refresh_from_db()
    assert run.checkpoint_path == "/tmp/ckpt/step-000003" and run.current_step == 3


def test_an_earlier_checkpoint_is_recorded_without_moving_the_current_step(run):
    """A resumed job reports a checkpoint written whole just before its worker died; a multi-GPU job's own sink then
    reports nothing more (rank 0 does, through its own sink), so its close must not set the run back to that step."""
    Run.objects.filter(pk=run.pk).update(current_step=4)  # where rank 0 got to
    sink = DjangoSink(run)
    sink.checkpoint(2, "/tmp/ck/step-000002", earlier=True)
    sink.close()
    run.refresh_from_db()
    assert run.current_step == 4 and Checkpoint.objects.filter(run=run, step=2).exists()
    sink.checkpoint(3, "/tmp/ck/step-000003")  # a checkpoint of this job's own step moves it, as before
    run.refresh_from_db()
    assert run.current_step == 3


def test_control_reads_the_requested_state(run):
    sink = DjangoSink(run)
    assert not sink.control().pause and not sink.control().stop
    run.request_pause()
    assert sink.control().pause
    Run.objects.filter(pk=run.pk).update(requested="cancel")
    assert sink.control().stop
    Run.objects.filter(pk=run.pk).update(requested="", status=Status.FAILED)  # e.g. reaped meanwhile
    assert sink.control().stop


def test_a_redis_outage_is_counted_not_raised(run, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                           "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]}}}
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    try:
        sink = DjangoSink(run)
        sink.metrics(1, "solver", {"reward_mean": 0.5})
        sink.samples(1, _records(1))
        sink.control()
    finally:
        channel_layers.backends.clear()
    assert sink.publish_failures >= 2
    assert Metric.objects.filter(run=run).count() == 1 and Attempt.objects.count() == 1
