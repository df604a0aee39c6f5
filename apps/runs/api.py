"""REST endpoints of runs (mounted under /api/v1/ by apps/runs/api_urls.py).

- ``GET runs/`` (``?status=&method=&mine=1&limit=``), ``POST runs/`` (``method``, ``model``,
  ``corpus``, ``config`` dict of overrides, optional ``set`` list of key=value, ``queue``)
- ``GET runs/<id>/``; ``POST runs/<id>/pause|resume|cancel/``
- ``GET runs/<id>/metrics/?name=&role=&since_step=&points=`` (``name`` may repeat or be
  comma-separated; long series come back downsampled to ``points``)
- ``GET models/`` -> ``{"models": [...]}``: the model catalog (bundled models, installed or not,
  and the folders of the models directory) with their sizes, as ``manage.py models --json``
"""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.views.decorators.debug import sensitive_variables
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from apps.accounts.roles import (HasRole, can, can_control_run, denied_message, run_refusal, server_path,
                                 shown_catalog, shown_model)
from apps.api.errors import ERRORS, error_response
from apps.jobs.lifecycle import QueueUnavailable
from apps.jobs.waiting import no_worker_warning, wait_reason
from apps.runs import metrics as run_metrics
from apps.runs.models import IllegalTransition, Run
from apps.runs.sealed import redact, redact_overrides
from apps.runs.services import lifecycle
from apps.runs.services.estimate import estimate
from apps.runs.services.launch import LaunchError, available_models, launch
from apps.runs.views import with_last_reward
from trainer.config import METHOD_NAMES
from trainer.method_configs import SECTIONS


def run_dict(run: Run, full: bool = True, user=None) -> dict:
    out = {
        "id": run.pk, "url": f"/runs/{run.pk}/", "method": run.method,
        "model": shown_model(run.model_name, user),  # a model folder's path: admins only, else its name
        "corpus": run.corpus.name if run.corpus_id else (run.corpus_name or None),
        "status": run.status, "requested": run.requested or None, "resumable": run.resumable,
        "owner": run.owner.username if run.owner_id else None, "queue": run.queue,
        "current_step": run.current_step, "total_steps": run.total_steps,
        "last_reward": getattr(run, "last_reward", None),
        "created_at": run.created_at, "started_at": run.started_at, "first_started_at": run.first_started_at,
        "finished_at": run.finished_at,
        "heartbeat_at": run.heartbeat_at, "error": run.error or None,
        # what a queued run waits for ("2nd in line on cpu, behind run 1 on the only cpu worker")
        "waiting_for": (wait_reason(run.job_id, run.queue) or None) if run.status == "queued" else None,
        "control_of": run.control_of_id,
        "name": run.name, "tags": run.tags or [], "notes": run.notes,
        # finished before total_steps because train.time_limit_minutes ran out (current_step says where)
        "stopped_at_time_limit": run.time_limited,
    }
    if full:
        out.update({"worker": run.worker_name or None, "job_id": run.job_id or None,
                    "run_dir": run.run_dir if can(user, "control_any_run") else None,
                    "imported_from": server_path(run.imported_from, user),
                    "controls": list(run.controls.order_by("pk").values_list("pk", flat=True)),
                    "checkpoint_path": server_path(run.checkpoint_path, user), "config": redact(run.config),
                    "overrides": redact_overrides(run.overrides),
                    # the id is what POST evals/ and runs/<id>/crossplay/ take for a checkpoint
                    "checkpoints": [{"id": c.pk, "step": c.step, "path": server_path(c.path, user), "created": c.created}
                                    for c in run.checkpoints.all()[:20]]})
    return out


