"""The run pages: list, launch form (built from the trainer's config), run page."""
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders

from apps.episodes.models import Attempt, Task
from apps.runs.models import Metric, Run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _commit(django_capture_on_commit_callbacks):
    global _callbacks
    _callbacks = django_capture_on_commit_callbacks


def test_the_empty_list_offers_a_launch_button(client, researcher, reviewer):
    client.force_login(researcher)
    html = client.get("/runs/").content.decode()
    assert "No runs yet." in html and 'href="/runs/new/"' in html
    client.force_login(reviewer)
    html = client.get("/runs/").content.decode()
    assert "No runs yet." in html and "needs the researcher role" in html


def test_the_list_shows_status_step_last_reward_and_owner(client, researcher):
    run = Run.objects.create(method="spice", model_name="smollm2-135m-instruct", config={}, owner=researcher,
                             corpus_name="gone", current_step=7, total_steps=10)
    Metric.objects.create(run=run, step=7, role="reasoner", name="reward_mean", value=0.625)
    client.force_login(researcher)
    html = client.get("/runs/").content.decode()
    assert 'class="badge queued"' in html and "7 / 10" in html and "0.625" in html and "rita" in html
    assert "gone (deleted)" in html


def test_the_form_has_the_methods_paper_defaults_and_help(client, researcher, run_env):
    client.force_login(researcher)
    html = client.get("/runs/new/?method=grpo").content.decode()
    assert 'name="cfg__train__lr"' in html and 'value="1e-06"' in html
    assert "Peak learning rate" in html  # the field's description from the trainer's config class
    assert 'name="cfg__grpo__advantage"' in html and 'name="cfg__spice__' not in html
    spice = client.get("/runs/new/?method=spice").content.decode()
    assert 'name="cfg__spice__challenger_attempts"' in spice


def test_a_reviewer_cannot_open_the_form(client, reviewer):
    client.force_login(reviewer)
    assert client.get("/runs/new/").status_code == 403


def _form_data(client, method, run_env, **changes):
    """The form's own initial values (as a browser would post them) with ``changes`` applied."""
    from apps.runs.forms import LaunchForm

    form = LaunchForm(method)
    data = {"method": method, "model": "tiny", "corpus": "", "queue": ""}
    for name, field in form.fields.items():
        if name.startswith("cfg__"):
            value = form[name].value()
            if value is False:
                continue  # an unchecked checkbox is not posted
            data[name] = "on" if value is True else ("" if value is None else value)
    data.update(changes)
    return data


def test_a_valid_form_launches_and_redirects_to_the_run(client, researcher, run_env, tiny_grpo):
    client.force_login(researcher)
    data = _form_data(client, "grpo", run_env, cfg__data__path=str(run_env / "prompts" / "arith.jsonl"),
                      cfg__train__steps="3", cfg__train__device="cpu", cfg__rollout__max_new_tokens="6")
    with _callbacks(execute=True):
        response = client.post("/runs/new/?method=grpo", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    run = Run.objects.get()
    assert response["Location"] == f"/runs/{run.pk}/"
    assert run.queue == "cpu" and run.total_steps == 3 and run.config["rollout"]["max_new_tokens"] == 6
    assert run.overrides["config"] == {"data": {"path": str(run_env / "prompts" / "arith.jsonl")},
                                       "train": {"steps": 3, "device": "cpu"}, "rollout": {"max_new_tokens": 6}}


def test_config_errors_show_next_to_their_fields(client, researcher, run_env):
    client.force_login(researcher)
    data = _form_data(client, "grpo", run_env, cfg__train__lr="-1", cfg__rollout__min_new_tokens="9",
                      cfg__rollout__max_new_tokens="4", model="/etc")
    response = client.post("/runs/new/?method=grpo", data)
    assert response.status_code == 400
    form = response.context["form"]
    assert "greater than 0" in form.errors["cfg__train__lr"][0]
    assert "must not exceed rollout.max_new_tokens" in form.errors["cfg__rollout__min_new_tokens"][0]
    assert "outside the allowed model directories" in form.errors["model"][0]
    assert "cfg__data__path" not in form.errors  # prefilled with bundled:gsm8k (issue 20)
    assert not Run.objects.exists()


def test_micro_batch_tokens_takes_auto_or_a_number_in_the_form(client, researcher, run_env):
    """train.micro_batch_tokens is 'auto' or a whole number: a text field, typed on the way in, errors beside it."""
    client.force_login(researcher)
    html = client.get("/runs/new/?method=grpo").content.decode()
    assert 'name="cfg__train__micro_batch_tokens"' in html and 'value="auto"' in html
    path = str(run_env / "prompts" / "arith.jsonl")
    data = _form_data(client, "grpo", run_env, cfg__data__path=path, cfg__train__micro_batch_tokens="lots")
    response = client.post("/runs/new/?method=grpo", data)
    assert response.status_code == 400
    assert "auto or a whole number" in response.context["form"].errors["cfg__train__micro_batch_tokens"][0]
    data = _form_data(client, "grpo", run_env, cfg__data__path=path, cfg__train__micro_batch_tokens="4096",
                      cfg__train__device="cpu")
    with _callbacks(execute=False):
        response = client.post("/runs/new/?method=grpo", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Run.objects.get().config["train"]["micro_batch_tokens"] == 4096


def test_lora_lr_takes_auto_train_or_a_number_in_the_form(client, researcher, run_env):
    """model.lora.lr is auto, train or a number (a Literal-or-float union): its default auto is no form error
    (it was 'Enter a number' while the field was a FloatField), a number is stored as a float, other text is the
    config's own error beside the field."""
    client.force_login(researcher)
    path = str(run_env / "prompts" / "arith.jsonl")
    for given, stored in (("auto", "auto"), ("train", "train"), ("2e-5", 2e-5)):
        data = _form_data(client, "grpo", run_env, cfg__data__path=path, cfg__train__device="cpu",
                          cfg__model__lora__lr=given)
        with _callbacks(execute=False):
            response = client.post("/runs/new/?method=grpo", data)
        assert response.status_code == 302, (given, response.context and response.context["form"].errors)
        assert Run.objects.latest("pk").config["model"]["lora"]["lr"] == stored
    for bad in ("fast", "-1", "inf"):
        data = _form_data(client, "grpo", run_env, cfg__data__path=path, cfg__model__lora__lr=bad)
        response = client.post("/runs/new/?method=grpo", data)
        assert response.status_code == 400
        assert "must be auto, train, or a number > 0" in response.context["form"].errors["cfg__model__lora__lr"][0]


def test_the_run_page_has_the_live_elements_and_escapes_model_text(client, researcher):
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, owner=researcher)
    run.mark_running("w")
    task = Task.objects.create(run=run, key="1:t0", step=1, question="<img src=x onerror=alert(1)>")
    Attempt.objects.create(run=run, task=task, key="1:0", step=1, text="<script>alert(2)</script>", reward=1.0)
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    for element in ('id="run-status"', 'id="reward-chart"', 'id="samples"'):
        assert element in html
    assert "vendor/plotly.min.js" in html and "js/run_live.js" in html  # the live script is a file (CSP)
    assert "/ws/runs/${runId}/" in Path(finders.find("js/run_live.js")).read_text()
    assert "<script>alert(2)</script>" not in html and "&lt;script&gt;alert(2)&lt;/script&gt;" in html
    assert "<img src=x" not in html
    assert ">Pause<" in html and ">Cancel<" in html
    runs = client.get("/runs/").content.decode()
    assert "plotly" not in runs and f'href="/runs/{run.pk}/"' in runs  # only the run page loads plotly
