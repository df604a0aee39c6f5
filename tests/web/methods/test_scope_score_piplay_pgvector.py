"""SCOPE, SCORE and pi-Play end to end with the real pgvector search tool: a small corpus is
ingested into Postgres (embedded with the bundled MiniLM, indexed for hybrid search) and each
recipe runs 3 steps of a tiny random-init model on the CPU, searching and sampling documents
through ``PgvectorRetriever`` / ``PgDocumentSource``."""
import json

import pytest

from apps.corpora.ingest import ingest_documents
from apps.corpora.models import Corpus
from apps.corpora.parsing import ParsedDoc
from apps.corpora.retriever import PgDocumentSource, PgvectorRetriever
from tests.trainer.conftest import smollm2_tokenizer, tiny_config, tiny_model_dir, tiny_prompts_path  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

DOCS = [
    ("SS El Faro", "SS El Faro was an American cargo ship that sank on 1 October 2015 during Hurricane Joaquin "
     "near the Bahamas; all 33 crew members were lost. The NTSB blamed the captain's decision to sail."),
    ("Hurricane Joaquin", "Hurricane Joaquin was a powerful Atlantic hurricane in 2015 that struck the Bahamas "
     "and sank the cargo ship El Faro."),
    ("Ann Lee", "Ann Lee founded the Shaker movement in England and led it to America in 1774."),
    ("Texas Penal Code 9.42", "Section 9.42 allows deadly force to protect property only at night and only when "
     "the property cannot be protected by other means."),
]

SECTIONS = {
    "scope": {"iterations": 1, "challenger_steps": 2, "solver_steps": 1, "challenger_prompts_per_step": 2,
              "solver_prompts_per_step": 2, "scoring_rollouts": 2, "filter_rollouts": 2, "candidate_rounds": 1,
              "max_turns": 2, "max_tool_tokens": 32, "judge_max_new_tokens": 16},
    "score": {"max_tool_calls": 2, "evaluator_max_turns": 2, "evaluator_max_new_tokens": 32, "harness_every": 2,
              "max_tool_tokens": 32, "dimensions": 3},
    "piplay": {"iterations": 1, "examiner_steps": 1, "student_steps": 2, "student_attempts": 2, "max_turns": 2,
               "max_tool_tokens": 32, "distill_top_k": 8},
}


@pytest.fixture
def pg_corpus():
    corpus = Corpus.objects.create(name="methods-e2e", description="SCOPE/SCORE/pi-Play end to end")
    ingest_documents(corpus, [ParsedDoc(title, text, "test") for title, text in DOCS])
    return corpus


class CountingRetriever(PgvectorRetriever):
    """The real pgvector retriever, counting the batched calls the recipe makes."""

    calls = 0

    def search(self, queries, k):
        self.calls += 1
        return super().search(queries, k)


@pytest.mark.parametrize("method", ["scope", "score", "piplay"])
def test_each_method_runs_three_steps_with_the_pgvector_search_tool(method, pg_corpus, tiny_config, tmp_path):
    import trainer

    retriever = CountingRetriever(pg_corpus)
    hits = retriever.search(["cargo ship sank in a hurricane"], 2)[0]
    assert hits and hits[0].title in ("SS El Faro", "Hurricane Joaquin")
    cfg = tiny_config(method, train={"steps": 3, "prompts_per_step": 2},
                      rollout={"max_new_tokens": 32, "group_size": 2}, **{method: SECTIONS[method]})
    result = trainer.run(cfg, retriever=retriever, documents=PgDocumentSource(pg_corpus), run_dir=tmp_path / "run")
    assert result.steps == 3 and len(result.step_seconds) == 3 and result.final_checkpoint
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    tasks = [r for r in samples if r["kind"] == "task"]
    ids = {str(pk) for pk in pg_corpus.documents.values_list("id", flat=True)}
    assert tasks and {t["document_id"] for t in tasks} <= ids  # documents sampled from Postgres
    attempts = [r for r in samples if r["kind"] == "attempt"]
    passages = [p for a in attempts for p in a["passages"]]
    # whenever the random model closed a <search> tag, the passages came from Postgres
    assert all(p["title"] in {t for t, _ in DOCS} for p in passages)
    if method == "score":
        assert any(r["kind"] == "event" and "harness" in r["data"] for r in samples)
    if method == "piplay":
        assert all("qcp" in t["data"] for t in tasks)
