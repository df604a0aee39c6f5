"""Human review reaching the REAL recipes through a real DjangoSink at the next step boundary.

- SPICE (tiny model, 2 steps, the corpus's pgvector document source): right after step 1's
  samples are stored (the run is still running, before the step boundary's ``control()``), a
  reviewer flags one of its tasks through the API. The recipe's review state, checkpointed after
  step 2, holds the flagged key; with a model taught to write one valid MCQ for every document,
  the same question written again in step 2 is invalid ("flagged by a reviewer") and never a
  Reasoner group.
- SCORE (tiny model, 3 steps, harness refresh every 2): the run's owner saves a harness through
  the API after step 1; the recipe applies it at its step-2 refresh, the run page's "current
  harness" follows, and step 3's rubrics obey it.
- SCOPE: a rubric a reviewer edits is the text the Judge grades against next.
"""
from __future__ import annotations

import random

import pytest
import torch
from rest_framework.test import APIClient

from apps.corpora.models import Corpus, Document
from apps.corpora.retriever import PgDocumentSource
from apps.episodes.models import Task
from apps.review.models import ReviewItem
from apps.runs.models import Run
from apps.runs.sink import DjangoSink
from tests.trainer.conftest import smollm2_tokenizer, tiny_config, tiny_model_dir, tiny_prompts_path  # noqa: F401
from trainer.checkpoint import latest_checkpoint
from trainer.runner import run as train

pytestmark = pytest.mark.django_db

DOCS = [("Solar System", "The Sun holds the planets. Jupiter is the largest planet, Mercury the smallest."),
        ("Castle Drogo", "Castle Drogo is a country house in Devon, built between 1911 and 1930 by Edwin Lutyens.")]
QUESTION = "Which is largest? A) one B) two C) three D) four"


class ReviewerAtTheBoundary(DjangoSink):
    """A real DjangoSink; once step ``flag_step`` is stored, a reviewer flags one of its tasks
    through the API before the step boundary's control() answers (as a person would, mid-run)."""

    def __init__(self, run: Run, reviewer, flag_step: int = 1, valid_only: bool = False):
        super().__init__(run)
        self.api = APIClient()
        self.api.force_authenticate(reviewer)
        self.flag_step, self.valid_only = flag_step, valid_only
        self.flagged: str | None = None
        self.verdicts_heard: list = []

    def control(self):
        self.flush()
        if self.flagged is None and self._max_step == self.flag_step:
            items = ReviewItem.objects.filter(run_number=self.run_id, kind="task", step=self.flag_step).order_by("id")
            item = next(i for i in items if i.snapshot["valid"] or not self.valid_only)
            response = self.api.post(f"/api/v1/review/items/{item.pk}/", {"verdict": "flag", "reason": "bad task"},
                                     format="json")
            assert response.status_code == 200, response.json()
            self.flagged = item.key
        control = super().control()
        self.verdicts_heard += control.verdicts
        return control


@pytest.fixture
def corpus(db):
    corpus = Corpus.objects.create(name="facts")
    for i, (title, text) in enumerate(DOCS):
        Document.objects.create(corpus=corpus, title=title, text=text, content_hash=f"h{i}")
    return corpus


def _config(tiny_config, model_dir, temperature=1.0) -> dict:
    cfg = tiny_config("spice", model={"name_or_path": str(model_dir), "lora": {"r": 0}},
                      rollout={"max_new_tokens": 48, "temperature": temperature, "group_size": 3},
                      train={"steps": 2, "prompts_per_step": 2, "lr": 1e-4, "micro_batch_size": 8, "device": "cpu"},
                      spice={"challenger_attempts": 3, "challenger_group_size": 2, "max_document_tokens": 64,
                             "format_max_new_tokens": 24})
    cfg["review"] = {"tasks": 1.0, "rubrics": 0.0, "grades": 0.0, "suspicious": []}
    return cfg


