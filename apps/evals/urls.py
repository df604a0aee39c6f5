from django.urls import path

from apps.evals import views

app_name = "evals"
urlpatterns = [
    path("", views.index, name="index"),
]
