"""REST endpoints of evals (mounted under /api/v1/ by apps/evals/api_urls.py).

- ``GET evals/benchmarks/``; ``POST evals/benchmarks/`` (multipart ``file`` + ``name`` [+ ``scoring``,
  ``title``]: an uploaded JSONL; or JSON ``{"name", "corpus", "n", "seed"}``: a held-out cloze set)
- ``GET evals/`` (``?run=&status=&limit=``), ``POST evals/`` (``benchmarks``, ``checkpoint`` id or
  ``model`` ``base:<name>``, ``run``, ``limit``, ``search``, ``corpus``, ``queue``, ``max_new_tokens``)
- ``GET evals/<id>/``; ``GET evals/<id>/samples/?benchmark=&correct=&offset=&limit=``
- ``POST evals/<id>/cancel/``: a queued or running evaluation is cancelled (a running one stops before its next
  item and keeps what it scored; 409 once it has ended); ``POST evals/crossplay/<id>/cancel/`` the same for a
  cross-play (it stops before its next cell)
- ``GET evals/compare/?run=1&run=2&benchmark=gsm8k`` (table rows and chart series)
- ``GET|POST runs/<id>/crossplay/`` (POST: ``checkpoints`` ids, ``n_tasks``, ``answers_per_task``,
  ``temperature``, ``queue``); ``GET evals/crossplay/<id>/``

Reading is open to every logged-in user; launching and creating benchmarks need the researcher
role (``launch_run``).
"""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from apps.accounts.roles import HasRole, can, hide_server_paths
from apps.api.errors import ERRORS, error_response
from apps.corpora.models import Corpus
from apps.evals import benchmarks as bench_service
from apps.evals.compare import comparison
from apps.evals.launch import EvalCancelError, EvalLaunchError, cancel_eval, launch_crossplay, launch_eval
from apps.evals.models import Benchmark, CrossPlay, EvalJob, EvalResult, EvalSample
from apps.jobs.lifecycle import QueueUnavailable
from apps.jobs.waiting import no_worker_warning
from apps.runs.models import Run
from trainer.evaluate import SCORING, BenchmarkError

BENCHMARK_EXAMPLE = {"id": 4, "name": "my-qa", "title": "my-qa", "kind": "upload", "scoring": "exact", "size": 120,
                     "corpus": None, "description": "", "meta": {"filename": "my-qa.jsonl"},
                     "created": "2025-01-01T00:00:00Z"}
EVAL_EXAMPLE = {"id": 12, "url": "/evals/jobs/12/", "status": "finished", "model": "/var/runs/7/checkpoints/step-000050",
                "label": "run 7 @ step 50", "run": 7, "checkpoint": 31, "step": 50, "benchmarks": ["gsm8k"],
                "limit": 100, "search": False, "done": 100, "total": 100,
                "results": [{"benchmark": "gsm8k", "scoring": "math", "n": 100, "correct": 41, "score": 0.41,
                             "ci_low": 0.31, "ci_high": 0.51, "seconds": 812.0, "complete": True}]}
LAUNCH = inline_serializer("EvalLaunch", {
    "benchmarks": serializers.ListField(child=serializers.CharField(), help_text="gsm8k, gpqa-diamond, aime2025, ..."),
    "checkpoint": serializers.IntegerField(required=False, help_text="A checkpoint id (see GET runs/<id>/)"),
    "model": serializers.CharField(required=False, help_text="base:<model name>; default: the run's base model"),
    "run": serializers.IntegerField(required=False),
    "limit": serializers.IntegerField(required=False, help_text="First N items of each benchmark"),
    "search": serializers.BooleanField(required=False, help_text="Answer with the search tool"),
    "corpus": serializers.CharField(required=False, help_text="Search corpus (default: the run's)"),
    "queue": serializers.ChoiceField(choices=["gpu", "cpu"], required=False),
    "max_new_tokens": serializers.IntegerField(required=False),
})
BENCHMARK_CREATE = inline_serializer("BenchmarkCreate", {
    "name": serializers.CharField(help_text="lowercase letters, digits, - and _"),
    "file": serializers.FileField(required=False, help_text='JSONL: {"question", "answer", "choices"?} per line'),
    "scoring": serializers.ChoiceField(choices=list(SCORING), required=False),
    "title": serializers.CharField(required=False),
    "corpus": serializers.CharField(required=False, help_text="Held-out set: the corpus to build cloze QA from"),
    "n": serializers.IntegerField(required=False, help_text="Held-out set: number of questions (default 200)"),
    "seed": serializers.IntegerField(required=False),
})
CROSSPLAY = inline_serializer("CrossPlayLaunch", {
    "checkpoints": serializers.ListField(child=serializers.IntegerField(), help_text="Checkpoint ids of the run"),
    "n_tasks": serializers.IntegerField(required=False, help_text="Valid tasks per challenger (default 8)"),
    "answers_per_task": serializers.IntegerField(required=False, help_text="Reasoner answers per task (default 4)"),
    "temperature": serializers.FloatField(required=False),
    "queue": serializers.ChoiceField(choices=["gpu", "cpu"], required=False),
})