# Response schemas (OpenAPI): what run_dict and the views answer.
_RUN_FIELDS = {
    "id": serializers.IntegerField(), "url": serializers.CharField(), "method": serializers.CharField(),
    "model": serializers.CharField(), "corpus": serializers.CharField(allow_null=True),
    "status": serializers.ChoiceField(choices=["queued", "running", "paused", "finished", "failed", "cancelled"]),
    "requested": serializers.CharField(allow_null=True, help_text="pause | cancel asked for, taking effect at the next step"),
    "resumable": serializers.BooleanField(), "owner": serializers.CharField(allow_null=True),
    "queue": serializers.CharField(), "current_step": serializers.IntegerField(), "total_steps": serializers.IntegerField(),
    "last_reward": serializers.FloatField(allow_null=True), "created_at": serializers.DateTimeField(),
    "started_at": serializers.DateTimeField(allow_null=True, help_text="the latest start (a resume moves it)"),
    "first_started_at": serializers.DateTimeField(allow_null=True, help_text="the first start, kept across resumes"),
    "finished_at": serializers.DateTimeField(allow_null=True),
    "heartbeat_at": serializers.DateTimeField(allow_null=True), "error": serializers.CharField(allow_null=True),
    "waiting_for": serializers.CharField(allow_null=True, help_text="what a queued run waits for"),
    "control_of": serializers.IntegerField(allow_null=True, help_text="the run this one is a control of"),
    "name": serializers.CharField(), "tags": serializers.ListField(child=serializers.CharField()),
    "notes": serializers.CharField(),
    "stopped_at_time_limit": serializers.BooleanField(help_text="finished before total_steps: train.time_limit_minutes "
                                                      "ran out (current_step is the step it reached)"),
}
_FULL_FIELDS = {
    **_RUN_FIELDS, "worker": serializers.CharField(allow_null=True), "job_id": serializers.CharField(allow_null=True),
    "run_dir": serializers.CharField(), "imported_from": serializers.CharField(allow_null=True),
    "controls": serializers.ListField(child=serializers.IntegerField(), help_text="this run's control runs"),
    "checkpoint_path": serializers.CharField(allow_null=True),
    "config": serializers.DictField(help_text="the resolved trainer config (secrets hidden)"),
    "overrides": serializers.DictField(help_text="what the launcher set (secrets hidden)"),
    "checkpoints": inline_serializer("RunCheckpoint", {"id": serializers.IntegerField(help_text=(
        "what POST evals/ (checkpoint) and runs/<id>/crossplay/ (checkpoints) take")),
                                                       "step": serializers.IntegerField(), "path": serializers.CharField(),
                                                       "created": serializers.DateTimeField()}, many=True),
}
RUN_FULL = inline_serializer("RunDetail", _FULL_FIELDS)
RUN_LAUNCHED = inline_serializer("RunLaunched", {
    **_FULL_FIELDS, "warnings": serializers.ListField(child=serializers.CharField()),
    "estimate": inline_serializer("RunEstimate", {
        "sequences": serializers.IntegerField(), "tokens": serializers.IntegerField(),
        "step_seconds": serializers.FloatField(allow_null=True), "total_seconds": serializers.FloatField(allow_null=True),
        "text": serializers.CharField()}),
})
RUN_LIST = inline_serializer("RunList", {"results": inline_serializer("RunListItem", _RUN_FIELDS, many=True)})
SERIES = inline_serializer("MetricSeries", {
    "name": serializers.CharField(), "role": serializers.CharField(),
    "steps": serializers.ListField(child=serializers.IntegerField()),
    "values": serializers.ListField(child=serializers.FloatField(allow_null=True)),
    "total": serializers.IntegerField(help_text="points stored"), "downsampled": serializers.BooleanField()}, many=True)
METRICS = inline_serializer("RunMetrics", {
    "run": serializers.IntegerField(), "status": serializers.CharField(), "current_step": serializers.IntegerField(),
    "since_step": serializers.IntegerField(allow_null=True), "points": serializers.IntegerField(), "series": SERIES})
MODELS = inline_serializer("ModelCatalog", {"models": serializers.ListField(
    child=serializers.DictField(), help_text="one object per model: name, installed, params, sizes, install command")})


