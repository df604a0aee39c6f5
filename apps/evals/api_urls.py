"""REST routes of evals, mounted under /api/v1/ by apps/api/urls.py."""
urlpatterns = []