# Response schemas (OpenAPI): the models' as_dict and compare.comparison.
_BENCHMARK_FIELDS = {
    "id": serializers.IntegerField(), "name": serializers.CharField(), "title": serializers.CharField(),
    "kind": serializers.CharField(), "scoring": serializers.CharField(), "size": serializers.IntegerField(),
    "corpus": serializers.CharField(allow_null=True), "description": serializers.CharField(),
    "meta": serializers.DictField(), "created": serializers.DateTimeField()}
BENCHMARK = inline_serializer("Benchmark", _BENCHMARK_FIELDS)
BENCHMARKS = inline_serializer("BenchmarkList", {"results": inline_serializer("BenchmarkListItem", _BENCHMARK_FIELDS, many=True)})
RESULT = inline_serializer("EvalResult", {
    "benchmark": serializers.CharField(), "scoring": serializers.CharField(), "n": serializers.IntegerField(),
    "correct": serializers.IntegerField(), "score": serializers.FloatField(allow_null=True),
    "ci_low": serializers.FloatField(allow_null=True), "ci_high": serializers.FloatField(allow_null=True),
    "seconds": serializers.FloatField(allow_null=True), "complete": serializers.BooleanField()}, many=True)
_JOB_FIELDS = {
    "id": serializers.IntegerField(), "url": serializers.CharField(),
    "status": serializers.ChoiceField(choices=["queued", "running", "finished", "failed", "cancelled"]),
    "model": serializers.CharField(), "label": serializers.CharField(), "run": serializers.IntegerField(allow_null=True),
    "checkpoint": serializers.IntegerField(allow_null=True), "step": serializers.IntegerField(allow_null=True),
    "benchmarks": serializers.ListField(child=serializers.CharField()), "limit": serializers.IntegerField(allow_null=True),
    "search": serializers.BooleanField(), "corpus": serializers.CharField(allow_null=True),
    "max_new_tokens": serializers.IntegerField(), "auto": serializers.BooleanField(), "queue": serializers.CharField(),
    "done": serializers.IntegerField(), "total": serializers.IntegerField(), "error": serializers.CharField(allow_null=True),
    "owner": serializers.CharField(allow_null=True), "created": serializers.DateTimeField(),
    "started_at": serializers.DateTimeField(allow_null=True), "finished_at": serializers.DateTimeField(allow_null=True),
    "waiting_for": serializers.CharField(allow_null=True)}
JOB = inline_serializer("EvalJob", {**_JOB_FIELDS, "results": RESULT})
JOB_LAUNCHED = inline_serializer("EvalLaunched", {**_JOB_FIELDS, "results": RESULT,
                                                  "warnings": serializers.ListField(child=serializers.CharField())})
JOBS = inline_serializer("EvalJobList", {"results": inline_serializer("EvalJobListItem", {**_JOB_FIELDS, "results": RESULT},
                                                                      many=True)})
SAMPLES = inline_serializer("EvalSamples", {"count": serializers.IntegerField(), "results": inline_serializer("EvalSample", {
    "benchmark": serializers.CharField(), "index": serializers.IntegerField(), "id": serializers.CharField(),
    "question": serializers.CharField(), "gold": serializers.CharField(), "prediction": serializers.CharField(allow_null=True),
    "output": serializers.CharField(), "correct": serializers.BooleanField(), "score": serializers.FloatField(),
    "data": serializers.DictField()}, many=True)})
