"""At launch, a run's judge / meta-harness endpoint must be http(s) and, unless the operator lists it in
SELFPLAY_JUDGE_ENDPOINTS, a public address, whatever key it gets (trainer/endpoints.py: destination_problem).
The workers check again (tests/trainer/test_destinations.py)."""
import pytest
from rest_framework.test import APIClient

from apps.corpora.models import Corpus
from apps.runs.models import Run

pytestmark = pytest.mark.django_db
OWN_KEY = "sk-own-3c1f-typed-in"


def _launch(user, method, endpoint, captured):
    Corpus.objects.get_or_create(name="dest-c")
    section = ({"judge": "endpoint", "judge_endpoint": endpoint, "judge_model": "j", "judge_api_key": OWN_KEY}
               if method == "ssp" else
               {"meta_harness": "endpoint", "harness_endpoint": endpoint, "harness_model": "j",
                "harness_api_key": OWN_KEY})
    client = APIClient()
    client.force_authenticate(user)
    with captured(execute=True):
        return client.post("/api/v1/runs/", {"method": method, "model": "smollm2-135m-instruct", "corpus": "dest-c",
                                             "config": {"train": {"steps": 2, "device": "cpu"}, method: section}},
                           format="json")


@pytest.mark.parametrize("method,field", [("ssp", "ssp.judge_endpoint"), ("score", "score.harness_endpoint")])
@pytest.mark.parametrize("endpoint,needle", [
    ("http://127.0.0.1:18099/v1", "internal address"),  # the finding: a listener on the web server's loopback
    ("http://169.254.169.254/latest", "internal address"),  # a cloud metadata service
    ("http://10.0.0.8:6379/v1", "internal address"),
    ("file:///etc/passwd", "must be an http(s) base URL"),
])
def test_an_internal_or_non_http_endpoint_is_refused_at_launch_even_with_the_runs_own_key(
        researcher, rq_queues, django_capture_on_commit_callbacks, settings, method, field, endpoint, needle):
    settings.SELFPLAY_JUDGE_ENDPOINTS = []
    response = _launch(researcher, method, endpoint, django_capture_on_commit_callbacks)
    assert response.status_code == 400, response.content
    why = response.json()["fields"][field]
    assert needle in why and OWN_KEY not in response.content.decode()
    if needle == "internal address":
        assert "SELFPLAY_JUDGE_ENDPOINTS" in why  # what to ask the operator for
    assert not Run.objects.exists()


def test_an_endpoint_the_operator_lists_may_be_internal(researcher, rq_queues, django_capture_on_commit_callbacks,
                                                        settings):
    settings.SELFPLAY_JUDGE_ENDPOINTS = ["127.0.0.1:18099"]
    response = _launch(researcher, "ssp", "http://127.0.0.1:18099/v1", django_capture_on_commit_callbacks)
    assert response.status_code == 201, response.content
    response = _launch(researcher, "ssp", "http://127.0.0.1:18100/v1", django_capture_on_commit_callbacks)
    assert response.status_code == 400  # another port of that host is not listed


def test_a_public_endpoint_with_the_runs_own_key_is_accepted(researcher, rq_queues,
                                                              django_capture_on_commit_callbacks, settings):
    settings.SELFPLAY_JUDGE_ENDPOINTS = []
    response = _launch(researcher, "ssp", "https://93.184.216.34/v1", django_capture_on_commit_callbacks)
    assert response.status_code == 201, response.content
