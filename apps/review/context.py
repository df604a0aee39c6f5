"""Everything a reviewer needs to judge one item, read from the live rows when they still exist
and from the item's snapshot when they do not (a deleted run keeps its verdicts, not its rows).

- the source document (the corpus Document the task was written from) or the passages the
  attempts retrieved;
- the task (question, gold answer, pass rate, validity and, for an invalid task, the stored reason why);
- the task's rubric list (the item's own rubric marked);
- an attempt with its grade(s): the graded attempt for a grade item, else a solver attempt;
- for a task item, every other solver answer too (SPICE's Reasoner answers a task several times:
  a reviewer judging the task sees all of them, with their rewards).

All of it is model-generated text: templates show it escaped, never marked safe.
"""
from __future__ import annotations

from apps.corpora.models import Document
from apps.episodes.models import Attempt, Grade, Rubric, Task
from apps.review.models import Kind, ReviewItem
from apps.runs.samples import REASON_KEYS

DOCUMENT_CHARS = 8000
PASSAGES = 6


def item_context(item: ReviewItem) -> dict:
    snap = item.snapshot or {}
    task = _task(item)
    attempt = _attempt(item, task)
    return {
        "task": _task_view(item, task, snap),
        "rubrics": _rubrics(item, task, snap),
        "attempt": _attempt_view(attempt, item, snap),
        "other_attempts": _other_attempts(item, task, attempt),
        "document": _document(item, task, snap),
        "passages": _passages(attempt, task),
    }


def _task(item: ReviewItem) -> Task | None:
    if item.task_id:
        return item.task
    if item.run_id and item.task_key:
        return Task.objects.filter(run_id=item.run_id, key=item.task_key).first()
    return None


def _task_view(item: ReviewItem, task: Task | None, snap: dict) -> dict:
    if task is not None:
        view = {"key": task.key, "question": task.question, "answer": task.answer, "valid": task.valid,
                "pass_rate": task.pass_rate, "role": task.role, "format": task.format, "step": task.step,
                "data": task.data, "live": True}
    else:
        view = {"key": item.task_key, "question": snap.get("question", ""), "answer": snap.get("answer", ""),
                "valid": snap.get("valid", True), "pass_rate": snap.get("pass_rate"), "role": snap.get("role", ""),
                "format": snap.get("format", ""), "step": item.step, "data": snap.get("data") or {}, "live": False}
    data = view["data"] if isinstance(view["data"], dict) else {}
    # why the gate or the parser refused it, as the run page's samples say ("" for a valid task or none stored)
    view["why"] = "" if view["valid"] else next(
        (str(data[k]) for k in REASON_KEYS if data.get(k) not in (None, "", "ok")), "")
    return view


def _rubrics(item: ReviewItem, task: Task | None, snap: dict) -> list[dict]:
    own = item.key if item.kind == Kind.RUBRIC else snap.get("rubric_key") or ""
    rows = list(Rubric.objects.filter(run_id=task.run_id, task_key=task.key).order_by("key")) if task else []
    out = [{"key": r.key, "text": r.text, "priority": r.priority, "mine": r.key == own} for r in rows]
    if not any(r["mine"] for r in out) and own:
        text = snap.get("text") if item.kind == Kind.RUBRIC else snap.get("rubric_text")
        out.insert(0, {"key": own, "text": text or "", "priority": item.priority, "mine": True})
    return out


def _attempt(item: ReviewItem, task: Task | None) -> Attempt | None:
    if item.kind == Kind.GRADE:
        if item.grade_id and item.grade.attempt_id:
            return item.grade.attempt
        key = (item.snapshot or {}).get("attempt_key")
        return Attempt.objects.filter(run_id=item.run_id, key=key).first() if item.run_id and key else None
    if task is None:
        return None
    attempts = Attempt.objects.filter(run_id=task.run_id, task_key=task.key).order_by("key")
    solver = attempts.exclude(role=task.role) if task.role else attempts
    return solver.filter(grades__isnull=False).first() or solver.first() or attempts.first()


OTHER_ATTEMPTS = 16


def _other_attempts(item: ReviewItem, task: Task | None, shown: Attempt | None) -> list[dict]:
    """The task's other solver answers (a task item only: a grade is about its own attempt)."""
    if item.kind != Kind.TASK or task is None:
        return []
    attempts = Attempt.objects.filter(run_id=task.run_id, task_key=task.key).order_by("key")
    if task.role:
        attempts = attempts.exclude(role=task.role)
    if shown is not None:
        attempts = attempts.exclude(pk=shown.pk)
    return [{"key": a.key, "role": a.role, "text": a.text, "reward": a.reward}
            for a in attempts.only("key", "role", "text", "reward")[:OTHER_ATTEMPTS]]


def _attempt_view(attempt: Attempt | None, item: ReviewItem, snap: dict) -> dict | None:
    if attempt is not None:
        grades = list(Grade.objects.filter(attempt=attempt).select_related("rubric").order_by("key")[:20])
        return {"key": attempt.key, "role": attempt.role, "text": attempt.text, "reward": attempt.reward,
                "turns": attempt.turns if len(attempt.turns or []) > 1 else [],
                "grades": [{"key": g.key, "score": g.score, "judge_text": g.judge_text,
                            "rubric": g.rubric.text if g.rubric else "", "mine": g.key == item.key} for g in grades]}
    if item.kind == Kind.GRADE:
        return {"key": snap.get("attempt_key", ""), "role": "", "text": snap.get("attempt_text", ""),
                "reward": snap.get("attempt_reward"), "turns": [],
                "grades": [{"key": item.key, "score": snap.get("score"), "judge_text": snap.get("judge_text", ""),
                            "rubric": snap.get("rubric_text", ""), "mine": True}]}
    return None


def _document(item: ReviewItem, task: Task | None, snap: dict) -> dict | None:
    doc_id = task.document_id if task is not None else (snap.get("document_id") or "")
    if not str(doc_id).isdecimal() or item.run is None or not item.run.corpus_id:
        return None
    doc = Document.objects.filter(pk=int(doc_id), corpus_id=item.run.corpus_id).only("id", "title", "text").first()
    if doc is None:
        return None
    cut = len(doc.text) > DOCUMENT_CHARS
    return {"id": doc.pk, "title": doc.title, "text": doc.text[:DOCUMENT_CHARS], "cut": cut}


def _passages(attempt: Attempt | None, task: Task | None) -> list[dict]:
    found = list(attempt.passages or []) if attempt is not None else []
    if not found and task is not None:
        for a in Attempt.objects.filter(run_id=task.run_id, task_key=task.key).exclude(passages=[]).only("passages")[:3]:
            found += a.passages
    seen, out = set(), []
    for p in found:
        if not isinstance(p, dict):
            continue
        ident = (p.get("document_id"), p.get("chunk_id"), p.get("text", "")[:80])
        if ident not in seen:
            seen.add(ident)
            out.append({"title": p.get("title", ""), "text": str(p.get("text", ""))[:2000],
                        "document_id": p.get("document_id")})
    return out[:PASSAGES]
