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
        assert {q["name"] for q in overview["queues"]} == {"gpu", "cpu", "short", "evals", "default"}
    finally:
        worker.register_death()
    assert all(w["name"] != worker.name for w in workers_overview()["workers"])


# nvidia-smi's answers on a 2-card host (as `query_gpus` asks: csv, noheader, nounits); card 1 has an
# unsupported utilisation reading, which nvidia-smi prints as [N/A]
GPUS_CSV = """0, GPU-aaaa-0001, NVIDIA H100 80GB HBM3, 40961, 81559, 87
1, GPU-bbbb-0002, NVIDIA H100 80GB HBM3, 1, 81559, [N/A]
"""


def test_nvidia_smi_answers_are_parsed():
    from apps.runs.workers import gpu_state, parse_gpus, parse_processes

    assert parse_gpus(GPUS_CSV) == [
        {"index": 0, "uuid": "GPU-aaaa-0001", "name": "NVIDIA H100 80GB HBM3", "memory_used_mib": 40961.0,
         "memory_total_mib": 81559.0, "utilization": 87.0},
        {"index": 1, "uuid": "GPU-bbbb-0002", "name": "NVIDIA H100 80GB HBM3", "memory_used_mib": 1.0,
         "memory_total_mib": 81559.0, "utilization": None},
    ]
    assert parse_gpus("0, GPU-x, Tesla T4, Inc, 10, 15360, 0\n")[0]["name"] == "Tesla T4, Inc"  # a comma in a name
    assert parse_processes("1234, GPU-aaaa-0001, 40950\nNo running processes found\n") == [
        {"pid": 1234, "uuid": "GPU-aaaa-0001", "memory_mib": 40950.0}]
    assert parse_processes("\u00b2, GPU-aaaa-0001, 1\n") == []  # a digit int() refuses is no pid, not a crash
    with pytest.raises(ValueError, match="expected 6"):
        parse_gpus("0, NVIDIA H100\n")
    state = gpu_state(GPUS_CSV, "1234, GPU-bbbb-0002, 500\n")
    assert [c["processes"] for c in state["gpus"]] == [[], [{"pid": 1234, "uuid": "GPU-bbbb-0002", "memory_mib": 500.0}]]


def test_without_nvidia_smi_a_gpu_worker_says_it_sees_no_gpu(client, reader, private_redis, monkeypatch, caplog):
    """This machine has no NVIDIA driver: a worker serving gpu warns at start-up and the page says so."""
    monkeypatch.setenv("SELFPLAY_NVIDIA_SMI", "nvidia-smi-not-here")
    queue = django_rq.get_queue("gpu")
    worker = SelfplayWorker([queue], connection=queue.connection)
    with caplog.at_level("WARNING"):
        worker.register_birth()
    try:
        assert any("serves the gpu queue but sees no GPU" in r.getMessage() and "no nvidia-smi" in r.getMessage()
                   for r in caplog.records)
        client.force_login(reader)
        page = client.get("/runs/workers/").content.decode()
        assert "serves gpu but sees no GPU: no nvidia-smi on this machine&#x27;s PATH" in page
    finally:
        worker.register_death()


@pytest.mark.django_db(transaction=True)
def test_the_page_shows_each_card_its_memory_utilisation_and_the_run_holding_it(client, reader, roles, researcher,
                                                                               tiny_grpo):
    """The cards come from nvidia-smi's text through the same path as a live reading (refresh_gpus); the
    process on card 0 is this worker's own (its pid), so card 0 is held by the worker's job, a run;
    card 1 holds a process of someone else's (memory a killed job left behind, say)."""
    import os

    from apps.runs.services.launch import launch
    from apps.runs.workers import gpu_state

    model, config = tiny_grpo
    run = launch("grpo", model, None, config=config, user=researcher, queue="gpu")
    queue = django_rq.get_queue("gpu")
    worker = SelfplayWorker([queue], connection=queue.connection)
    worker.register_birth()
    stranger = os.getppid()  # a process that is not below the worker (this test's parent)
    try:
        job = queue.fetch_job(run.job_id)
        worker.prepare_execution(job)  # what the worker records when it starts the job
        worker.refresh_gpus(gpu_state(GPUS_CSV, f"{os.getpid()}, GPU-aaaa-0001, 40950\n"
                                                f"{stranger}, GPU-bbbb-0002, 2048\n"))
        client.force_login(reader)
        page = client.get("/runs/workers/").content.decode()
        cards = page.split('class="gpu" data-index=')[1:]
        assert len(cards) == 2
        assert "0: NVIDIA H100 80GB HBM3" in cards[0] and "40.0 / 79.6 GiB" in cards[0] and "87% busy" in cards[0]
        assert f'held by <a href="/runs/{run.pk}/">run {run.pk}</a>' in cards[0] and "also in use" not in cards[0]
        assert "0.0 / 79.6 GiB" in cards[1] and "? busy" in cards[1] and "held by" not in cards[1]
        assert f"also in use by pid {stranger} (2.0 GiB), not this worker" in cards[1]
        # the table asks for itself again: htmx gets the table alone
        partial = client.get("/runs/workers/", HTTP_HX_REQUEST="true").content.decode()
        assert partial.startswith("\n<div id=\"workers-live\"") or partial.lstrip().startswith('<div id="workers-live"')
        assert 'hx-trigger="every 5s"' in partial and "<html" not in partial and "87% busy" in partial
    finally:
        worker.register_death()


def test_a_busy_worker_names_its_job_by_what_it_is(private_redis):
    """The workers page says "evaluation 98" or "ingestion of corpus 3", not apps.corpora.jobs.ingest_upload(3)."""
    from apps.runs.workers import _job_summary

    queue = django_rq.get_queue("short")
    upload = queue.enqueue("apps.corpora.jobs.ingest_upload", 3, "/tmp/upload.txt", "upload.txt")
    evaluation = django_rq.get_queue("evals").enqueue("apps.evals.jobs.execute_eval", 98)
    reaper = django_rq.get_queue("default").enqueue("apps.jobs.reaper.reap_job")
    assert _job_summary(queue.connection, upload.id)["description"] == "ingestion of corpus 3"
    summary = _job_summary(queue.connection, evaluation.id)
    assert summary["description"] == "evaluation 98" and summary["eval_id"] == 98
    assert _job_summary(queue.connection, reaper.id)["description"] == "the reaper"
