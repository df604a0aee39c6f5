"""A training run and what it records: status events, metrics, checkpoints.

Status changes are methods of ``Run`` that write a ``RunEvent`` and tell the live page. The
lifecycle (see docs in ``apps/runs/services/lifecycle.py``)::

    queued -> running -> finished | failed | cancelled
    running -> paused  (a pause asked for while running takes effect at the next step boundary)
    paused  -> queued  (resume: a NEW job continues from the last checkpoint)
    failed  -> queued  (resume, only when ``resumable``: the worker died, e.g. heartbeat lost)
    queued | paused -> cancelled (at once); running -> cancelled at the next step boundary

Every transition is a conditional UPDATE on the current status, so two actors (a worker and a
person, a worker and the reaper) can never both win.
"""
from __future__ import annotations

import logging

from django.conf import settings
from django.db import models, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.jobs.models import JobRow
from apps.runs import live
from apps.runs.sealed import redact_overrides

log = logging.getLogger("selfplay.runs")


SUMMARY_SKIP = ("model.name_or_path=", "corpus=", "method=")  # shown in their own columns


def flat_config(tree: dict, prefix: str = ""):
    """(dotted key, value) of a nested dict's leaves.

    >>> list(flat_config({"train": {"steps": 4, "lr": 1e-6}, "reward": "math"}))
    [('train.steps', 4), ('train.lr', 1e-06), ('reward', 'math')]
    """
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from flat_config(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


class IllegalTransition(ValueError):
    """A status change that the lifecycle does not allow; the message says why and what to do."""


class Status(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE = (Status.QUEUED, Status.RUNNING, Status.PAUSED)
ENDED = (Status.FINISHED, Status.FAILED, Status.CANCELLED)

# status -> the statuses it may change into
ALLOWED = {
    Status.QUEUED: {Status.RUNNING, Status.CANCELLED, Status.FAILED},
    Status.RUNNING: {Status.PAUSED, Status.FINISHED, Status.FAILED, Status.CANCELLED},
    Status.PAUSED: {Status.QUEUED, Status.CANCELLED},
    Status.FAILED: {Status.QUEUED},  # resume, only when resumable
    Status.FINISHED: set(),
    Status.CANCELLED: set(),
}


class Run(JobRow):
    method = models.CharField(max_length=32)
    model_name = models.CharField(max_length=500, help_text="Bundled model name, folder under the models dir, or path.")
    corpus = models.ForeignKey("corpora.Corpus", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    corpus_name = models.CharField(max_length=200, blank=True, help_text="Kept when the corpus is deleted.")
    config = models.JSONField(help_text="The full resolved trainer config.")
    overrides = models.JSONField(default=dict, blank=True, help_text="What the launcher set, before defaults.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    requested = models.CharField(max_length=16, blank=True, default="",
                                 help_text="pause | cancel asked for while running; read at the next step boundary.")
    resumable = models.BooleanField(default=False, help_text="A failed run that may continue from its last checkpoint.")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="runs")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    current_step = models.IntegerField(default=0)
    total_steps = models.IntegerField(default=0)
    checkpoint_path = models.CharField(max_length=1000, blank=True)
    run_dir = models.CharField(max_length=1000, blank=True)
    imported_from = models.CharField(max_length=1000, blank=True,
                                     help_text="The run folder it was loaded from (manage.py import_run); "
                                               "empty for a run of this site.")
    name = models.CharField(max_length=200, blank=True, help_text="What the run is, in a few words (lists, titles, "
                                                                  "charts); an imported run's folder name.")
    tags = models.JSONField(default=list, blank=True, help_text="Short labels to filter runs by.")
    notes = models.TextField(blank=True, help_text="What it was and what it showed (an imported folder's notes.md).")
    first_started_at = models.DateTimeField(null=True, blank=True, help_text="When a worker first started it; "
                                            "started_at is the latest start (a resume moves it, not this).")
    control_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="controls",
        help_text="The run this one is a control of (the same config with train.control set, launched with it).")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["imported_from"], condition=~models.Q(imported_from=""),
                                               name="run_one_import_per_folder")]

    def __str__(self):
        return f"run {self.pk} ({self.method}, {self.status})"

    # ---- reading -------------------------------------------------------------------------
    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE

    @property
    def heartbeat_stale(self) -> bool:
        """Running, but its worker silent for longer than the reaper allows (RUN_HEARTBEAT_SECONDS)."""
        if self.status != Status.RUNNING or self.heartbeat_at is None:
            return False
        return (timezone.now() - self.heartbeat_at).total_seconds() > settings.RUN_HEARTBEAT_SECONDS

    @property
    def imported(self) -> bool:
        return bool(self.imported_from)

    @property
    def imported_name(self) -> str:
        """The imported folder's name (".../examples/runs/trl-grpo-gsm8k-qwen05-lr1e-6" -> its last part), or ""."""
        return self.imported_from.rstrip("/").rsplit("/", 1)[-1] if self.imported_from else ""

    @property
    def label(self) -> str:
        """How charts name the run: "run 10 · <name>", else for an imported run "run 10 (<folder name>)" - runs
        imported from examples/runs/ (ours and TRL's on one model) are told apart by their folders - else "run 10"."""
        if self.name:
            return f"run {self.pk} · {self.name}"
        return f"run {self.pk} ({self.imported_name})" if self.imported_name else f"run {self.pk}"

    @property
    def model_label(self) -> str:
        """The model as people name it: a catalog name stays; a path (an imported GPU run's
        ``/tmp/models/qwen2.5-coder-0.5b-instruct``) shows as the catalog name its folder is, else its folder."""
        name = self.model_name or ""
        if "/" not in name:
            return name
        folder = name.rstrip("/").rsplit("/", 1)[-1]
        from trainer.models import BUNDLED

        known = {key.lower(): key for key in BUNDLED}
        return known.get(folder.lower(), folder) or name

    @property
    def time_limited(self) -> bool:
        """Finished before its last step because ``train.time_limit_minutes`` ran out (status stays finished:
        the trainer ended it cleanly, with a checkpoint it can resume from)."""
        limit = ((self.config or {}).get("train") or {}).get("time_limit_minutes") or 0
        return (self.status == Status.FINISHED and bool(limit) and 0 < self.total_steps
                and self.current_step < self.total_steps)

    @property
    def status_label(self) -> str:
        """The status as lists and titles show it: "stopped at its time limit" for a time-limited finish."""
        return "stopped at its time limit" if self.time_limited else self.status

    def describe(self, name=None, tags=None, notes=None) -> None:
        """Set the name, tags and notes (None leaves one as it is); ValueError names a bad one."""
        fields = {}
        if name is not None:
            if not isinstance(name, str) or len(name.strip()) > 200:
                raise ValueError("name: text of at most 200 characters")
            fields["name"] = name.strip()
        if tags is not None:
            if isinstance(tags, str):
                tags = [t for t in tags.replace(";", ",").split(",")]
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                raise ValueError('tags: a list of short labels, e.g. ["baseline", "lr-sweep"] (or "baseline, lr-sweep")')
            clean = list(dict.fromkeys(t.strip().lower() for t in tags if t.strip()))
            if len(clean) > 20 or any(len(t) > 40 for t in clean):
                raise ValueError("tags: at most 20, each at most 40 characters")
            fields["tags"] = clean
        if notes is not None:
            if not isinstance(notes, str) or len(notes) > 20000:
                raise ValueError("notes: text of at most 20,000 characters")
            fields["notes"] = notes.strip()
        if fields:
            Run.objects.filter(pk=self.pk).update(**fields)
            for key, value in fields.items():
                setattr(self, key, value)

    @property
    def settings_summary(self) -> list[str]:
        """What the launcher set (``overrides``, secrets hidden) as ``key=value`` items, the model and
        corpus left out (they have columns): what tells two runs of one method and model apart."""
        shown = redact_overrides(self.overrides) if isinstance(self.overrides, dict) else {}
        items = [f"{key}={value}" for key, value in flat_config(shown.get("config") or {})]
        items += [str(s) for s in shown.get("set") or []]
        return [i for i in items if not i.startswith(SUMMARY_SKIP)]

    @property
    def can_pause(self) -> bool:
        return self.status == Status.RUNNING and not self.requested

    @property
    def can_resume(self) -> bool:
        return self.status == Status.PAUSED or (self.status == Status.FAILED and self.resumable)

    @property
    def can_cancel(self) -> bool:
        return self.status in ACTIVE and self.requested != "cancel"

    # ---- status changes ------------------------------------------------------------------
    def transition(self, new: str, message: str = "", *, expect: str | None = None, data: dict | None = None,
                   **fields) -> None:
        """Move to ``new`` (from ``expect``, default the current status) and write a RunEvent.

        Raises IllegalTransition when the lifecycle forbids it or another actor changed the
        status first (the conditional UPDATE matched no row).
        """
        old = expect or self.status
        if new not in ALLOWED.get(old, set()):
            raise IllegalTransition(_why_not(self, old, new))
        now = timezone.now()
        fields = {"status": new, **fields}
        if new in ENDED:
            fields.setdefault("finished_at", now)
        with transaction.atomic():
            if Run.objects.filter(pk=self.pk, status=old).update(**fields) != 1:
                self.refresh_from_db()
                raise IllegalTransition(f"Run {self.pk} is {self.status} now (not {old}); reload and try again.")
            for key, value in fields.items():
                setattr(self, key, value)
            RunEvent.objects.create(run=self, kind=RunEvent.Kind.STATUS, step=self.current_step,
                                    message=message or f"{old} -> {new}", data={"from": old, "to": new, **(data or {})})
        self.publish({"type": "status", "status": new, "message": message, "step": self.current_step,
                      "error": self.error})

    def mark_running(self, worker: str) -> bool:
        """The job's atomic claim: True when this worker took the queued run."""
        now = timezone.now()
        claimed = Run.objects.filter(pk=self.pk, status=Status.QUEUED).update(
            status=Status.RUNNING, started_at=now, heartbeat_at=now, worker_name=worker, requested="", error="",
            resumable=False, first_started_at=Coalesce(F("first_started_at"), Value(now)))
        if claimed != 1:
            return False
        self.refresh_from_db()
        RunEvent.objects.create(run=self, kind=RunEvent.Kind.STATUS, step=self.current_step,
                                message=f"running on {worker}", data={"from": "queued", "to": "running"})
        self.publish({"type": "status", "status": Status.RUNNING, "message": f"running on {worker}",
                      "step": self.current_step, "error": ""})
        return True

    def mark_finished(self, message: str = "finished") -> None:
        self.transition(Status.FINISHED, message, expect=Status.RUNNING, requested="")

    def mark_paused(self) -> None:
        self.transition(Status.PAUSED, f"paused at step {self.current_step}", expect=Status.RUNNING, requested="")

    def mark_cancelled(self, message: str = "cancelled") -> None:
        self.transition(Status.CANCELLED, message, expect=self.status, requested="")

    def mark_failed(self, error: str, resumable: bool = False, expect: str = Status.RUNNING) -> None:
        self.transition(Status.FAILED, f"failed: {error}", expect=expect, error=error[:5000], requested="",
                        resumable=resumable, data={"resumable": resumable})

    def request_pause(self, by=None) -> None:
        """Ask a running run to pause at its next step boundary."""
        if self.status != Status.RUNNING:
            raise IllegalTransition(_why_not(self, self.status, Status.PAUSED))
        if self.requested:
            raise IllegalTransition(f"Run {self.pk} already has a {self.requested} request pending; wait for it.")
        self._request("pause", by)

    def request_cancel(self, by=None) -> None:
        """Cancel now when queued or paused; a running run stops at its next step boundary."""
        if self.status == Status.RUNNING:
            if self.requested == "cancel":
                raise IllegalTransition(f"Run {self.pk} is already stopping; it ends at the next step boundary.")
            self._request("cancel", by)
            return
        if self.status not in (Status.QUEUED, Status.PAUSED):
            raise IllegalTransition(_why_not(self, self.status, Status.CANCELLED))
        self.mark_cancelled(f"cancelled by {_who(by)}")

    def _request(self, what: str, by) -> None:
        with transaction.atomic():
            if Run.objects.filter(pk=self.pk, status=Status.RUNNING).update(requested=what) != 1:
                self.refresh_from_db()
                raise IllegalTransition(f"Run {self.pk} is {self.status} now; reload and try again.")
            self.requested = what
            RunEvent.objects.create(run=self, kind=RunEvent.Kind.STATUS, step=self.current_step,
                                    message=f"{what} requested by {_who(by)}; takes effect at the next step boundary",
                                    data={"requested": what})
        self.publish({"type": "status", "status": self.status, "requested": what, "step": self.current_step,
                      "message": f"{what} requested"})

    def notable(self, message: str, data: dict | None = None, step: int | None = None, key: str = "",
                kind: str = "notable") -> None:
        RunEvent.objects.create(run=self, kind=kind, message=message, data=data or {}, key=key,
                                step=self.current_step if step is None else step)

    # ---- live page -----------------------------------------------------------------------
    def publish(self, data: dict) -> bool:
        """Send a small message to the run's websocket group; False (and logged) when Redis is away."""
        return live.publish(self.pk, data)


