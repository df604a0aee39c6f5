"""REST routes of review, mounted under /api/v1/ by apps/api/urls.py."""
from django.urls import path

from apps.review import api

urlpatterns = [
    path("review/queue/", api.queue, name="api-review-queue"),
    path("review/items/<int:item_id>/", api.item, name="api-review-item"),
    path("review/bulk/", api.bulk, name="api-review-bulk"),
    path("review/agreement/", api.agreement_view, name="api-review-agreement"),
    path("review/runs/<int:run_id>/harness/", api.harness_view, name="api-review-harness"),
]
