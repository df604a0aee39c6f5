"""/api-docs/: the OpenAPI schema as pages (Swagger UI, Redoc), their assets served from our static
files by drf-spectacular-sidecar (no CDN). Pages, not API routes: an anonymous visitor is sent to log in."""
from django.urls import path
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView

urlpatterns = [
    path("", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
]