LAUNCH = inline_serializer("RunLaunch", {
    "method": serializers.ChoiceField(choices=list(METHOD_NAMES)),
    "model": serializers.CharField(help_text="a bundled model (GET models/ lists them: smollm2-135m-instruct, "
                                             "qwen2.5-coder-0.5b-instruct, ...), a folder of the models dir, "
                                             "or a path in it"),
    "corpus": serializers.CharField(required=False, help_text="Corpus name or id (all methods but " + ", ".join(
        name for name, section in SECTIONS.items() if not section.needs_corpus) + ")"),
    "config": serializers.DictField(required=False, help_text="Config overrides, nested or dotted keys"),
    "set": serializers.ListField(child=serializers.CharField(), required=False, help_text="key.path=value strings"),
    "queue": serializers.ChoiceField(choices=["gpu", "cpu"], required=False),
    "control": serializers.ChoiceField(choices=["random-reward"], required=False, help_text=(
        "also launch the run's control: the same config with train.control set (random-reward: the answering "
        "role's reward is a coin flip, train.control_p its probability); the answer's controls lists it")),
})


@extend_schema(methods=["GET"], operation_id="runs_list", summary="List runs", responses={200: RUN_LIST, **ERRORS},
               parameters=[OpenApiParameter("status", str), OpenApiParameter("method", str),
                           OpenApiParameter("mine", bool), OpenApiParameter("limit", int)])
@extend_schema(methods=["POST"], operation_id="runs_launch", summary="Launch a run", request=LAUNCH,
               responses={201: RUN_LAUNCHED, **ERRORS})
@api_view(["GET", "POST"])
@permission_classes([IsAuthenticated])
def runs(request):
    if request.method == "POST":
        return _launch(request)
    lifecycle.reap_stale_runs()
    qs = with_last_reward(Run.objects.select_related("owner", "corpus"))
    for field in ("status", "method"):
        if request.query_params.get(field):
            qs = qs.filter(**{field: request.query_params[field]})
    if request.query_params.get("mine") in ("1", "true"):
        qs = qs.filter(owner=request.user)
    limit = _int_param(request, "limit", 100, 1, 1000)
    return Response({"results": [run_dict(r, full=False, user=request.user) for r in qs[:limit]]})


@sensitive_variables("body", "overrides")  # may hold an API key until launch() seals it
def _launch(request):
    if not can(request.user, "launch_run"):
        return error_response(HasRole("launch_run").message, status.HTTP_403_FORBIDDEN)
    body = request.data if isinstance(request.data, dict) else {}
    overrides = body.get("set") or []
    if not isinstance(overrides, list) or not all(isinstance(s, str) for s in overrides):
        return error_response("set: must be a list of key.path=value strings", fields={"set": "must be a list"})
    try:
        run = launch(str(body.get("method") or ""), body.get("model"), body.get("corpus"), config=body.get("config"),
                     overrides=overrides, user=request.user, web=True, queue=body.get("queue"),
                     control=body.get("control"))
    except LaunchError as exc:
        return error_response(f"invalid launch: {exc}", fields=exc.as_dict())
    except QueueUnavailable as exc:
        return error_response(str(exc), status.HTTP_503_SERVICE_UNAVAILABLE)
    warning = no_worker_warning(run.queue)
    cost = estimate(run.method, run.model_name, run.config, run.queue)
    return Response({**run_dict(run, user=request.user), "warnings": [warning] if warning else [],
                     "estimate": {k: cost[k] for k in ("sequences", "tokens", "step_seconds", "total_seconds", "text")}},
                    status=status.HTTP_201_CREATED)


DESCRIBE_BODY = inline_serializer("RunDescription", {
    "name": serializers.CharField(required=False, help_text="What the run is, in a few words"),
    "tags": serializers.ListField(child=serializers.CharField(), required=False),
    "notes": serializers.CharField(required=False, help_text="What it was and what it showed"),
})


@extend_schema(methods=["GET"], operation_id="runs_detail", summary="One run", responses={200: RUN_FULL, **ERRORS})
@extend_schema(methods=["PATCH"], operation_id="runs_describe", summary="Set a run's name, tags and notes (researchers)",
               request=DESCRIBE_BODY, responses={200: RUN_FULL, **ERRORS})
