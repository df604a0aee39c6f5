"""/api-docs/: the OpenAPI schema as pages (Swagger UI, Redoc), their assets served from our static
files by drf-spectacular-sidecar (no CDN). Pages, not API routes: an anonymous visitor is sent to log in.
Swagger UI's start-up script is served as a file of its own (``?script``, the split view), so the
Content-Security-Policy (selfplay_web/csp.py) needs no inline script; templates/drf_spectacular/redoc.html
drops Redoc's Google Fonts links (the policy loads nothing from other sites)."""
from django.urls import path
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerSplitView

urlpatterns = [
    path("", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
]
