from django.urls import path

from apps.corpora import views

app_name = "corpora"
urlpatterns = [
    path("", views.index, name="index"),
    path("new/", views.create, name="create"),
    path("<int:pk>/", views.detail, name="detail"),
    path("<int:pk>/upload/", views.upload, name="upload"),
    path("<int:pk>/progress/", views.progress, name="progress"),
    path("<int:pk>/resume/", views.resume, name="resume"),
    path("<int:pk>/search/", views.search_partial, name="search"),
    path("<int:pk>/documents/<int:doc_id>/", views.document, name="document"),
]
