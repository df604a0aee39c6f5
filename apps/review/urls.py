from django.urls import path

from apps.review import views

app_name = "review"
urlpatterns = [
    path("", views.index, name="index"),
]
