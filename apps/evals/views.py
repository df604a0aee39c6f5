"""Evals pages: the index (benchmarks, launch, recent evaluations), one evaluation with its samples,
the compare view, cross-play matrices, and the run page's panel (``templates/evals/_run_panel.html``).

Launch forms post here; with htmx from the run page they answer with the refreshed panel (errors
shown in place), otherwise they redirect to what was created.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.accounts.roles import can, hide_server_paths, role_required
from apps.corpora.models import Corpus
from apps.evals import benchmarks as bench_service
from apps.evals.api import compare_inputs
from apps.evals.compare import annotate_paired, comparison, control_gains, control_pairs
from apps.evals.estimate import default_limit
from apps.evals.estimate import estimate as eval_estimate
from apps.evals.launch import (CPU_EVAL_QUEUE, EvalCancelError, EvalLaunchError, can_cancel, cancel_eval,
                               launch_crossplay, launch_eval)
from apps.evals.models import Benchmark, CrossPlay, EvalJob, EvalResult, EvalSample
from apps.jobs.lifecycle import QueueUnavailable
from apps.jobs.waiting import no_worker_warning
from apps.runs.models import Run
from apps.runs.services.launch import available_models, check_model
from apps.runs.workers import workers_overview
from trainer.evaluate import SCORING, BenchmarkError, time_to_reach

SAMPLES_PER_PAGE = 50


def reap() -> None:
    EvalJob.reap_stale()
    CrossPlay.reap_stale()


RECENT_SHOWN = 10  # evaluations listed open on /evals/; the older ones of the 50 newest are folded


def index(request):
    reap()
    bench_service.ensure_builtins()
    jobs = list(EvalJob.objects.select_related("run").prefetch_related("results__benchmark", "benchmarks")[:50])
    return render(request, "evals/index.html", {
        "benchmarks": Benchmark.objects.select_related("corpus"),
        # the newest first; the rest folded, so the forms below are not 50 rows down (an import brings dozens)
        "jobs": jobs[:RECENT_SHOWN], "older_jobs": jobs[RECENT_SHOWN:],
        "crossplays": CrossPlay.objects.select_related("run")[:20],
        "models": available_models(), "corpora": Corpus.objects.order_by("name"), "scorings": SCORING,
        "runs": Run.objects.order_by("-id")[:50], "can_launch": can(request.user, "launch_run"),
        "default_queue": _default_queue(),
    })


def _default_queue() -> str:
    """gpu when a live worker serves it, else cpu (the CPU-only `make demo` has no gpu worker)."""
    try:
        workers = workers_overview()["workers"]
    except Exception:  # Redis down: keep the form usable, the launch itself reports the problem
        return "gpu"
    return "gpu" if any("gpu" in w["queues"] for w in workers) or not workers else "cpu"


def panel_context(request, run: Run, error: str = "", notice: str = "") -> dict:
    """The run page's evals panel: launch form, this run's evaluations (a checkpoint's results with their
    paired difference from the base model: ``r.paired``), cross-play."""
    reap()
    bench_service.ensure_builtins()
    checkpoints = [c for c in run.checkpoints.all()[:50] if Path(c.path).is_dir()]
    jobs = list(run.evals.prefetch_related("results__benchmark")[:10])
    annotate_paired(run, [r for j in jobs for r in j.results.all()])  # each checkpoint result vs the base model
    crossplays = list(run.crossplays.all()[:5])
    return {
        "gains": control_gains(control_pairs(run)),  # over the base model and over the control, paired
        "run": run, "checkpoints": checkpoints, "benchmarks": Benchmark.objects.exclude(kind=Benchmark.Kind.IMPORTED),
        "jobs": jobs,
        "crossplays": crossplays, "active": any(j.is_active for j in jobs + crossplays),
        "can_launch": can(request.user, "launch_run"), "eval_error": error, "eval_notice": notice,
        "user": request.user,  # the panel is also an inclusion tag's (no context processors): paths as they may see them
        "auto": (run.config or {}).get("eval") or {},
        # a run folder imported without weights, from a machine whose model path is not here: nothing to evaluate
        "weights_elsewhere": run.imported and not checkpoints and check_model(run.model_name) is not None,
    }


def evals_chart_context(run: Run) -> dict:
    """The run page's evaluation chart and heatmap: every benchmark with a complete result of the run,
    its series by step (``comparison``: step 0 = the base model; 95% intervals), and the newest
    cross-play of the run with a computed cell (imported or computed here)."""
    names = sorted(set(EvalResult.objects.filter(job__run=run, complete=True)
                       .values_list("benchmark__name", flat=True)))
    benches = list(Benchmark.objects.filter(name__in=names).order_by("name"))
    series = comparison([run], benches, pairs=False)["series"] if names else []
    cross = run.crossplays.filter(cells_done__gt=0).order_by("-created", "-id").first()
    heatmap = None
    if cross is not None:
        rows, cols = cross.labels
        heatmap = {"id": cross.pk, "url": f"/evals/crossplay/{cross.pk}/", "status": cross.status, "rows": rows,
                   "columns": cols, "matrix": cross.matrix, "counts": cross.counts, "imported": cross.imported,
                   "reading": cross.reading}
    return {"run": run, "data": {"series": series, "crossplay": heatmap} if series or heatmap else None}


def wallclock_chart_context(runs: list[Run]) -> dict:
    """The runs compare view's time-to-accuracy chart (issue 22): each run's checkpoint scores against
    its training wall-clock, from the same ``comparison`` series as the run page's chart by step.

    Every benchmark with a complete result of one of ``runs``; a point's x is its ``train_seconds``
    in minutes (the base model at 0). A point without ``train_seconds`` is left out, and ``lacking``
    names its run and steps for the page's note; a series left with only its base model is dropped.
    ``data`` is None when none of the runs has an evaluation."""
    names = sorted(set(EvalResult.objects.filter(job__run__in=runs, complete=True)
                       .values_list("benchmark__name", flat=True)))
    if not names:
        return {"data": None}
    series, lacking = [], {}
    benches = list(Benchmark.objects.filter(name__in=names).order_by("name"))
    for s in comparison(runs, benches, pairs=False)["series"]:
        keep = [i for i, t in enumerate(s["train_seconds"]) if t is not None]
        missing = [step for step, t in zip(s["steps"], s["train_seconds"]) if t is None]
        if missing:
            lacking.setdefault(s["run"], set()).update(missing)
        if any(s["steps"][i] > 0 for i in keep):
            series.append({"name": s["name"], "run": s["run"], "benchmark": s["benchmark"],
                           "minutes": [round(s["train_seconds"][i] / 60, 4) for i in keep],
                           **{k: [s[k][i] for i in keep] for k in ("train_seconds", "steps", "scores", "ci_low",
                                                                   "ci_high")}})
    if not series and not lacking:
        return {"data": None}
    order = [r.pk for r in runs]
    return {"data": {"series": series, "lacking": [{"run": pk, "steps": sorted(lacking[pk])}
                                                    for pk in order if pk in lacking]},
            "reach": time_to_reach_table(series, {r.pk: r.label for r in runs}),
            "table_url": reverse("evals:compare") + "?" + urlencode([("run", pk) for pk in order])}


def time_to_reach_table(series: list[dict], labels: dict[int, str]) -> list[dict]:
    """Under the wall-clock chart, per benchmark that two or more runs were evaluated on: for each run (a row)
    its final score (the last checkpoint by training time) and, for every run (a column), the training seconds
    of its first checkpoint at or above that score (``trainer.evaluate.time_to_reach``; interpolated between
    checkpoints in ``interp``) and that time as a fraction of the row run's (``ratio``): "ours reached TRL's
    final accuracy in 0.40 of TRL's time" is the cell of ours in TRL's row. ``no_gain``: the row's final score is
    no better than its base model's, so reaching it says nothing."""
    tables = []
    for bench in sorted({s["benchmark"] for s in series}):
        runs = [s for s in series if s["benchmark"] == bench]
        if len(runs) < 2:
            continue
        rows = []
        for ref in runs:
            final_s, final = ref["train_seconds"][-1], ref["scores"][-1]
            base = ref["scores"][0] if ref["steps"][0] == 0 else None
            cells = []
            for other in runs:
                first, interp = time_to_reach(zip(other["train_seconds"], other["scores"]), final)
                cells.append({"run": other["run"], "seconds": first, "interp": interp,
                              "ratio": None if first is None or final_s <= 0 else first / final_s})
            rows.append({"run": ref["run"], "label": labels.get(ref["run"], f"run {ref['run']}"), "final": final,
                         "final_s": final_s, "no_gain": base is not None and final <= base, "cells": cells})
        tables.append({"benchmark": bench, "runs": [(s["run"], labels.get(s["run"], f"run {s['run']}")) for s in runs],
                       "rows": rows})
    return tables


