from importlib import import_module

from django.apps import AppConfig, apps as global_apps
from django.db.models.signals import post_migrate


def _roles_after_migrate(sender, apps=global_apps, **kwargs) -> None:
    """The role groups and their permissions, made again (idempotently) after every migrate and flush: a flush
    (``manage.py flush``, or the one that ends each transactional test) empties auth_group, and the migration
    that first made them does not run again (flush sends no ``apps``: the installed models then)."""
    import_module("apps.accounts.migrations.0001_roles").create_roles(apps, None)


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"

    def ready(self):
        from apps.accounts import throttle  # noqa: F401  (connects the failed-login counters)

        post_migrate.connect(_roles_after_migrate, sender=self, dispatch_uid="selfplay-roles")
