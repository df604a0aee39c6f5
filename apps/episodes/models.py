"""What a run generates for itself: tasks, rubrics, attempts (trajectories) and grades.

Rows come from the trainer's sample records (``trainer/sink.py``) through the DjangoSink.
Every record carries a ``key`` unique within its run (``"<step>:<index>"`` style); the
(run, key) unique constraints make writes idempotent, so a resumed run that re-reports a
step replaces rows instead of duplicating them. Links between records are by key
(``task_key``, ``attempt_key``, ``rubric_key``), kept as text and resolved into foreign keys
when the linked row exists.
"""
from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models


class IntArrayField(ArrayField):
    """An integer array written as one Postgres array literal (``{1,2,3}``).

    Django's ArrayField prepares every element in Python, and the driver adapts each again: for
    1,280 attempts of 1,400 token ids that was 70 of the 76 s it took to store them (a SPICE step's
    samples, written by the DjangoSink of a live run and by ``manage.py import_run``). Reading is
    unchanged (the driver returns a list)."""

    def get_db_prep_value(self, value, connection, prepared=False):
        if isinstance(value, (list, tuple)) and not prepared:
            try:
                return "{" + ",".join(map(str, map(int, value))) + "}"
            except TypeError:  # NULL elements: Django's own element by element path
                pass
        return super().get_db_prep_value(value, connection, prepared)


class Task(models.Model):
    """A question a role wrote (SPICE Challenger, SSP Proposer ...) or a prompt from a dataset."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="tasks")
    key = models.CharField(max_length=200)
    step = models.IntegerField(default=0)
    role = models.CharField(max_length=32, blank=True)
    question = models.TextField(blank=True)
    answer = models.TextField(blank=True)
    valid = models.BooleanField(default=True)
    pass_rate = models.FloatField(null=True, blank=True)
    document_id = models.CharField(max_length=200, blank=True)
    format = models.CharField(max_length=64, blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-step", "-id"]
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="task_unique_key")]
        indexes = [models.Index(fields=["run", "step"])]

    def __str__(self):
        return f"task {self.key}: {self.question[:60]}"


class Rubric(models.Model):
    """One criterion a judge wrote for a task (SCOPE, SCORE)."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="rubrics")
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.CASCADE, related_name="rubrics")
    key = models.CharField(max_length=200)
    task_key = models.CharField(max_length=200, blank=True)
    step = models.IntegerField(default=0)
    text = models.TextField()
    priority = models.CharField(max_length=16, blank=True)  # critical | important | bonus
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-step", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="rubric_unique_key")]

    def __str__(self):
        return f"rubric {self.key}: {self.text[:60]}"


class Attempt(models.Model):
    """One trajectory: the model's text, its tool turns, reward, and the trained tokens."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="attempts")
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="attempts")
    key = models.CharField(max_length=200)
    task_key = models.CharField(max_length=200, blank=True)
    role = models.CharField(max_length=32, blank=True)
    step = models.IntegerField(default=0)
    text = models.TextField(blank=True)
    reward = models.FloatField(null=True, blank=True)
    turns = models.JSONField(default=list, blank=True)
    passages = models.JSONField(default=list, blank=True)
    token_ids = IntArrayField(models.IntegerField(), default=list, blank=True)
    loss_mask = IntArrayField(models.SmallIntegerField(), default=list, blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-step", "-id"]
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="attempt_unique_key")]
        indexes = [models.Index(fields=["run", "step"]), models.Index(fields=["run", "role", "step"])]

    def __str__(self):
        return f"attempt {self.key} ({self.role}) reward={self.reward}"


class Grade(models.Model):
    """A judge's score of an attempt, overall or against one rubric."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="grades")
    attempt = models.ForeignKey(Attempt, null=True, blank=True, on_delete=models.CASCADE, related_name="grades")
    rubric = models.ForeignKey(Rubric, null=True, blank=True, on_delete=models.SET_NULL, related_name="grades")
    key = models.CharField(max_length=200)
    attempt_key = models.CharField(max_length=200, blank=True)
    rubric_key = models.CharField(max_length=200, blank=True)
    step = models.IntegerField(default=0)
    score = models.FloatField(null=True, blank=True)
    judge_text = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-step", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="grade_unique_key")]

    def __str__(self):
        return f"grade {self.key}: {self.score}"
