"""Run pages: the list, the launch form, the run page, its pause / resume / cancel buttons, the
task ledger (JSON for the page's charts), an attempt's trajectory, and the compare view."""
from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Case, CharField, Count, F, Func, IntegerField, OuterRef, Q, Subquery, Value, When
from django.db.models.expressions import RawSQL
from django.db.models.functions import Lower
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from apps.accounts.roles import can, can_control_run, role_required, run_refusal, shown_model
from apps.episodes.models import Attempt, Task
from apps.jobs.lifecycle import QueueUnavailable
from apps.jobs.waiting import launch_warning, no_worker_warning
from apps.runs import compare as run_compare
from apps.runs import ledger as run_ledger
from apps.runs import method_panel
from apps.runs import metrics as run_metrics
from apps.runs import samples as run_samples
from apps.runs import trajectory as run_trajectory
from apps.runs.forms import PRESETS, SECRET_FIELDS, LaunchForm, clone_prefill, field_name, preset_prefill, typed
from apps.runs.live import current_progress
from apps.runs.models import ACTIVE, IllegalTransition, Metric, Run, Status
from apps.runs.services import lifecycle
from apps.runs.services.estimate import estimate
from apps.runs.services.launch import LaunchError, launch, validate
from apps.runs.workers import workers_overview
from trainer.config import METHOD_NAMES

LATEST_SAMPLES = 12
INITIAL_POINTS = 1000  # per role, about the reward chart's width in pixels


def _latest_samples(run) -> dict:
    """The samples table: the newest tasks (with why an invalid one is invalid and how many attempts
    answer it) and attempts (without their token arrays and turns: the trajectory page has them),
    each with the answer a verifier read next to the gold answer."""
    tasks = list(Task.objects.filter(run=run).annotate(n_attempts=Count("attempts"))
                 .order_by("-step", "-id")[:LATEST_SAMPLES])
    for t in tasks:
        t.why = run_samples.why_invalid(t)
    attempts = list(Attempt.objects.filter(run=run).select_related("task")
                    .defer("token_ids", "loss_mask", "turns", "passages", "task__data")
                    .order_by("-step", "-id")[:LATEST_SAMPLES])
    for a in attempts:
        a.check = run_samples.answer_check(run, a, a.task)
    return {"tasks": tasks, "attempts": attempts}


def with_last_reward(qs):
    """Annotate ``last_reward``: the newest reward metric of each run (any role)."""
    newest = (Metric.objects.filter(run=OuterRef("pk"), name__in=run_metrics.REWARD_NAMES)
              .order_by("-step", "role").values("value")[:1])
    return qs.annotate(last_reward=Subquery(newest))


RUN_SORTS = {"live": "live runs first, then newest", "newest": "newest first", "oldest": "oldest first",
             "name": "by name", "method": "by method", "status": "by status", "model": "by model",
             "tag": "by first tag"}

# "by status": the order of the status filter (queued, running, paused, finished, failed, cancelled)
_STATUS_RANK = Case(*(When(status=s, then=Value(i)) for i, s in enumerate(Status.values)),
                    default=Value(len(Status.values)), output_field=IntegerField())
# "by model": the model as the list shows it, a path by its folder's name (Run.model_label), case-insensitive
_MODEL_KEY = Lower(Func(Func(F("model_name"), Value("/"), function="rtrim"), Value("^.*/"), Value(""),
                        function="regexp_replace", output_field=CharField()))
# "by tag": a run's first tag in alphabetical order; untagged runs last
_FIRST_TAG = RawSQL("(SELECT min(t) FROM jsonb_array_elements_text(runs_run.tags) AS t)", (), output_field=CharField())


