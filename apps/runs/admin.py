"""Admin views of runs and what they record (read-mostly; status changes go through the run's methods)."""
from django.contrib import admin

from apps.runs.models import Checkpoint, Metric, Run, RunEvent


class RunEventInline(admin.TabularInline):
    model = RunEvent
    extra = 0
    fields = ("created", "kind", "step", "message")
    readonly_fields = fields
    can_delete = False
    ordering = ("-created",)


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "method", "model_name", "corpus_name", "status", "current_step", "total_steps", "owner",
                    "created_at", "heartbeat_at")
    list_filter = ("status", "method", "queue")
    search_fields = ("model_name", "corpus_name", "owner__username", "worker_name")
    readonly_fields = ("status", "requested", "created_at", "started_at", "finished_at", "heartbeat_at",
                       "current_step", "checkpoint_path", "job_id", "worker_name", "run_dir")
    inlines = [RunEventInline]


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    list_display = ("run", "created", "kind", "step", "message")
    list_filter = ("kind",)


@admin.register(Metric)
class MetricAdmin(admin.ModelAdmin):
    list_display = ("run", "step", "role", "name", "value")
    list_filter = ("role",)
    search_fields = ("name",)


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ("run", "step", "path", "created")
