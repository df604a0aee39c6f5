"""Starting evaluations: checks, the job rows, and their RQ jobs (queue ``gpu``, or ``evals`` for the CPU).

- ``launch_eval(...)``: a checkpoint of a run (its folder must still exist: ``checkpoint.keep_last``
  prunes old ones) or ``base:<model name>`` on one or more benchmarks, optionally with the search
  tool over a corpus;
- ``launch_crossplay(run, checkpoints, ...)``: the cross-play matrix of chosen checkpoints;
- ``cancel_eval(job, user)``: a queued or running evaluation or cross-play is cancelled (its owner, the
  owner of its run for an automatic one, or an admin); a running one stops before its next item or cell;
- ``on_checkpoint(run_id, step, path)``: a run hook (apps/runs/hooks.py, registered in apps.py);
  when the run's config has ``eval.every_checkpoints: N`` (and ``eval.benchmarks``), every N-th
  checkpoint of the run gets an automatic evaluation. It never raises: a problem becomes a run event.

Every problem is an ``EvalLaunchError`` whose ``field`` names the input to fix.
"""
from __future__ import annotations

import logging
from pathlib import Path

from django.db import IntegrityError, transaction

from apps.accounts.roles import can, can_control_run, denied_message, run_refusal
from apps.corpora.models import Corpus
from apps.evals.benchmarks import find
from apps.evals.estimate import CPU_DEFAULT_LIMIT
from apps.evals.models import Benchmark, CrossPlay, EvalJob
from apps.jobs.lifecycle import enqueue as enqueue_job
from apps.runs.models import Checkpoint, Run
from apps.runs.services.launch import QUEUES, check_model
from trainer.evaluate import BenchmarkError, ModelSpecError, describe_target

log = logging.getLogger("selfplay.evals")
JOB_TIMEOUT = 7 * 24 * 3600
MAX_LIMIT = 100_000
MAX_CROSSPLAY_CHECKPOINTS = 8


class EvalLaunchError(ValueError):
    def __init__(self, message: str, field: str = "", status: int = 400):
        super().__init__(message)
        self.field = field
        self.status = status

    def as_dict(self) -> dict:
        return {self.field or "request": str(self)}


def _checkpoint(value, run: Run | None) -> Checkpoint:
    if isinstance(value, Checkpoint):
        return value
    qs = Checkpoint.objects.select_related("run")
    if run is not None:
        qs = qs.filter(run=run)
    try:
        return qs.get(pk=int(value))
    except (TypeError, ValueError, Checkpoint.DoesNotExist):
        where = f" of run {run.pk}" if run else ""
        raise EvalLaunchError(f"no checkpoint {value!r}{where}; pick one from the run page", "checkpoint") from None


def _on_disk(ckpt: Checkpoint) -> None:
    if not Path(ckpt.path).is_dir():
        raise EvalLaunchError(f"checkpoint step {ckpt.step} ({ckpt.path}) is no longer on disk: runs keep only their "
                              "newest checkpoint.keep_last checkpoints; evaluate a newer one", "checkpoint")


def _int(value, name: str, low: int, high: int, default=None):
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise EvalLaunchError(f"{name} must be an integer between {low} and {high}, got {value!r}", name) from None
    if not low <= number <= high:
        raise EvalLaunchError(f"{name} must be between {low} and {high}, got {number}", name)
    return number


CPU_EVAL_QUEUE = "evals"  # an evaluation on the CPU waits behind no training run (`cpu`) and holds up no
# upload or reaper (`short`, `default`): it has a queue and a worker of its own


def _queue(queue, run: Run | None) -> str:
    """The RQ queue of an evaluation: ``gpu``, or ``evals`` (CPU_EVAL_QUEUE) for one on the CPU (asked as ``cpu``)."""
    if queue in (None, ""):
        queue = run.queue if run is not None and run.queue in QUEUES else "gpu"
    if queue not in (*QUEUES, CPU_EVAL_QUEUE):
        raise EvalLaunchError(f"unknown queue {queue!r}; use gpu or cpu", "queue")
    return CPU_EVAL_QUEUE if queue == "cpu" else queue


