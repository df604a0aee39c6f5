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
    runs = client.get("/runs/").content.decode()
    assert '<a href="/runs/" class="active">' in runs
    # every page: an icon of its own (no /favicon.ico 404 per page) and the API's docs one click away
    assert '<link rel="icon" href="data:image/svg+xml,' in runs and '<a href="/api-docs/"' in runs
    assert client.get("/api-docs/").status_code == 200


def test_make_demo_refuses_a_port_in_use_before_starting_anything(tmp_path):
    """A second `make demo` on a taken port said "Selfplay is running" while its own web server had died on the
    port; it now stops first, in one line, naming another port."""
    import os
    import socket
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(["bash", "scripts/demo.sh"], cwd=root, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PORT": str(port), "SELFPLAY_DATA_DIR": str(tmp_path)})
    assert done.returncode == 1
    assert f"make demo: port {port} is in use" in done.stderr and f"PORT={port + 1} make demo" in done.stderr
    assert "Selfplay is running" not in done.stdout and not (tmp_path / "log").exists()  # nothing was started
