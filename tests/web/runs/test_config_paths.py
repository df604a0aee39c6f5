"""One rule for every file a run's config names (trainer/paths.py): only the datasets folder, at launch (API, form,
``manage.py launch``) and again on the worker before it reads.

The attack this guards against: a researcher launched an SSP run with ``ssp.answer_source=list`` and
``ssp.answers_path=<data dir>/admin_password`` (or SCORE with ``score.queries_path=<data dir>/secret_key``); the
worker read the file and each line became a task, on the run page and in the exports."""
import io
import shutil

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from apps.runs.models import Run
from apps.runs.services.launch import LaunchError, validate
from tests.web.runs.conftest import burst, facts_corpus
from trainer.config import Config
from trainer.paths import file_fields

pytestmark = pytest.mark.django_db

SECRET = "s3cret-admin-password-value"


@pytest.fixture
def data_dir(settings, tmp_path, run_env):
    """A data dir with the server's own secrets in it and a datasets folder holding one answer list."""
    root = tmp_path / "data"
    (root / "datasets").mkdir(parents=True)
    (root / "pg").mkdir()
    (root / "admin_password").write_text(SECRET + "\n")
    (root / "secret_key").write_text("django-secret-key-value\n")
    (root / "datasets" / "answers.txt").write_text("Paris\nBerlin\n")
    settings.DATA_DIR = root
    settings.DATASETS_DIR = root / "datasets"
    return root


@pytest.fixture
def facts(db):
    return facts_corpus(["Paris is the capital of France.", "Berlin is the capital of Germany."])


@pytest.fixture(autouse=True)
def _commit(django_capture_on_commit_callbacks):
    global _callbacks
    _callbacks = django_capture_on_commit_callbacks


def _post(user, **body):
    client = APIClient()
    client.force_authenticate(user)
    with _callbacks(execute=True):
        return client.post("/api/v1/runs/", body, format="json")


def _ssp(path):
    return {"method": "ssp", "model": "tiny", "corpus": "facts",
            "config": {"ssp.answer_source": "list", "ssp.answers_path": path, "train.device": "cpu"}}


@pytest.mark.parametrize("name", ["admin_password", "secret_key", "pg", "/etc/passwd"])
def test_an_answer_list_outside_the_datasets_folder_is_refused_at_launch(researcher, facts, data_dir, name):
    path = name if name.startswith("/") else str(data_dir / name)
    response = _post(researcher, **_ssp(path))
    assert response.status_code == 400, response.json()
    message = response.json()["fields"]["ssp.answers_path"]
    assert "ssp.answers_path" in message and "outside the datasets folder" in message
    assert f"put the file in the datasets folder {data_dir / 'datasets'}" in message  # where it belongs
    assert SECRET not in str(response.json()) and not Run.objects.exists()


def test_a_query_file_naming_the_secret_key_is_refused_at_launch(researcher, facts, data_dir):
    response = _post(researcher, method="score", model="tiny", corpus="facts",
                     config={"score.queries_path": str(data_dir / "secret_key"), "train.device": "cpu"})
    assert response.status_code == 400, response.json()
    assert "outside the datasets folder" in response.json()["fields"]["score.queries_path"]
    assert not Run.objects.exists()


def test_a_prompt_set_naming_a_file_of_the_data_dir_is_refused(researcher, data_dir, tiny_grpo):
    model, config = tiny_grpo
    response = _post(researcher, method="grpo", model=model,
                     config={**config, "data": {"path": str(data_dir / "admin_password")}})
    assert response.status_code == 400
    assert "outside the datasets folder" in response.json()["fields"]["data.path"]


def test_tricks_inside_the_datasets_folder_are_refused(researcher, facts, data_dir):
    datasets = data_dir / "datasets"
    (datasets / "link.txt").symlink_to(data_dir / "admin_password")  # a link out of the folder
    for path, needle in [(str(datasets / "link.txt"), "outside the datasets folder"),
                         (str(datasets / ".." / "admin_password"), "outside the datasets folder"),
                         ("answers.txt", "is a relative path"),
                         (str(datasets), "is a folder"),
                         (str(datasets / "nope.txt"), "does not exist"),
                         (str(datasets / "a\x00b.txt"), "NUL byte")]:
        response = _post(researcher, **_ssp(path))
        assert response.status_code == 400, (path, response.json())
        assert "ssp.answers_path" in str(response.json()) and needle in str(response.json()), (path, response.json())
    assert not Run.objects.exists()


def test_a_file_of_the_datasets_folder_is_accepted(researcher, facts, data_dir):
    response = _post(researcher, **_ssp(str(data_dir / "datasets" / "answers.txt")))
    assert response.status_code == 201, response.json()


def _owner(field: str) -> str:
    section = field.split(".")[0]
    return {"data": "grpo", "corpus": "spice"}.get(section, section)


@pytest.mark.parametrize("field", sorted(file_fields(Config)))
def test_every_file_field_of_the_schema_goes_through_the_rule(researcher, facts, data_dir, field):
    """Walks the config schema: a file field added later is checked without anyone listing it here."""
    method = _owner(field)
    config = {field: str(data_dir / "secret_key"), "train.device": "cpu"}
    if method == "grpo" and field != "data.path":
        config["data.path"] = "bundled:gsm8k"
    if field == "ssp.answers_path":
        config["ssp.answer_source"] = "list"
    corpus = None if method == "grpo" else "facts"
    for web in (True, False):  # the API / form, and manage.py launch
        with pytest.raises(LaunchError) as caught:
            validate(method, "tiny", corpus, config, user=researcher, web=web)
        problems = dict(caught.value.problems)
        if field == "corpus.path" and web:
            assert "the web injects the chosen corpus" in problems[field]
        else:
            assert "outside the datasets folder" in problems[field], problems


def test_the_command_line_launch_is_held_to_the_same_rule(researcher, data_dir, tiny_grpo):
    model, _ = tiny_grpo
    with pytest.raises(CommandError, match=r"data\.path: data\.path .*secret_key is outside the datasets folder"):
        call_command("launch", "grpo", "--model", model, "--set", f"data.path={data_dir / 'secret_key'}",
                     "--set", "train.device=cpu", stdout=io.StringIO(), stderr=io.StringIO())
    assert not Run.objects.exists()


def test_the_worker_checks_again_before_reading(researcher, data_dir, tiny_grpo):
    """A run stored with a path outside the folder (launched before the rule, or the datasets folder moved): the
    worker refuses it before reading the file, and the file's text appears nowhere."""
    model, config = tiny_grpo
    prompts = data_dir / "datasets" / "arith.jsonl"
    shutil.copy(config["data"]["path"], prompts)
    response = _post(researcher, method="grpo", model=model, config={**config, "data": {"path": str(prompts)}})
    assert response.status_code == 201, response.json()
    run = Run.objects.get()
    run.config = {**run.config, "data": {**run.config["data"], "path": str(data_dir / "admin_password")}}
    run.save(update_fields=["config"])
    burst("cpu")
    run.refresh_from_db()
    assert run.status == "failed"
    assert "data.path" in run.error and "outside the datasets folder" in run.error, run.error
    assert SECRET not in run.error and not any(SECRET in e.message for e in run.events.all())
