"""A SPICE run launched through the API reads its documents from the Postgres corpus (PgDocumentSource)."""
import pytest
from rest_framework.test import APIClient

from apps.corpora.models import Corpus, Document
from apps.episodes.models import Attempt, Task
from apps.runs.models import Metric, Run
from tests.web.runs.conftest import burst

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_spice_run_trains_on_a_corpus(roles, researcher, run_env):
    corpus = Corpus.objects.create(name="facts", status="ready")
    for i, text in enumerate(["Paris is the capital of France.", "Water boils at 100 degrees Celsius at sea level.",
                              "The Nile flows north into the Mediterranean Sea."]):
        Document.objects.create(corpus=corpus, title=f"fact {i}", text=text, content_hash=f"h{i}")
    config = {
        "seed": 0,
        "rollout": {"max_new_tokens": 6, "group_size": 2},
        "train": {"steps": 1, "lr": 1e-3, "prompts_per_step": 1, "micro_batch_size": 4, "device": "cpu"},
        "checkpoint": {"every": 0},
        "spice": {"challenger_attempts": 2, "challenger_group_size": 2, "max_document_tokens": 64,
                  "format_max_new_tokens": 16},
    }
    client = APIClient()
    client.force_authenticate(researcher)
    response = client.post("/api/v1/runs/", {"method": "spice", "model": "tiny", "corpus": "facts", "config": config},
                           format="json")
    assert response.status_code == 201, response.json()
    burst("cpu")
    run = Run.objects.get()
    assert run.status == "finished", run.error
    assert run.corpus == corpus and run.current_step == 1
    roles_seen = set(Metric.objects.filter(run=run).values_list("role", flat=True))
    assert "challenger" in roles_seen
    tasks = Task.objects.filter(run=run)
    assert tasks.exists() and set(tasks.values_list("document_id", flat=True)) <= {str(d.id) for d in Document.objects.all()}
    assert Attempt.objects.filter(run=run, role="challenger").exists()