COMPARISON = inline_serializer("EvalComparison", {
    "benchmarks": serializers.ListField(child=serializers.CharField()),
    "runs": serializers.ListField(child=serializers.IntegerField()),
    "rows": serializers.ListField(child=serializers.DictField(), help_text=(
        "label, run, step, cells (one per benchmark: score, ci_low, ci_high, n, job, scoring, and for a checkpoint "
        "paired: its difference from the base model on the same items, {diff, low, high, n, gained, lost}, "
        "fractions with the 95% bootstrap interval; null without samples on both sides)")),
    "series": serializers.ListField(child=serializers.DictField(), help_text="per run and benchmark: steps, scores, CIs")})
_CROSSPLAY_FIELDS = {
    "id": serializers.IntegerField(), "url": serializers.CharField(), "run": serializers.IntegerField(),
    "status": serializers.CharField(), "steps": serializers.ListField(child=serializers.IntegerField()),
    "checkpoints": serializers.ListField(child=serializers.DictField()),
    "column_steps": serializers.ListField(child=serializers.IntegerField()),
    "labels": serializers.ListField(child=serializers.CharField()),
    "column_labels": serializers.ListField(child=serializers.CharField()),
    "counts": serializers.ListField(child=serializers.ListField(child=serializers.IntegerField(allow_null=True))),
    "imported": serializers.BooleanField(), "n_tasks": serializers.IntegerField(),
    "answers_per_task": serializers.IntegerField(), "temperature": serializers.FloatField(),
    "matrix": serializers.ListField(child=serializers.ListField(child=serializers.FloatField(allow_null=True)),
                                    help_text="matrix[i][j]: pass rate of solver j on challenger i's tasks"),
    "cells_done": serializers.IntegerField(), "cells_total": serializers.IntegerField(),
    "tasks": serializers.ListField(child=serializers.DictField()), "error": serializers.CharField(allow_null=True),
    "queue": serializers.CharField(), "created": serializers.DateTimeField(),
    "started_at": serializers.DateTimeField(allow_null=True), "finished_at": serializers.DateTimeField(allow_null=True)}
CROSSPLAY_OUT = inline_serializer("CrossPlay", _CROSSPLAY_FIELDS)
CROSSPLAYS = inline_serializer("CrossPlayList", {"results": inline_serializer("CrossPlayListItem", _CROSSPLAY_FIELDS, many=True)})


def _forbidden():
    return error_response(HasRole("launch_run").message, status.HTTP_403_FORBIDDEN)


@extend_schema(methods=["GET"], operation_id="evals_benchmarks", summary="List benchmarks",
               responses={200: BENCHMARKS, **ERRORS},
               examples=[OpenApiExample("benchmarks", value={"results": [BENCHMARK_EXAMPLE]}, response_only=True)])
@extend_schema(methods=["POST"], operation_id="evals_benchmarks_create",
               summary="Upload a JSONL benchmark, or freeze a held-out cloze QA set from a corpus",
               request={"multipart/form-data": BENCHMARK_CREATE, "application/json": BENCHMARK_CREATE},
               responses={201: BENCHMARK, **ERRORS},
               examples=[OpenApiExample("held-out", value={"name": "wiki-cloze", "corpus": "wikipedia", "n": 200},
                                        request_only=True),
                         OpenApiExample("created", value=BENCHMARK_EXAMPLE, response_only=True, status_codes=["201"]),
                         OpenApiExample("bad file", value={"error": 'my.jsonl:3: "answer" is missing (fields present: '
                                                                   "['question'])"}, response_only=True,
                                        status_codes=["400"])])
@api_view(["GET", "POST"])
@permission_classes([IsAuthenticated])
def benchmarks(request):
    if request.method == "GET":
        bench_service.ensure_builtins()
        return Response({"results": [b.as_dict() for b in Benchmark.objects.select_related("corpus")]})
    if not can(request.user, "launch_run"):
        return _forbidden()
    data = request.data
    if not isinstance(data, dict):
        return error_response("Send a JSON object (name, corpus, n, seed, scoring) or a multipart `file` upload.")
    try:
        if data.get("corpus") not in (None, ""):
            corpus = _corpus(data.get("corpus"))
            bench = bench_service.heldout(data.get("name"), corpus, n=_as_int(data.get("n"), 200, "n"),
                                          seed=_as_int(data.get("seed"), 0, "seed"), user=request.user,
                                          scoring=data.get("scoring") or "exact")
        else:
            bench = bench_service.upload(data.get("name"), request.FILES.get("file"), data.get("scoring"),
                                         user=request.user, title=data.get("title") or "")
    except BenchmarkError as exc:
        return error_response(str(exc))
    return Response(bench.as_dict(), status=status.HTTP_201_CREATED)


