from django.apps import AppConfig


class CorporaConfig(AppConfig):
    name = "apps.corpora"
    label = "corpora"
