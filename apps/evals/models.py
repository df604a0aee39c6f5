"""Benchmarks, evaluation jobs with per-benchmark results and sample-level outputs, and
cross-play matrices.

- ``Benchmark``: a bundled set (GSM8K test, GPQA-Diamond, AIME 2025: read from the package),
  a held-out QA set built from a corpus, or an uploaded JSONL; the last two are frozen to a
  JSONL file under ``$SELFPLAY_DATA_DIR/benchmarks/`` (``path``) and never change afterwards.
- ``EvalJob``: one model (a checkpoint of a run, or ``base:<model name>``) on one or more
  benchmarks; an RQ job (queue gpu or cpu) fills one ``EvalResult`` per benchmark (mean score and
  its 95% bootstrap interval) and its ``EvalSample`` rows (question, gold, prediction, correct).
- ``CrossPlay``: for chosen checkpoints of a run, the pass rate of checkpoint j (Reasoner) on
  tasks written by checkpoint i (SPICE Challenger), stored as ``matrix[i][j]`` cell by cell.
  An imported one (``manage.py import_run``, queue ``imported``) may have other columns than rows
  (``reasoners``) and the answers behind each cell (``counts``).

Jobs claim their row with a conditional UPDATE (queued -> running), so two workers never run
the same job; ``finish`` / ``fail`` are conditional on running too.
"""
from __future__ import annotations

import math

from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.jobs.lifecycle import cancel_job
from apps.jobs.models import JobRow
from apps.jobs.reaper import reap
from apps.jobs.waiting import wait_reason
from trainer.evaluate import SCORING


