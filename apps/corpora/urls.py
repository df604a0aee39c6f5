from django.urls import path

from apps.corpora import views

app_name = "corpora"
urlpatterns = [
    path("", views.index, name="index"),
]
