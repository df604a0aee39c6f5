"""The live feed: /ws/runs/<id>/ gets a status snapshot, then the DjangoSink's metric and sample messages."""
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from apps.runs.models import Run
from apps.runs.sink import DjangoSink
from selfplay_web.asgi import application
from tests.web.test_websocket_and_browser import HEADERS, _session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


def _running_run():
    run = Run.objects.create(method="spice", model_name="tiny", config={}, total_steps=3)
    run.mark_running("w")
    return run


def _report(run_id):
    sink = DjangoSink(run_id)
    sink.metrics(1, "reasoner", {"reward_mean": 0.75, "loss": float("nan")})
    sink.samples(1, [
        {"kind": "task", "key": "1:t0", "role": "challenger", "step": 1, "question": "<script>x</script>?",
         "answer": "4", "valid": True, "pass_rate": 0.5},
        {"kind": "attempt", "key": "1:0", "task_key": "1:t0", "role": "reasoner", "step": 1, "text": "4",
         "reward": 1.0, "token_ids": [1], "loss_mask": [1]},
    ])
    sink.control()


async def _messages(comm, n):
    return [await comm.receive_json_from(timeout=10) for _ in range(n)]


async def test_metric_and_sample_messages_arrive(reader):
    run = await sync_to_async(_running_run)()
    cookie = await sync_to_async(_session_cookie)(reader)
    comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=HEADERS + [(b"cookie", cookie.encode())])
    connected, _ = await comm.connect(timeout=10)
    assert connected
    snapshot = await comm.receive_json_from(timeout=10)
    assert snapshot["type"] == "status" and snapshot["status"] == "running" and snapshot["snapshot"]

    await sync_to_async(_report)(run.pk)
    received = await _messages(comm, 4)
    seqs = [m.pop("seq") for m in received]  # the run's message counter: one number each, none skipped
    assert seqs == list(range(snapshot["seq"] + 1, snapshot["seq"] + 5))
    by_type = {}
    for m in received:
        by_type.setdefault(m["type"], []).append(m)
    # the queue is short, so the step's one task goes to review (review.min_per_step; attempts are not sampled)
    assert by_type["review"] == [{"type": "review", "event": "queued", "count": 1}]
    assert by_type["metric"] == [{"type": "metric", "step": 1, "role": "reasoner",
                                  "values": {"loss": None, "reward_mean": 0.75}}]
    samples = {m["kind"]: m for m in by_type["sample"]}
    assert samples["task"]["question"] == "<script>x</script>?"  # raw text; the page inserts it as textContent
    assert samples["attempt"]["reward"] == 1.0 and samples["attempt"]["task_key"] == "1:t0"

    await sync_to_async(lambda: Run.objects.get(pk=run.pk).request_pause())()
    status = await comm.receive_json_from(timeout=10)
    assert status["type"] == "status" and status["requested"] == "pause"
    await comm.disconnect()


def _fast_run_report(run_id):
    """A fast run: 50 steps of two roles in one flush (the sink's timer never fired in between)."""
    sink = DjangoSink(run_id, flush_seconds=3600, max_buffer=100_000)
    for step in range(1, 51):
        sink.metrics(step, "challenger", {"reward_mean": step / 100})
        sink.metrics(step, "reasoner", {"reward_mean": step / 50, "entropy": 1.0})
    sink.control()
    assert sink.publish_failures == 0


async def test_a_fast_run_sends_one_metric_message_per_role_per_flush(reader):
    run = await sync_to_async(_running_run)()
    cookie = await sync_to_async(_session_cookie)(reader)
    comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=HEADERS + [(b"cookie", cookie.encode())])
    connected, _ = await comm.connect(timeout=10)
    assert connected
    await comm.receive_json_from(timeout=10)  # the status snapshot
    await sync_to_async(_fast_run_report)(run.pk)
    received = await _messages(comm, 2)
    assert await comm.receive_nothing(timeout=0.5)  # 100 points, 2 messages
    by_role = {m["role"]: m for m in received}
    reasoner = by_role["reasoner"]
    assert reasoner["step"] == 50 and reasoner["values"] == {"entropy": 1.0, "reward_mean": 1.0}
    assert [p["step"] for p in reasoner["earlier"]] == list(range(1, 50))
    assert reasoner["earlier"][0]["values"] == {"entropy": 1.0, "reward_mean": 0.02}
    assert [p["values"]["reward_mean"] for p in by_role["challenger"]["earlier"]] == [s / 100 for s in range(1, 50)]
    await comm.disconnect()


async def test_a_viewer_too_far_behind_is_closed_to_catch_up(reader, monkeypatch):
    """A socket with more messages waiting than BACKLOG_LIMIT is closed (4408) instead of buffering
    without bound; the page reconnects and catches up from Postgres."""
    from apps.runs import consumers

    run = await sync_to_async(_running_run)()
    cookie = await sync_to_async(_session_cookie)(reader)
    comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=HEADERS + [(b"cookie", cookie.encode())])
    connected, _ = await comm.connect(timeout=10)
    assert connected
    await comm.receive_json_from(timeout=10)  # the snapshot
    monkeypatch.setattr(consumers, "BACKLOG_LIMIT", -1)  # any waiting count is "too far behind"
    await sync_to_async(_report)(run.pk)
    closed = await comm.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": consumers.SLOW_VIEWER_CLOSE}
    await comm.disconnect()
