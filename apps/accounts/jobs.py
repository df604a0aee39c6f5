"""Housekeeping jobs for the `default` queue."""
from django.contrib.sessions.models import Session
from django.utils import timezone


def clear_expired_sessions() -> int:
    """Delete expired login sessions; returns how many went."""
    deleted, _ = Session.objects.filter(expire_date__lt=timezone.now()).delete()
    return deleted
