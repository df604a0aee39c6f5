"""An API client evaluates a run's checkpoint with what the API told it: ``GET runs/<id>/`` lists each checkpoint's
id, which ``POST evals/`` and ``POST runs/<id>/crossplay/`` take.

Finding (issue 34, driving the product through its API on a GPU machine): the run's checkpoints came without their
ids, while the evaluation's ``checkpoint`` field says "A checkpoint id (see GET runs/<id>/)", so a client could
evaluate only the base model."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.corpora.models import Corpus
from apps.evals.models import CrossPlay, EvalJob
from apps.runs.models import Checkpoint, Run

pytestmark = pytest.mark.django_db


def test_the_run_lists_checkpoint_ids_that_evaluations_and_cross_play_take(researcher, tmp_path, rq_queues):
    corpus = Corpus.objects.create(name="ids-c", status="ready")
    run = Run.objects.create(method="spice", model_name="smollm2-135m-instruct", config={"method": "spice"},
                             owner=researcher, status="finished", queue="cpu", corpus=corpus, corpus_name="ids-c")
    made = []
    for step in (5, 10):
        (tmp_path / f"step-{step:06d}").mkdir()
        made.append(Checkpoint.objects.create(run=run, step=step, path=str(tmp_path / f"step-{step:06d}")))
    client = APIClient()
    client.force_authenticate(researcher)

    listed = client.get(f"/api/v1/runs/{run.pk}/").json()["checkpoints"]
    assert sorted((c["id"], c["step"]) for c in listed) == sorted((c.pk, c.step) for c in made)

    last = max(listed, key=lambda c: c["step"])
    response = client.post("/api/v1/evals/", {"checkpoint": last["id"], "benchmarks": ["gsm8k"], "limit": 2,
                                              "queue": "cpu"}, format="json")
    assert response.status_code == 201, response.json()
    job = EvalJob.objects.get(pk=response.json()["id"])
    assert job.checkpoint_id == made[-1].pk and job.step == 10 and response.json()["label"] == f"run {run.pk} @ step 10"

    response = client.post(f"/api/v1/runs/{run.pk}/crossplay/", {"checkpoints": [c["id"] for c in listed]},
                           format="json")
    assert response.status_code == 201, response.json()
    assert sorted(CrossPlay.objects.get(pk=response.json()["id"]).steps) == [5, 10]


def test_the_schema_documents_the_checkpoint_id(researcher):
    client = APIClient()
    client.force_authenticate(researcher)
    schema = client.get("/api/v1/schema/?format=json").json()
    fields = schema["components"]["schemas"]["RunCheckpoint"]["properties"]
    assert "id" in fields and "evals/" in fields["id"]["description"]