def seed_rows(runs: list) -> list[dict]:
    """The runs table's rows: ``{"run": run}`` for a run on its own; for seeds of one config
    (``compare.seed_groups``: same config apart from the seed, or a shared ``group:<name>`` tag) one
    ``{"group": {...}}`` line where the group's first run would stand (its seeds, steps, statuses and the mean
    and spread of their last rewards), followed by its runs as ``{"run": run, "seed": seed}``."""
    groups = run_compare.seed_groups(runs)
    by_pk = {r.pk: r for r in runs}
    group_of = {pk: i for i, g in enumerate(groups) for pk in g["runs"]}
    rows, shown = [], set()
    for run in runs:
        i = group_of.get(run.pk)
        if i is None:
            rows.append({"run": run})
            continue
        if i in shown:
            continue
        shown.add(i)
        g, members = groups[i], [by_pk[pk] for pk in groups[i]["runs"]]
        seeds = [run_compare.seed_of(m) for m in members]
        rewards = [float(m.last_reward) for m in members if m.last_reward is not None]
        mean = sum(rewards) / len(rewards) if rewards else None
        sd = (sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)) ** 0.5 if len(rewards) > 1 else None
        steps = [m.current_step for m in members]
        rows.append({"group": {
            # the line lists the seeds itself: a config group's label without its " · seeds ..." (the compare
            # chart's legend keeps it)
            "label": g["label"].split(" · seeds ")[0] if g["by"] == "config" else g["label"],
            "by": g["by"], "runs": g["runs"], "ids": ",".join(map(str, g["runs"])),
            "seeds": ", ".join("?" if s is None else str(s) for s in seeds), "n": len(members),
            "mean": mean, "sd": sd, "lo": min(rewards) if rewards else None, "hi": max(rewards) if rewards else None,
            "rewarded": len(rewards), "step_lo": min(steps), "step_hi": max(steps),
            "statuses": ", ".join(sorted({m.status for m in members}))}})
        rows += [{"run": m, "seed": s} for m, s in zip(members, seeds)]
    return rows


def index(request):
    """Every run, filtered by method / status / tag / model, live runs (running, queued, paused) first."""
    lifecycle.reap_stale_runs()
    qs = Run.objects.select_related("owner", "corpus")
    chosen = {k: (request.GET.get(k) or "").strip() for k in ("method", "status", "tag", "model", "q")}
    sort = request.GET.get("sort") if request.GET.get("sort") in RUN_SORTS else "live"
    if chosen["method"]:
        qs = qs.filter(method=chosen["method"])
    if chosen["status"] == "time-limit":
        qs = qs.filter(status=Status.FINISHED, config__train__time_limit_minutes__gt=0,
                       current_step__lt=F("total_steps"))
    elif chosen["status"]:
        qs = qs.filter(status=chosen["status"])
    if chosen["tag"]:
        qs = qs.filter(tags__contains=[chosen["tag"].lower()])
    if chosen["model"]:  # a model's name, or its path (an admin's list): a path's runs show under its folder's name too
        folder = "/" + chosen["model"].strip("/")  # a stored path may end in "/" (the list shows its folder's name)
        qs = qs.filter(Q(model_name=chosen["model"]) | Q(model_name__endswith=folder)
                       | Q(model_name__endswith=folder + "/"))
    if chosen["q"]:
        qs = qs.filter(Q(name__icontains=chosen["q"]) | Q(notes__icontains=chosen["q"]))
    live = Case(When(status__in=ACTIVE, then=Value(0)), default=Value(1), output_field=IntegerField())
    order = {"live": (live, "-created_at", "-id"), "newest": ("-created_at", "-id"), "oldest": ("created_at", "id"),
             "name": ("name", "-id"), "method": ("method", "-created_at"),
             "status": (_STATUS_RANK, "-created_at", "-id"), "model": (_MODEL_KEY, "-created_at", "-id"),
             "tag": (_FIRST_TAG.asc(nulls_last=True), "-created_at", "-id")}[sort]
    runs = list(with_last_reward(qs.order_by(*order))[:200])
    every = Run.objects.all()
    return render(request, "runs/index.html", {
        "runs": runs, "rows": seed_rows(runs), "can_launch": can(request.user, "launch_run"), "chosen": chosen, "sort": sort,
        "sorts": RUN_SORTS.items(), "statuses": [*Status.values, "time-limit"],
        "methods": sorted(set(every.values_list("method", flat=True))),
        "models": sorted({shown_model(m, request.user) for m in every.values_list("model_name", flat=True)})[:100],
        "all_tags": sorted({t for tags in every.exclude(tags=[]).values_list("tags", flat=True) for t in tags or []}),
        "filtered": any(chosen.values())})


