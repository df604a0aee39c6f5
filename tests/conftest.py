"""Test bootstrap: real embedded Postgres+pgvector and real Redis (a separate Redis db).

`make test` starts the services first; starting them here too keeps `pytest` alone working.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config):
    from selfplay_web import services

    services.start_all()  # settings put the tests on Redis db 9, away from the demo's db 0