def _target(model, checkpoint, run, web: bool) -> tuple[str, Run | None, Checkpoint | None, int | None]:
    """(model spec, run, checkpoint, step) from a checkpoint, base:<name>/a model name, or the run's base."""
    if checkpoint not in (None, ""):
        ckpt = _checkpoint(checkpoint, run)
        _on_disk(ckpt)
        return ckpt.path, ckpt.run, ckpt, ckpt.step
    if model in (None, "") and run is not None:
        model = f"base:{run.model_name}"
    if not isinstance(model, str) or not model.strip():
        raise EvalLaunchError("choose what to evaluate: a checkpoint id, or model base:<model name> "
                              "(e.g. base:smollm2-135m-instruct)", "model")
    model = model.strip()
    name = model[5:].strip() if model.startswith("base:") else None
    if name is not None:
        problem = check_model(name, web) if name else "base: needs a model name"
        if problem:
            raise EvalLaunchError(problem, "model")
        return f"base:{name}", run, None, None
    if web:
        raise EvalLaunchError("through the web, give a checkpoint id or base:<model name>; checkpoint folders are "
                              "for manage.py eval", "model")
    try:
        target = describe_target(model)
    except ModelSpecError as exc:
        raise EvalLaunchError(str(exc), "model") from None
    return model, run, None, target.get("step")


def launch_eval(*, benchmarks, model=None, checkpoint=None, run: Run | None = None, limit=None, search=False,
                corpus=None, queue=None, max_new_tokens=512, user=None, auto: bool = False, web: bool = True,
                enqueue_job: bool = True) -> EvalJob:
    spec, run, ckpt, step = _target(model, checkpoint, run, web)
    _may_evaluate(user, run, "evaluate its checkpoints")
    try:
        found = find(benchmarks)
    except BenchmarkError as exc:
        raise EvalLaunchError(str(exc), "benchmarks") from None
    scores_only = [b.name for b in found if b.kind == Benchmark.Kind.IMPORTED]
    if scores_only:
        raise EvalLaunchError(f"{', '.join(scores_only)}: scores imported with a run folder (manage.py import_run); "
                              "the benchmark's questions file is not here (only the items those evaluations answered), so it "
                              "cannot be evaluated (upload the questions under another name)",
                              "benchmarks")
    limit = _int(limit, "limit", 1, MAX_LIMIT)
    if limit is None and _queue(queue, run) == CPU_EVAL_QUEUE:
        limit = CPU_DEFAULT_LIMIT  # the whole of GSM8K on the CPU would take days: a few items unless asked
    max_new_tokens = _int(max_new_tokens, "max_new_tokens", 1, 32768, 512)
    search = search in (True, "true", "1", "on", 1)
    corpus_obj = _search_corpus(corpus, run) if search else None
    with transaction.atomic():
        job = EvalJob.objects.create(
            model_spec=spec, run=run, checkpoint=ckpt, step=step, limit=limit, search=search, corpus=corpus_obj,
            max_new_tokens=max_new_tokens, auto=auto, queue=_queue(queue, run),
            owner=user if getattr(user, "is_authenticated", False) else None,
            label=spec if ckpt is None else f"run {run.pk} @ step {step}")
        job.benchmarks.set(found)
    if enqueue_job:
        enqueue(job, "apps.evals.jobs.execute_eval")
    return job


def _search_corpus(corpus, run: Run | None):
    if corpus in (None, ""):
        if run is not None and run.corpus_id:
            return run.corpus
        raise EvalLaunchError("search needs a corpus: give corpus (a name or id), or evaluate a run's checkpoint",
                              "corpus")
    if isinstance(corpus, Corpus):
        return corpus
    text = str(corpus).strip()
    found = Corpus.objects.filter(name=text).first() or (
        Corpus.objects.filter(pk=int(text)).first() if text.isdecimal() else None)
    if found is None:
        raise EvalLaunchError(f"no corpus named {text!r}; see /corpora/", "corpus")
    return found


def launch_crossplay(run: Run, checkpoints, *, n_tasks=8, answers_per_task=4, temperature=1.0, max_new_tokens=None,
                     seed=0, queue=None, user=None, enqueue_job: bool = True) -> CrossPlay:
    _may_evaluate(user, run, "cross-play its checkpoints")
    if run.corpus_id is None:
        raise EvalLaunchError("cross-play writes tasks from the run's corpus documents; this run has no corpus",
                              "run")
    if isinstance(checkpoints, (str, int)):
        checkpoints = [c for c in str(checkpoints).split(",") if c.strip()]
    chosen = [_checkpoint(c, run) for c in (checkpoints or [])]
    chosen = sorted({c.pk: c for c in chosen}.values(), key=lambda c: c.step)
    if not 1 <= len(chosen) <= MAX_CROSSPLAY_CHECKPOINTS:
        raise EvalLaunchError(f"choose 1 to {MAX_CROSSPLAY_CHECKPOINTS} checkpoints of the run", "checkpoints")
    for c in chosen:
        _on_disk(c)
    try:
        temperature = float(temperature)
    except (TypeError, ValueError):
        raise EvalLaunchError(f"temperature must be a number, got {temperature!r}", "temperature") from None
    if not 0 <= temperature <= 2:
        raise EvalLaunchError("temperature must be between 0 and 2", "temperature")
    default_tokens = int((run.config.get("rollout") or {}).get("max_new_tokens") or 512)
    job = CrossPlay.objects.create(
        run=run, checkpoints=[{"id": c.pk, "step": c.step, "path": c.path} for c in chosen],
        n_tasks=_int(n_tasks, "n_tasks", 1, 512, 8), answers_per_task=_int(answers_per_task, "answers_per_task", 1, 64, 4),
        temperature=temperature, max_new_tokens=_int(max_new_tokens, "max_new_tokens", 16, 32768, default_tokens),
        seed=_int(seed, "seed", 0, 2**31 - 1, 0), queue=_queue(queue, run),
        matrix=[[None] * len(chosen) for _ in chosen],
        owner=user if getattr(user, "is_authenticated", False) else None)
    if enqueue_job:
        enqueue(job, "apps.evals.jobs.execute_crossplay")
    return job


