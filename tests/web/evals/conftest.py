"""Fixtures of the evals tests: the run tests' private test database / Redis db, tiny model and
temporary directories (tests/web/runs/conftest.py), and a folder for frozen benchmarks.

The evals tests use Redis db 13 (SELFPLAY_RUNS_TEST_REDIS_DB) unless it is set, so they can run
beside the run tests.
"""
from __future__ import annotations

import os

from selfplay_web.test_settings import JOBS_TEST_REDIS_DB  # noqa: E402  (13 outside pytest-xdist)

os.environ.setdefault("SELFPLAY_RUNS_TEST_REDIS_DB", str(JOBS_TEST_REDIS_DB))

import pytest  # noqa: E402

from tests.web.runs.conftest import (  # noqa: E402,F401  (fixtures)
    burst,
    private_redis,
    roles,
    run_env,
    smollm2_tokenizer,
    tiny_model_dir,
    tiny_prompts_path,
    tiny_grpo,
    web_dirs,
)


@pytest.fixture
def data_dir(settings, tmp_path):
    """Frozen benchmarks in a temporary folder (settings.DATA_DIR stays: the embedded database's
    address is derived from it, and a worker copies it into SELFPLAY_DATA_DIR)."""
    settings.BENCHMARKS_DIR = tmp_path / "data" / "benchmarks"
    return tmp_path / "data"
