"""The launch form shows every error at once (issue 32 item 5): a field that does not parse and a config problem
found from the other fields (an unknown model, a cross-field check) come back from one submit."""
import pytest

from apps.runs.models import Run

pytestmark = pytest.mark.django_db


def test_a_field_error_and_the_configs_own_problems_show_together(researcher, client, run_env):
    client.force_login(researcher)
    page = client.post("/runs/new/", {"method": "grpo", "model": "no-such-model", "cfg__data__path": "bundled:gsm8k",
                                      "cfg__rollout__group_size": "100000",
                                      "cfg__rollout__min_new_tokens": "64", "cfg__rollout__max_new_tokens": "32"})
    assert page.status_code == 400
    html = page.content.decode()
    assert "Ensure this value is less than or equal to 512." in html  # the field that did not parse
    assert "model &#x27;no-such-model&#x27; not found: not a bundled name" in html  # the model, from the same submit
    assert "must not exceed rollout.max_new_tokens" in html  # a cross-field check, from the same submit
    assert html.count("Ensure this value is less than or equal to 512.") == 1
    assert not Run.objects.exists()
