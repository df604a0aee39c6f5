"""The users page (/accounts/users/, admins): every user with their roles; create a user with roles (a password
typed in, or one generated and shown once); change a user's roles. Roles are the groups admin, researcher and
reviewer (apps/accounts/migrations/0001_roles.py); everyone logged in may read."""
from __future__ import annotations

import secrets

from django.contrib import messages
from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from apps.accounts.roles import role_required

ROLES = ("admin", "researcher", "reviewer")
USERNAME_HELP = "letters, digits and @ . + - _ (at most 150)"


def _chosen_roles(post) -> list[str]:
    chosen = post.getlist("roles")
    unknown = [r for r in chosen if r not in ROLES]
    if unknown:
        raise ValueError(f"unknown role {unknown[0]!r}; choose from {', '.join(ROLES)}")
    return chosen


@require_http_methods(["GET", "POST"])
@role_required("manage_users")
def users(request):
    if request.method == "POST":
        action = request.POST.get("action")
        try:
            if action == "create":
                _create(request)
            elif action == "roles":
                _set_roles(request)
            else:
                raise ValueError("unknown action; use the forms on this page")
        except ValueError as exc:
            messages.error(request, f"Not saved: {exc}.")
        return redirect("users")
    rows = [{"user": u, "roles": {g.name for g in u.groups.all()}}
            for u in User.objects.prefetch_related("groups").order_by("username")]
    return render(request, "accounts/users.html", {"rows": rows, "roles": ROLES, "username_help": USERNAME_HELP})


def _create(request) -> None:
    username = request.POST.get("username", "").strip()
    field = User._meta.get_field("username")
    try:
        field.run_validators(username)
    except ValidationError:
        raise ValueError(f"the username must be {USERNAME_HELP}") from None
    if not username:
        raise ValueError("a username is needed")
    roles = _chosen_roles(request.POST)
    password = request.POST.get("password", "")
    generated = not password
    password = password or secrets.token_urlsafe(12)
    user = User(username=username, email=request.POST.get("email", "").strip())
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise ValueError(" ".join(exc.messages).rstrip(".")) from None
    try:
        with transaction.atomic():
            user.set_password(password)
            user.save()
            user.groups.set(Group.objects.filter(name__in=roles))
    except IntegrityError:
        raise ValueError(f"a user named {username!r} exists already") from None
    shown = f" Their password, shown once: {password}" if generated else ""
    messages.success(request, f"User {username} created with role{'s' if len(roles) != 1 else ''} "
                              f"{', '.join(roles) or 'none (read only)'}.{shown}")


def _set_roles(request) -> None:
    user = get_object_or_404(User, pk=request.POST.get("user") or 0)
    roles = _chosen_roles(request.POST)
    if user == request.user and "admin" not in roles and not user.is_superuser:
        raise ValueError("you cannot take the admin role from yourself (another admin can)")
    user.groups.set(Group.objects.filter(name__in=roles))
    messages.success(request, f"{user.username}: {', '.join(roles) or 'no role (read only)'}.")
