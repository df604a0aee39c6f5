"""Test bootstrap: real embedded Postgres+pgvector and real Redis (a separate Redis db).

`make test` starts the services first; starting them here too keeps `pytest` alone working.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["SELFPLAY_TEST_FAST_HASHER"] = "1"  # MD5 password hashes in tests (selfplay_web/settings.py)


def pytest_configure(config):
    from selfplay_web import services

    services.start_all()  # settings put the tests on Redis db 9, away from the demo's db 0
    _fast_password_hashes()


def _fast_password_hashes():
    """pytest-django loaded the settings before this file set SELFPLAY_TEST_FAST_HASHER (the servers the
    tests start read it): give this process the same hasher list."""
    from django.conf import settings
    from django.contrib.auth import hashers

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher",
                                 "django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    hashers.get_hashers.cache_clear()
    hashers.get_hashers_by_algorithm.cache_clear()


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """SELFPLAY_TEST_DB_SUFFIX=x gives a test session its own database (test_selfplay_x), so
    sessions running side by side on one Postgres do not drop each other's database."""
    from django.conf import settings

    suffix = os.environ.get("SELFPLAY_TEST_DB_SUFFIX")
    if suffix:
        test = settings.DATABASES["default"].setdefault("TEST", {})
        test["NAME"] = f"{test.get('NAME') or 'test_selfplay'}_{suffix}"


@pytest.fixture(autouse=True)
def _environment_as_found():
    """A run job executed in-process sets variables for its trainer: SELFPLAY_DATA_DIR (execute_run; a later
    server subprocess derives its database address from it), SELFPLAY_DATASETS_DIR (execute_run) and
    SELFPLAY_JUDGE_ENDPOINTS (apps/runs/sealed.py: open_for_worker). Every test ends with them as it began."""
    names = ("SELFPLAY_DATA_DIR", "SELFPLAY_JUDGE_ENDPOINTS", "SELFPLAY_DATASETS_DIR")
    before = {name: os.environ.get(name) for name in names}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
