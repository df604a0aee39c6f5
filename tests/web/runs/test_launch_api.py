"""POST /api/v1/runs/: validation through the trainer's config classes, web guards, roles, queueing."""
import django_rq
import pytest
from rest_framework.test import APIClient

from apps.runs.models import Run

pytestmark = pytest.mark.django_db


def _client(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture(autouse=True)
def _commit(django_capture_on_commit_callbacks):
    """django-rq enqueues on commit; run those callbacks inside the test's transaction."""
    global _callbacks
    _callbacks = django_capture_on_commit_callbacks


def _post(user, **body):
    with _callbacks(execute=True):
        return _client(user).post("/api/v1/runs/", body, format="json")


def test_a_researcher_launches_a_run_on_the_cpu_queue(researcher, tiny_grpo):
    model, config = tiny_grpo
    response = _post(researcher, method="grpo", model=model, config=config)
    assert response.status_code == 201, response.json()
    body = response.json()
    run = Run.objects.get(pk=body["id"])
    assert (run.status, run.queue, run.owner, run.total_steps) == ("queued", "cpu", researcher, 4)
    assert run.config["train"]["lr"] == 1e-3 and run.config["grpo"]["advantage"] == "grpo"  # defaults filled in
    assert run.run_dir.endswith(f"/runs/{run.pk}")
    assert django_rq.get_queue("cpu").job_ids == [run.job_id]
    assert run.events.get().message == "queued on cpu by rita"


def test_invalid_config_is_refused_with_every_key_path(researcher, tiny_grpo):
    model, config = tiny_grpo
    config["train"] = {**config["train"], "lr": -1, "stepz": 3}
    response = _post(researcher, method="grpo", model=model, config={**config, "rollout.temperature": "hot"})
    assert response.status_code == 400
    fields = response.json()["fields"]
    assert set(fields) == {"train.lr", "train.stepz", "rollout.temperature"}
    assert "did you mean train.steps" in fields["train.stepz"]
    assert "train.lr" in response.json()["error"]
    assert not Run.objects.exists()


@pytest.mark.parametrize("body,path,needle", [
    ({"method": "ppo"}, "method", "unknown method"),
    ({"method": "grpo", "model": "/etc"}, "model.name_or_path", "outside the allowed model directories"),
    ({"method": "grpo", "model": "no-such-model"}, "model.name_or_path", "not found"),
    ({"method": "grpo", "config": {"data": {"path": "/etc/passwd"}}}, "data.path", "outside the datasets folder"),
    ({"method": "spice"}, "corpus", "trains on a corpus"),
    ({"method": "grpo", "corpus": "nope"}, "corpus", "no corpus named 'nope'"),
    ({"method": "grpo", "queue": "tpu"}, "queue", "unknown queue"),
])
def test_web_guards_name_the_key_path(researcher, tiny_grpo, body, path, needle):
    model, config = tiny_grpo
    body = {"model": model, **body, "config": {**config, **body.get("config", {})}}
    if body["method"] != "grpo":
        body["config"].pop("data", None)
        body["config"].pop("grpo", None)
    response = _post(researcher, **body)
    assert response.status_code == 400, response.json()
    assert needle in response.json()["fields"][path]


def test_a_data_file_missing_from_the_data_directory_is_refused_at_launch(researcher, tiny_grpo, run_env):
    model, config = tiny_grpo
    response = _post(researcher, method="grpo", model=model,
                     config={**config, "data": {"path": str(run_env / "prompts" / "nope.jsonl")}})
    assert response.status_code == 400
    assert "nope.jsonl does not exist" in response.json()["fields"]["data.path"]
    assert not Run.objects.exists()


def test_remote_code_needs_the_permission(researcher, admin_user, tiny_grpo):
    model, config = tiny_grpo
    config["model"] = {"trust_remote_code": True}
    refused = _post(researcher, method="grpo", model=model, config=config)
    assert refused.status_code == 400
    assert "allow_remote_code" in refused.json()["fields"]["model.trust_remote_code"]
    assert _post(admin_user, method="grpo", model=model, config=config).status_code == 201


def test_a_reviewer_cannot_launch(reviewer, tiny_grpo):
    model, config = tiny_grpo
    response = _post(reviewer, method="grpo", model=model, config=config)
    assert response.status_code == 403
    assert "researcher role" in response.json()["error"]


def test_anonymous_gets_401():
    assert APIClient().post("/api/v1/runs/", {}, format="json").status_code == 401


def test_list_and_detail(researcher, tiny_grpo):
    model, config = tiny_grpo
    run_id = _post(researcher, method="grpo", model=model, config=config).json()["id"]
    listed = _client(researcher).get("/api/v1/runs/?status=queued").json()["results"]
    assert [r["id"] for r in listed] == [run_id] and listed[0]["owner"] == "rita"
    detail = _client(researcher).get(f"/api/v1/runs/{run_id}/").json()
    assert detail["config"]["method"] == "grpo" and detail["overrides"]["config"]["train"]["steps"] == 4
    assert _client(researcher).get("/api/v1/runs/999999/").status_code == 404