def _who(user) -> str:
    return getattr(user, "username", None) or "the system"


def _why_not(run: Run, old: str, new: str) -> str:
    hints = {
        Status.PAUSED: "only a running run can be paused",
        Status.QUEUED: "only a paused run (or a failed run whose worker died) can be resumed",
        Status.CANCELLED: "only a queued, running or paused run can be cancelled",
        Status.RUNNING: "only a queued run can start",
        Status.FINISHED: "only a running run can finish",
        Status.FAILED: "only a queued or running run can fail",
    }
    verb = {Status.QUEUED: "resume", Status.PAUSED: "pause", Status.CANCELLED: "cancel"}.get(new, f"move to {new}")
    return f"Cannot {verb} run {run.pk}: it is {old}; {hints.get(new, 'not allowed')}."


class RunEvent(models.Model):
    """One row per status change and per notable thing the trainer or a watchdog reports."""

    class Kind(models.TextChoices):
        STATUS = "status"
        NOTABLE = "notable"
        VERDICT = "verdict"
        WATCHDOG = "watchdog"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    created = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.NOTABLE)
    step = models.IntegerField(null=True, blank=True)
    key = models.CharField(max_length=200, blank=True, help_text="Trainer event key (idempotent on resume).")
    message = models.TextField()
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["run", "-created"])]
        constraints = [models.UniqueConstraint(fields=["run", "key"], condition=~models.Q(key=""),
                                               name="runevent_unique_key")]

    def __str__(self):
        return f"{self.kind}: {self.message[:60]}"


class Metric(models.Model):
    """One number per (step, role, name); rewriting the same key replaces the value."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metrics")
    step = models.IntegerField()
    role = models.CharField(max_length=32, default="", blank=True)
    name = models.CharField(max_length=100)
    value = models.FloatField()

    class Meta:
        indexes = [models.Index(fields=["run", "name", "step"]),
                   # per (name, role) reads: latest values by a loose index scan, SQL downsampling
                   models.Index(fields=["run", "name", "role", "step"], include=["value"],
                                name="metric_run_name_role_step")]
        constraints = [models.UniqueConstraint(fields=["run", "step", "role", "name"], name="metric_unique_point")]

    def __str__(self):
        return f"{self.name}[{self.role}]@{self.step}={self.value:.4g}"


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.IntegerField()
    path = models.CharField(max_length=1000)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="checkpoint_unique_step")]

    def __str__(self):
        return f"checkpoint {self.step}: {self.path}"
