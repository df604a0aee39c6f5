"""REST endpoints of review (mounted under /api/v1/ by apps/review/api_urls.py).

- ``GET review/queue/?run=&kind=&status=&page=&page_size=`` (any logged-in user; default status
  pending) -> ``{"count", "page", "pages", "next", "previous", "results": [item, ...]}``
- ``POST review/items/<id>/`` (reviewer role or admin) with ``verdict`` approve | flag, optional
  ``edit`` (a rubric's new text) and ``reason`` -> the item
- ``GET review/agreement/?run=&bucket=`` -> judge-human agreement (agreement.py)
- ``GET|POST review/runs/<id>/harness/`` -> a SCORE run's current harness / a person's edit
  (POST: the run's owner or an admin; body ``harness`` as an object or JSON text)
"""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from apps.accounts.roles import HasRole, can, can_control_run
from apps.api.errors import ERRORS, error_response
from apps.review import agreement
from apps.review import harness as run_harness
from apps.review.models import Kind, ReviewError, ReviewItem, ReviewStatus
from apps.runs.models import Run
from trainer.methods.harness import HarnessError

PAGE_SIZE = 20
MAX_PAGE_SIZE = 200

VERDICT_BODY = inline_serializer("ReviewVerdict", {
    "verdict": serializers.ChoiceField(["approve", "flag"]),
    "edit": serializers.CharField(required=False, help_text="A rubric's replacement text."),
    "reason": serializers.CharField(required=False, help_text="Why (for a flag)."),
})
HARNESS_BODY = inline_serializer("HarnessEdit", {
    "harness": serializers.JSONField(help_text="dimension_constraints, process_constraints and notes"),
})
QUEUE_PARAMS = [OpenApiParameter("run", int), OpenApiParameter("kind", str, enum=Kind.values),
                OpenApiParameter("status", str, enum=[*ReviewStatus.values, "all"]),
                OpenApiParameter("page", int), OpenApiParameter("page_size", int)]


def filtered(params) -> tuple[dict, object]:
    """(the filters as given, the queryset) for run / kind / status; ValidationError for bad values."""
    run = params.get("run") or ""
    kind = params.get("kind") or ""
    state = params.get("status") or ReviewStatus.PENDING
    qs = ReviewItem.objects.all()
    if run:
        qs = qs.filter(run_number=_int(run, "run"))
    if kind:
        if kind not in Kind.values:
            raise ValidationError({"kind": f"unknown kind {kind!r}; use one of {', '.join(Kind.values)}"})
        qs = qs.filter(kind=kind)
    if state != "all":
        if state not in ReviewStatus.values:
            raise ValidationError({"status": f"unknown status {state!r}; use one of "
                                             f"{', '.join(ReviewStatus.values)} or all"})
        qs = qs.filter(status=state)
    return {"run": run, "kind": kind, "status": state}, qs.order_by("id")


# Response schemas (OpenAPI): ReviewItem.as_dict, agreement.run_agreement, the harness view.
_ITEM_FIELDS = {
    "id": serializers.IntegerField(), "run": serializers.IntegerField(), "run_exists": serializers.BooleanField(),
    "kind": serializers.ChoiceField(choices=["task", "rubric", "grade"]), "key": serializers.CharField(),
    "step": serializers.IntegerField(), "task_key": serializers.CharField(),
    "priority": serializers.CharField(allow_null=True), "judge_score": serializers.FloatField(allow_null=True),
    "status": serializers.ChoiceField(choices=["pending", "approved", "flagged"]),
    "verdict": serializers.CharField(allow_null=True), "sampled": serializers.BooleanField(),
    "suspicious": serializers.ListField(child=serializers.CharField()), "reason": serializers.CharField(),
    "edit": serializers.CharField(allow_null=True), "reviewer": serializers.CharField(allow_null=True),
    "reviewed_at": serializers.DateTimeField(allow_null=True), "applied_at": serializers.DateTimeField(allow_null=True),
    "created": serializers.DateTimeField(),
    "snapshot": serializers.DictField(help_text="the sample as it was queued (question, answer, rubric, grade ...)")}
ITEM = inline_serializer("ReviewItem", _ITEM_FIELDS)
QUEUE_PAGE = inline_serializer("ReviewQueuePage", {
    "count": serializers.IntegerField(), "page": serializers.IntegerField(), "pages": serializers.IntegerField(),
    "next": serializers.URLField(allow_null=True), "previous": serializers.URLField(allow_null=True),
    "results": inline_serializer("ReviewQueueItem", _ITEM_FIELDS, many=True)})
_KAPPA = {"n": serializers.IntegerField(), "agreement": serializers.FloatField(allow_null=True),
          "kappa": serializers.FloatField(allow_null=True), "judge_pass_rate": serializers.FloatField(allow_null=True),
          "human_pass_rate": serializers.FloatField(allow_null=True),
          "table": serializers.DictField(child=serializers.IntegerField())}
