import threading

import django_rq
import pytest

from apps.runs.workers import SelfplayWorker, workers_overview


def test_the_workers_page_needs_login(client, db):
    assert client.get("/runs/workers/").status_code == 302


def test_the_workers_page_says_how_to_start_one_when_none_runs(client, reader, private_redis):
    client.force_login(reader)
    response = client.get("/runs/workers/")
    assert response.status_code == 200
    assert b"No worker is running" in response.content and b"rqworker" in response.content


@pytest.mark.django_db(transaction=True)
def test_a_live_worker_shows_its_queues_gpus_and_state(private_redis):
    """A real SelfplayWorker registers itself in Redis; the overview reads it back."""
    queue = django_rq.get_queue("cpu")
    worker = SelfplayWorker([queue], connection=queue.connection)
    worker.register_birth()
    try:
        overview = workers_overview()
        (row,) = [w for w in overview["workers"] if w["name"] == worker.name]
        assert row["queues"] == ["cpu"]
        assert row["gpus"] == []  # this machine has no accelerator; a GPU host lists its cards
        assert {q["name"] for q in overview["queues"]} == {"gpu", "cpu", "short", "default"}
    finally:
        worker.register_death()
    assert all(w["name"] != worker.name for w in workers_overview()["workers"])
