"""Failed logins are throttled per (username, client address).

``LOGIN_FAILURE_LIMIT`` (5) wrong passwords for one username from one address within
``LOGIN_FAILURE_WINDOW`` (15 minutes) lock that pair until the oldest of those failures is older
than the window; other users, and the same user from elsewhere, are unaffected. Failures are rows
of ``LoginFailure`` in Postgres, so every server process (``manage.py serve`` runs several) sees
the same count; the local-memory cache of the settings would give each process its own.

Enforced where Django checks a password (``ThrottledModelBackend``, the first authentication
backend): the login page and anything else calling ``authenticate()`` (the admin's own login
page is behind the login page: LoginRequiredMiddleware). The backend writes the attempt's row
*before* checking the password and counts after, so concurrent guesses cannot all pass a count
taken before any of them failed; a right password deletes its row, a successful login clears the
pair (``user_logged_in``), an attempt refused while locked is not counted. The login page's form
(``ThrottledAuthenticationForm``) checks first and says how long to wait instead of "wrong password".

The API takes only tokens (40 random hex characters) and sessions: no password is checked there.
"""
from __future__ import annotations

import math
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_logged_in
from django.core.exceptions import PermissionDenied, ValidationError
from django.dispatch import receiver
from django.utils import timezone

from apps.accounts.models import LoginFailure


def limit() -> int:
    return getattr(settings, "LOGIN_FAILURE_LIMIT", 5)


def window() -> timedelta:
    return timedelta(seconds=getattr(settings, "LOGIN_FAILURE_WINDOW", 15 * 60))


def client_address(request) -> str:
    """The client's address: REMOTE_ADDR, or behind the TLS proxy (``SELFPLAY_BEHIND_PROXY``,
    which sets SECURE_PROXY_SSL_HEADER) the last X-Forwarded-For entry, the one the proxy added."""
    if request is None:
        return ""
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if getattr(settings, "SECURE_PROXY_SSL_HEADER", None) and forwarded.strip():
        return forwarded.split(",")[-1].strip()[:64]
    return str(request.META.get("REMOTE_ADDR", ""))[:64]


def _key(username) -> str:
    return str(username or "").casefold()[:150]


def wait_seconds(username, request) -> int:
    """Seconds until this username may try again from this address (0: it may now)."""
    times = list(_attempts(username, request).order_by("-at").values_list("at", flat=True)[:limit()])
    if len(times) < limit():
        return 0
    return max(1, math.ceil((times[-1] + window() - timezone.now()).total_seconds()))


def wait_message(seconds: int) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    return (f"Too many failed logins for this username from your address: wait {minutes} minute"
            f"{'s' if minutes != 1 else ''} and try again (or ask an admin to reset your password).")


def _attempts(username, request):
    return LoginFailure.objects.filter(username=_key(username), address=client_address(request),
                                       at__gte=timezone.now() - window())


def record_attempt(username, request):
    """A row for one password check, counted as a failure unless deleted; older rows are dropped."""
    LoginFailure.objects.filter(at__lt=timezone.now() - window()).delete()
    return LoginFailure.objects.create(username=_key(username), address=client_address(request))


def clear(username, request) -> None:
    LoginFailure.objects.filter(username=_key(username), address=client_address(request)).delete()


class ThrottledModelBackend(ModelBackend):
    """Django's username/password check, refused once the (username, address) pair has
    ``limit()`` failures in the window. It answers every password check itself: a refusal or a
    wrong password raises PermissionDenied, which stops ``authenticate()`` before Django's own
    ModelBackend (listed after it only so that sessions made before keep working) checks again."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        name = username if username is not None else kwargs.get(get_user_model().USERNAME_FIELD)
        if request is None or name is None or password is None:  # nothing to count (a command, a token)
            return super().authenticate(request, username=username, password=password, **kwargs)
        attempt = record_attempt(name, request)
        if _attempts(name, request).count() > limit():  # limit() failures before this one: locked
            attempt.delete()
            raise PermissionDenied("too many failed logins")
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            raise PermissionDenied("wrong username or password")  # the attempt's row stays: one failure
        attempt.delete()
        return user


@receiver(user_logged_in, dispatch_uid="selfplay-login-throttle-cleared")
def _clear_on_login(sender, request, user, **kwargs):
    if request is not None:
        clear(user.get_username(), request)


class ThrottledAuthenticationForm(AuthenticationForm):
    """The login page's form: says how long to wait instead of "wrong password" while locked."""

    def clean(self):
        seconds = wait_seconds(self.cleaned_data.get("username"), self.request)
        if seconds:
            raise ValidationError(wait_message(seconds), code="throttled")
        return super().clean()

    @property
    def throttled(self) -> bool:
        return any(e.code == "throttled" for e in self.non_field_errors().as_data())
