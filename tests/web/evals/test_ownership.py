"""Evaluating or cross-playing a run's checkpoints needs the run's owner or an admin; refusals say the right thing.

Findings: any researcher could queue evaluations and cross-play matrices on another researcher's run; a researcher
refused a run's cancel (or an evaluation's) was told they "need the researcher role", which they have."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.test import APIClient

from apps.corpora.models import Corpus
from apps.evals.models import CrossPlay, EvalJob
from apps.runs.models import Checkpoint, Run

pytestmark = pytest.mark.django_db


def api(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def other(db):
    user = User.objects.create_user("oscar", password="pw-oscar")
    user.groups.add(*Group.objects.filter(name="researcher"))
    return user


@pytest.fixture
def ritas_run(researcher, tmp_path, rq_queues):
    corpus = Corpus.objects.create(name="own-c", status="ready")
    run = Run.objects.create(method="spice", model_name="smollm2-135m-instruct", config={"method": "spice"},
                             owner=researcher, status="finished", queue="cpu", corpus=corpus, corpus_name="own-c")
    folder = tmp_path / "step-000005"
    folder.mkdir()
    ckpt = Checkpoint.objects.create(run=run, step=5, path=str(folder))
    return run, ckpt


def test_another_researcher_cannot_evaluate_or_cross_play_a_run(other, ritas_run):
    run, ckpt = ritas_run
    response = api(other).post("/api/v1/evals/", {"checkpoint": ckpt.pk, "benchmarks": ["gsm8k"]}, format="json")
    assert response.status_code == 403, response.json()
    assert f"Run {run.pk} belongs to rita: only its owner or an admin can evaluate" in response.json()["error"]
    response = api(other).post(f"/api/v1/runs/{run.pk}/crossplay/", {"checkpoints": [ckpt.pk]}, format="json")
    assert response.status_code == 403 and "only its owner or an admin can cross-play" in response.json()["error"]
    assert not EvalJob.objects.exists() and not CrossPlay.objects.exists()


def test_the_pages_refuse_it_too(client, other, ritas_run):
    run, ckpt = ritas_run
    client.force_login(other)
    page = client.post("/evals/launch/", {"run": run.pk, "target": f"ckpt:{ckpt.pk}", "benchmarks": ["gsm8k"]},
                       follow=True)
    assert "belongs to rita: only its owner or an admin can evaluate its checkpoints" in page.content.decode()
    page = client.post(f"/evals/runs/{run.pk}/crossplay/", {"checkpoints": [ckpt.pk]}, follow=True)
    assert "only its owner or an admin can cross-play its checkpoints" in page.content.decode()
    assert not EvalJob.objects.exists() and not CrossPlay.objects.exists()


@pytest.mark.parametrize("who", ["researcher", "admin_user"])
def test_the_owner_and_an_admin_may(request, ritas_run, who):
    run, ckpt = ritas_run
    user = request.getfixturevalue(who)
    response = api(user).post("/api/v1/evals/", {"checkpoint": ckpt.pk, "benchmarks": ["gsm8k"]}, format="json")
    assert response.status_code == 201, response.json()
    response = api(user).post(f"/api/v1/runs/{run.pk}/crossplay/", {"checkpoints": [ckpt.pk]}, format="json")
    assert response.status_code == 201, response.json()


def test_a_researcher_refused_a_cancel_is_not_told_to_get_the_researcher_role(other, reader, ritas_run, researcher):
    run, _ = ritas_run
    Run.objects.filter(pk=run.pk).update(status="running")
    response = api(other).post(f"/api/v1/runs/{run.pk}/cancel/")
    assert response.status_code == 403
    assert "researcher role" not in response.json()["error"]
    assert f"Run {run.pk} belongs to rita: only its owner or an admin can pause, resume or cancel it" \
        in response.json()["error"]
    response = api(reader).post(f"/api/v1/runs/{run.pk}/cancel/")  # one without the role is told to get it
    assert response.status_code == 403 and "This needs the researcher role" in response.json()["error"]
    job = EvalJob.objects.create(model_spec="base:x", status="queued", queue="cpu", owner=researcher)
    response = api(other).post(f"/api/v1/evals/{job.pk}/cancel/")
    assert response.status_code == 403 and "researcher role" not in response.json()["error"]
    assert "Only its launcher or an admin can cancel evaluation" in response.json()["error"]


def test_server_paths_are_shown_to_admins_only(researcher, reader, admin_user, ritas_run):
    """Finding: the API showed server paths (run folder, checkpoints) to every account."""
    run, ckpt = ritas_run
    Run.objects.filter(pk=run.pk).update(run_dir="/srv/selfplay/var/runs/7", checkpoint_path=ckpt.path)
    job = EvalJob.objects.create(model_spec=ckpt.path, run=run, checkpoint=ckpt, step=5, queue="cpu", owner=researcher)
    for user in (researcher, reader):
        body = api(user).get(f"/api/v1/runs/{run.pk}/").json()
        assert body["run_dir"] is None and body["checkpoint_path"] == "step-000005"
        assert [c["path"] for c in body["checkpoints"]] == ["step-000005"]
        assert api(user).get(f"/api/v1/evals/{job.pk}/").json()["model"] == "step-000005"
        text = api(user).get("/api/v1/evals/").content.decode() + api(user).get(f"/api/v1/runs/{run.pk}/").content.decode()
        assert str(ckpt.path) not in text and "/srv/selfplay" not in text
        assert text.count("step-000005") >= 2  # the checkpoint is named, by its folder only (list and run)
    body = api(admin_user).get(f"/api/v1/runs/{run.pk}/").json()
    assert body["run_dir"] == "/srv/selfplay/var/runs/7" and body["checkpoint_path"] == ckpt.path
    assert api(admin_user).get(f"/api/v1/evals/{job.pk}/").json()["model"] == ckpt.path
