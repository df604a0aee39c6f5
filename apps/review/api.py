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

from django.db.models import BooleanField, Case, F, FloatField, Q, TextField, Value, When
from django.db.models.fields.json import KT, KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Coalesce, NullIf
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from apps.accounts.roles import HasRole, can, can_control_run, run_refusal
from apps.api.errors import ERRORS, error_response
from apps.review import agreement
from apps.review.collapse import COLLAPSE_REASON
from apps.review import harness as run_harness
from apps.review.models import Kind, ReviewError, ReviewItem, ReviewStatus
from apps.runs.models import Run
from trainer.config import METHOD_NAMES
from trainer.methods.harness import HarnessError

PAGE_SIZE = 20
MAX_PAGE_SIZE = 200

VERDICT_BODY = inline_serializer("ReviewVerdict", {
    "verdict": serializers.ChoiceField(["approve", "flag"]),
    "edit": serializers.JSONField(required=False, help_text="A rubric's replacement text, or a task's "
                                  '{"question": ..., "answer": ...} (the recipe receives it as the task\'s text)'),
    "reason": serializers.CharField(required=False, help_text="Why (for a flag)."),
})
HARNESS_BODY = inline_serializer("HarnessEdit", {
    "harness": serializers.JSONField(help_text="dimension_constraints, process_constraints and notes"),
})
QUEUE_PARAMS = [OpenApiParameter("run", int), OpenApiParameter("kind", str, enum=Kind.values),
                OpenApiParameter("status", str, enum=[*ReviewStatus.values, "all"]),
                OpenApiParameter("valid", str, enum=["valid", "invalid"],
                                 description="The task's validity (its gate verdict); both when left out"),
                OpenApiParameter("role", str, description="The role that wrote the task (challenger, proposer ...)"),
                OpenApiParameter("method", str, description="The run's method (spice, ssp ...)"),
                OpenApiParameter("page", int), OpenApiParameter("page_size", int)]


FILTER_NAMES = ("run", "kind", "status", "valid", "role", "method")
VALID_VALUES = ("valid", "invalid")


def _number(text):
    """A JSON value's text as a float when it is a number, else NULL (a Cast of other text would fail)."""
    return Case(When(**{f"{text}__regex": r"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$"},
                     then=Cast(F(text), FloatField())), default=Value(None), output_field=FloatField())


def annotated(qs=None):
    """Review items with ``x_valid`` and ``x_role``: their task's validity and role (from the live task
    row, else from the item's snapshot; an item whose task is unknown counts as valid); and ``x_front``: the
    item is in a collapsed task family (apps/review/collapse.py: flagged by the watchdog's collapse rule, or its
    task's template cluster above its run's ``watchdog.collapse_share``, default 0.5)."""
    qs = ReviewItem.objects.all() if qs is None else qs
    qs = qs.annotate(
        x_valid=Coalesce(F("task__valid"), Cast(KT("snapshot__valid"), BooleanField()), Value(True),
                         output_field=BooleanField()),
        x_role=Coalesce(NullIf(F("task__role"), Value("")), KT("snapshot__role"), Value(""), output_field=TextField()),
        x_share_text=Coalesce(KeyTextTransform("cluster_share", "task__data"),
                              KeyTextTransform("cluster_share", KeyTransform("data", "snapshot"))),
        x_limit_text=KeyTextTransform("collapse_share", KeyTransform("watchdog", "run__config")))
    qs = qs.annotate(x_share=_number("x_share_text"), x_limit=Coalesce(_number("x_limit_text"), Value(0.5)))
    return qs.annotate(x_front=Case(
        When(Q(suspicious__contains=[COLLAPSE_REASON]) | Q(x_share__gt=F("x_limit")), then=Value(True)),
        default=Value(False), output_field=BooleanField()))


