"""What the run page shows about a sample, from what the recipes already store: why a task is
invalid, the corpus document it was written from, and the answer a verifier read from an attempt
next to the gold answer.

Recipes spell the reason differently (``Task.data``): SPICE's ``invalid_reason``, SSP's
``filter_reason`` (``"ok"`` for a kept task); a reviewer's flag writes ``invalid_reason`` too.
"""
from __future__ import annotations

from django.urls import reverse

from apps.corpora.models import Document
from trainer.method_configs import SECTIONS
from trainer.verify import compared_answer

REASON_KEYS = ("invalid_reason", "filter_reason")
EXCERPT = 1200  # characters of a source document shown with its task


def why_invalid(task) -> str:
    """The stored reason a task is invalid ("" for a valid task or none stored).

    >>> class T: valid, data = False, {"filter_reason": "too_short"}
    >>> why_invalid(T())
    'too_short'
    """
    if task.valid:
        return ""
    data = task.data if isinstance(task.data, dict) else {}
    return next((str(data[k]) for k in REASON_KEYS if data.get(k) not in (None, "", "ok")), "")


def source_document(run, task) -> dict | None:
    """The corpus document a task was written from: {"id", "title", "excerpt", "url"}; the stored
    title alone when the corpus (or the document) is gone; None when the task names none."""
    doc_id = (task.document_id or "").strip() if task is not None else ""
    if not doc_id:
        return None
    data = task.data if isinstance(task.data, dict) else {}
    found = None
    if run.corpus_id and doc_id.isdecimal():
        found = Document.objects.filter(corpus_id=run.corpus_id, pk=int(doc_id)).only("id", "title", "text").first()
    if found is None:
        return {"id": doc_id, "title": data.get("document_title") or "", "excerpt": "", "url": "",
                "missing": f"document {doc_id} is not in {'corpus ' + run.corpus_name if run.corpus_name else 'any corpus'} now"}
    text = found.text
    return {"id": doc_id, "title": found.title, "excerpt": text[:EXCERPT] + ("…" if len(text) > EXCERPT else ""),
            "url": reverse("corpora:document", args=[run.corpus_id, found.pk]), "missing": ""}


def answer_check(run, attempt, task) -> dict | None:
    """{"answer", "gold"}: what the verifier read from an attempt, next to the task's gold answer.

    GRPO: the answer ``trainer.methods.grpo.score`` compares (with the run's verifier); SPICE's
    Reasoner: its stored boxed answer. None for attempts that answer no gold (a Challenger's task,
    a report)."""
    if task is None or not task.answer:
        return None
    data = attempt.data if isinstance(attempt.data, dict) else {}
    if run.method in SECTIONS and SECTIONS[run.method].needs_prompt_set:  # the reward verifier read it
        return {"answer": compared_answer(attempt.text, task.answer, run.config.get("reward") or "math"),
                "gold": task.answer}
    if "boxed" in data:
        return {"answer": "" if data["boxed"] is None else str(data["boxed"]), "gold": task.answer}
    return None
