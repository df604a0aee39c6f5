"""Postgres drops the worker's connections in the middle of a run.

While a real ``manage.py rqworker`` trains a tiny grpo run, the test terminates every database
session of the worker (``pg_terminate_backend``; the main thread's and the heartbeat thread's)
several times. The sink retries a write whose connection was lost on a fresh connection, so the
run finishes: every step is stored exactly once, nothing half-written, and the worker's log says
that it reconnected.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection

from apps.episodes.models import Attempt, Task
from apps.runs.models import Metric, Run
from apps.runs.services.launch import launch
from apps.runs.sink import DjangoSink
from tests.fault.conftest import APP_NAME, test_database_url, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = 8


def _terminate_worker_sessions() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name = %s", [APP_NAME])
        return cur.fetchone()[0]


def _at_step(run_id, step):
    run = Run.objects.get(pk=run_id)
    ended = run.status not in ("queued", "running")
    return run if ended or (run.status == "running" and run.current_step >= step) else None


def test_dropped_database_connections_are_retried_and_the_run_finishes(roles, researcher, tiny_grpo, worker):
    model, config = tiny_grpo
    config["train"] = {**config["train"], "steps": STEPS}
    run = launch("grpo", model, None, config=config, user=researcher)
    proc = worker("cpu")
    terminated = 0
    for step in (2, 4, 6):
        current = wait_for(lambda: _at_step(run.pk, step), 180, f"step {step}", on_timeout=proc.output)
        if current.status != "running":
            break
        terminated += _terminate_worker_sessions()
    assert terminated >= 3, "no worker session was terminated"

    done = wait_for(lambda: Run.objects.filter(pk=run.pk, status__in=["finished", "failed"]).first(), 180,
                    "the run to end", interval=0.2, on_timeout=proc.output)
    log = proc.output()
    assert done.status == "finished", f"{done.error}\n{log[-3000:]}"
    assert done.current_step == STEPS
    keys = list(Metric.objects.filter(run=run, name="reward_mean").values_list("step", flat=True))
    assert sorted(keys) == list(range(1, STEPS + 1))
    assert Task.objects.filter(run=run).count() == STEPS * 2
    assert Attempt.objects.filter(run=run).count() == STEPS * 4
    assert Attempt.objects.filter(run=run, task__isnull=True).count() == 0  # links resolved: no half-written step
    runlog = (Path(done.run_dir) / "run.log").read_text()
    assert "database connection lost while" in runlog and "reconnecting" in runlog


def _terminate_this_session() -> None:
    """End this process's own database session from another connection, as an admin or a restart would."""
    import psycopg

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    with psycopg.connect(test_database_url(), autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0]


def test_a_sink_flush_on_a_terminated_connection_is_retried_once_reconnected(roles, caplog):
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, total_steps=3)
    run.mark_running("w")
    sink = DjangoSink(run)
    sink.metrics(1, "solver", {"loss": 1.5, "reward_mean": 0.25})
    _terminate_this_session()
    control = sink.control()  # flush (retried on a new connection), then the run's row
    assert not control.stop
    assert dict(Metric.objects.filter(run=run).values_list("name", "value")) == {"loss": 1.5, "reward_mean": 0.25}
    assert Run.objects.get(pk=run.pk).current_step == 1
    assert any("database connection lost while writing reports" in r.getMessage() for r in caplog.records)