@require_POST
@role_required("launch_run")
def describe(request, run_id: int):
    """Name, tags and notes of a run (researchers)."""
    run = get_object_or_404(Run, pk=run_id)
    try:
        run.describe(request.POST.get("name", ""), request.POST.get("tags", ""), request.POST.get("notes", ""))
    except ValueError as exc:
        messages.error(request, f"Not saved: {exc}.")
    else:
        messages.success(request, f"Run {run.pk} described.")
    return redirect("runs:detail", run_id=run.pk)


def when(request, run_id: int):
    """The run page's "Started · heartbeat" line, polled (htmx) while the run is active so the heartbeat's age
    stays current."""
    run = get_object_or_404(Run, pk=run_id)
    return render(request, "runs/_when.html", {"run": run})


@sensitive_post_parameters(*SECRET_FIELDS)  # error reports never show a typed-in API key
@role_required("launch_run")
def new(request):
    method = request.GET.get("method") or request.POST.get("method") or "spice"
    if method not in METHOD_NAMES:
        messages.error(request, f"Unknown method {method!r}; choose one of {', '.join(METHOD_NAMES)}.")
        return redirect("runs:new")
    form = LaunchForm(method, request.POST or None, prefill=_prefill(request))
    if request.method == "POST" and form.is_valid():
        try:
            run = launch(method, form.cleaned_data["model"], form.cleaned_data["corpus"] or None,
                         config=form.overrides(), user=request.user, web=True,
                         queue=form.cleaned_data["queue"] or None,
                         control="random-reward" if form.cleaned_data["control"] else None)
        except LaunchError as exc:
            form.add_problems(exc.problems)
        except QueueUnavailable as exc:
            form.add_error(None, str(exc))
        else:
            twins = [f"its {t.config['train']['control']} control, run {t.pk}" for t in run.controls.all()]
            messages.success(request, f"Run {run.pk} queued on {run.queue}" + (f", with {twins[0]}" if twins else "")
                             + ".")
            warning = no_worker_warning(run.queue)
            if warning:
                messages.warning(request, f"Run {run.pk}: {warning}.")
            return redirect("runs:detail", run_id=run.pk)
    elif form.is_bound:
        _config_problems_too(form, method)
    status = 400 if request.method == "POST" else 200
    return render(request, "runs/new.html", {"form": form, "method": method, "methods": METHOD_NAMES,
                                             "presets": PRESETS, "preset": request.GET.get("preset", ""),
                                             "clone": _clone_id(request) or "",
                                             "estimate": _estimate(form, method)},
                  status=status)


def _prefill(request) -> dict:
    """?preset=cpu-smoke or ?clone=<run id> (a run of the same method) fill the form."""
    if request.method != "GET":
        return {}
    clone = _clone_id(request)
    if clone is not None:
        source = Run.objects.filter(pk=clone).first()
        if source is None:
            messages.error(request, f"No run {clone} to clone.")
            return {}
        return clone_prefill(source)
    return preset_prefill(request.GET.get("preset", ""))


def _clone_id(request) -> int | None:
    """?clone=<run id> as a number (ASCII digits only: "²" is a digit to str.isdigit, not to int)."""
    raw = request.GET.get("clone", "")
    return int(raw) if raw.isascii() and raw.isdigit() else None


def _config_problems_too(form: LaunchForm, method: str) -> None:
    """A form with field errors also shows the config's own problems (model, corpus, cross-field checks) found from
    the fields that did parse, so one submit lists every error instead of one round per kind."""
    data = getattr(form, "cleaned_data", {})
    config = {}
    for row in form.rows:
        name = field_name(row["path"])
        if name in data:
            value = typed(row, data[name])
            if value != row["default"]:
                config[row["path"]] = value
    try:
        validate(method, data.get("model") or form["model"].value() or "", data.get("corpus") or None, config=config,
                 web=True, queue=data.get("queue") or None)
    except LaunchError as exc:
        fresh = [(path, message) for path, message in exc.problems
                 if {"model.name_or_path": "model"}.get(path, field_name(path)) not in form.errors]
        form.add_problems(fresh)
    except Exception:  # noqa: BLE001  the field errors already say what to fix first
        pass


