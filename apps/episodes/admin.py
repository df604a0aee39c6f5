"""Admin views of what runs generate: tasks, rubrics, attempts, grades."""
from django.contrib import admin

from apps.episodes.models import Attempt, Grade, Rubric, Task


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("run", "key", "step", "role", "valid", "pass_rate", "short_question")
    list_filter = ("valid", "role")
    search_fields = ("key", "question", "answer")
    raw_id_fields = ("run",)

    @admin.display(description="question")
    def short_question(self, obj):
        return obj.question[:80]


@admin.register(Rubric)
class RubricAdmin(admin.ModelAdmin):
    list_display = ("run", "key", "step", "priority", "text")
    raw_id_fields = ("run", "task")


@admin.register(Attempt)
class AttemptAdmin(admin.ModelAdmin):
    list_display = ("run", "key", "step", "role", "reward")
    list_filter = ("role",)
    search_fields = ("key", "text")
    raw_id_fields = ("run", "task")


@admin.register(Grade)
class GradeAdmin(admin.ModelAdmin):
    list_display = ("run", "key", "step", "score")
    raw_id_fields = ("run", "attempt", "rubric")