def _taught_config(tiny_config, model_dir, temperature=1.0) -> dict:
    """For a model taught the task turn as JSON alone: no thinking before the task (spice.think_before_task, on
    by default, changes that turn's prompt), and the task gate's model rules off (the taught model was never
    taught to answer as the gate's reader or guess probe, so consensus would refuse every task); this test is
    about the reviewer's flag, not the gate."""
    cfg = _config(tiny_config, model_dir, temperature)
    cfg["spice"]["think_before_task"] = False
    cfg["gate"] = {"consensus_samples": 0, "guess_probe": False}
    return cfg


def _run_row(cfg, corpus, researcher) -> Run:
    run = Run.objects.create(method="spice", model_name="tiny", config=cfg, corpus=corpus, owner=researcher,
                             total_steps=2)
    run.mark_running("test")
    return run


def _recipe_review_state(run_dir) -> dict:
    state = torch.load(latest_checkpoint(run_dir) / "state.pt", weights_only=False)
    return state["recipe"]["review"]


def test_a_flag_between_steps_reaches_the_spice_recipe(tiny_config, tiny_model_dir, corpus, researcher, reviewer,
                                                       tmp_path):
    cfg = _config(tiny_config, tiny_model_dir)
    run = _run_row(cfg, corpus, researcher)
    sink = ReviewerAtTheBoundary(run, reviewer)
    result = train(cfg, sink=sink, documents=PgDocumentSource(corpus), run_dir=tmp_path / "run")
    sink.close()
    assert result.steps == 2 and sink.flagged and sink.flagged.startswith("1:")
    assert [(v.kind, v.key, v.verdict, v.reason) for v in sink.verdicts_heard] == [("task", sink.flagged, "flag",
                                                                                     "bad task")]
    assert sink.flagged in _recipe_review_state(tmp_path / "run")["flagged_keys"]  # the recipe's excluded set
    item = ReviewItem.objects.get(run_number=run.pk, key=sink.flagged)
    assert item.applied_at is not None
    assert run.events.filter(kind="verdict", message__startswith=f"review: task {sink.flagged} flagged").exists()
    # 2 documents x challenger_attempts 3: one round, as a CPU step makes no retry round (spice.token_budget);
    # a retry round would add the valid attempts it finds
    assert Task.objects.filter(run=run, step=2).count() == 2 * 3 and not Task.objects.filter(run=run, step=2,
                                                                                            key=sink.flagged).exists()


def test_a_flagged_question_is_not_trained_on_in_the_next_step(tiny_config, tiny_model_dir, corpus, researcher,
                                                               reviewer, tmp_path):
    from transformers import AutoTokenizer

    from tests.trainer.taught import pair, teach

    from trainer.config import load_config
    from trainer.methods.gate import question_key, shuffle_options
    from trainer.methods.spice_tasks import (FormatChoice, SpiceTask, challenger_prompt, continue_chat,
                                             reasoner_prompt, task_prompt)
    from trainer.prompts import chat
    from trainer.tools.corpus import Document as TrainerDocument

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    sec = load_config(_taught_config(tiny_config, tiny_model_dir)).spice
    eos = [tok.eos_token_id]
    choice = tok.encode('{"suitable_for_mcq": true, "suitable_for_free_form": false}', add_special_tokens=False) + eos
    mcq = tok.encode(f'{{"multiple_choice_question": "{QUESTION}", "multiple_choice_correct": "D"}}',
                     add_special_tokens=False) + eos
    sequences = []
    for doc in Document.objects.filter(corpus=corpus):  # both Challenger turns of one conversation per document
        first = challenger_prompt(tok, TrainerDocument(str(doc.pk), doc.title, doc.text), sec)
        sequences.append([(first, False), (choice, True), (continue_chat(tok, task_prompt(FormatChoice("mcq", None), sec.worked_example), True), False), (mcq, True)])
    task = SpiceTask("mcq", "mcq", QUESTION, "D")
    sequences.append(pair(chat(tok, None, reasoner_prompt(task)),
                          tok.encode("So \\boxed{D}", add_special_tokens=False) + eos))
    taught = teach(tiny_model_dir, tmp_path / "taught", sequences, target_loss=0.05)

    cfg = _taught_config(tiny_config, taught, temperature=0.3)
    run = _run_row(cfg, corpus, researcher)
    sink = ReviewerAtTheBoundary(run, reviewer, valid_only=True)
    train(cfg, sink=sink, documents=PgDocumentSource(corpus), run_dir=tmp_path / "run")
    sink.close()
    # the task as the gate showed it (gate.shuffle_options): the order drawn for the run's seed and the question,
    # the same in both steps, so the flag (matched by question text) still finds it
    shown = shuffle_options(QUESTION, "D", random.Random(f"{load_config(cfg).seed}:{question_key(QUESTION)}"))[0]
    assert shown != QUESTION
    step1 = Task.objects.get(run=run, key=sink.flagged)
    assert step1.valid and step1.question == shown
    again = Task.objects.filter(run=run, step=2, question=shown)
    assert again.exists()  # the taught model wrote the same question in step 2 ...
    for t in again:  # ... and the recipe, told at the step boundary, kept it out of training
        assert not t.valid and not t.data["reasoner_group"]
    # on the Solar System document as flagged; on Castle Drogo's it was never valid ("largest" is not in it), and
    # its refused question is on record too
    reasons = {t.data["invalid_reason"].split(":")[0] for t in again}
    assert "flagged by a reviewer" in reasons and reasons <= {"flagged by a reviewer", "task"}
    assert not Task.objects.filter(run=run, step=2, valid=True, data__reasoner_group=True).exists()