def _estimate(form: LaunchForm, method: str) -> dict:
    """{"text", "warning", "error"}: the cost of what the form holds, and a queue no live worker serves."""
    if form.is_bound:
        if not form.is_valid():
            return {"error": "fix the fields marked below to see the cost"}
        model, corpus, queue, config = (form.cleaned_data["model"], form.cleaned_data["corpus"] or None,
                                        form.cleaned_data["queue"] or None, form.overrides())
    else:
        model, corpus, queue = form["model"].value(), form["corpus"].value() or None, form["queue"].value() or None
        values = ((row, typed(row, form[field_name(row["path"])].value())) for row in form.rows)
        config = {row["path"]: value for row, value in values if value != row["default"]}
    try:
        cfg, _, queue = validate(method, model, corpus, config=config, web=True, queue=queue)
    except LaunchError as exc:
        return {"error": f"not launchable yet: {exc.problems[0][0] or 'config'}: {exc.problems[0][1]}"}
    return {**estimate(method, cfg.model.name_or_path, cfg.to_dict(), queue), "queue": queue,
            "warning": launch_warning(queue)}


@require_POST
@role_required("launch_run")
def estimate_view(request):
    """The launch form's cost box, refreshed (htmx) whenever a field changes."""
    method = request.POST.get("method") or "spice"
    if method not in METHOD_NAMES:
        return render(request, "runs/_estimate.html", {"estimate": {"error": f"unknown method {method!r}"}})
    form = LaunchForm(method, request.POST)
    return render(request, "runs/_estimate.html", {"estimate": _estimate(form, method)})


def run_time_axis(run) -> dict:
    """The run page's step -> time map (``compare.time_axes``, as the compare view draws it) and ``wall_start``:
    the wall clock at which the run's first step began, so the page can place live steps' stamps on it."""
    axis = run_compare.time_axes([run])[run.pk]
    axis["wall_start"] = None
    if axis["wall"]:
        stamp = (Metric.objects.filter(run=run, name="wall_clock", step=axis["steps"][-1]).order_by("-value")
                 .values_list("value", flat=True).first())
        if stamp is not None:
            axis["wall_start"] = stamp - axis["wall"][-1]
    return axis


def detail(request, run_id: int):
    lifecycle.reap_stale_runs()
    run = get_object_or_404(Run.objects.select_related("owner", "corpus"), pk=run_id)
    curves = run_metrics.role_curves(run)
    return render(request, "runs/detail.html", {
        "run": run,
        "can_control": can_control_run(request.user, run),
        "can_describe": can(request.user, "launch_run"),
        "events": run.events.all()[:50],
        **_latest_samples(run),
        "latest_groups": run_metrics.by_role(run_metrics.latest_values(run), curves),
        # the reward chart: one curve per role; its first points come with the page (no round trip before it can draw)
        "curve_names": run_metrics.CURVE_NAMES,
        "reward_series": run_metrics.curve_series(run, points=INITIAL_POINTS),
        "time_axis": run_time_axis(run),  # the curves' wall / training time axes
        "waiting": "" if curves else run_metrics.waiting_note(run),
        "progress": current_progress(run.pk) if run.status == "running" else None,
        "tabs": run_metrics.tabs(run_metrics.metric_names(run.pk)),
        "ledger": run_ledger.ledger(run),
        "method_panel": method_panel.panel(run),  # SCOPE / SCORE / pi-Play: gates, harness, QCPs
        "checkpoints": run.checkpoints.all()[:5],
        "controls": list(run.controls.order_by("pk")),  # its control runs (launched with it; the other side: control_of)
    })


@require_POST
def control(request, run_id: int, action: str):
    """pause / resume / cancel; answers htmx with the refreshed status+controls block."""
    run = get_object_or_404(Run, pk=run_id)
    if not can_control_run(request.user, run):
        raise PermissionDenied(run_refusal(request.user, run))
    error = ""
    try:
        lifecycle.ACTIONS[action](run, request.user)
    except (IllegalTransition, QueueUnavailable) as exc:
        error = str(exc)
    run.refresh_from_db()
    if request.headers.get("HX-Request"):
        # 200 even for a refused action: htmx swaps only 2xx answers, and the block shows the reason
        return render(request, "runs/_controls.html", {"run": run, "can_control": True, "error": error, "oob": True})
    if error:
        messages.error(request, error)
    return redirect("runs:detail", run_id=run.pk)


