from django.contrib import admin

from apps.evals.models import Benchmark, CrossPlay, EvalJob, EvalResult


@admin.register(Benchmark)
class BenchmarkAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "scoring", "size", "created")


@admin.register(EvalJob)
class EvalJobAdmin(admin.ModelAdmin):
    list_display = ("id", "label", "status", "auto", "queue", "created")
    list_filter = ("status", "auto")


@admin.register(EvalResult)
class EvalResultAdmin(admin.ModelAdmin):
    list_display = ("job", "benchmark", "score", "ci_low", "ci_high", "n")


@admin.register(CrossPlay)
class CrossPlayAdmin(admin.ModelAdmin):
    list_display = ("id", "run", "status", "cells_done", "created")
