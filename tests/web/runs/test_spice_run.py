"""A SPICE run launched through the API reads its documents from the Postgres corpus (PgDocumentSource)."""
import pytest

from apps.corpora.models import Document
from apps.episodes.models import Attempt, Task
from apps.runs.models import Metric, Run
from tests.web.runs.conftest import facts_corpus, launch_tiny_spice

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_spice_run_trains_on_a_corpus(roles, researcher, run_env):
    corpus = facts_corpus(["Paris is the capital of France.", "Water boils at 100 degrees Celsius at sea level.",
                           "The Nile flows north into the Mediterranean Sea."])
    launch_tiny_spice(researcher, train={"steps": 1, "prompts_per_step": 1}, checkpoint={"every": 0})
    run = Run.objects.get()
    assert run.status == "finished", run.error
    assert run.corpus == corpus and run.current_step == 1
    roles_seen = set(Metric.objects.filter(run=run).values_list("role", flat=True))
    assert "challenger" in roles_seen
    tasks = Task.objects.filter(run=run)
    assert tasks.exists() and set(tasks.values_list("document_id", flat=True)) <= {str(d.id) for d in Document.objects.all()}
    assert Attempt.objects.filter(run=run, role="challenger").exists()
