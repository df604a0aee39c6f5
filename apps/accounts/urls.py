from django.contrib.auth import views as auth_views
from django.urls import path

from apps.accounts import users, views

urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("token/", views.token, name="api-token"),
    path("users/", users.users, name="users"),
]
