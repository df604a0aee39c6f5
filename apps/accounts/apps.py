from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"

    def ready(self):
        from apps.accounts import throttle  # noqa: F401  (connects the failed-login counters)
