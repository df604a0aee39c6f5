"""Run pages under /runs/."""
from django.urls import path, re_path

from apps.runs import views

app_name = "runs"
urlpatterns = [
    path("", views.index, name="index"),
    path("new/", views.new, name="new"),
    path("new/estimate/", views.estimate_view, name="estimate"),
    path("workers/", views.workers, name="workers"),
    path("compare/", views.compare, name="compare"),
    path("<int:run_id>/", views.detail, name="detail"),
    path("<int:run_id>/controls/", views.controls, name="controls"),
    path("<int:run_id>/describe/", views.describe, name="describe"),
    path("<int:run_id>/when/", views.when, name="when"),
    path("<int:run_id>/samples/", views.samples, name="samples"),
    path("<int:run_id>/ledger/", views.ledger, name="ledger"),
    path("<int:run_id>/attempts/<path:key>/", views.trajectory, name="trajectory"),
    path("<int:run_id>/tasks/<path:key>/", views.task_detail, name="task"),
    re_path(r"^(?P<run_id>\d+)/(?P<action>pause|resume|cancel)/$", views.control, name="control"),
]
