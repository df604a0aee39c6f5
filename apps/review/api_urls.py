"""REST routes of review, mounted under /api/v1/ by apps/api/urls.py."""
urlpatterns = []
