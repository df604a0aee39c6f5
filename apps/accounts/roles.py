"""Access helpers: one place that says who may do what.

Pages use `@role_required("launch_run")`; API views use `HasRole("launch_run")`.
Superusers may do everything; every logged-in user may read.
"""
from __future__ import annotations

from functools import wraps
from pathlib import PurePath

from django.core.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission

ROLE_OF_PERM = {
    "upload_corpus": "admin",
    "launch_run": "researcher",
    "review_items": "reviewer",
    "manage_users": "admin",
    "control_any_run": "admin",
    "allow_remote_code": "admin",
}


def can(user, perm: str) -> bool:
    return bool(user and user.is_authenticated and (user.is_superuser or user.has_perm(f"accounts.{perm}")))


def denied_message(perm: str) -> str:
    return f"This needs the {ROLE_OF_PERM.get(perm, perm)} role; ask an admin to add you to it."


def role_required(perm: str):
    def decorator(view):
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if not can(request.user, perm):
                raise PermissionDenied(denied_message(perm))
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


def HasRole(perm: str):  # noqa: N802 - reads like a class in permission_classes
    class _HasRole(BasePermission):
        message = denied_message(perm)

        def has_permission(self, request, view):
            return can(request.user, perm)

    _HasRole.__name__ = f"HasRole_{perm}"
    return _HasRole


def can_control_run(user, run) -> bool:
    """A researcher controls their own runs; admins (control_any_run) control all."""
    if not can(user, "launch_run"):
        return False
    return run.owner_id == user.id or can(user, "control_any_run")


def run_refusal(user, run, what: str = "pause, resume or cancel it") -> str:
    """Why ``can_control_run`` said no, told to this user: a role they lack, or a run that is not theirs (a researcher
    who is not the owner needs no other role, and is not told so)."""
    if not can(user, "launch_run"):
        return denied_message("launch_run")
    owner = getattr(run.owner, "username", None) or "nobody (launched from the command line)"
    return f"Run {run.pk} belongs to {owner}: only its owner or an admin can {what}."


def server_path(path: str | None, user) -> str | None:
    """A path on the server (run folder, checkpoint) as ``user`` may see it: whole for an admin, else only its last
    part (``step-000010``): the layout of the servers' disks (data dir, virtualenv) is the operator's."""
    if not path:
        return None
    return path if can(user, "control_any_run") else PurePath(path).name


def hide_server_paths(data, user):
    """A copy of an API answer with every ``path`` (and a ``model`` that is a folder) cut to its last part for a
    user who is not an admin (``server_path``)."""
    if can(user, "control_any_run"):
        return data
    if isinstance(data, list):
        return [hide_server_paths(v, user) for v in data]
    if not isinstance(data, dict):
        return data
    out = {}
    for key, value in data.items():
        if key in ("path", "run_dir", "checkpoint_path") and isinstance(value, str):
            value = server_path(value, user)
        elif key == "model" and isinstance(value, str) and value.startswith("/"):
            value = server_path(value, user)
        else:
            value = hide_server_paths(value, user)
        out[key] = value
    return out
