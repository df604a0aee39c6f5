"""The run page's method panel: SCOPE's gates, rubrics and pool decisions, SCORE's harness and
rubrics, pi-Play's difficulty, teacher divergence and QCPs.

Real runs of the tiny random-init model launched through the API and executed by a real RQ
worker on a Postgres corpus (pgvector search); the page is rendered and checked against the
rows and metrics the run stored. The SCOPE decision rule is also checked on crafted task rows
(a random model never passes the Judge's gates)."""
import pytest
from django.utils.html import escape
from rest_framework.test import APIClient

from apps.corpora.ingest import ingest_documents
from apps.corpora.models import Corpus
from apps.corpora.parsing import ParsedDoc
from apps.episodes.models import Rubric, Task
from apps.runs import method_panel
from apps.runs.models import Metric, Run
from tests.web.methods.test_scope_score_piplay_pgvector import DOCS, SECTIONS
from tests.web.runs.conftest import burst

pytestmark = pytest.mark.django_db(transaction=True)

TITLES = {"scope": "SCOPE: gates, rubrics and pool decisions", "score": "SCORE: harness and rubrics",
          "piplay": "pi-Play: difficulty, teacher and QCPs"}


def launch(method: str, researcher) -> Run:
    corpus = Corpus.objects.create(name=f"panel-{method}", description="method panel")
    ingest_documents(corpus, [ParsedDoc(title, text, "test") for title, text in DOCS])
    config = {"seed": 0, "rollout": {"max_new_tokens": 24, "group_size": 2},
              "train": {"steps": 3, "lr": 1e-3, "prompts_per_step": 2, "micro_batch_size": 4, "device": "cpu"},
              "checkpoint": {"every": 0}, method: SECTIONS[method]}
    client = APIClient()
    client.force_authenticate(researcher)
    response = client.post("/api/v1/runs/", {"method": method, "model": "tiny", "corpus": corpus.name,
                                             "config": config}, format="json")
    assert response.status_code == 201, response.json()
    burst("cpu")
    run = Run.objects.get(pk=response.json()["id"])
    assert run.status == "finished", run.error
    return run


def page(client, researcher, run) -> str:
    client.force_login(researcher)
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def metric(run, role, name, step):
    return Metric.objects.get(run=run, role=role, name=name, step=step).value


@pytest.mark.parametrize("method", ["scope", "score", "piplay"])
def test_the_run_page_shows_the_method_panel_of_a_real_run(method, roles, researcher, run_env, client):
    run = launch(method, researcher)
    html = page(client, researcher, run)
    assert TITLES[method] in html and f'data-method="{method}"' in html
    panel = method_panel.panel(run)
    assert [r["step"] for r in panel["steps"]["rows"]] == [3, 2, 1]
    tasks = Task.objects.filter(run=run)
    assert tasks.exists()
    if method in ("scope", "piplay"):  # the papers' iterations of two stage blocks, each step placed in them
        cols = panel["steps"]["columns"]
        assert cols[0] == "iteration" and cols[1].startswith("stage")
        stages = {r["step"]: (r["cells"][0], r["cells"][1]) for r in panel["steps"]["rows"]}
        assert stages == ({1: (1.0, 1.0), 2: (1.0, 1.0), 3: (1.0, 2.0)} if method == "scope"
                          else {1: (1.0, 1.0), 2: (1.0, 2.0), 3: (1.0, 2.0)})
    if method == "scope":
        # steps 1-2 are Challenger steps: the gate columns carry the stored metrics
        assert {"gate: entity", "gate: relevance", "gates passed", "in window"} <= set(panel["steps"]["columns"])
        col = panel["steps"]["columns"].index("gates passed")
        row = next(r for r in panel["steps"]["rows"] if r["step"] == 1)
        assert row["cells"][col] == metric(run, "challenger", "gate_pass_rate", 1)
        shown = panel["tasks"]
        assert shown and len(shown) == min(6, tasks.filter(role="challenger").count())
        for r in shown:
            t = r["task"]
            expect = "not judged (no parsable task)" if not t.data.get("gates") else None
            if expect:
                assert r["decision"] == expect
            assert escape(r["decision"]) in html
    elif method == "score":
        assert "harness v" in panel["steps"]["columns"][0] and "depth zeroed" in panel["steps"]["columns"]
        assert panel["harness"] and panel["harness"][-1]["version"] == 0
        assert "v0 · default" in html and "harness v0 (default)" in html
        dims = [d["name"] for d in tasks.order_by("-step", "-id")[0].data["rubric"]["dimensions"]]
        assert dims and all(escape(d) in html for d in dims)
        assert Rubric.objects.filter(run=run).exists()
    else:
        assert {"student pass rate", "student exact match", "lambda"} <= set(panel["steps"]["columns"])
        # the divergence is reported only when a Student step had valid questions to train on
        distilled = Metric.objects.filter(run=run, role="student", name="distill").exists()
        assert ("divergence to teacher" in panel["steps"]["columns"]) == distilled
        col = panel["steps"]["columns"].index("lambda")
        row = next(r for r in panel["steps"]["rows"] if r["step"] == 3)
        assert row["cells"][col] == metric(run, "student", "lambda", 3)
        newest = tasks.filter(role="examiner").order_by("-step", "-id")[0]
        assert newest.data["qcp"] and escape(newest.data["qcp"][:60]) in html
        assert f"QCP ({len(newest.data['qcp'])} chars)" in html


def test_scope_pool_decisions_follow_the_gates_and_the_window(roles, researcher, client):
    run = Run.objects.create(method="scope", model_name="tiny", total_steps=1,
                             config={"method": "scope", "scope": {"filter_low": 0.2, "filter_high": 0.8}})
    ok = {"entity": 1, "relevance": 1, "passed": True}
    rows = [("no task", False, None, {}), ("gate fail", False, None, {"entity": 1, "relevance": 0, "passed": False}),
            ("in window", True, 0.5, ok), ("too easy", True, 0.9, ok), ("not scored", True, None, ok)]
    for i, (q, valid, rate, gates) in enumerate(rows):
        Task.objects.create(run=run, key=f"1:{i}", step=1, role="challenger", question=q, valid=valid,
                            pass_rate=rate, data={"gates": gates, "stage": "challenger"})
    task = Task.objects.get(run=run, key="1:2")
    Rubric.objects.create(run=run, task=task, key="1:2:r0", task_key="1:2", step=1, text="Names the ship",
                          priority="critical")
    decisions = {r["task"].question: r["decision"] for r in method_panel.panel(run)["tasks"]}
    assert decisions == {"no task": "not judged (no parsable task)", "gate fail": "gate failed",
                         "in window": "joins the solver pool", "too easy": "outside window [0.2, 0.8]",
                         "not scored": "gates passed, not scored"}
    html = page(client, researcher, run)
    assert "joins the solver pool" in html and "Names the ship" in html and "not graded" in html
    assert "relevance ✗" in html


def test_other_methods_have_no_panel(roles, researcher, client):
    run = Run.objects.create(method="grpo", model_name="tiny", total_steps=1, config={"method": "grpo"})
    assert method_panel.panel(run) is None
    html = page(client, researcher, run)
    assert 'id="method-panel"' not in html and f'id="run-title">Run {run.pk} · grpo</h1>' in html