def _may_evaluate(user, run: Run | None, what: str) -> None:
    """A person evaluates (or cross-plays) a run's checkpoints only when the run is theirs or they are an admin: the
    jobs hold the run's GPU queue and their results are shown on its page. (No user: the command line, or the
    automatic evaluations a run's own config asks for.)"""
    if run is not None and getattr(user, "is_authenticated", False) and not can_control_run(user, run):
        raise EvalLaunchError(run_refusal(user, run, what), "run", status=403)


class EvalCancelError(ValueError):
    """Why an evaluation cannot be cancelled; ``status`` is the HTTP status an API answers with."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def can_cancel(user, job: EvalJob) -> bool:
    """The launcher, the run's owner for an automatic evaluation, or an admin (control_any_run)."""
    if not can(user, "launch_run"):
        return False
    owner = job.owner_id if job.owner_id is not None else (job.run.owner_id if job.run_id else None)
    return owner == user.id or can(user, "control_any_run")


def cancel_eval(job: EvalJob, user) -> EvalJob:
    """queued -> cancelled; running -> cancelled, the job stopping at its next item with what it scored
    kept (an evaluation or a cross-play); EvalCancelError saying why not."""
    noun = "cross-play" if isinstance(job, CrossPlay) else "evaluation"
    if not can_cancel(user, job):
        role = f"{denied_message('launch_run')} " if not can(user, "launch_run") else ""  # a researcher lacks no role
        raise EvalCancelError(f"{role}Only its launcher or an admin can cancel {noun} {job.pk}.", 403)
    if not job.cancel(user):
        raise EvalCancelError(f"Cannot cancel {noun} {job.pk}: it is {job.status}; only a queued or running "
                              f"{noun} can be cancelled.", 409)
    return job


def enqueue(job, func: str) -> str:
    """Put ``func(job.pk)`` on the job's queue; the job fails with the reason when Redis refuses."""
    return enqueue_job(job, func, type(job).__name__.lower(), type(job).fail, "launch again", JOB_TIMEOUT)


# ---- automatic evaluations ------------------------------------------------------------------------

def auto_settings(run: Run) -> tuple[int, list[str], dict]:
    """(every N checkpoints, benchmark names, other options) from the run's ``eval`` config section."""
    section = (run.config or {}).get("eval") or {}
    every = int(section.get("every_checkpoints") or 0)
    names = section.get("benchmarks") or []
    options = {"limit": section.get("limit"), "search": bool(section.get("search")),
               "max_new_tokens": section.get("max_new_tokens") or 512}
    return every, list(names), options


def on_checkpoint(run_id: int, step: int, path: str) -> EvalJob | None:
    """Queue the automatic evaluation of this checkpoint when it is due; never raises."""
    try:
        run = Run.objects.get(pk=run_id)
        every, names, options = auto_settings(run)
        if every <= 0 or not names:
            return None
        ckpt = Checkpoint.objects.get(run=run, step=int(step))
        nth = Checkpoint.objects.filter(run=run, step__lte=ckpt.step).count()
        if nth % every or EvalJob.objects.filter(checkpoint=ckpt, auto=True).exists():
            return None
        job = launch_eval(benchmarks=names, checkpoint=ckpt, run=run, auto=True, web=False, **options)
        run.notable(f"automatic evaluation {job.pk} of step {ckpt.step} queued ({', '.join(names)})",
                    data={"eval_job": job.pk}, step=ckpt.step)
        return job
    except IntegrityError:  # the same checkpoint reported twice at once: one job is enough
        return None
    except Exception as exc:
        log.warning("automatic evaluation of run %s step %s not queued: %s", run_id, step, exc)
        try:
            Run.objects.get(pk=run_id).notable(f"automatic evaluation of step {step} not queued: {exc}",
                                               step=int(step))
        except Exception:
            pass
        return None
