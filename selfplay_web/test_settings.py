"""The test suite's settings (pyproject.toml points pytest-django here): the product's settings, with the choices
that are the suite's alone made here, by name, instead of guessed from what a process happened to import.

- Redis database 9 (unless REDIS_URL names one): the tests flush their queues, so they keep off the demo's db 0.
  Processes the tests start (workers, torchrun ranks, servers) inherit DJANGO_SETTINGS_MODULE and land on the
  same database.
- MD5 password hashes: PBKDF2's 1,000,000 rounds take ~1.4 s per user or login on a 2-core CI box. PBKDF2 stays
  in the list, so a hash made either way verifies.
"""
import os

from selfplay_web.settings import *  # noqa: F403
from selfplay_web.settings import CHANNEL_LAYERS, REDIS_URL, RQ_QUEUES  # noqa: F401

TEST_REDIS_DB = 9
if not os.environ.get("REDIS_URL"):
    REDIS_URL = REDIS_URL.rsplit("/", 1)[0] + f"/{TEST_REDIS_DB}"
    CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [REDIS_URL]
    for _queue in RQ_QUEUES.values():
        _queue["URL"] = REDIS_URL

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher",
                    "django.contrib.auth.hashers.PBKDF2PasswordHasher"]
