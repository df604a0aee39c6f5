"""Runs that say what they are: a name, tags and notes (API and page, researchers only), shown in the
list and the title; /runs/ filtered by method, status, tag and model with live runs first; a run
finished by train.time_limit_minutes before its last step says so."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.runs.models import Run

pytestmark = pytest.mark.django_db


def _api(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def _run(owner, **fields):
    base = {"method": "grpo", "model_name": "tiny", "config": {"method": "grpo"}, "owner": owner,
            "status": "finished", "total_steps": 10, "current_step": 10}
    return Run.objects.create(**{**base, **fields})


def test_a_researcher_names_tags_and_notes_a_run_through_the_api(researcher, reader):
    run = _run(researcher)
    answer = _api(researcher).patch(f"/api/v1/runs/{run.pk}/", {"name": "GRPO lr 1e-6", "tags": ["Baseline", "lr"],
                                                                  "notes": "Learned +9.7 points."}, format="json")
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert (body["name"], body["tags"], body["notes"]) == ("GRPO lr 1e-6", ["baseline", "lr"], "Learned +9.7 points.")
    run.refresh_from_db()
    assert run.label == f"run {run.pk} · GRPO lr 1e-6"
    assert _api(reader).patch(f"/api/v1/runs/{run.pk}/", {"name": "x"}, format="json").status_code == 403
    bad = _api(researcher).patch(f"/api/v1/runs/{run.pk}/", {"tags": [1, 2]}, format="json")
    assert bad.status_code == 400 and bad.json()["error"].startswith("tags:")
    unknown = _api(researcher).patch(f"/api/v1/runs/{run.pk}/", {"status": "finished"}, format="json")
    assert unknown.status_code == 400 and "name, tags and/or notes" in unknown.json()["error"]


def test_the_run_page_edits_and_shows_name_tags_notes(client, researcher):
    run = _run(researcher)
    client.force_login(researcher)
    client.post(f"/runs/{run.pk}/describe/", {"name": "SPICE on Wikipedia", "tags": "spice, collapse",
                                               "notes": "Collapsed to one template by step 20."})
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f"<title>Run {run.pk} · SPICE on Wikipedia" in page
    assert "Collapsed to one template by step 20." in page and ">collapse</a>" in page
    listing = client.get("/runs/").content.decode()
    assert "SPICE on Wikipedia" in listing


def test_the_runs_list_filters_and_puts_live_runs_first(client, researcher):
    old_live = _run(researcher, status="running", current_step=2)
    newer = _run(researcher, method="spice", tags=["wiki"])
    timed = _run(researcher, config={"method": "grpo", "train": {"time_limit_minutes": 6.5}}, current_step=37,
                 total_steps=640)
    client.force_login(researcher)

    def ids(query=""):
        return [r.pk for r in client.get(f"/runs/?{query}").context["runs"]]

    assert ids()[0] == old_live.pk  # live first, though it is the oldest
    assert ids("sort=newest")[0] == timed.pk
    assert ids("method=spice") == [newer.pk]
    assert ids("tag=wiki") == [newer.pk]
    assert ids("status=time-limit") == [timed.pk]
    assert ids("status=running") == [old_live.pk]
    assert "No run matches these filters" in client.get("/runs/?tag=nothing").content.decode()
    # a badge short enough for the status column (the whole sentence wrapped into a four-line blob) and its title
    listing = client.get("/runs/?status=time-limit").content.decode()
    assert ('title="stopped at its time limit: train.time_limit_minutes ran out at step 37">time limit</span>'
            in listing)
    assert timed.time_limited and timed.status_label == "stopped at its time limit"
    assert not newer.time_limited
    page = client.get(f"/runs/{timed.pk}/").content.decode()
    assert "stopped at its time limit · step 37 / 640" in page
    assert "at step 37 of 640, with a checkpoint to resume from." in page  # trained here: its checkpoint is here
    Run.objects.filter(pk=timed.pk).update(imported_from="/x/examples/runs/timed")  # a folder without weights
    page = client.get(f"/runs/{timed.pk}/").content.decode()
    assert "with a checkpoint to resume from" not in page and "its checkpoints stayed on the machine" in page
    assert _api(researcher).get(f"/api/v1/runs/{timed.pk}/").json()["stopped_at_time_limit"] is True


def test_an_imported_runs_model_path_shows_as_its_catalog_name(client, researcher, admin_user):
    run = _run(researcher, model_name="/tmp/models/qwen2.5-coder-0.5b-instruct")
    other = _run(researcher, model_name="/data/models/my-finetune/")
    assert run.model_label == "qwen2.5-coder-0.5b-instruct" and other.model_label == "my-finetune"
    assert _run(researcher, model_name="smollm2-135m-instruct").model_label == "smollm2-135m-instruct"
    client.force_login(researcher)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    # the path beside it is a server path: an admin's only (tests/web/test_server_paths.py)
    assert 'id="run-model">qwen2.5-coder-0.5b-instruct</dd>' in page and "/tmp/models" not in page
    assert ">qwen2.5-coder-0.5b-instruct</td>" in client.get("/runs/").content.decode()
    client.force_login(admin_user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-model">qwen2.5-coder-0.5b-instruct <span' in page and "(/tmp/models/qwen2.5-coder-0.5b-instruct)" in page


def test_an_imported_runs_ledger_says_which_steps_its_samples_cover(client, researcher):
    from apps.episodes.models import Task

    run = _run(researcher, method="ssp", imported_from="/x/examples/runs/ssp", current_step=22, total_steps=200)
    for step in (1, 2, 3):
        Task.objects.create(run=run, key=f"{step}:0", step=step, question="q?", answer="a", valid=False, role="proposer")
    client.force_login(researcher)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Computed from the samples this imported folder kept: steps 1–3 of the 22 the run reached" in page
    assert 'id="samples-coverage"' in page
    whole = _run(researcher, imported_from="/x/examples/runs/whole", current_step=2)
    for step in (1, 2):
        Task.objects.create(run=whole, key=f"{step}:0", step=step, question="q?", answer="a")
    page = client.get(f"/runs/{whole.pk}/").content.decode()
    assert 'id="ledger-coverage"' not in page and '<span class="num" id="ledger-tasks">2</span>' in page  # the ledger
    Run.objects.filter(pk=run.pk).update(queue="imported", corpus_name="wiki.jsonl")  # as import_run stores it
    row = client.get("/runs/?method=ssp").content.decode()
    assert "imported: <code>ssp</code>" in row and "· imported</span>" not in row  # said once, not twice
    # its corpus file was on the GPU machine, never here: not "deleted" (a run trained here whose corpus went is)
    assert ">wiki.jsonl</span>" in row and "(deleted)" not in row
    gone = _run(researcher, method="score", corpus_name="notes")
    assert "notes (deleted)" in client.get("/runs/?method=score").content.decode()
    assert gone.corpus is None
    one = _run(researcher, imported_from="/x/examples/runs/one", current_step=32, total_steps=640)
    Task.objects.create(run=one, key="1:0", step=1, question="q?", answer="a", valid=False)
    page = client.get(f"/runs/{one.pk}/").content.decode()  # the gate run's folder kept step 1 alone
    assert "kept: step 1 of the 32 the run reached" in page and "steps 1–1" not in page


def test_a_tasks_data_block_is_json_not_a_python_repr(client, researcher):
    from apps.episodes.models import Task

    run = _run(researcher, method="spice")
    Task.objects.create(run=run, key="1:0", step=1, question="q?", answer="a",
                        data={"grounded": None, "ok": True, "score": 0.5})
    client.force_login(researcher)
    page = client.get(f"/runs/{run.pk}/tasks/1:0/").content.decode()
    assert "&quot;grounded&quot;: null" in page and "&quot;ok&quot;: true" in page
    assert "None" not in page.split("<h2>Data</h2>", 1)[1].split("</section>", 1)[0]


def test_the_heartbeat_shows_its_age(client, researcher):
    from datetime import timedelta

    from django.utils import timezone

    run = _run(researcher, status="running", heartbeat_at=timezone.now() - timedelta(minutes=3),
               started_at=timezone.now() - timedelta(hours=1))
    client.force_login(researcher)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-heartbeat-age">3\xa0minutes ago<' in page


def test_the_runs_list_filters_by_model_and_sorts_by_name_method_status_model_and_tag(client, researcher):
    a = _run(researcher, name="beta", method="spice", status="failed", model_name="/tmp/models/Zeta-model/",
             tags=["wiki", "baseline"])
    b = _run(researcher, name="alpha", method="grpo", status="running", model_name="alpha-model", tags=["zzz"])
    c = _run(researcher, name="gamma", method="absolute_zero", status="queued", model_name="mid-model")
    d = _run(researcher, name="delta", method="ssp", status="cancelled", model_name="mid-model", tags=["lr"])
    client.force_login(researcher)

    def ids(query=""):
        answer = client.get(f"/runs/?{query}")
        assert answer.status_code == 200
        return [r.pk for r in answer.context["runs"]]

    # the model filter: a catalog name, and a path's runs under its folder's name as well as under the path
    assert ids("model=mid-model") == [c.pk, d.pk]  # live (queued) first
    assert ids("model=Zeta-model") == [a.pk]
    assert ids("model=/tmp/models/Zeta-model/") == [a.pk]
    assert ids("model=alpha-model&method=spice") == []
    assert ids("sort=name") == [b.pk, a.pk, d.pk, c.pk]
    assert ids("sort=method") == [c.pk, b.pk, a.pk, d.pk]  # absolute_zero, grpo, spice, ssp
    # the order of the status filter: queued, running, paused, finished, failed, cancelled
    assert ids("sort=status") == [c.pk, b.pk, a.pk, d.pk]
    # as the list shows the model (a path by its folder's name), A-Z regardless of case; newest first within one
    assert ids("sort=model") == [b.pk, d.pk, c.pk, a.pk]
    # a run's first tag A-Z (baseline, lr, zzz), untagged runs last
    assert ids("sort=tag") == [a.pk, d.pk, b.pk, c.pk]
    # the sort control offers each order, the chosen one selected
    page = client.get("/runs/?sort=model").content.decode()
    for key in ("name", "method", "status", "tag"):
        assert f'<option value="{key}">' in page
    assert '<option value="model" selected>by model</option>' in page
    assert ids("sort=nonsense") == [c.pk, b.pk, d.pk, a.pk]  # an unknown sort: live first, then newest