SCORE_CORPUS = [
    {"title": "Castle doctrine", "text": "The castle doctrine lets a person use force to defend their home against "
     "an intruder without a duty to retreat."},
    {"title": "Self-defense", "text": "Self-defense law differs between states; most require proportional force."},
]
EDITED = {"dimension_constraints": {"k": 2, "must_include": ["citation"], "weight_min": 0.2, "weight_max": 0.4},
          "process_constraints": {"require_gap_analysis": False, "require_verification": False,
                                  "citation_cross_check": True, "min_number_of_tool_call": 0},
          "notes": "Check that every citation supports its claim."}


class ResearcherAtTheBoundary(DjangoSink):
    """A real DjangoSink; after step 1 the run's owner saves a harness on the run page (the API)."""

    def __init__(self, run: Run, researcher):
        super().__init__(run)
        self.api = APIClient()
        self.api.force_authenticate(researcher)
        self.edited = False

    def control(self):
        self.flush()
        if not self.edited and self._max_step == 1:
            response = self.api.post(f"/api/v1/review/runs/{self.run_id}/harness/", {"harness": EDITED}, format="json")
            assert response.status_code == 201, response.json()
            self.edited = True
        return super().control()


def test_a_harness_edited_mid_run_drives_the_score_recipe_from_its_next_refresh(tiny_config, researcher, tmp_path):
    import json

    from apps.review import harness as run_harness
    from trainer.tools.bm25 import InMemoryRetriever
    from trainer.tools.corpus import JsonlDocumentSource

    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in SCORE_CORPUS))
    cfg = tiny_config("score", train={"steps": 3, "prompts_per_step": 2}, rollout={"max_new_tokens": 24, "group_size": 2},
                      score={"max_tool_calls": 2, "evaluator_max_turns": 2, "evaluator_max_new_tokens": 24,
                             "harness_every": 2, "max_tool_tokens": 32, "dimensions": 3, "meta_harness": "human"})
    run = Run.objects.create(method="score", model_name="tiny", config=cfg, owner=researcher, total_steps=3)
    run.mark_running("test")
    assert run_harness.current(run)["source"] == "config"
    sink = ResearcherAtTheBoundary(run, researcher)
    train(cfg, sink=sink, run_dir=tmp_path / "run", retriever=InMemoryRetriever.from_jsonl(path),
          documents=JsonlDocumentSource.from_jsonl(path))
    sink.close()
    now = run_harness.current(run)  # what the run page shows: the recipe's newest harness event
    assert now["source"] == "recipe" and now["harness"] == EDITED and now["driver"] == "human" and now["step"] == 2
    assert run_harness.pending(run) is None  # handed over
    step3 = Task.objects.filter(run=run, step=3)
    assert step3 and all(t.data["rubric"]["dimensions"][0]["name"] == "citation" for t in step3)
    assert all(t.data["rubric"]["dimensions"][0]["name"] != "citation" for t in Task.objects.filter(run=run, step=1))
    assert run.events.filter(kind="verdict", message__contains="takes effect at the next harness refresh").count() == 1


