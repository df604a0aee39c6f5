"""The run export's REST route, mounted under /api/v1/ by apps/api/urls.py."""
from django.urls import re_path

from apps.export import views

urlpatterns = [
    re_path(r"^runs/(?P<run_id>\d+)/export/(?P<kind>[a-z_]+)\.(?P<fmt>[a-z0-9]+)$", views.export_run,
            name="api-run-export"),
]
