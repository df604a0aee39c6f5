"""The test suite's settings (pyproject.toml points pytest-django here): the product's settings, with the choices
that are the suite's alone made here, by name, instead of guessed from what a process happened to import.

- Redis database 9 (unless REDIS_URL names one; other numbers for each pytest-xdist worker after the first): the
  tests flush their queues, so they keep off the demo's db 0.
  Processes the tests start (workers, torchrun ranks, servers) inherit DJANGO_SETTINGS_MODULE and land on the
  same database.
- MD5 password hashes: PBKDF2's 1,000,000 rounds take ~1.4 s per user or login on a 2-core CI box. PBKDF2 stays
  in the list, so a hash made either way verifies.
"""
import os

from selfplay_web.settings import *  # noqa: F403
from selfplay_web.settings import CHANNEL_LAYERS, REDIS_URL, RQ_QUEUES  # noqa: F401

# Redis databases of one test process: the shared test db, the run tests' private db, and the evals / export / robust
# tests' private db. `make test` runs the suite in pytest-xdist workers (gw0, gw1, ...), each on databases of its own,
# so one worker's flush never drops another's job; db 0 stays the demo's. A process that is not an xdist worker (a
# plain `pytest`) takes the first row.
REDIS_DBS_PER_WORKER = [(9, 12, 13), (1, 2, 3), (4, 5, 6), (7, 8, 10), (11, 14, 15)]


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdecimal() else 0
    if index >= len(REDIS_DBS_PER_WORKER):
        raise RuntimeError(f"pytest-xdist worker {worker}: the test settings give Redis databases to at most "
                           f"{len(REDIS_DBS_PER_WORKER)} workers (Redis has 16); run pytest with -n "
                           f"{len(REDIS_DBS_PER_WORKER)} or fewer")
    return index


TEST_REDIS_DB, RUNS_TEST_REDIS_DB, JOBS_TEST_REDIS_DB = REDIS_DBS_PER_WORKER[_worker_index()]
if not os.environ.get("REDIS_URL"):
    REDIS_URL = REDIS_URL.rsplit("/", 1)[0] + f"/{TEST_REDIS_DB}"
    CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [REDIS_URL]
    for _queue in RQ_QUEUES.values():
        _queue["URL"] = REDIS_URL

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher",
                    "django.contrib.auth.hashers.PBKDF2PasswordHasher"]