def run_panel(request, run_id: int):
    run = get_object_or_404(Run, pk=run_id)
    return render(request, "evals/_run_panel_body.html", panel_context(request, run))


@require_POST
@role_required("launch_run")
def launch(request):
    post = request.POST
    run = Run.objects.filter(pk=post.get("run")).first() if str(post.get("run", "")).isdecimal() else None
    target = post.get("target") or ""
    checkpoint = target[5:] if target.startswith("ckpt:") else None
    model = target if target.startswith("base:") else None  # "base" (the panel's choice): the run's own base model
    try:
        job = launch_eval(benchmarks=post.getlist("benchmarks"), model=model, checkpoint=checkpoint, run=run,
                          limit=post.get("limit"), search=post.get("search") == "on", corpus=post.get("corpus"),
                          queue=post.get("queue"), max_new_tokens=post.get("max_new_tokens"), user=request.user)
    except (EvalLaunchError, QueueUnavailable) as exc:
        return _answer(request, run, error=str(exc))
    warning = no_worker_warning(job.queue)
    where = ("the CPU (queue evals, where evaluations wait behind no training run and hold up no upload)"
             if job.queue == CPU_EVAL_QUEUE else job.queue)
    notice = f"Evaluation {job.pk} queued on {where}." + (f" Warning: {warning}." if warning else "")
    return _answer(request, run, notice=notice, go=job)


