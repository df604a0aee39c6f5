"""Review verdicts and harness edits going back into training, at the next step boundary.

The run hooks (apps/runs/hooks.py, registered in apps/review/apps.py) bring two functions of this
module to the DjangoSink's ``control()`` at each step boundary (after each flush of samples the sink
also calls sampling.py's ``enqueue_for_review``: what enters the queue):

- ``pending_verdicts(run)`` -> [trainer.sink.Verdict]: reviewed items the recipe has not
  received yet, oldest verdict first, each claimed atomically (``applied_at`` set) and recorded
  as a ``RunEvent`` of kind ``verdict``. What the recipe does with them:
    task flagged   -> excluded from solver training from then on, invalid for the challenger's reward;
    rubric edited  -> ``Verdict.edit`` replaces the judge's rubric in later grading;
    grade flagged  -> recorded as a judge disagreement (see agreement.py); past updates stand.
  A verdict handed to an earlier job of the run (``applied_at`` before the run's current
  ``started_at``) is handed again after a resume: the checkpoint the new job restored may
  predate it, and applying a verdict twice changes nothing.
- ``pending_harness(run)`` -> dict | None: the newest SCORE harness a person saved on the run
  page and not yet handed over; the recipe applies it at its next harness refresh.
"""
from __future__ import annotations

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.review.models import HarnessEdit, ReviewItem, ReviewStatus
from apps.runs.live import publish
from apps.runs.models import Run, RunEvent

VERB = {"approve": "approved", "flag": "flagged"}
EFFECT = {
    ("task", "flag"): "excluded from solver training; invalid for the challenger",
    ("task", "approve"): "kept",
    ("rubric", "flag"): "the judge may drop it",
    ("rubric", "approve"): "kept",
    ("grade", "flag"): "recorded as a judge disagreement",
    ("grade", "approve"): "judge confirmed",
}


def pending_verdicts(run: Run) -> list:
    """Claim the run's verdicts the recipe has not received and return them as Verdicts."""
    started = Run.objects.filter(pk=run.pk).values_list("started_at", "current_step").first()
    if started is None:
        return []
    started_at, step = started
    waiting = Q(applied_at__isnull=True)
    if started_at is not None:
        waiting |= Q(applied_at__lt=started_at)
    now = timezone.now()
    with transaction.atomic():
        items = list(ReviewItem.objects.select_for_update(skip_locked=True)
                     .filter(waiting, run_id=run.pk).exclude(status=ReviewStatus.PENDING)
                     .order_by("reviewed_at", "id"))
        if not items:
            return []
        resent = [i for i in items if i.applied_at is not None]
        ReviewItem.objects.filter(pk__in=[i.pk for i in items]).update(applied_at=now)
        events = [_event(run.pk, step, i) for i in items if i.applied_at is None]
        if resent:
            events.append(RunEvent(run_id=run.pk, kind=RunEvent.Kind.VERDICT, step=step,
                                   message=f"{len(resent)} earlier verdict(s) handed again after the resume",
                                   data={"items": [i.pk for i in resent]}))
        RunEvent.objects.bulk_create(events)
    _publish(run.pk, step, items)
    return [i.as_verdict() for i in items]


def _event(run_id: int, step: int, item: ReviewItem) -> RunEvent:
    verdict = item.verdict
    what = f"{item.kind} {item.key} {VERB[verdict]}"
    if item.edit:
        what = f"rubric {item.key} edited"
    by = f" by {item.reviewer_name}" if item.reviewer_name else ""
    reason = f" ({item.reason})" if item.reason else ""
    effect = "the new text replaces the judge's rubric" if item.edit else EFFECT[(item.kind, verdict)]
    return RunEvent(run_id=run_id, kind=RunEvent.Kind.VERDICT, step=step,
                    message=f"review: {what}{by}{reason}: {effect}",
                    data={"item": item.pk, "kind": item.kind, "key": item.key, "verdict": verdict,
                          "edit": item.edit or None, "reason": item.reason, "reviewer": item.reviewer_name})


def _publish(run_id: int, step: int, items: list[ReviewItem]) -> None:
    publish(run_id, {"type": "review", "event": "applied", "step": step,
                     "verdicts": [{"kind": i.kind, "key": i.key, "verdict": i.verdict, "edited": bool(i.edit)}
                                  for i in items[:50]], "count": len(items)})


def pending_harness(run: Run) -> dict | None:
    """The newest unapplied harness edit of the run (older unapplied ones are superseded)."""
    now = timezone.now()
    with transaction.atomic():
        edits = list(HarnessEdit.objects.select_for_update(skip_locked=True)
                     .filter(run_id=run.pk, applied_at__isnull=True).order_by("-created", "-id"))
        if not edits:
            return None
        HarnessEdit.objects.filter(pk__in=[e.pk for e in edits]).update(applied_at=now)
        step = Run.objects.filter(pk=run.pk).values_list("current_step", flat=True).first() or 0
        newest = edits[0]
        RunEvent.objects.create(run_id=run.pk, kind=RunEvent.Kind.VERDICT, step=step,
                                message=f"harness edited by {newest.author_name or 'a person'} handed to the recipe; "
                                        "it takes effect at the next harness refresh",
                                data={"harness_edit": newest.pk, "harness": newest.harness})
    return newest.harness