class Status(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobMixin(JobRow):
    """Status, owner and creation of a background job (the rest of its row: apps/jobs/models.py),
    with its atomic claim."""

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    created = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        abstract = True

    @property
    def is_active(self) -> bool:
        return self.status in (Status.QUEUED, Status.RUNNING)

    def claim(self, worker: str) -> bool:
        """queued -> running; False when another worker (or nobody: a finished job) has it."""
        now = timezone.now()
        won = type(self).objects.filter(pk=self.pk, status=Status.QUEUED).update(
            status=Status.RUNNING, started_at=now, heartbeat_at=now, worker_name=worker[:200], error="")
        if won:
            self.refresh_from_db()
        return won == 1

    def cancel(self, user=None) -> bool:
        """queued or running -> cancelled; False when it has already ended. A queued job never starts (its
        RQ job, if a worker still picks it, finds nothing to claim); a running one stops at its next item
        (``cancelled()``, which the job checks between items) and keeps what it scored."""
        who = getattr(user, "username", "") or "the system"
        now = timezone.now()
        won = type(self).objects.filter(pk=self.pk, status=Status.QUEUED).update(
            status=Status.CANCELLED, finished_at=now, error=f"cancelled by {who} before it started")
        if won and self.job_id:
            cancel_job(self.job_id)
        if not won:
            won = type(self).objects.filter(pk=self.pk, status=Status.RUNNING).update(
                status=Status.CANCELLED, finished_at=now,
                error=f"cancelled by {who} while running; what it scored before is kept")
        self.refresh_from_db()
        return won == 1

    def cancelled(self) -> bool:
        """True once the row was cancelled (the running job asks between items)."""
        return type(self).objects.filter(pk=self.pk, status=Status.CANCELLED).exists()

    def beat(self, **fields) -> None:
        type(self).objects.filter(pk=self.pk).update(heartbeat_at=timezone.now(), **fields)

    def finish(self) -> None:
        self._end(Status.FINISHED, "")

    def fail(self, error: str) -> None:
        self._end(Status.FAILED, error[:5000])

    @classmethod
    def reap_stale(cls, now=None) -> list[int]:
        """Fail running jobs whose worker stopped beating (killed, machine gone): nobody else would."""
        return reap(cls, cls._fail_silent, "launch it again", now)

    @classmethod
    def any_active(cls) -> bool:
        return cls.objects.filter(status__in=(Status.QUEUED, Status.RUNNING)).exists()

    def _fail_silent(self, error: str) -> bool:
        """Failed by the reaper, unless it beat or ended since the reaper read it."""
        return type(self).objects.filter(pk=self.pk, status=Status.RUNNING, heartbeat_at=self.heartbeat_at).update(
            status=Status.FAILED, finished_at=timezone.now(), error=error[:5000]) == 1

    def _end(self, status: str, error: str) -> None:
        now = timezone.now()
        type(self).objects.filter(pk=self.pk, status__in=[Status.QUEUED, Status.RUNNING]).update(
            status=status, error=error, finished_at=now, heartbeat_at=now)
        self.refresh_from_db()


class Benchmark(models.Model):
    class Kind(models.TextChoices):
        BUILTIN = "builtin"
        HELDOUT = "heldout"
        UPLOAD = "upload"
        IMPORTED = "imported"  # scores loaded with a run folder (manage.py import_run); no items here

    name = models.SlugField(max_length=100, unique=True, help_text="What commands and the API call it.")
    title = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    scoring = models.CharField(max_length=16, choices=[(s, s) for s in SCORING])
    path = models.CharField(max_length=1000, blank=True, help_text="The frozen JSONL (held-out and uploaded sets).")
    size = models.IntegerField(default=0)
    corpus = models.ForeignKey("corpora.Corpus", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    description = models.TextField(blank=True)
    meta = models.JSONField(default=dict, blank=True, help_text="How it was made (method, seed, documents).")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["kind", "name"]

    def __str__(self):
        return self.name

    def items(self):
        """The benchmark's ``trainer.evaluate.Item`` list (raises BenchmarkError when unreadable)."""
        from trainer.evaluate import BenchmarkError, load_builtin, read_jsonl

        if self.kind == self.Kind.IMPORTED:
            raise BenchmarkError(f"benchmark {self.name} holds scores imported with a run folder; its questions "
                                 "file is not here (its imported evaluations keep only the items they answered), so it "
                                 "cannot be evaluated again (upload its JSONL under another name)")
        if self.kind == self.Kind.BUILTIN:
            return load_builtin(self.name)[0]
        return read_jsonl(self.path, self.name)

    def as_dict(self) -> dict:
        return {"id": self.pk, "name": self.name, "title": self.title, "kind": self.kind, "scoring": self.scoring,
                "size": self.size, "corpus": self.corpus.name if self.corpus_id else None,
                "description": self.description, "meta": self.meta, "created": self.created}


class EvalJob(JobMixin):
    model_spec = models.CharField(max_length=1000, help_text="base:<model name> or a checkpoint folder.")
    label = models.CharField(max_length=300, blank=True)
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="evals")
    checkpoint = models.ForeignKey("runs.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="evals")
    step = models.IntegerField(null=True, blank=True, help_text="The checkpoint's step; None for a base model.")
    benchmarks = models.ManyToManyField(Benchmark, related_name="jobs")
    limit = models.IntegerField(null=True, blank=True, help_text="First N items of each benchmark.")
    search = models.BooleanField(default=False, help_text="Answer with the search tool over `corpus`.")
    corpus = models.ForeignKey("corpora.Corpus", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    max_new_tokens = models.IntegerField(default=512)
    auto = models.BooleanField(default=False, help_text="Queued by the run's eval.every_checkpoints.")
    done = models.IntegerField(default=0, help_text="Samples scored so far (all benchmarks).")
    total = models.IntegerField(default=0)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [models.UniqueConstraint(fields=["checkpoint"], condition=models.Q(auto=True),
                                               name="evaljob_one_auto_per_checkpoint")]

    def __str__(self):
        return f"eval {self.pk} of {self.label or self.model_spec} ({self.status})"

    @property
    def is_base(self) -> bool:
        return self.model_spec.startswith("base:")

    def as_dict(self, results: bool = True) -> dict:
        out = {"id": self.pk, "url": f"/evals/jobs/{self.pk}/", "status": self.status, "model": self.model_spec,
               "label": self.label, "run": self.run_id, "checkpoint": self.checkpoint_id, "step": self.step,
               "benchmarks": [b.name for b in self.benchmarks.all()], "limit": self.limit, "search": self.search,
               "corpus": self.corpus.name if self.corpus_id else None, "max_new_tokens": self.max_new_tokens,
               "auto": self.auto, "queue": self.queue, "done": self.done, "total": self.total,
               "error": self.error or None, "owner": self.owner.username if self.owner_id else None,
               "created": self.created, "started_at": self.started_at, "finished_at": self.finished_at,
               # what a queued evaluation waits for ("no live worker serves gpu: ...")
               "waiting_for": (wait_reason(self.job_id, self.queue) or None) if self.status == Status.QUEUED else None}
        if results:
            out["results"] = [r.as_dict() for r in self.results.select_related("benchmark")]
        return out


class EvalResult(models.Model):
    job = models.ForeignKey(EvalJob, on_delete=models.CASCADE, related_name="results")
    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="results")
    scoring = models.CharField(max_length=16)
    n = models.IntegerField(default=0)
    correct = models.IntegerField(default=0)
    score = models.FloatField(null=True, blank=True, help_text="Mean sample score (accuracy, or mean F1).")
    ci_low = models.FloatField(null=True, blank=True)
    ci_high = models.FloatField(null=True, blank=True)
    seconds = models.FloatField(default=0.0)
    train_seconds = models.FloatField(null=True, blank=True,
                                      help_text="The run's summed training seconds at this checkpoint (imported "
                                                "evals.jsonl's train_seconds); None when not recorded.")
    complete = models.BooleanField(default=False)

    class Meta:
        ordering = ["benchmark__name"]
        constraints = [models.UniqueConstraint(fields=["job", "benchmark"], name="evalresult_unique")]

    def as_dict(self) -> dict:
        return {"benchmark": self.benchmark.name, "scoring": self.scoring, "n": self.n, "correct": self.correct,
                "score": self.score, "ci_low": self.ci_low, "ci_high": self.ci_high, "seconds": self.seconds,
                "train_seconds": self.train_seconds, "complete": self.complete}


class EvalSample(models.Model):
    result = models.ForeignKey(EvalResult, on_delete=models.CASCADE, related_name="samples")
    index = models.IntegerField()
    item_id = models.CharField(max_length=200, blank=True)
    question = models.TextField()
    gold = models.TextField(blank=True)
    prediction = models.TextField(blank=True, null=True)
    output = models.TextField(blank=True)
    correct = models.BooleanField(default=False)
    score = models.FloatField(default=0.0)
    data = models.JSONField(default=dict, blank=True, help_text="Turns and passages with search, aliases of the gold.")

    class Meta:
        ordering = ["index"]
        constraints = [models.UniqueConstraint(fields=["result", "index"], name="evalsample_unique")]

    @classmethod
    def from_sample(cls, result: EvalResult, s: dict) -> EvalSample:
        """The row of one ``trainer.evaluate.evaluate`` sample (index, id, question, gold, prediction, output,
        correct, score; turns, passages, searches, document_id kept in ``data``), unsaved; an eval job's
        batches and an imported folder's eval_samples/ (apps/evals/imported.py) both store them so."""
        gold = s["gold"]
        data = {k: s[k] for k in ("turns", "passages", "searches", "document_id") if k in s}
        if isinstance(gold, list):
            data["aliases"] = gold
            gold = " | ".join(gold)
        return cls(result=result, index=s["index"], item_id=_clean(s["id"])[:200], question=_clean(s["question"]),
                   gold=_clean(gold), prediction=None if s["prediction"] is None else _clean(s["prediction"]),
                   output=_clean(s["output"]), correct=bool(s["correct"]), score=float(s["score"]),
                   data=_json_clean(data))

    def as_dict(self) -> dict:
        return {"index": self.index, "id": self.item_id, "question": self.question, "gold": self.gold,
                "prediction": self.prediction, "output": self.output, "correct": self.correct, "score": self.score,
                "data": self.data}


def _clean(text) -> str:
    """Text Postgres stores: no NUL characters."""
    return "" if text is None else str(text).replace("\x00", "")


def _json_clean(value):
    if isinstance(value, dict):
        return {str(k): _json_clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_clean(v) for v in value]
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class CrossPlay(JobMixin):
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="crossplays")
    checkpoints = models.JSONField(default=list, help_text='[{"id", "step", "path"}] in matrix order.')
    n_tasks = models.IntegerField(default=8, help_text="Valid tasks each challenger should write.")
    answers_per_task = models.IntegerField(default=4)
    temperature = models.FloatField(default=1.0)
    max_new_tokens = models.IntegerField(default=512)
    seed = models.IntegerField(default=0)
    tasks = models.JSONField(default=list, help_text='Per challenger: {"tasks": [...], "attempts": n}.')
    matrix = models.JSONField(default=list, help_text="matrix[i][j]: pass rate of solver j on challenger i's tasks "
                                                      "(None: not computed yet, or challenger i wrote no valid task).")
    cells_done = models.IntegerField(default=0)
    reasoners = models.JSONField(default=list, blank=True,
                                 help_text='Columns [{"step", "label"}] when they differ from the rows (imported).')
    counts = models.JSONField(default=list, blank=True, help_text="counts[i][j]: answers behind matrix[i][j] "
                                                                  "(imported; empty when not recorded).")

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self):
        return f"cross-play {self.pk} of run {self.run_id} ({self.status})"

    @property
    def steps(self) -> list[int]:
        return [c["step"] for c in self.checkpoints]

    @property
    def columns(self) -> list[dict]:
        """The solver (Reasoner) checkpoints: the rows' own, unless imported with others."""
        return self.reasoners or self.checkpoints

    @property
    def column_steps(self) -> list[int]:
        return [c["step"] for c in self.columns]

    @property
    def labels(self) -> tuple[list[str], list[str]]:
        """(row labels, column labels): an imported label, else "step N"."""
        def name(c):
            return c.get("label") or f"step {c['step']}"
        return [name(c) for c in self.checkpoints], [name(c) for c in self.columns]

    @property
    def matrix_rows(self) -> list[tuple[dict, list]]:
        """(challenger checkpoint, its row of pass rates) pairs, for the table."""
        return list(zip(self.checkpoints, self.matrix))

    @property
    def cells_total(self) -> int:
        return len(self.checkpoints) * len(self.columns)

    @property
    def reading(self) -> str:
        """The heatmap's one-line reading (apps/evals/crossplay_reading.py)."""
        from apps.evals.crossplay_reading import reading
        rows, columns = self.labels
        return reading(self.matrix or [], rows, columns)

    @property
    def imported(self) -> bool:
        return self.queue == "imported"

    def as_dict(self) -> dict:
        return {"id": self.pk, "url": f"/evals/crossplay/{self.pk}/", "run": self.run_id, "status": self.status,
                "steps": self.steps, "checkpoints": self.checkpoints, "column_steps": self.column_steps,
                "labels": self.labels[0], "column_labels": self.labels[1], "counts": self.counts,
                "imported": self.imported, "n_tasks": self.n_tasks,
                "answers_per_task": self.answers_per_task, "temperature": self.temperature,
                "matrix": self.matrix, "cells_done": self.cells_done, "cells_total": self.cells_total,
                "tasks": self.tasks, "error": self.error or None, "queue": self.queue,
                "created": self.created, "started_at": self.started_at, "finished_at": self.finished_at}
