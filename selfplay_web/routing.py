"""Websocket routes. Each app that streams adds its consumer here."""
from django.urls import path

from apps.runs.consumers import RunConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:run_id>/", RunConsumer.as_asgi()),
]
