"""Review pages under /review/."""
from django.urls import path

from apps.review import views

app_name = "review"
urlpatterns = [
    path("", views.index, name="index"),
    path("items/<int:item_id>/", views.review_item, name="item"),
    path("bulk/", views.review_bulk, name="bulk"),
    path("runs/<int:run_id>/panel/", views.run_panel, name="run-panel"),
    path("runs/<int:run_id>/harness/", views.harness_edit, name="harness"),
]
