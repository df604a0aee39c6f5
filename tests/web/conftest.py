"""Personas shared by the web tests: an admin, a researcher, a reviewer, and a reader (no role)."""
import pytest
from django.contrib.auth.models import Group, User


def _user(name, *roles, superuser=False):
    if roles and Group.objects.filter(name__in=roles).count() < len(set(roles)):
        # an earlier transactional test's flush took the role groups the migration made: make them again
        from importlib import import_module

        from django.apps import apps
        import_module("apps.accounts.migrations.0001_roles").create_roles(apps, None)
    user = User.objects.create_user(name, password="pw-" + name, is_superuser=superuser, is_staff=superuser)
    user.groups.add(*Group.objects.filter(name__in=roles))
    return user


@pytest.fixture
def admin_user(db):
    return _user("alice", "admin")


@pytest.fixture
def researcher(db):
    return _user("rita", "researcher")


@pytest.fixture
def reviewer(db):
    return _user("vic", "reviewer")


@pytest.fixture
def reader(db):
    return _user("rob")


@pytest.fixture
def rq_queues():
    """Empty the test Redis db before and after a test that uses the queues."""
    import django_rq

    conn = django_rq.get_connection("default")
    conn.flushdb()
    yield
    conn.flushdb()
