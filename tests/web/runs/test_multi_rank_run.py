"""A run that asks for train.gpus = 2 is trained by two processes started by the worker's job
(torchrun + manage.py run_rank; here CPU ranks over gloo): rank 0 reports through the DjangoSink,
the Metric rows count both ranks' work once, and the run ends finished at its last step."""
import pytest
from rest_framework.test import APIClient

from apps.episodes.models import Task
from apps.runs.models import Metric, Run
from apps.runs.ranks import database_url
from tests.web.runs.conftest import burst, facts_corpus, launch_tiny_spice

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_two_rank_spice_run_from_the_api(roles, researcher, run_env):
    facts_corpus(["Paris is the capital of France.", "Water boils at 100 degrees Celsius.",
                  "The Nile flows north into the Mediterranean Sea.", "Iron is a metal."])
    launch_tiny_spice(researcher, train={"steps": 2, "prompts_per_step": 3, "gpus": 2}, checkpoint={"every": 1})
    run = Run.objects.get()
    assert run.status == "finished", run.error
    assert run.current_step == 2 and run.checkpoint_path.endswith("step-000002")
    samples = Metric.objects.filter(run=run, role="challenger", name="samples").order_by("step")
    assert [(m.step, m.value) for m in samples] == [(1, 6.0), (2, 6.0)]  # 3 documents x 2 attempts, both ranks
    assert Metric.objects.filter(run=run, role="system", name="rollout_tokens").count() == 2
    assert Task.objects.filter(run=run).count() == 12  # 2 steps x 6 tasks, none lost or doubled


def test_a_run_asking_for_more_gpus_than_the_worker_has_fails_clearly(roles, researcher, run_env, tiny_grpo):
    model, config = tiny_grpo
    config = {**config, "train": {**config["train"], "device": "cuda", "gpus": 64}}
    client = APIClient()
    client.force_authenticate(researcher)
    response = client.post("/api/v1/runs/", {"method": "grpo", "model": model, "config": config}, format="json")
    assert response.status_code == 201, response.json()
    burst("gpu")
    run = Run.objects.get()
    assert run.status == "failed" and "64 GPUs" in run.error, run.error


def test_database_url_points_children_at_the_same_database(settings):
    from django.db import connection

    import environ

    parsed = environ.Env.db_url_config(database_url())
    assert parsed["NAME"] == connection.settings_dict["NAME"]
    host = parsed.get("HOST") or parsed.get("OPTIONS", {}).get("host")
    assert host == (connection.settings_dict.get("HOST") or connection.settings_dict.get("OPTIONS", {}).get("host"))
