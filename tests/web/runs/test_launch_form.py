"""The launch form (issue 20, item 6): sanity bounds in the config layer (the form and the API refuse
the same values with the same reason), the cost estimate, the CPU smoke-test preset, "clone this
run", GRPO's prompt set prefilled, only the method's own fields (no grpo `reward` on SPICE), and the
few fields that matter shown first with the rest under "advanced"."""
import pytest
from rest_framework.test import APIClient

from apps.runs.models import Metric, Run
from apps.runs.services.estimate import step_tokens

pytestmark = pytest.mark.django_db


def test_group_size_100000_is_refused_by_the_api_and_the_form_alike(researcher, client, run_env, private_redis):
    api = APIClient()
    api.force_authenticate(researcher)
    response = api.post("/api/v1/runs/", {"method": "grpo", "model": "tiny",
                                          "config": {"data.path": "bundled:gsm8k", "rollout.group_size": 100000}},
                        format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["rollout.group_size"] == "Input should be less than or equal to 512 (got 100000)"
    client.force_login(researcher)
    page = client.post("/runs/new/", {"method": "grpo", "model": "tiny", "cfg__data__path": "bundled:gsm8k",
                                      "cfg__rollout__group_size": "100000"})
    assert page.status_code == 400
    assert "Ensure this value is less than or equal to 512." in page.content.decode()
    assert not Run.objects.exists()


def test_the_grpo_form_starts_launchable_with_its_fields_first(researcher, client, run_env):
    client.force_login(researcher)
    html = client.get("/runs/new/?method=grpo").content.decode()
    first = html.split('id="first-fields"', 1)[1].split('id="advanced"', 1)[0]
    assert 'name="cfg__data__path"' in first and 'value="bundled:gsm8k"' in first
    assert 'name="cfg__rollout__group_size"' in first and 'name="cfg__train__steps"' in first
    assert 'name="cfg__train__clip_low"' not in first  # the rest is under "advanced"
    assert 'name="cfg__train__clip_low"' in html.split('id="advanced"', 1)[1]
    assert "Cost:</strong> at most 32,768 generated tokens a step (64 sequences)" in html  # 8 prompts x G=8 x 512


def test_the_spice_form_has_no_grpo_only_fields(researcher, client, run_env):
    client.force_login(researcher)
    html = client.get("/runs/new/?method=spice").content.decode()
    assert 'name="cfg__spice__formats"' in html and 'name="cfg__train__steps"' in html  # SPICE's form and the shared one
    assert 'name="cfg__reward"' not in html and 'name="cfg__data__path"' not in html
    assert "Verifier for method grpo" not in html


def test_the_cpu_smoke_preset_fills_small_sizes_on_the_cpu_queue(researcher, client, run_env):
    client.force_login(researcher)
    html = client.get("/runs/new/?method=grpo&preset=cpu-smoke").content.decode()
    first = html.split('id="first-fields"', 1)[1].split('id="advanced"', 1)[0]
    assert 'name="cfg__train__steps" value="2"' in first and 'name="cfg__rollout__group_size" value="2"' in first
    assert '<option value="cpu" selected>' in first
    assert "at most 64 generated tokens a step (2 sequences)" in html  # 1 prompt x G=2 x 32 tokens


def test_clone_prefills_the_form_from_a_run(researcher, client, run_env):
    source = Run.objects.create(method="grpo", model_name="tiny", owner=researcher, queue="cpu", config={
        "method": "grpo", "data": {"path": "bundled:aime2025"}, "rollout": {"group_size": 6, "max_new_tokens": 77},
        "train": {"steps": 9, "device": "cpu"}})
    client.force_login(researcher)
    page = client.get(f"/runs/{source.pk}/").content.decode()
    assert f'href="/runs/new/?method=grpo&amp;clone={source.pk}"' in page
    html = client.get(f"/runs/new/?method=grpo&clone={source.pk}").content.decode()
    assert 'value="bundled:aime2025"' in html and 'name="cfg__rollout__group_size" value="6"' in html
    assert 'name="cfg__rollout__max_new_tokens" value="77"' in html and 'name="cfg__train__steps" value="9"' in html
    assert 'value="tiny"' in html


def test_the_estimate_is_timed_by_an_earlier_run_on_the_same_queue(researcher, client, run_env, private_redis):
    earlier = Run.objects.create(method="grpo", model_name="tiny", owner=researcher, queue="cpu", status="finished",
                                 config={"train": {"prompts_per_step": 1}, "rollout": {"group_size": 2,
                                                                                       "max_new_tokens": 32}})
    Metric.objects.bulk_create([Metric(run=earlier, step=s, role="policy", name="step_seconds", value=10.0)
                                for s in (1, 2, 3)])
    client.force_login(researcher)
    box = client.post("/runs/new/estimate/", {"method": "grpo", "model": "tiny", "queue": "cpu",
                                              "cfg__data__path": "bundled:gsm8k", "cfg__train__steps": "30",
                                              "cfg__train__prompts_per_step": "2", "cfg__rollout__group_size": "2",
                                              "cfg__rollout__max_new_tokens": "32", "cfg__train__device": "cpu"})
    text = box.content.decode()
    assert "at most 128 generated tokens a step (4 sequences)" in text
    assert "about 20 s a step on cpu, about 10 min for 30 steps" in text  # twice run 1's 64 tokens
    assert f"scaled from run {earlier.pk}: 10 s a step at 64 tokens" in text
    assert "no live worker serves the cpu queue" in text


def test_step_tokens_of_spice_counts_both_roles():
    values = {"train": {"prompts_per_step": 2}, "rollout": {"group_size": 4, "max_new_tokens": 100},
              "spice": {"challenger_attempts": 3, "format_max_new_tokens": 50, "reasoner_tasks_per_document": 1}}
    assert step_tokens("spice", values) == (2 * (3 + 4), 2 * (3 * 150 + 4 * 100), "exact")
