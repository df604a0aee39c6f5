from django.contrib import admin
from django.urls import include, path

from apps.accounts import views as account_views

urlpatterns = [
    path("", account_views.home, name="home"),
    path("accounts/", include("apps.accounts.urls")),
    path("corpora/", include("apps.corpora.urls")),
    path("runs/", include("apps.runs.urls")),
    path("review/", include("apps.review.urls")),
    path("evals/", include("apps.evals.urls")),
    path("api/v1/", include("apps.api.urls")),
    path("api-docs/", include("apps.api.docs_urls")),
    path("admin/", admin.site.urls),
    path("django-rq/", include("django_rq.urls")),
]

handler403 = "apps.accounts.errors.permission_denied"
handler404 = "apps.accounts.errors.page_not_found"
handler500 = "apps.accounts.errors.server_error"
