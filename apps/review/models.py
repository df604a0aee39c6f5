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

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from apps.runs.live import publish

EDIT_MAX_CHARS = 4000
REASON_MAX_CHARS = 2000


class ReviewError(ValueError):
    """A verdict that cannot be recorded; the message says what to change."""


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
    edit = models.TextField(blank=True, help_text="A rubric's replacement text.")
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

    def as_verdict(self):
        from trainer.sink import Verdict

        return Verdict(kind=self.kind, key=self.key, verdict=self.verdict, edit=self.edit or None, reason=self.reason)

    def as_dict(self) -> dict:
        return {
            "id": self.pk, "run": self.run_number, "run_exists": self.run_id is not None, "kind": self.kind,
            "key": self.key, "step": self.step, "task_key": self.task_key, "priority": self.priority or None,
            "judge_score": self.judge_score, "status": self.status, "verdict": self.verdict,
            "sampled": self.sampled, "suspicious": self.suspicious, "reason": self.reason, "edit": self.edit or None,
            "reviewer": self.reviewer_name or None, "reviewed_at": self.reviewed_at, "applied_at": self.applied_at,
            "created": self.created, "snapshot": self.snapshot,
        }


def _check(item: ReviewItem, verdict, edit, reason) -> tuple[str, str, str]:
    if verdict not in VERDICT_STATUS:
        raise ReviewError(f"verdict must be 'approve' or 'flag', got {verdict!r}")
    if edit is not None and not isinstance(edit, str):
        raise ReviewError("edit must be the rubric's new text (a string)")
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        raise ReviewError("reason must be text")
    edit = (edit or "").strip()
    if edit and item.kind != Kind.RUBRIC:
        raise ReviewError(f"only rubrics can be edited; this item is a {item.kind} (drop 'edit' or flag it)")
    if len(edit) > EDIT_MAX_CHARS:
        raise ReviewError(f"edit is {len(edit)} characters; a rubric is one sentence (at most {EDIT_MAX_CHARS})")
    reason = reason.strip()
    if verdict == "flag" and not reason and not edit:
        raise ReviewError("a flag needs a reason: say what is wrong (e.g. 'the gold answer is not in the document'), "
                          "so the researcher and the recipe's event log can act on it")
    if len(reason) > REASON_MAX_CHARS:
        raise ReviewError(f"reason is {len(reason)} characters; keep it under {REASON_MAX_CHARS}")
    return verdict, edit, reason


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
