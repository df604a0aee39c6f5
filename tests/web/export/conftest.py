"""Fixtures of the export tests: a run with samples written through the real DjangoSink, and the
run tests' private Redis db and role groups (tests/web/runs/conftest.py; Redis db 13 unless
SELFPLAY_RUNS_TEST_REDIS_DB says otherwise, as for the evals tests)."""
from __future__ import annotations

import json
import os

from selfplay_web.test_settings import JOBS_TEST_REDIS_DB  # noqa: E402  (13 outside pytest-xdist)

os.environ.setdefault("SELFPLAY_RUNS_TEST_REDIS_DB", str(JOBS_TEST_REDIS_DB))

import pytest  # noqa: E402

from tests.web.runs.conftest import private_redis, roles  # noqa: E402,F401  (fixtures)


def records(step: int, n_tasks: int = 2, answers: int = 3) -> list[dict]:
    """SPICE-like sample records of one step: tasks, challenger + reasoner attempts, rubrics, grades."""
    out = []
    for t in range(n_tasks):
        key = f"{step}:{t}"
        out.append({"kind": "task", "key": key, "role": "challenger", "step": step, "question": f"Q{step}.{t}?",
                    "answer": str(t), "valid": t % 2 == 0, "pass_rate": None if t else 0.5, "document_id": "d1",
                    "format": "free_form", "data": {"answer_type": "integer", "iteration": step // 2}})
        out.append({"kind": "attempt", "key": f"{key}:c", "task_key": key, "role": "challenger", "step": step,
                    "text": "challenger text", "reward": 0.8, "turns": [{"role": "assistant", "text": "a"}],
                    "passages": [], "token_ids": [5, 6], "loss_mask": [1, 1], "data": {"kept": True}})
        for j in range(answers):
            out.append({"kind": "attempt", "key": f"{key}:r{j}", "task_key": key, "role": "reasoner", "step": step,
                        "text": f"answer {j}", "reward": 1 if j == 0 else 0,
                        "turns": [{"role": "assistant", "text": f"<search>q{j}</search>"},
                                  {"role": "tool", "text": "<information>x</information>"}],
                        "passages": [{"document_id": "d1", "chunk_id": "c1", "title": "T", "text": "p", "score": 1}]
                        if j == 1 else [],
                        "token_ids": list(range(j + 1)), "loss_mask": [1] * (j + 1), "data": {"boxed": str(j)}})
        out.append({"kind": "rubric", "key": f"{key}:k", "task_key": key, "step": step, "text": "Mentions x",
                    "priority": "critical", "data": {}})
        out.append({"kind": "grade", "key": f"{key}:g", "attempt_key": f"{key}:r0", "rubric_key": f"{key}:k",
                    "step": step, "score": 1, "judge_text": "<score>1</score>", "data": {}})
    return out


NO_REVIEW = {"method": "spice", "review": {"tasks": 0, "rubrics": 0, "grades": 0, "suspicious": []}}


def jsonl_view(rows: list[dict], kind: str) -> list[dict]:
    """Parquet rows as the JSONL of the same export has them: its JSON columns (``data``, a verdict's
    ``snapshot`` ...) are JSON text in Parquet and objects in JSONL."""
    from apps.export.stream import columns

    json_columns = {name for name, code in columns(kind) if code == "json"}
    return [{k: json.loads(v) if k in json_columns else v for k, v in row.items()} for row in rows]


@pytest.fixture
def filled_run(db, researcher):
    """A SPICE run with 3 steps of samples written by the real DjangoSink (review sampling off), a
    flagged task (1:0), an approved task (2:0) and a pending rubric (3:1:k)."""
    from apps.review.models import Kind, ReviewItem
    from apps.runs.models import Run
    from apps.runs.sink import DjangoSink

    run = Run.objects.create(method="spice", model_name="tiny", config=NO_REVIEW, owner=researcher, status="running",
                             total_steps=3)
    sink = DjangoSink(run)
    for step in (1, 2, 3):
        sink.samples(step, records(step))
    sink.close()
    for key, verdict in (("1:0", "flag"), ("2:0", "approve")):
        item = ReviewItem.objects.create(run=run, run_number=run.pk, kind=Kind.TASK, key=key, task_key=key)
        item.review(researcher, verdict, reason="gold is wrong" if verdict == "flag" else "")
    ReviewItem.objects.create(run=run, run_number=run.pk, kind=Kind.RUBRIC, key="3:1:k", task_key="3:1")
    return run
