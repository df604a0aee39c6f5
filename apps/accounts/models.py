"""Roles (Django groups carrying these permissions) and the failed-login log of the login throttle."""
from django.db import models
from django.utils import timezone


class Access(models.Model):
    """Holds the product's permissions; it has no table of its own."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("upload_corpus", "Can upload and manage corpora"),
            ("launch_run", "Can launch and control runs"),
            ("review_items", "Can review generated tasks, rubrics and grades"),
            ("manage_users", "Can manage users and roles"),
            ("control_any_run", "Can control runs owned by others"),
            ("allow_remote_code", "Can allow trust_remote_code in run configs"),
        ]


ROLE_PERMISSIONS = {
    "admin": ["upload_corpus", "launch_run", "review_items", "manage_users", "control_any_run", "allow_remote_code"],
    "researcher": ["launch_run"],
    "reviewer": ["review_items"],
}


class LoginFailure(models.Model):
    """One wrong password for ``username`` (casefolded) from ``address``: apps/accounts/throttle.py
    counts them per pair over a window and drops the older ones."""

    username = models.CharField(max_length=150)
    address = models.CharField(max_length=64, blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        indexes = [models.Index(fields=["username", "address", "at"], name="loginfailure_pair_at")]
