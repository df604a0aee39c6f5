"""REST routes of evals, mounted under /api/v1/ by apps/api/urls.py."""
from django.urls import path

from apps.evals import api

urlpatterns = [
    path("evals/", api.evals, name="api-evals"),
    path("evals/benchmarks/", api.benchmarks, name="api-eval-benchmarks"),
    path("evals/compare/", api.compare, name="api-eval-compare"),
    path("evals/<int:job_id>/", api.eval_detail, name="api-eval"),
    path("evals/<int:job_id>/samples/", api.eval_samples, name="api-eval-samples"),
    path("evals/<int:job_id>/cancel/", api.eval_cancel, name="api-eval-cancel"),
    path("evals/crossplay/<int:crossplay_id>/", api.crossplay_detail, name="api-crossplay"),
    path("evals/crossplay/<int:crossplay_id>/cancel/", api.crossplay_cancel, name="api-crossplay-cancel"),
    path("runs/<int:run_id>/crossplay/", api.run_crossplay, name="api-run-crossplay"),
]
