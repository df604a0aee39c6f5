"""The CPU-only `make demo`: the evals page's base-model form defaults to the cpu queue when no live
worker serves gpu (an evaluation queued on gpu would wait forever), and to gpu when one does."""
import django_rq
import pytest

from apps.runs.workers import SelfplayWorker


def _selected_queue(client) -> str:
    html = client.get("/evals/").content.decode()
    select = html.split('id="base-queue"', 1)[1].split("</select>", 1)[0]
    return "cpu" if "<option selected>cpu" in select else "gpu"


@pytest.mark.parametrize("queues, expected", [(["cpu", "default"], "cpu"), (["gpu", "cpu"], "gpu")])
def test_the_evals_form_picks_the_queue_a_live_worker_serves(client, admin_user, private_redis, queues, expected):
    client.force_login(admin_user)
    assert _selected_queue(client) == "gpu"  # no worker at all: the form keeps its usual default
    worker = SelfplayWorker([django_rq.get_queue(q) for q in queues], connection=django_rq.get_connection("default"))
    worker.register_birth()
    try:
        assert _selected_queue(client) == expected
    finally:
        worker.register_death()


def test_the_workers_page_highlights_workers_not_runs_in_the_nav(client, reader, private_redis):
    client.force_login(reader)
    html = client.get("/runs/workers/").content.decode()
    assert '<a href="/runs/workers/" class="active">' in html and '<a href="/runs/" class="">' in html
    assert '<a href="/runs/" class="active">' in client.get("/runs/").content.decode()