def _answer(request, run, error: str = "", notice: str = "", go=None):
    if request.headers.get("HX-Request") and run is not None:
        return render(request, "evals/_run_panel_body.html", panel_context(request, run, error, notice))
    if error:
        messages.error(request, error)
        return redirect("runs:detail", run_id=run.pk) if run is not None else redirect("evals:index")
    messages.success(request, notice)
    if isinstance(go, CrossPlay):
        return redirect("evals:crossplay", crossplay_id=go.pk)
    return redirect("evals:job", job_id=go.pk)


@require_POST
@role_required("launch_run")
def create_benchmark(request):
    post = request.POST
    try:
        if post.get("kind") == "heldout":
            corpus = Corpus.objects.filter(pk=post.get("corpus")).first() if str(post.get("corpus", "")).isdecimal() \
                else None
            if corpus is None:
                raise BenchmarkError("choose the corpus to build the held-out questions from")
            bench = bench_service.heldout(post.get("name"), corpus, n=_number(post.get("n"), 200, "n"),
                                          seed=_number(post.get("seed"), 0, "seed"), user=request.user,
                                          scoring=post.get("scoring") or "exact")
        else:
            bench = bench_service.upload(post.get("name"), request.FILES.get("file"), post.get("scoring") or None,
                                         user=request.user, title=post.get("title") or "")
    except BenchmarkError as exc:
        messages.error(request, f"Benchmark not created: {exc}")
        return redirect("evals:index")
    messages.success(request, f"Benchmark {bench.name} created with {bench.size} items.")
    return redirect("evals:index")


def _number(value, default: int, name: str) -> int:
    if value in (None, ""):
        return default
    if not str(value).strip().isdecimal():
        raise BenchmarkError(f"{name} must be a whole number, got {value!r}")
    return int(value)


def estimate_view(request):
    """The launch forms' estimate line (htmx): items x tokens, and a time measured on the queue."""
    queue = request.GET.get("queue") or "gpu"
    queue = CPU_EVAL_QUEUE if queue == "cpu" else queue
    names = request.GET.getlist("benchmarks")
    raw = (request.GET.get("limit") or "").strip()
    limit = int(raw) if raw.isdecimal() and int(raw) > 0 else default_limit(queue)
    sizes = [b.size or limit for b in Benchmark.objects.filter(name__in=names)] or [limit]
    items = sum(min(limit, size) for size in sizes)
    tokens = (request.GET.get("max_new_tokens") or "512").strip()
    target = request.GET.get("target") or ""
    if target == "base":  # the run panel's choice: the run's own base model (the page shows no server path)
        run_id = request.GET.get("run") or ""
        run = Run.objects.filter(pk=int(run_id)).first() if run_id.isdecimal() and len(run_id) < 19 else None
        target = f"base:{run.model_name}" if run is not None else ""
    result = eval_estimate(queue, items, int(tokens) if tokens.isdecimal() else 512,
                           target.removeprefix("base:") if target.startswith("base:") else "")
    return render(request, "evals/_estimate.html", {"estimate": result})


