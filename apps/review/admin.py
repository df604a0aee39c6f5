"""Admin: the audit trail of review (who reviewed what, when, and when the recipe received it)."""
from django.contrib import admin

from apps.review.models import HarnessEdit, ReviewItem


@admin.register(ReviewItem)
class ReviewItemAdmin(admin.ModelAdmin):
    list_display = ("id", "run_number", "kind", "key", "step", "status", "reviewer_name", "reviewed_at", "applied_at",
                    "sampled", "created")
    list_filter = ("status", "kind", "sampled", "run_number")
    search_fields = ("key", "task_key", "reviewer_name", "reason", "edit")
    date_hierarchy = "reviewed_at"
    readonly_fields = ("run", "run_number", "kind", "key", "step", "task", "rubric", "grade", "task_key", "priority",
                       "judge_score", "snapshot", "sampled", "suspicious", "status", "reason", "edit", "reviewer",
                       "reviewer_name", "reviewed_at", "applied_at", "created")

    def has_add_permission(self, request):
        return False  # items come from the sampling policy; verdicts from the queue (/review/)


@admin.register(HarnessEdit)
class HarnessEditAdmin(admin.ModelAdmin):
    list_display = ("id", "run", "author_name", "step", "created", "applied_at")
    list_filter = ("run",)
    readonly_fields = ("run", "harness", "author", "author_name", "step", "created", "applied_at")