def _as_int(value, default, name):
    if value in (None, ""):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BenchmarkError(f"{name} must be an integer, got {value!r}") from None


def _corpus(value) -> Corpus:
    text = str(value).strip()
    found = Corpus.objects.filter(name=text).first() or (Corpus.objects.filter(pk=int(text)).first()
                                                         if text.isdecimal() else None)
    if found is None:
        raise BenchmarkError(f"no corpus named {text!r}; see /corpora/")
    return found


@extend_schema(methods=["GET"], operation_id="evals_list", summary="List evaluations",
               parameters=[OpenApiParameter("run", int), OpenApiParameter("status", str), OpenApiParameter("limit", int)],
               responses={200: JOBS, **ERRORS},
               examples=[OpenApiExample("evaluations", value={"results": [EVAL_EXAMPLE]}, response_only=True)])
@extend_schema(methods=["POST"], operation_id="evals_launch", summary="Evaluate a checkpoint or a base model",
               request=LAUNCH, responses={201: JOB_LAUNCHED, **ERRORS},
               examples=[OpenApiExample("checkpoint", value={"checkpoint": 31, "benchmarks": ["gsm8k"], "limit": 100},
                                        request_only=True),
                         OpenApiExample("base", value={"model": "base:smollm2-135m-instruct",
                                                       "benchmarks": ["gsm8k", "aime2025"]}, request_only=True),
                         OpenApiExample("queued", value=EVAL_EXAMPLE, response_only=True, status_codes=["201"])])
@api_view(["GET", "POST"])
@permission_classes([IsAuthenticated])
def evals(request):
    if request.method == "POST":
        return _launch(request)
    EvalJob.reap_stale()
    qs = EvalJob.objects.select_related("owner", "corpus").prefetch_related("benchmarks")
    params = request.query_params
    if params.get("run"):
        if not str(params["run"]).isdecimal():
            return error_response(f"run must be a run id, got {params['run']!r}")
        qs = qs.filter(run_id=int(params["run"]))
    if params.get("status"):
        qs = qs.filter(status=params["status"])
    try:
        limit = _as_int(params.get("limit"), 100, "limit")
    except BenchmarkError as exc:
        return error_response(str(exc))
    return Response(hide_server_paths({"results": [j.as_dict() for j in qs[:max(1, min(limit, 1000))]]}, request.user))


def _launch(request):
    if not can(request.user, "launch_run"):
        return _forbidden()
    body = request.data if isinstance(request.data, dict) else {}
    run = None
    if body.get("run") not in (None, ""):
        run = Run.objects.filter(pk=body["run"]).first() if str(body["run"]).isdecimal() else None
        if run is None:
            return error_response(f"no run {body['run']!r}", fields={"run": "unknown run"})
    return _queued(request, lambda: launch_eval(
        benchmarks=body.get("benchmarks"), model=body.get("model"), checkpoint=body.get("checkpoint"), run=run,
        limit=body.get("limit"), search=body.get("search", False), corpus=body.get("corpus"), queue=body.get("queue"),
        max_new_tokens=body.get("max_new_tokens"), user=request.user))


def _queued(request, start) -> Response:
    """201 with the job ``start()`` queued, or why not: 400 naming the input to fix, 503 when Redis refuses."""
    try:
        job = start()
    except EvalLaunchError as exc:
        return error_response(str(exc), exc.status, fields=exc.as_dict())
    except QueueUnavailable as exc:
        return error_response(str(exc), status.HTTP_503_SERVICE_UNAVAILABLE)
    warning = no_worker_warning(job.queue)
    return Response(hide_server_paths({**job.as_dict(), "warnings": [warning] if warning else []}, request.user),
                    status=status.HTTP_201_CREATED)


@extend_schema(operation_id="evals_detail", summary="One evaluation with its results per benchmark",
               responses={200: JOB, **ERRORS},
               examples=[OpenApiExample("evaluation", value=EVAL_EXAMPLE, response_only=True)])
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def eval_detail(request, job_id: int):
    EvalJob.reap_stale()
    job = get_object_or_404(EvalJob.objects.select_related("owner", "corpus"), pk=job_id)
    return Response(hide_server_paths(job.as_dict(), request.user))


