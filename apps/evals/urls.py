"""Evals pages under /evals/."""
from django.urls import path

from apps.evals import views

app_name = "evals"
urlpatterns = [
    path("", views.index, name="index"),
    path("launch/", views.launch, name="launch"),
    path("estimate/", views.estimate_view, name="estimate"),
    path("benchmarks/", views.create_benchmark, name="create-benchmark"),
    path("jobs/<int:job_id>/", views.job_detail, name="job"),
    path("jobs/<int:job_id>/cancel/", views.cancel, name="cancel"),
    path("compare/", views.compare, name="compare"),
    path("crossplay/<int:crossplay_id>/", views.crossplay_detail, name="crossplay"),
    path("crossplay/<int:crossplay_id>/cancel/", views.crossplay_cancel, name="crossplay-cancel"),
    path("runs/<int:run_id>/panel/", views.run_panel, name="run-panel"),
    path("runs/<int:run_id>/crossplay/", views.crossplay_launch, name="crossplay-launch"),
]
