"""REST routes of runs, mounted under /api/v1/ by apps/api/urls.py."""
from django.urls import path, re_path

from apps.runs import api

urlpatterns = [
    path("models/", api.models, name="api-models"),
    path("runs/", api.runs, name="api-runs"),
    path("runs/<int:run_id>/", api.run_detail, name="api-run"),
    path("runs/<int:run_id>/metrics/", api.run_metrics_view, name="api-run-metrics"),
    re_path(r"^runs/(?P<run_id>\d+)/(?P<action>pause|resume|cancel)/$", api.run_action, name="api-run-action"),
]