@api_view(["GET", "PATCH"])
@permission_classes([IsAuthenticated])
def run_detail(request, run_id: int):
    lifecycle.reap_stale_runs()
    run = get_object_or_404(with_last_reward(Run.objects.select_related("owner", "corpus")), pk=run_id)
    if request.method == "PATCH":
        if not can(request.user, "launch_run"):
            return error_response(denied_message("launch_run") + " Naming and noting runs is for researchers.",
                                  status.HTTP_403_FORBIDDEN)
        body = request.data if isinstance(request.data, dict) else None
        if body is None or not body or set(body) - {"name", "tags", "notes"}:
            return error_response('send a JSON object with name, tags and/or notes, e.g. {"name": "GRPO lr 1e-6", '
                                  '"tags": ["baseline"], "notes": "..."}')
        try:
            run.describe(body.get("name"), body.get("tags"), body.get("notes"))
        except ValueError as exc:
            return error_response(str(exc))
    return Response(run_dict(run, user=request.user))


@extend_schema(operation_id="runs_control", summary="Pause, resume or cancel a run (action: pause | resume | cancel)",
               request=None, responses={200: RUN_FULL, **ERRORS})
@api_view(["POST"])
@permission_classes([IsAuthenticated])
def run_action(request, run_id: int, action: str):
    run = get_object_or_404(Run, pk=run_id)
    if not can_control_run(request.user, run):
        return error_response(run_refusal(request.user, run), status.HTTP_403_FORBIDDEN)
    try:
        lifecycle.ACTIONS[action](run, request.user)
    except IllegalTransition as exc:
        return error_response(str(exc), status.HTTP_409_CONFLICT)
    except QueueUnavailable as exc:
        return error_response(str(exc), status.HTTP_503_SERVICE_UNAVAILABLE)
    run.refresh_from_db()
    return Response(run_dict(run, user=request.user))


@extend_schema(operation_id="runs_metrics", summary="Metric series of a run, downsampled server-side",
               responses={200: METRICS, **ERRORS},
               parameters=[OpenApiParameter("name", str, description="metric name(s), comma-separated or repeated"),
                           OpenApiParameter("role", str), OpenApiParameter("since_step", int),
                           OpenApiParameter("points", int, description="most points per series (min/max buckets)")])
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def run_metrics_view(request, run_id: int):
    run = get_object_or_404(Run, pk=run_id)
    names = [n for raw in request.query_params.getlist("name") for n in raw.split(",") if n.strip()]
    role = request.query_params.get("role")
    since = request.query_params.get("since_step")
    if since not in (None, "") and not _is_int(since):
        return error_response(f"since_step must be an integer step, got {since!r}")
    points = _int_param(request, "points", run_metrics.DEFAULT_POINTS, 2, run_metrics.MAX_POINTS)
    found = run_metrics.series(run, names or None, role, int(since) if since not in (None, "") else None, points)
    return Response({"run": run.pk, "status": run.status, "current_step": run.current_step,
                     "since_step": int(since) if since not in (None, "") else None, "points": points,
                     "series": found})


def _is_int(text: str) -> bool:
    try:
        int(text)
    except (TypeError, ValueError):
        return False
    return True


def _int_param(request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    if not _is_int(raw):
        raise ValidationError({name: f"must be an integer between {low} and {high}, got {raw!r}"})
    return max(low, min(high, int(raw)))


@extend_schema(operation_id="models_list", summary="The models a run can use, with their sizes",
               description="Bundled models (installed or not; ``install`` is the command for a missing one) "
                           "and the model folders of the models directory. ``params`` is the nominal size, "
                           "``parameters`` the count of an imported checkpoint, ``package_bytes`` the GGUF as "
                           "shipped, ``disk_bytes`` the imported float32 checkpoint.",
               responses={200: MODELS, **ERRORS})
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def models(request):
    return Response({"models": shown_catalog(available_models(), request.user)})  # the server's Python: admins only
