"""The launch estimate warns when the only worker of the run's queue is busy (issue 32 item 5), naming what holds
it and how many jobs already wait; a free worker gives no warning. Real RQ workers registered in Redis (as a
started `rqworker` registers itself), on the runs tests' private Redis db."""
import django_rq
import pytest
from rq import Queue, Worker

from apps.jobs.waiting import launch_warning

pytestmark = pytest.mark.django_db


def test_a_busy_only_worker_is_named_and_a_free_one_is_not(private_redis):
    conn = django_rq.get_connection("cpu")
    worker = Worker(["cpu"], connection=conn, name="cpu-worker-1")
    worker.register_birth()
    try:
        assert launch_warning("cpu") is None  # one free worker, nothing waiting
        queue = Queue("cpu", connection=conn)
        running = queue.enqueue("apps.runs.jobs.execute_run", 12)
        queue.remove(running)  # the worker took it: RQ's own bookkeeping of a job it runs
        worker.prepare_execution(running)
        assert launch_warning("cpu") == "the only cpu worker is busy with run 12: this starts after them"
        queue.enqueue("apps.runs.jobs.execute_run", 13)
        assert launch_warning("cpu") == ("the only cpu worker is busy with run 12 (and 1 job already waits there): "
                                         "this starts after them")
    finally:
        worker.register_death()
    assert launch_warning("cpu").startswith("no live worker serves the cpu queue")


ESTIMATE_FORM = {"method": "grpo", "model": "tiny", "queue": "cpu", "cfg__data__path": "bundled:gsm8k",
                 "cfg__train__steps": "30", "cfg__train__prompts_per_step": "2", "cfg__rollout__group_size": "2",
                 "cfg__rollout__max_new_tokens": "32", "cfg__train__device": "cpu"}


def test_the_launch_forms_estimate_shows_the_busy_worker_warning(private_redis, researcher, client, run_env):
    """The launch form's cost box (the partial htmx refreshes from /runs/new/estimate/) says so in
    #estimate-warning when the only worker of the chosen queue is busy, and says nothing while it is free."""
    from html import unescape

    conn = django_rq.get_connection("cpu")
    worker = Worker(["cpu"], connection=conn, name="cpu-worker-1")
    worker.register_birth()
    client.force_login(researcher)
    try:
        free = client.post("/runs/new/estimate/", ESTIMATE_FORM, HTTP_HX_REQUEST="true")
        assert free.status_code == 200
        assert 'id="estimate-text"><strong>Cost:</strong>' in free.content.decode()
        assert 'id="estimate-warning"' not in free.content.decode()
        queue = Queue("cpu", connection=conn)
        running = queue.enqueue("apps.runs.jobs.execute_run", 12)
        queue.remove(running)
        worker.prepare_execution(running)
        busy = unescape(client.post("/runs/new/estimate/", ESTIMATE_FORM, HTTP_HX_REQUEST="true").content.decode())
        assert ('<p class="error" id="estimate-warning">Warning: the only cpu worker is busy with run 12: '
                "this starts after them.</p>") in busy
        assert 'id="estimate-text"><strong>Cost:</strong>' in busy  # the cost still shows above it
    finally:
        worker.register_death()
