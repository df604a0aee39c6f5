"""REST routes of corpora, mounted under /api/v1/ by apps/api/urls.py."""
from django.urls import path

from apps.corpora import api

urlpatterns = [
    path("corpora/", api.corpora, name="api-corpora"),
    path("corpora/<int:pk>/", api.corpus_detail, name="api-corpus"),
    path("corpora/<int:pk>/documents/", api.documents, name="api-corpus-documents"),
    path("corpora/<int:pk>/search/", api.corpus_search, name="api-corpus-search"),
    path("corpora/<int:pk>/resume/", api.corpus_resume, name="api-corpus-resume"),
]
