"""The fields the job layer reads and writes on a background job's row (lifecycle.py, reaper.py).

``JobRow`` is abstract: each app's job model (``Run``, ``EvalJob``, ``CrossPlay``) inherits these
columns and adds its own ``status`` with its own states (the layer reads ``queued`` and ``running``).
"""
from django.db import models


class JobRow(models.Model):
    queue = models.CharField(max_length=32, default="gpu")
    job_id = models.CharField(max_length=64, blank=True)
    worker_name = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