@extend_schema(operation_id="evals_cancel", summary="Cancel a queued or running evaluation (a running one stops "
               "before its next item and keeps what it scored)", request=None,
               responses={200: JOB, **ERRORS},
               examples=[OpenApiExample("ended", response_only=True, status_codes=["409"], value={
                   "error": "Cannot cancel evaluation 12: it is finished; only a queued or running evaluation can be "
                            "cancelled."})])
@api_view(["POST"])
@permission_classes([IsAuthenticated])
def eval_cancel(request, job_id: int):
    job = get_object_or_404(EvalJob.objects.select_related("owner", "corpus", "run"), pk=job_id)
    try:
        cancel_eval(job, request.user)
    except EvalCancelError as exc:
        return error_response(str(exc), exc.status)
    return Response(hide_server_paths(job.as_dict(), request.user))


@extend_schema(operation_id="evals_samples", summary="Sample-level outputs of an evaluation",
               parameters=[OpenApiParameter("benchmark", str), OpenApiParameter("correct", bool),
                           OpenApiParameter("offset", int), OpenApiParameter("limit", int)],
               responses={200: SAMPLES, **ERRORS},
               examples=[OpenApiExample("samples", response_only=True, value={"count": 1, "results": [
                   {"benchmark": "gsm8k", "index": 0, "id": "gsm8k-0", "question": "Janet's ducks ...", "gold": "18",
                    "prediction": "18", "output": "... \\boxed{18}", "correct": True, "score": 1.0, "data": {}}]})])
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def eval_samples(request, job_id: int):
    job = get_object_or_404(EvalJob, pk=job_id)
    params = request.query_params
    results = EvalResult.objects.filter(job=job)
    if params.get("benchmark"):
        results = results.filter(benchmark__name=params["benchmark"])
    qs = EvalSample.objects.filter(result__in=results).select_related("result__benchmark").order_by("result_id", "index")
    if params.get("correct") not in (None, ""):
        if params["correct"] not in ("true", "false"):
            return error_response(f"correct must be true or false, got {params['correct']!r}")
        qs = qs.filter(correct=params["correct"] == "true")
    try:
        offset = _as_int(params.get("offset"), 0, "offset")
        limit = _as_int(params.get("limit"), 100, "limit")
    except BenchmarkError as exc:
        return error_response(str(exc))
    page = qs[max(offset, 0):max(offset, 0) + max(1, min(limit, 1000))]
    return Response({"count": qs.count(), "results": [{"benchmark": s.result.benchmark.name, **s.as_dict()}
                                                       for s in page]})


@extend_schema(operation_id="evals_compare", summary="Base vs checkpoints vs other runs on the same benchmarks",
               parameters=[OpenApiParameter("run", int, many=True, description="Run ids (repeat or comma-separate)"),
                           OpenApiParameter("benchmark", str, many=True, description="Benchmark names")],
               responses={200: COMPARISON, **ERRORS},
               examples=[OpenApiExample("comparison", response_only=True, value={
                   "benchmarks": ["gsm8k"], "runs": [7], "rows": [
                       {"label": "base:smollm2-135m-instruct", "run": None, "step": None,
                        "cells": [{"score": 0.3, "ci_low": 0.21, "ci_high": 0.39, "n": 100, "job": 3, "scoring": "math",
                                   "paired": None}]},
                       {"label": "run 7 @ step 50", "run": 7, "step": 50,
                        "cells": [{"score": 0.41, "ci_low": 0.31, "ci_high": 0.51, "n": 100, "job": 4, "scoring": "math",
                                   "paired": {"diff": 0.11, "low": 0.04, "high": 0.18, "n": 100, "gained": 15,
                                              "lost": 4}}]}],
                   "series": [{"name": "run 7 · gsm8k", "run": 7, "benchmark": "gsm8k", "steps": [0, 50],
                               "scores": [0.3, 0.41], "ci_low": [0.21, 0.31], "ci_high": [0.39, 0.51]}]})])
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def compare(request):
    try:
        runs, benches = compare_inputs(request.query_params)
    except BenchmarkError as exc:
        return error_response(str(exc))
    return Response(hide_server_paths(comparison(runs, benches), request.user))


