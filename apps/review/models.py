"""Human review: the queue items a run's samples become, their verdicts, and harness edits.

A ``ReviewItem`` is one task, rubric or grade that the sampling policy (``sampling.py``) sent
to review. It keeps a ``snapshot`` of what was judged and the run's id in ``run_number``, and
its foreign keys are SET_NULL, so verdicts (and who gave them, when) survive the deletion of
the run or its rows and still appear in exports. ``review()`` records a verdict;
``feedback.pending_verdicts`` hands it to the recipe at the next step boundary and sets
``applied_at``. Reviewing an item again clears ``applied_at`` so the new verdict is sent too.

A ``HarnessEdit`` is a SCORE evaluator harness a researcher wrote on the run page; it reaches
the recipe through ``Control.harness`` (``feedback.pending_harness``).
"""
from __future__ import annotations

import json

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from apps.runs.live import publish

EDIT_MAX_CHARS = 4000
TASK_EDIT_MAX_CHARS = 20000
BULK_MAX = 500
REASON_MAX_CHARS = 2000


class ReviewError(ValueError):
    """A verdict that cannot be recorded; the message says what to change and ``field`` names the form
    field it needs (``reason``, ``edit`` or ``None``), so the page can put the cursor there."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class Kind(models.TextChoices):
    TASK = "task"
    RUBRIC = "rubric"
    GRADE = "grade"


class ReviewStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    FLAGGED = "flagged"


VERDICT_STATUS = {"approve": ReviewStatus.APPROVED, "flag": ReviewStatus.FLAGGED}
STATUS_VERDICT = {v: k for k, v in VERDICT_STATUS.items()}


class ReviewItem(models.Model):
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="review_items")
    run_number = models.IntegerField(db_index=True, help_text="The run's id, kept after the run is deleted.")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    key = models.CharField(max_length=200, help_text="The sample key within the run.")
    step = models.IntegerField(default=0)
    task = models.ForeignKey("episodes.Task", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    rubric = models.ForeignKey("episodes.Rubric", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    grade = models.ForeignKey("episodes.Grade", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    task_key = models.CharField(max_length=200, blank=True, help_text="The task this item belongs to.")
    priority = models.CharField(max_length=16, blank=True, help_text="Rubric priority (rubrics, rubric grades).")
    judge_score = models.FloatField(null=True, blank=True, help_text="The judge's score (grades).")
    snapshot = models.JSONField(default=dict, blank=True, help_text="What was reviewed, as it was generated.")
    sampled = models.BooleanField(default=False, help_text="Picked by the run's review share.")
    suspicious = models.JSONField(default=list, blank=True, help_text="Why a detector sent it to review.")
    status = models.CharField(max_length=10, choices=ReviewStatus.choices, default=ReviewStatus.PENDING)
    reason = models.TextField(blank=True, help_text="The reviewer's reason (flags).")
    edit = models.TextField(blank=True, help_text="A rubric's replacement text.")  # a task's: JSON {question, answer}
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="review_items")
    reviewer_name = models.CharField(max_length=150, blank=True, help_text="Kept after the user is deleted.")
    reviewed_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True, help_text="When the recipe received the verdict.")
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["run_number", "kind", "key"], name="reviewitem_unique_key")]
        indexes = [models.Index(fields=["status", "id"]), models.Index(fields=["run_number", "kind", "status"])]

    def __str__(self):
        return f"{self.kind} {self.key} of run {self.run_number} ({self.status})"

    @property
    def verdict(self) -> str | None:
        return STATUS_VERDICT.get(self.status)

    @property
    def judge_pass(self) -> bool | None:
        """The judge's verdict on a grade: score >= 0.5 passes."""
        return None if self.judge_score is None else self.judge_score >= 0.5

    def review(self, user, verdict: str, edit: str | None = None, reason: str = "") -> None:
        """Record ``verdict`` (approve | flag) by ``user``; raises ReviewError for bad input."""
        verdict, edit, reason = _check(self, verdict, edit, reason)
        now = timezone.now()
        with transaction.atomic():
            ReviewItem.objects.filter(pk=self.pk).update(
                status=VERDICT_STATUS[verdict], edit=edit, reason=reason, reviewer=user,
                reviewer_name=getattr(user, "username", "") or "", reviewed_at=now, applied_at=None)
        self.refresh_from_db()
        if self.run_id:
            publish(self.run_id, {"type": "review", "event": "reviewed", "kind": self.kind, "key": self.key,
                                  "verdict": verdict, "edited": bool(edit), "reviewer": self.reviewer_name})

    @classmethod
    def review_many(cls, user, ids, verdict: str, reason: str = "") -> list[ReviewItem]:
        """One verdict (no edit) on several items, all or none; ReviewError names what to fix."""
        try:
            wanted = sorted({int(i) for i in ids})
        except (TypeError, ValueError):
            raise ReviewError("ids must be review item ids (integers)") from None
        if not wanted:
            raise ReviewError("select at least one item")
        if len(wanted) > BULK_MAX:
            raise ReviewError(f"{len(wanted)} items selected; review at most {BULK_MAX} at once")
        items = list(cls.objects.filter(pk__in=wanted))
        missing = sorted(set(wanted) - {i.pk for i in items})
        if missing:
            raise ReviewError(f"no review item with id {', '.join(map(str, missing[:10]))}")
        for item in items:
            _check(item, verdict, None, reason)
        with transaction.atomic():
            for item in items:
                item.review(user, verdict, None, reason)
        return items

    def as_verdict(self):
        from trainer.sink import Verdict

        return Verdict(kind=self.kind, key=self.key, verdict=self.verdict, edit=self.edit or None, reason=self.reason)

    def as_dict(self) -> dict:
        return {
            "id": self.pk, "run": self.run_number, "run_exists": self.run_id is not None, "kind": self.kind,
            "key": self.key, "step": self.step, "task_key": self.task_key, "priority": self.priority or None,
            "judge_score": self.judge_score, "status": self.status, "verdict": self.verdict,
            "sampled": self.sampled, "suspicious": self.suspicious, "reason": self.reason,
            "edit": task_edit_of(self) if self.kind == Kind.TASK and self.edit else (self.edit or None),
            "reviewer": self.reviewer_name or None, "reviewed_at": self.reviewed_at, "applied_at": self.applied_at,
            "created": self.created, "snapshot": self.snapshot,
        }