def job_detail(request, job_id: int):
    reap()
    job = get_object_or_404(EvalJob.objects.select_related("run", "checkpoint", "corpus", "owner"), pk=job_id)
    results = list(job.results.select_related("benchmark", "job"))
    annotate_paired(job.run, results)
    chosen = request.GET.get("benchmark") or (results[0].benchmark.name if results else "")
    samples = EvalSample.objects.filter(result__job=job, result__benchmark__name=chosen).order_by("index")
    if request.GET.get("correct") in ("true", "false"):
        samples = samples.filter(correct=request.GET["correct"] == "true")
    page = Paginator(samples, SAMPLES_PER_PAGE).get_page(request.GET.get("page"))
    template = "evals/_job_status.html" if request.headers.get("HX-Request") else "evals/job.html"
    return render(request, template, {"job": job, "results": results, "chosen": chosen, "page": page,
                                      "correct": request.GET.get("correct", ""),
                                      "can_cancel": job.is_active and can_cancel(request.user, job)})


@require_POST
@role_required("launch_run")
def cancel(request, job_id: int):
    job = get_object_or_404(EvalJob.objects.select_related("run"), pk=job_id)
    _cancel(request, job, f"Evaluation {job.pk}", " It stops before its next item; what it scored is kept.")
    return redirect("evals:job", job_id=job.pk)


@require_POST
@role_required("launch_run")
def crossplay_cancel(request, crossplay_id: int):
    job = get_object_or_404(CrossPlay.objects.select_related("run"), pk=crossplay_id)
    _cancel(request, job, f"Cross-play {job.pk}", " It stops before its next cell; the cells it filled are kept.")
    return redirect("evals:crossplay", crossplay_id=job.pk)


def _cancel(request, job, what: str, when_running: str) -> None:
    """Cancel an evaluation or cross-play for the page: a refusal or the outcome as a message."""
    try:
        cancel_eval(job, request.user)
    except EvalCancelError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{what} cancelled." + (when_running if job.started_at else ""))


def compare(request):
    error, data = "", None
    if request.GET.getlist("run"):
        try:
            runs, benches = compare_inputs(request.GET)
            data = hide_server_paths(comparison(runs, benches), request.user)  # a base model's path: its name
        except BenchmarkError as exc:
            error = str(exc)
    elif request.GET.get("go"):  # the form sent with no run picked
        error = "Pick one or more runs to compare (Ctrl- or ⌘-click picks several)."
    evaluated = Run.objects.filter(evals__isnull=False).distinct().order_by("-id")[:100]
    return render(request, "evals/compare.html", {
        "data": data, "error": error,
        "runs": evaluated, "benchmarks": Benchmark.objects.all(),
        "chosen_runs": [int(r) for v in request.GET.getlist("run") for r in v.split(",") if r.strip().isdecimal()],
        "chosen_benchmarks": [b for v in request.GET.getlist("benchmark") for b in v.split(",") if b.strip()],
    }, status=400 if error else 200)


@require_POST
@role_required("launch_run")
def crossplay_launch(request, run_id: int):
    run = get_object_or_404(Run, pk=run_id)
    post = request.POST
    try:
        job = launch_crossplay(run, post.getlist("checkpoints"), n_tasks=post.get("n_tasks"),
                               answers_per_task=post.get("answers_per_task"),
                               temperature=post.get("temperature") or 1.0, queue=post.get("queue"), user=request.user)
    except (EvalLaunchError, QueueUnavailable) as exc:
        return _answer(request, run, error=str(exc))
    return _answer(request, run, notice=f"Cross-play {job.pk} queued on {job.queue}.", go=job)


def crossplay_detail(request, crossplay_id: int):
    job = get_object_or_404(CrossPlay.objects.select_related("run"), pk=crossplay_id)
    template = "evals/_crossplay_body.html" if request.headers.get("HX-Request") else "evals/crossplay.html"
    return render(request, template, {"job": job, "job_data": hide_server_paths(job.as_dict(), request.user),
                                      "can_cancel": job.is_active and can_cancel(request.user, job)})