def compare_inputs(params):
    """(runs, benchmarks) from ``run`` / ``benchmark`` parameters (repeated or comma-separated)."""
    raw_runs = [r for v in params.getlist("run") for r in v.split(",") if r.strip()]
    if not all(r.strip().isdecimal() for r in raw_runs):
        raise BenchmarkError(f"run must be run ids, got {', '.join(raw_runs)}")
    runs = list(Run.objects.filter(pk__in=[int(r) for r in raw_runs]).order_by("pk"))
    missing = {int(r) for r in raw_runs} - {r.pk for r in runs}
    if missing:
        raise BenchmarkError(f"no run {', '.join(map(str, sorted(missing)))}")
    names = [n for v in params.getlist("benchmark") for n in v.split(",") if n.strip()]
    if not names:
        names = list(EvalResult.objects.filter(job__run__in=runs, complete=True)
                     .values_list("benchmark__name", flat=True).distinct()) or ["gsm8k"]
    return runs, bench_service.find(names)


CROSSPLAY_EXAMPLE = {"id": 2, "url": "/evals/crossplay/2/", "run": 7, "status": "finished", "steps": [10, 20],
                     "checkpoints": [{"id": 31, "step": 10, "path": "..."}, {"id": 32, "step": 20, "path": "..."}],
                     "n_tasks": 8, "answers_per_task": 4, "temperature": 1.0, "matrix": [[0.6, 0.7], [0.3, 0.45]],
                     "cells_done": 4, "cells_total": 4,
                     "tasks": [{"step": 10, "attempts": 16, "tasks": [{"question": "...", "answer": "4",
                                                                       "format": "free_form",
                                                                       "answer_type": "integer"}]}]}


@extend_schema(methods=["GET"], operation_id="runs_crossplay_list", summary="Cross-play matrices of a run",
               responses={200: CROSSPLAYS, **ERRORS},
               examples=[OpenApiExample("matrices", value={"results": [CROSSPLAY_EXAMPLE]}, response_only=True)])
@extend_schema(methods=["POST"], operation_id="runs_crossplay_launch",
               summary="Cross-play: challenger i's tasks answered by solver j, for chosen checkpoints",
               request=CROSSPLAY, responses={201: CROSSPLAY_OUT, **ERRORS},
               examples=[OpenApiExample("launch", value={"checkpoints": [31, 32, 33], "n_tasks": 16},
                                        request_only=True),
                         OpenApiExample("queued", value={**CROSSPLAY_EXAMPLE, "status": "queued", "cells_done": 0,
                                                         "matrix": [[None, None], [None, None]], "tasks": []},
                                        response_only=True, status_codes=["201"]),
                         OpenApiExample("no corpus", value={"error": "cross-play writes tasks from the run's corpus "
                                                                     "documents; this run has no corpus"},
                                        response_only=True, status_codes=["400"])])
@api_view(["GET", "POST"])
@permission_classes([IsAuthenticated])
def run_crossplay(request, run_id: int):
    run = get_object_or_404(Run, pk=run_id)
    if request.method == "GET":
        return Response(hide_server_paths({"results": [c.as_dict() for c in run.crossplays.all()[:50]]}, request.user))
    if not can(request.user, "launch_run"):
        return _forbidden()
    body = request.data if isinstance(request.data, dict) else {}
    return _queued(request, lambda: launch_crossplay(
        run, body.get("checkpoints"), n_tasks=body.get("n_tasks"), answers_per_task=body.get("answers_per_task"),
        temperature=body.get("temperature", 1.0), queue=body.get("queue"), user=request.user))


@extend_schema(operation_id="evals_crossplay_detail", summary="One cross-play matrix",
               responses={200: CROSSPLAY_OUT, **ERRORS},
               examples=[OpenApiExample("matrix", response_only=True, value=CROSSPLAY_EXAMPLE)])
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def crossplay_detail(request, crossplay_id: int):
    CrossPlay.reap_stale()
    return Response(hide_server_paths(get_object_or_404(CrossPlay, pk=crossplay_id).as_dict(), request.user))


@extend_schema(operation_id="evals_crossplay_cancel", summary="Cancel a queued or running cross-play (a running one "
               "stops before its next cell and keeps the cells it filled)", request=None,
               responses={200: CROSSPLAY_OUT, **ERRORS})
@api_view(["POST"])
@permission_classes([IsAuthenticated])
def crossplay_cancel(request, crossplay_id: int):
    job = get_object_or_404(CrossPlay.objects.select_related("run", "owner"), pk=crossplay_id)
    try:
        cancel_eval(job, request.user)
    except EvalCancelError as exc:
        return error_response(str(exc), exc.status)
    return Response(hide_server_paths(job.as_dict(), request.user))