def filtered(params) -> tuple[dict, object]:
    """(the filters as given, the queryset: a collapsed family's tasks first (``x_front``), then valid tasks, then
    oldest first) for run / kind / status / valid / role / method; ValidationError names a bad value."""
    run = params.get("run") or ""
    kind = params.get("kind") or ""
    state = params.get("status") or ReviewStatus.PENDING
    valid = params.get("valid") or ""
    role = (params.get("role") or "").strip()
    method = (params.get("method") or "").strip()
    qs = annotated()
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
    if valid:
        if valid not in VALID_VALUES:
            raise ValidationError({"valid": f"unknown value {valid!r}; use valid or invalid (or leave it out for both)"})
        qs = qs.filter(x_valid=valid == "valid")
    if role:
        qs = qs.filter(x_role=role)
    if method:
        if method not in METHOD_NAMES:
            raise ValidationError({"method": f"unknown method {method!r}; use one of {', '.join(METHOD_NAMES)}"})
        qs = qs.filter(run__method=method)
    filters = {"run": run, "kind": kind, "status": state, "valid": valid, "role": role, "method": method}
    return filters, qs.order_by("-x_front", "-x_valid", "id")


def after(qs, item: ReviewItem):
    """The items of ``qs`` (ordered a collapsed family first, then valid first, then by id) that come after
    ``item``."""
    front, valid = annotated(ReviewItem.objects.filter(pk=item.pk)).values_list("x_front", "x_valid").first() or (
        False, True)
    later = Q(x_front=front, x_valid=valid, pk__gt=item.pk)
    if valid:
        later |= Q(x_front=front, x_valid=False)
    if front:
        later |= Q(x_front=False)
    return qs.filter(later)


# Response schemas (OpenAPI): ReviewItem.as_dict, agreement.run_agreement, the harness view.
_ITEM_FIELDS = {
    "id": serializers.IntegerField(), "run": serializers.IntegerField(), "run_exists": serializers.BooleanField(),
    "kind": serializers.ChoiceField(choices=["task", "rubric", "grade"]), "key": serializers.CharField(),
    "step": serializers.IntegerField(), "task_key": serializers.CharField(),
    "priority": serializers.CharField(allow_null=True), "judge_score": serializers.FloatField(allow_null=True),
    "status": serializers.ChoiceField(choices=["pending", "approved", "flagged"]),
    "verdict": serializers.CharField(allow_null=True), "sampled": serializers.BooleanField(),
    "suspicious": serializers.ListField(child=serializers.CharField()), "reason": serializers.CharField(),
    "edit": serializers.JSONField(allow_null=True, help_text="a rubric's new text; a task's {question, answer}"),
    "reviewer": serializers.CharField(allow_null=True),
    "reviewed_at": serializers.DateTimeField(allow_null=True), "applied_at": serializers.DateTimeField(allow_null=True),
    "created": serializers.DateTimeField(),
    "snapshot": serializers.DictField(help_text="the sample as it was queued (question, answer, rubric, grade ...)")}
ITEM = inline_serializer("ReviewItem", _ITEM_FIELDS)
ITEM_LIST = inline_serializer("ReviewBulkItem", _ITEM_FIELDS, many=True)
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


BULK_BODY = inline_serializer("ReviewBulk", {
    "ids": serializers.ListField(child=serializers.IntegerField(), help_text="review item ids (at most 500)"),
    "verdict": serializers.ChoiceField(["approve", "flag"]),
    "reason": serializers.CharField(required=False, help_text="Why (a flag needs one); given to every item."),
})


@extend_schema(summary="One verdict on several review items (all or none)", request=BULK_BODY,
               responses={200: inline_serializer("ReviewBulkResult", {"count": serializers.IntegerField(),
                                                                      "results": ITEM_LIST}), **ERRORS})
@api_view(["POST"])
@permission_classes([IsAuthenticated])
def bulk(request):
    if not can(request.user, "review_items"):
        return error_response(HasRole("review_items").message, status.HTTP_403_FORBIDDEN)
    body = request.data if isinstance(request.data, dict) else None
    if body is None or not isinstance(body.get("ids"), list):
        return error_response('send a JSON object such as {"ids": [4, 5], "verdict": "flag", "reason": "off topic"}')
    unknown = sorted(set(body) - {"ids", "verdict", "reason"})
    if unknown:
        return error_response(f"unknown field(s) {unknown}; send ids, verdict (approve | flag) and reason "
                              "(edits are one item at a time: POST review/items/<id>/)")
    try:
        items = ReviewItem.review_many(request.user, body["ids"], body.get("verdict"), body.get("reason") or "")
    except ReviewError as exc:
        return error_response(str(exc))
    return Response({"count": len(items), "results": [i.as_dict() for i in items]})


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
            return error_response(run_refusal(request.user, run, "edit its harness"), status.HTTP_403_FORBIDDEN)
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
