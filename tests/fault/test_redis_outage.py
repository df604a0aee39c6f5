"""Redis goes away in the middle of a run, then comes back (empty: it keeps no data on disk).

A real ``manage.py rqworker`` trains a tiny grpo run on a Redis of the test's own (tests/fault/
conftest.py). A viewer watches the live feed (/ws/runs/<id>/). Then Redis is killed for a few
steps: the run keeps training and storing every step in Postgres, the pages and the API keep
answering, and after the restart a viewer that reconnects gets the current status and catches up
on the steps it missed from the metrics API (what the run page does on reconnect); the run
finishes with every step stored once.
"""
from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from apps.runs.models import Metric, Run
from apps.runs.services.launch import launch
from selfplay_web.asgi import application
from tests.fault.conftest import wait_for
from tests.web.test_websocket_and_browser import HEADERS, _session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

STEPS = 12


def _steps_of(message: dict) -> set[int]:
    """Steps a metric message carries (one step, or the newest plus ``earlier`` ones)."""
    if message.get("type") != "metric":
        return set()
    return {message["step"], *(e["step"] for e in message.get("earlier") or [])}


async def _viewer(run_id: int, cookie: str) -> tuple[WebsocketCommunicator, dict]:
    comm = WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=HEADERS + [(b"cookie", cookie.encode())])
    connected, _ = await comm.connect(timeout=10)
    assert connected
    snapshot = await comm.receive_json_from(timeout=10)
    assert snapshot["type"] == "status" and snapshot.get("snapshot")
    return comm, snapshot


async def _reconnect(run_id: int, cookie: str, tries: int = 6):
    """Connect again the way the run page does: on failure wait (1, 2, 4 ... s) and retry."""
    import asyncio

    for attempt in range(tries):
        try:
            return await _viewer(run_id, cookie)
        except Exception as exc:  # the first tries may meet pooled connections to the old Redis
            if attempt == tries - 1:
                raise
            print(f"reconnect {attempt + 1} failed: {type(exc).__name__}: {exc}")
            await asyncio.sleep(min(2 ** attempt, 8))


async def _metric_steps(comm, messages: int = 2) -> set[int]:
    """Steps of the next ``messages`` metric messages (a receive that times out ends the communicator)."""
    seen: set[int] = set()
    for _ in range(50):
        seen |= _steps_of(await comm.receive_json_from(timeout=30))
        if len(seen) >= messages:
            break
    return seen


def _step_at_least(run_id: int, step: int):
    run = Run.objects.get(pk=run_id)
    return run if run.status not in ("queued", "running") or run.current_step >= step else None


def _wait_and_close(*args, **kwargs):
    """wait_for in a worker thread, closing that thread's database connection afterwards."""
    from django.db import connection

    try:
        return wait_for(*args, **kwargs)
    finally:
        connection.close()


def _get(client: Client, url: str):
    response = client.get(url)
    return response.status_code, response


async def test_a_redis_outage_loses_no_step_and_viewers_catch_up(roles, researcher, tiny_grpo, worker, fault_redis):
    model, config = tiny_grpo
    config["train"] = {**config["train"], "steps": STEPS}
    run = await sync_to_async(launch)("grpo", model, None, config=config, user=researcher)
    proc = worker("cpu")
    db_wait = sync_to_async(_wait_and_close, thread_sensitive=False)
    await db_wait(lambda: _step_at_least(run.pk, 2), 180, "step 2", on_timeout=proc.output)

    cookie = await sync_to_async(_session_cookie)(researcher)
    comm, _ = await _viewer(run.pk, cookie)
    seen = await _metric_steps(comm)
    assert seen, "no live metric message before the outage"
    await comm.disconnect()

    fault_redis.stop()
    stopped_at = (await sync_to_async(Run.objects.get)(pk=run.pk)).current_step
    client = Client()
    await sync_to_async(client.force_login)(researcher)
    for url in (f"/runs/{run.pk}/", f"/api/v1/runs/{run.pk}/", f"/api/v1/runs/{run.pk}/metrics/?name=reward_mean",
                "/runs/"):
        status, response = await sync_to_async(_get)(client, url)
        assert status == 200, f"{url} answered {status} while Redis was down"
    during = await db_wait(lambda: _step_at_least(run.pk, stopped_at + 2), 120, "steps during the outage",
                           on_timeout=proc.output)
    assert during.status in ("running", "finished"), during.error
    fault_redis.start()

    comm, snapshot = await _reconnect(run.pk, cookie)
    assert snapshot["status"] in ("running", "finished") and snapshot["step"] >= stopped_at + 2
    # the page's catch-up: everything after the last step it saw, from Postgres
    status, response = await sync_to_async(_get)(client, f"/api/v1/runs/{run.pk}/metrics/?name=reward_mean"
                                                         f"&since_step={max(seen)}")
    assert status == 200
    caught_up = {step for series in response.json()["series"] for step in series["steps"]}
    assert set(range(max(seen) + 1, snapshot["step"] + 1)) <= caught_up
    await comm.disconnect()

    done = await db_wait(lambda: Run.objects.filter(pk=run.pk, status__in=["finished", "failed"]).first(), 180,
                         "the run to end", interval=0.2, on_timeout=proc.output)
    assert done.status == "finished", f"{done.error}\n{proc.output()[-3000:]}"
    steps = await sync_to_async(lambda: list(Metric.objects.filter(run=run, name="reward_mean")
                                             .values_list("step", flat=True)))()
    assert sorted(steps) == list(range(1, STEPS + 1))
    await sync_to_async(_close_connection)()  # this thread's session would keep the test database from being dropped


def _close_connection():
    from django.db import connection

    connection.close()
