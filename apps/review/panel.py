"""The run page's review panel: applied verdicts, judge-human agreement with its trend, and for
SCORE runs the current evaluator harness with an edit form (``templates/review/_run_panel*.html``)."""
from __future__ import annotations

from django.db.models import Count

from apps.accounts.roles import can, can_control_run
from apps.review import agreement
from apps.review import harness as run_harness
from apps.review.models import ReviewItem, ReviewStatus

RECENT_VERDICTS = 15


def verdicts_context(request, run) -> dict:
    items = ReviewItem.objects.filter(run_number=run.pk)
    counts = dict(items.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    reviewed = items.exclude(status=ReviewStatus.PENDING)
    return {
        "run": run,
        "pending": counts.get(ReviewStatus.PENDING, 0),
        "reviewed": sum(n for s, n in counts.items() if s != ReviewStatus.PENDING),
        "applied": reviewed.filter(applied_at__isnull=False).count(),
        "recent": reviewed.order_by("-reviewed_at", "-id")[:RECENT_VERDICTS],
        "agreement": agreement.run_agreement(run.pk),
        "can_review": can(request.user, "review_items"),
    }


def harness_context(request, run, harness_text: str | None = None, harness_error: str = "",
                    harness_saved: bool = False) -> dict:
    current = run_harness.current(run)
    pending = run_harness.pending(run)
    shown = pending.harness if pending else current["harness"]
    return {
        "run": run, "harness": current, "harness_json": run_harness.pretty(current["harness"]),
        "pending_edit": pending, "pending_json": run_harness.pretty(pending.harness) if pending else "",
        "harness_text": harness_text if harness_text is not None else run_harness.pretty(shown),
        "harness_error": harness_error, "harness_saved": harness_saved, "harness_pool": run_harness.pool(run),
        "can_edit_harness": can_control_run(request.user, run),
    }


def panel_context(request, run, **harness_kwargs) -> dict:
    context = verdicts_context(request, run)
    context["has_harness"] = run_harness.has_harness(run)
    if context["has_harness"]:
        context.update(harness_context(request, run, **harness_kwargs))
    return context
