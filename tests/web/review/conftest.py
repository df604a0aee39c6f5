"""Review test fixtures: a running run owned by the researcher, sample records, and role groups
recreated for transactional tests (live_server flushes the tables after each such test)."""
from __future__ import annotations

import pytest

from apps.runs.models import Run


@pytest.fixture
def make_run(researcher):
    def build(method: str = "spice", review: dict | None = None, running: bool = True, **config) -> Run:
        cfg = {"method": method, "seed": 0, **config}
        if review is not None:
            cfg["review"] = review
        run = Run.objects.create(method=method, model_name="tiny", config=cfg, total_steps=10, owner=researcher)
        if running:
            run.mark_running("test-worker")
        return run

    return build


@pytest.fixture
def run(make_run):
    return make_run(review={"tasks": 1.0, "rubrics": 1.0, "grades": 1.0})


def records(step: int, n: int = 1, pass_rate: float = 0.5, score: float = 1.0) -> list[dict]:
    """n tasks of one step, each with a rubric, a solver attempt and a rubric grade."""
    out = []
    for i in range(n):
        t = f"{step}:t{i}"
        out += [
            {"kind": "task", "key": t, "role": "challenger", "step": step, "question": f"Question {step}-{i}: what year?",
             "answer": "1969", "valid": True, "pass_rate": pass_rate, "document_id": None, "format": "free_form",
             "data": {}},
            {"kind": "rubric", "key": f"{t}:r0", "task_key": t, "step": step, "text": "States the year 1969.",
             "priority": "critical", "data": {}},
            {"kind": "attempt", "key": f"{t}:a0", "task_key": t, "role": "solver", "step": step,
             "text": "It was 1969.", "reward": 1.0, "turns": [], "passages": [], "token_ids": [], "loss_mask": [],
             "data": {}},
            {"kind": "grade", "key": f"{t}:a0:g0", "attempt_key": f"{t}:a0", "rubric_key": f"{t}:r0", "step": step,
             "score": score, "judge_text": "PASS", "data": {}},
        ]
    return out


@pytest.fixture
def roles(db):
    """The role groups, recreated for transactional tests."""
    from importlib import import_module

    from django.apps import apps

    import_module("apps.accounts.migrations.0001_roles").create_roles(apps, None)