def _check(item: ReviewItem, verdict, edit, reason) -> tuple[str, str, str]:
    if verdict not in VERDICT_STATUS:
        raise ReviewError(f"verdict must be 'approve' or 'flag', got {verdict!r}")
    if item.kind == Kind.TASK and edit not in (None, ""):
        edit = _task_edit(item, edit)
    elif edit is not None and not isinstance(edit, str):
        raise ReviewError("edit must be the rubric's new text (a string)", "edit")
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        raise ReviewError("reason must be text", "reason")
    edit = (edit or "").strip()
    if edit and item.kind not in (Kind.RUBRIC, Kind.TASK):
        raise ReviewError(f"only tasks and rubrics can be edited; this item is a {item.kind} (drop 'edit' or flag it)",
                          "edit")
    if item.kind == Kind.RUBRIC and len(edit) > EDIT_MAX_CHARS:
        raise ReviewError(f"edit is {len(edit)} characters; a rubric is one sentence (at most {EDIT_MAX_CHARS})", "edit")
    reason = reason.strip()
    if verdict == "flag" and not reason and not edit:
        raise ReviewError("a flag needs a reason: say what is wrong (e.g. 'the gold answer is not in the document'), "
                          "so the researcher and the recipe's event log can act on it", "reason")
    if len(reason) > REASON_MAX_CHARS:
        raise ReviewError(f"reason is {len(reason)} characters; keep it under {REASON_MAX_CHARS}", "reason")
    return verdict, edit, reason


def _task_edit(item: ReviewItem, edit) -> str:
    """A task edit ({"question", "answer"}, as an object or its JSON text) -> its canonical JSON text."""
    if isinstance(edit, str):
        try:
            edit = json.loads(edit)
        except ValueError:
            raise ReviewError('a task edit is {"question": "...", "answer": "..."} (JSON); got text that is not JSON',
                              "edit") from None
    if not isinstance(edit, dict):
        raise ReviewError('a task edit is {"question": "...", "answer": "..."}', "edit")
    unknown = sorted(set(edit) - {"question", "answer"})
    if unknown:
        raise ReviewError(f"a task edit has only question and answer; drop {unknown}", "edit")
    out = {}
    for name in ("question", "answer"):
        value = edit.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ReviewError(f"the edited {name} must be text", "edit")
        if len(value) > TASK_EDIT_MAX_CHARS:
            raise ReviewError(f"the edited {name} is {len(value)} characters; at most {TASK_EDIT_MAX_CHARS}", "edit")
        out[name] = value.strip()
    if not out.get("question"):
        raise ReviewError("the edited question is empty: write the question as it should be (or flag the task)", "edit")
    snap = item.snapshot or {}
    if out.get("question") == (snap.get("question") or "").strip() and out.get("answer", snap.get("answer")) == snap.get("answer"):
        return ""  # nothing changed: a plain verdict
    return json.dumps(out, ensure_ascii=False)


def task_edit_of(item: ReviewItem) -> dict | None:
    """An edited task's {"question", "answer"}, else None."""
    if item.kind != Kind.TASK or not item.edit:
        return None
    try:
        value = json.loads(item.edit)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class HarnessEdit(models.Model):
    """A SCORE evaluator harness written by a person, handed to the recipe at the next step boundary."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="harness_edits")
    harness = models.JSONField()
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    author_name = models.CharField(max_length=150, blank=True)
    step = models.IntegerField(default=0, help_text="The run's step when the edit was made.")
    created = models.DateTimeField(default=timezone.now)
    applied_at = models.DateTimeField(null=True, blank=True, help_text="When the recipe received it.")

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self):
        return f"harness edit of run {self.run_id} by {self.author_name or '?'}"