def test_a_rubric_edited_by_a_reviewer_is_what_the_scope_judge_grades_next(tiny_config, make_run, reviewer, tmp_path):
    """SCOPE's rubric-override path: a pool task whose rubric a reviewer edits through the API is
    graded against the edited text at the next grading (the Judge's own calls are recorded)."""
    import json

    from tests.trainer.test_scope import CORPUS, _task, scope_config
    from trainer.config import load_config
    from trainer.context import RecipeContext
    from trainer.engine import make_engine
    from trainer.methods.scope import Attempt as ScopeAttempt
    from trainer.methods.scope import Scope
    from trainer.methods.scope import Task as ScopeTask
    from trainer.models import load_policy
    from trainer.rollout.types import Trajectory
    from trainer.runner import make_generator
    from trainer.tools.bm25 import InMemoryRetriever
    from trainer.tools.corpus import JsonlDocumentSource

    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CORPUS))
    cfg = load_config(scope_config(tiny_config, path))
    run = make_run("scope", review={"tasks": 0.0, "rubrics": 1.0, "grades": 0.0, "suspicious": []})
    sink = DjangoSink(run)
    policy = load_policy(cfg)
    ctx = RecipeContext(config=cfg, policy=policy, generator=make_generator(cfg, policy),
                        engine=make_engine(cfg, policy), sink=sink, retriever=InMemoryRetriever.from_jsonl(path),
                        documents=JsonlDocumentSource.from_jsonl(path))
    scope = Scope(ctx)
    task = _task()  # key 1:c0.0, rubrics 1:c0.0:r0..r2 "Identifies point j."
    ctx.state["pool"] = [task.to_state()]
    sink.samples(1, [{"kind": "task", "key": task.key, "role": "challenger", "step": 1, "question": task.question,
                      "answer": "", "valid": True, "pass_rate": None, "data": {}}]
                 + [{"kind": "rubric", "key": r.key, "task_key": task.key, "step": 1, "text": r.text,
                     "priority": r.priority, "data": {}} for r in task.rubrics])
    ctx.verdicts.extend(sink.control().verdicts)  # nothing reviewed yet: the step boundary hands nothing

    api = APIClient()
    api.force_authenticate(reviewer)
    item = ReviewItem.objects.get(run_number=run.pk, kind="rubric", key="1:c0.0:r1")
    assert api.post(f"/api/v1/review/items/{item.pk}/", {"verdict": "approve", "edit": "Names the 2015 cause."},
                    format="json").status_code == 200
    ctx.verdicts.extend(sink.control().verdicts)  # what ctx.steps() does at the next step boundary
    scope.apply_verdicts()
    assert ctx.state["rubric_edits"] == {"1:c0.0:r1": "Names the 2015 cause."}

    asked = []
    grade_batch = scope.judge.grade_batch

    def recording(items, **kwargs):  # the real Judge call, with its inputs recorded
        asked.extend(rubric for _, _, rubric in items)
        return grade_batch(items, **kwargs)

    scope.judge.grade_batch = recording
    pooled = ScopeTask.from_state(ctx.state["pool"][0])
    answer = ScopeAttempt(Trajectory(prompt_ids=[1], final="The ship sank in a hurricane.",
                                     turns=[{"role": "assistant", "text": "x"}]))
    scope.judge_grades([pooled], {pooled.key: [answer]})
    assert asked == ["Identifies point 0.", "Names the 2015 cause.", "Identifies point 2."]
    assert answer.rubric_keys == ["1:c0.0:r0", "1:c0.0:r1", "1:c0.0:r2"] and len(answer.grades) == 3
