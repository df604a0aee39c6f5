"""Test switches stay out of production settings (issue 35): SELFPLAY_TEST_FAST_HASHER (MD5 password hashes) is
refused with DEBUG off or SELFPLAY_PRODUCTION=1, and the tests' Redis database is named by their settings module
(selfplay_web/test_settings.py), not guessed from whether pytest happened to be imported first. Each case is a
fresh Python process reading the settings from its environment."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

from django.conf import settings

ROOT = settings.BASE_DIR


def _read(module: str, first: str = "", **env_values) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DEBUG", "SELFPLAY_PRODUCTION", "SELFPLAY_TEST_FAST_HASHER", "REDIS_URL",
                        "DJANGO_SETTINGS_MODULE", "PYTEST_XDIST_WORKER")}
    env.update({"SECRET_KEY": secrets.token_urlsafe(50), **env_values})
    code = (f"{first}import json, os; os.environ['DJANGO_SETTINGS_MODULE'] = {module!r}; "
            "from django.conf import settings; "
            "print(json.dumps({'hashers': settings.PASSWORD_HASHERS, 'redis': settings.REDIS_URL, "
            "'rq': sorted({q['URL'] for q in settings.RQ_QUEUES.values()}), "
            "'channels': settings.CHANNEL_LAYERS['default']['CONFIG']['hosts']}))")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def _ok(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_fast_hasher_is_refused_with_debug_off_or_in_production():
    off = _read("selfplay_web.settings", DEBUG="0", SELFPLAY_TEST_FAST_HASHER="1")
    assert off.returncode != 0 and "SELFPLAY_TEST_FAST_HASHER=1" in off.stderr and "DEBUG off" in off.stderr
    prod = _read("selfplay_web.settings", DEBUG="1", SELFPLAY_PRODUCTION="1", SELFPLAY_TEST_FAST_HASHER="1")
    assert prod.returncode != 0 and "SELFPLAY_PRODUCTION=1" in prod.stderr
    # a DEBUG development server may use it; without it, PBKDF2 (Django's default) hashes
    assert "MD5" in _ok(_read("selfplay_web.settings", DEBUG="1", SELFPLAY_TEST_FAST_HASHER="1"))["hashers"][0]
    assert "PBKDF2" in _ok(_read("selfplay_web.settings", DEBUG="0"))["hashers"][0]


def test_the_redis_database_does_not_depend_on_what_was_imported_first():
    plain = _ok(_read("selfplay_web.settings", DEBUG="0"))
    after_pytest = _ok(_read("selfplay_web.settings", first="import pytest; ", DEBUG="0"))
    assert plain["redis"] == after_pytest["redis"] and not plain["redis"].endswith("/9")  # the demo's, both ways
    tests = _ok(_read("selfplay_web.test_settings", DEBUG="0"))
    assert tests["redis"].endswith("/9") and tests["rq"] == [tests["redis"]] and tests["channels"] == [tests["redis"]]
    assert "MD5" in tests["hashers"][0]  # the suite's fast hashes, with no environment switch
    from selfplay_web.test_settings import TEST_REDIS_DB

    assert settings.REDIS_URL == (os.environ.get("REDIS_URL")  # this process: the same choice, for its xdist worker
                                  or tests["redis"].rsplit("/", 1)[0] + f"/{TEST_REDIS_DB}")


def test_each_xdist_worker_has_redis_databases_of_its_own():
    """`make test` runs pytest-xdist workers: the second worker's tests, and the processes they start, are on other
    Redis databases than the first's (one worker's flush would drop the other's queued job); too many workers are
    refused with what to do."""
    first = _ok(_read("selfplay_web.test_settings", DEBUG="0", PYTEST_XDIST_WORKER="gw0"))
    second = _ok(_read("selfplay_web.test_settings", DEBUG="0", PYTEST_XDIST_WORKER="gw1"))
    assert first["redis"].endswith("/9") and not second["redis"].endswith(("/0", "/9", "/12", "/13"))
    assert second["rq"] == [second["redis"]] and second["channels"] == [second["redis"]]
    many = _read("selfplay_web.test_settings", DEBUG="0", PYTEST_XDIST_WORKER="gw5")
    assert many.returncode != 0 and "at most 5 workers" in many.stderr and "-n 5 or fewer" in many.stderr
