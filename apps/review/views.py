"""Review pages: the queue (one item at a time, keyboard driven), the verdict form, and the run
page's review panel with the SCORE harness editor.

- ``GET /review/?run=&kind=&status=&after=&item=``: the next item matching the filters after
  ``after`` (wrapping around), or ``item`` itself. Reviewer role or admin.
- ``POST /review/items/<id>/``: verdict (approve | flag), edit, reason -> back to the queue.
- ``GET /review/runs/<id>/panel/``: the verdicts + agreement part of the run page's panel (htmx polls it).
- ``POST /review/runs/<id>/harness/``: a SCORE harness edit (the run's owner or an admin).
"""
from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from rest_framework.exceptions import ValidationError

from apps.accounts.roles import can_control_run, role_required, run_refusal
from apps.review import harness as run_harness
from apps.review.api import FILTER_NAMES, VALID_VALUES, after, annotated, filtered
from apps.review.context import item_context
from apps.review.models import Kind, ReviewError, ReviewItem, ReviewStatus, task_edit_of
from apps.review.panel import harness_context, verdicts_context
from apps.runs.models import Run
from trainer.config import METHOD_NAMES
from trainer.methods.harness import HarnessError

FILTERS = FILTER_NAMES
FOCUSABLE = ("reason", "edit", "bulk-reason")
SELECTION = 50  # items listed for bulk verdicts  # form fields a refused verdict can send the cursor to


@role_required("review_items")
def index(request):
    try:
        filters, qs = filtered(request.GET)
    except ValidationError as exc:
        messages.error(request, "; ".join(f"{k}: {v[0] if isinstance(v, list) else v}" for k, v in exc.detail.items()))
        return redirect("review:index")
    item = _current(request, qs)
    query = urlencode({k: v for k, v in filters.items() if v})
    context = {
        "filters": filters, "query": query, "item": item, "total": qs.count(),
        "kinds": Kind.values, "statuses": [*ReviewStatus.values, "all"],
        "runs": ReviewItem.objects.values("run_number").annotate(n=Count("id")).order_by("-run_number")[:100],
        "methods": METHOD_NAMES, "validities": VALID_VALUES,
        "roles": sorted({r for r in annotated().values_list("x_role", flat=True).distinct()[:50] if r}),
    }
    pending = dict(ReviewItem.objects.filter(status=ReviewStatus.PENDING).values_list("kind")
                   .annotate(n=Count("id")).values_list("kind", "n"))
    context["pending_counts"] = [(k, pending.get(k, 0)) for k in Kind.values]
    context["focus"] = request.GET.get("focus") if request.GET.get("focus") in FOCUSABLE else ""
    context["bulk_open"] = context["focus"] == "bulk-reason"
    context["selection"] = list(qs[:SELECTION]) if context["total"] else []
    for i in context["selection"]:
        snap = i.snapshot or {}
        i.summary = snap.get("question") or snap.get("text") or snap.get("rubric_text") or ""
    if item is not None:
        context.update(item_context(item))
        context["task_edit"] = task_edit_of(item)
        context["next_url"] = "?" + urlencode({**{k: v for k, v in filters.items() if v}, "after": item.pk})
    return render(request, "review/index.html", context)


def _current(request, qs) -> ReviewItem | None:
    wanted = request.GET.get("item")
    if wanted and wanted.isdecimal():
        found = ReviewItem.objects.select_related("run", "task", "rubric", "grade").filter(pk=int(wanted)).first()
        if found is not None:
            return found
    qs = qs.select_related("run", "task", "rubric", "grade")
    previous = request.GET.get("after")
    if previous and previous.isdecimal():
        seen = ReviewItem.objects.filter(pk=int(previous)).first()
        if seen is not None:
            return after(qs, seen).first() or qs.first()  # past the end: wrap around
    return qs.first()


@require_POST
@role_required("review_items")
def review_item(request, item_id: int):
    item = get_object_or_404(ReviewItem, pk=item_id)
    back = {k: request.POST.get(k) for k in FILTERS if request.POST.get(k)}
    edit = None
    if request.POST.get("with_edit"):
        if item.kind == Kind.TASK:
            edit = {"question": request.POST.get("edit_question", ""), "answer": request.POST.get("edit_answer", "")}
        else:
            edit = request.POST.get("edit")
    try:
        item.review(request.user, request.POST.get("verdict"), edit, request.POST.get("reason", ""))
    except ReviewError as exc:
        messages.error(request, f"Not saved: {exc}.")
        focus = {"focus": exc.field} if exc.field else {}  # the page puts the cursor in the field it needs
        return redirect(f"/review/?{urlencode({**back, 'item': item.pk, **focus})}")
    done = "edited" if item.edit else item.status
    messages.success(request, f"{item.kind.capitalize()} {item.key} of run {item.run_number} {done}.")
    return redirect(f"/review/?{urlencode({**back, 'after': item.pk})}")


@require_POST
@role_required("review_items")
def review_bulk(request):
    """One verdict for the items ticked in the queue's list (a flag's reason goes to each)."""
    back = {k: request.POST.get(k) for k in FILTERS if request.POST.get(k)}
    ids = request.POST.getlist("ids")
    try:
        items = ReviewItem.review_many(request.user, ids, request.POST.get("verdict"), request.POST.get("reason", ""))
    except ReviewError as exc:
        messages.error(request, f"Not saved: {exc}.")
        focus = {"focus": "bulk-reason"} if exc.field == "reason" else {}
        return redirect(f"/review/?{urlencode({**back, **focus})}")
    verdict = items[0].status
    messages.success(request, f"{len(items)} item{'s' if len(items) != 1 else ''} {verdict}.")
    return redirect(f"/review/?{urlencode(back)}")


def run_panel(request, run_id: int):
    run = get_object_or_404(Run, pk=run_id)
    return render(request, "review/_verdicts.html", verdicts_context(request, run))


@require_POST
def harness_edit(request, run_id: int):
    run = get_object_or_404(Run, pk=run_id)
    if not can_control_run(request.user, run):
        raise PermissionDenied(run_refusal(request.user, run, "edit its harness"))
    text = request.POST.get("harness", "")
    error = ""
    try:
        run_harness.submit(run, request.user, text)
    except HarnessError as exc:
        error = str(exc)
    if request.headers.get("HX-Request"):
        context = harness_context(request, run, harness_text=text if error else None, harness_error=error,
                                  harness_saved=not error)
        return render(request, "review/_harness.html", context)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, "Harness saved; the recipe takes it at its next harness refresh.")
    return redirect("runs:detail", run_id=run.pk)