AGREEMENT = inline_serializer("ReviewAgreement", {
    "run": serializers.IntegerField(), "overall": inline_serializer("Kappa", _KAPPA),
    "by_priority": serializers.DictField(help_text="priority (critical, important, bonus, overall) -> the same "
                                         "fields as overall"),
    "bucket": serializers.IntegerField(),
    "trend": inline_serializer("KappaBucket", {"from_step": serializers.IntegerField(), "to_step": serializers.IntegerField(),
                                               **_KAPPA}, many=True)})
HARNESS = inline_serializer("ScoreHarness", {
    "harness": serializers.DictField(), "version": serializers.IntegerField(allow_null=True),
    "driver": serializers.CharField(allow_null=True), "step": serializers.IntegerField(allow_null=True),
    "source": serializers.ChoiceField(choices=["recipe", "config"]),
    "pool": serializers.ListField(child=serializers.CharField(), help_text="dimensions a harness may use"),
    "pending_edit": serializers.DictField(allow_null=True, help_text="a person's edit the recipe has not taken yet")})


@extend_schema(summary="The review queue, filtered and paginated", parameters=QUEUE_PARAMS, responses={200: QUEUE_PAGE, **ERRORS})
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def queue(request):
    _, qs = filtered(request.query_params)
    size = _int(request.query_params.get("page_size") or PAGE_SIZE, "page_size", 1, MAX_PAGE_SIZE)
    page = _int(request.query_params.get("page") or 1, "page", 1)
    count = qs.count()
    pages = max(1, -(-count // size))
    items = qs[(page - 1) * size: page * size]
    base = request.build_absolute_uri(request.path)
    query = request.query_params.copy()

    def link(n):
        query["page"] = n
        return f"{base}?{query.urlencode()}"

    return Response({"count": count, "page": page, "pages": pages,
                     "next": link(page + 1) if page < pages else None,
                     "previous": link(page - 1) if 1 < page <= pages else None,
                     "results": [i.as_dict() for i in items]})


@extend_schema(summary="Review one item: approve or flag (a flag needs a reason), optionally edit a rubric",
               request=VERDICT_BODY, responses={200: ITEM, **ERRORS})
@api_view(["GET", "POST"])
@permission_classes([IsAuthenticated])
def item(request, item_id: int):
    found = get_object_or_404(ReviewItem, pk=item_id)
    if request.method == "GET":
        return Response(found.as_dict())
    if not can(request.user, "review_items"):
        return error_response(HasRole("review_items").message, status.HTTP_403_FORBIDDEN)
    body = request.data if isinstance(request.data, dict) else None
    if body is None:
        return error_response('send a JSON object such as {"verdict": "flag", "reason": "answer is wrong"}')
    unknown = sorted(set(body) - {"verdict", "edit", "reason"})
    if unknown:
        return error_response(f"unknown field(s) {unknown}; send verdict (approve | flag), edit and reason")
    try:
        found.review(request.user, body.get("verdict"), body.get("edit"), body.get("reason") or "")
    except ReviewError as exc:
        return error_response(str(exc))
    return Response(found.as_dict())


@extend_schema(summary="Judge-human agreement of a run (Cohen's kappa), overall, per priority, over steps",
               parameters=[OpenApiParameter("run", int, required=True), OpenApiParameter("bucket", int)],
               responses={200: AGREEMENT, **ERRORS})
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def agreement_view(request):
    raw = request.query_params.get("run")
    if not raw:
        return error_response("run is required: GET /api/v1/review/agreement/?run=<run id>")
    bucket = request.query_params.get("bucket")
    return Response(agreement.run_agreement(_int(raw, "run"), _int(bucket, "bucket", 1) if bucket else None))


@extend_schema(summary="A SCORE run's evaluator harness; POST a person's edit", request=HARNESS_BODY,
               responses={200: HARNESS, 201: HARNESS, **ERRORS})
@api_view(["GET", "POST"])
@permission_classes([IsAuthenticated])
def harness_view(request, run_id: int):
    run = get_object_or_404(Run, pk=run_id)
    if not run_harness.has_harness(run):
        return error_response(run_harness.no_harness(run), status.HTTP_404_NOT_FOUND)
    if request.method == "POST":
        if not can_control_run(request.user, run):
            return error_response("Only the run's owner (researcher role) or an admin can edit its harness.",
                                  status.HTTP_403_FORBIDDEN)
        body = request.data if isinstance(request.data, dict) else {}
        if "harness" not in body:
            return error_response('send {"harness": {...}} with dimension_constraints, process_constraints and notes')
        try:
            run_harness.submit(run, request.user, body["harness"])
        except HarnessError as exc:
            return error_response(str(exc), problems=exc.problems)
    pending = run_harness.pending(run)
    return Response({**run_harness.current(run), "pool": run_harness.pool(run),
                     "pending_edit": pending.harness if pending else None},
                    status=status.HTTP_201_CREATED if request.method == "POST" else status.HTTP_200_OK)


def _int(raw, name: str, low: int | None = None, high: int | None = None) -> int:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ValidationError({name: f"must be an integer, got {raw!r}"}) from None
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        raise ValidationError({name: f"must be {bounds}, got {value}"})
    return value
