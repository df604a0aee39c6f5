"""REST routes of corpora, mounted under /api/v1/ by apps/api/urls.py."""
urlpatterns = []
