"""`manage.py ensure_admin`: create the demo admin once and print its login (idempotent)."""
import os
import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from apps.accounts.schema import SchemaCommand
from selfplay_web import config


class Command(SchemaCommand):
    help = "Create the admin account if missing; print the username and password."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, username, **options):
        secret_file = config.data_dir() / "admin_password"
        if not secret_file.exists():  # owner-only from the start
            with os.fdopen(os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
                f.write(secrets.token_urlsafe(9))
        password = secret_file.read_text().strip()
        User = get_user_model()
        user, created = User.objects.get_or_create(username=username, defaults={"is_staff": True, "is_superuser": True})
        if created or not user.check_password(password):
            user.set_password(password)
            user.is_staff = user.is_superuser = True
            user.save()
        user.groups.add(*Group.objects.filter(name__in=["admin", "researcher", "reviewer"]))
        self.stdout.write(f"login: {username} / {password}")
