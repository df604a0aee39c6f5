"""REST routes of runs, mounted under /api/v1/ by apps/api/urls.py."""
urlpatterns = []
