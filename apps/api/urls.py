"""/api/v1/: each app contributes its routes from its own api_urls module."""
from django.urls import include, path
from drf_spectacular.renderers import OpenApiJsonRenderer, OpenApiYamlRenderer

from apps.api import views

urlpatterns = [
    path("schema/", views.SchemaView.as_view(renderer_classes=[OpenApiJsonRenderer, OpenApiYamlRenderer]), name="schema"),
    path("", views.root, name="api-root"),
    path("me/", views.me, name="api-me"),
    path("", include("apps.corpora.api_urls")),
    path("", include("apps.runs.api_urls")),
    path("", include("apps.review.api_urls")),
    path("", include("apps.evals.api_urls")),
    path("", include("apps.export.api_urls")),
]
