"""Access helpers: one place that says who may do what.

Pages use `@role_required("launch_run")`; API views use `HasRole("launch_run")`.
Superusers may do everything; every logged-in user may read.
"""
from __future__ import annotations

import re
import sys
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
        elif key in ("model", "label") and isinstance(value, str):
            value = shown_model(value, user)
        else:
            value = hide_server_paths(value, user)
        out[key] = value
    return out


def shown_model(spec: str | None, user) -> str | None:
    """A model or evaluation target as ``user`` may see it: a catalog name stays, and so does everything for an
    admin; a folder path, alone or as ``base:<path>``, is cut to the folder's name (``base:qwen2.5-coder-0.5b-instruct``,
    ``step-000005``)."""
    if not spec or can(user, "control_any_run"):
        return spec
    prefix = "base:" if spec.startswith("base:") else ""
    rest = spec[len(prefix):]
    if rest.startswith(("/", "~")):
        return prefix + (PurePath(rest.rstrip("/")).name or rest)
    return spec


# An absolute path inside a text (a command, an error): "/" or "~/" that follows no word, dot, colon, slash or "<"
# (so a URL's "//host", a fraction's "1/2" and a tag's "</b>" stay), then two or more parts ("/srv/data", not "/" or
# "/etc"), up to the next space, quote, bracket or separator.
_PATH_IN_TEXT = re.compile(r"(?<![\w.:/~<])~?/[^\s'\"(),;<>/]+(?:/[^\s'\"(),;<>/]*)+")


def shown_text(text: str | None, user) -> str | None:
    """A message or command as ``user`` may see it: whole for an admin; for anyone else the server's Python becomes
    ``python`` and every other absolute path its last part (``pip install`` hints, "imported from <folder>")."""
    if not text or can(user, "control_any_run"):
        return text
    text = text.replace(sys.executable, "python")
    return _PATH_IN_TEXT.sub(lambda m: PurePath(m.group(0).rstrip("/")).name or m.group(0), text)


def shown_catalog(rows: list[dict], user) -> list[dict]:
    """The model catalog (``trainer.models.catalog``) as ``user`` may see it: its install commands and problems
    through ``shown_text`` (no virtualenv or site-packages path but for an admin)."""
    if can(user, "control_any_run"):
        return rows
    return [{**row, "install": shown_text(row.get("install"), user), "problem": shown_text(row.get("problem"), user)}
            for row in rows]
