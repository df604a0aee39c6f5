"""Test bootstrap: real embedded Postgres+pgvector and real Redis (a separate Redis db).

`make test` starts the services first; starting them here too keeps `pytest` alone working.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config):
    from selfplay_web import config as envcfg
    from selfplay_web import services

    services.start_all()
    if not os.environ.get("REDIS_URL"):
        base = envcfg.resolved_redis_url().rsplit("/", 1)[0]
        os.environ["REDIS_URL"] = f"{base}/9"  # keep tests off the demo's db 0