def controls(request, run_id: int):
    """The status badge + buttons block (the page refreshes it after a status message)."""
    run = get_object_or_404(Run.objects.select_related("owner"), pk=run_id)
    return render(request, "runs/_controls.html", {"run": run, "can_control": can_control_run(request.user, run),
                                                   "oob": True})


def samples(request, run_id: int):
    """The latest tasks and attempts block (htmx refresh after reconnecting)."""
    run = get_object_or_404(Run, pk=run_id)
    return render(request, "runs/_samples.html", {
        "run": run,
        **_latest_samples(run),
    })


def workers(request):
    """RQ workers alive, their queues and GPUs, the job each runs, and what is queued (htmx asks for the
    table alone every few seconds)."""
    template = "runs/_workers.html" if request.headers.get("HX-Request") else "runs/workers.html"
    return render(request, template, workers_overview())


def ledger(request, run_id: int):
    """The task ledger as JSON (the run page draws it and refreshes it as tasks arrive)."""
    run = get_object_or_404(Run, pk=run_id)
    return JsonResponse(run_ledger.ledger(run))


def trajectory(request, run_id: int, key: str):
    """One attempt turn by turn, with the prompt it answered, its retrieved passages and its tokens coloured by loss mask."""
    run = get_object_or_404(Run.objects.select_related("corpus"), pk=run_id)
    attempt = Attempt.objects.select_related("task").filter(run=run, key=key).first()
    if attempt is None:
        raise Http404(f"Run {run.pk} has no attempt {key!r} (it may not be written yet; reload in a moment).")
    grades = attempt.grades.select_related("rubric").order_by("id")[:50]
    task = attempt.task
    return render(request, "runs/trajectory.html", {
        "run": run, "attempt": attempt, "task": task, "grades": grades,
        "why_invalid": run_samples.why_invalid(task) if task else "",
        "check": run_samples.answer_check(run, attempt, task),
        "document": run_samples.source_document(run, task),
        "prompt": run_trajectory.prompt_text(attempt, run.model_name),
        "turns": run_trajectory.turns(attempt), "passages": run_trajectory.passages(attempt),
        "tokens": run_trajectory.token_view(attempt, run.model_name),
    })


def task_detail(request, run_id: int, key: str):
    """One task: its question and answer, why it is invalid, the document it was written from, and
    every attempt that answers it (each linked to its trajectory)."""
    run = get_object_or_404(Run.objects.select_related("corpus"), pk=run_id)
    found = Task.objects.filter(run=run, key=key).first()
    if found is None:
        raise Http404(f"Run {run.pk} has no task {key!r} (it may not be written yet; reload in a moment).")
    attempts = list(Attempt.objects.filter(run=run, task_key=key)
                    .defer("token_ids", "loss_mask", "turns", "passages").order_by("role", "key"))
    for a in attempts:
        a.check = run_samples.answer_check(run, a, found)
    return render(request, "runs/task.html", {
        "run": run, "task": found, "attempts": attempts, "why_invalid": run_samples.why_invalid(found),
        "document": run_samples.source_document(run, found),
    })


def compare(request):
    """Two or more runs' curves of one metric overlaid: /runs/compare/?ids=1,2&metric=reward_mean; below,
    their checkpoint evaluations against training wall-clock when they have some (evals_tags.wallclock_chart)."""
    try:
        runs = run_compare.runs_to_compare(request.GET.getlist("ids"))
        choices = run_compare.metric_choices(runs)
        metric = run_compare.pick_metric(request.GET.get("metric"), choices)
    except run_compare.CompareError as exc:
        return render(request, "runs/compare.html", {"error": str(exc)}, status=400)
    return render(request, "runs/compare.html", {
        "runs": with_last_reward(Run.objects.filter(pk__in=[r.pk for r in runs])).select_related("owner"),
        "ids": ",".join(str(r.pk) for r in runs), "run_ids": [r.pk for r in runs], "compared": runs,
        "run_labels": [r.label for r in runs],
        "metric": metric, "choices": choices,
        "time_axes": {str(k): v for k, v in run_compare.time_axes(runs).items()},
        "seed_groups": run_compare.seed_groups(runs),
        "axis": request.GET.get("x") if request.GET.get("x") in run_compare.AXES else "step",
    })
