from django.apps import AppConfig


class EpisodesConfig(AppConfig):
    name = "apps.episodes"
    label = "episodes"
