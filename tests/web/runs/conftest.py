"""Fixtures of the run tests: a tiny random-init model inside a temporary models directory,
a small JSONL prompt set inside the data directory, temporary run folders, a grpo config that
trains in about a second per step on the CPU, and a real RQ worker in burst mode.

The tiny model and the prompt set come from the trainer's fixtures (tests/trainer/conftest.py);
they are copied under the directories the web allows.
"""
from __future__ import annotations

import os
import shutil

import pytest

from selfplay_web.test_settings import RUNS_TEST_REDIS_DB

from tests.trainer.conftest import smollm2_tokenizer, tiny_model_dir, tiny_prompts_path  # noqa: F401  (fixtures)


REDIS_DB = int(os.environ.get("SELFPLAY_RUNS_TEST_REDIS_DB", RUNS_TEST_REDIS_DB))  # 12 outside pytest-xdist


@pytest.fixture(autouse=True)
def private_redis(settings):
    """RQ queues and the channel layer on a Redis db of their own, emptied around each test.

    The shared test db is flushed by other tests (and other sessions) at any moment, which would
    drop a job between launch and the worker.
    """
    base = settings.REDIS_URL.rsplit("/", 1)[0]
    url = f"{base}/{REDIS_DB}"
    settings.RQ_QUEUES = {name: {**cfg, "URL": url} for name, cfg in settings.RQ_QUEUES.items()}
    layers = {**settings.CHANNEL_LAYERS["default"]}
    layers["CONFIG"] = {**layers["CONFIG"], "hosts": [url]}
    settings.CHANNEL_LAYERS = {"default": layers}
    import django_rq

    conn = django_rq.get_connection("default")
    conn.flushdb()
    yield url
    conn.flushdb()


@pytest.fixture(scope="session")
def web_dirs(tmp_path_factory, tiny_model_dir, tiny_prompts_path):  # noqa: F811
    root = tmp_path_factory.mktemp("selfplay-data")
    shutil.copytree(tiny_model_dir, root / "models" / "tiny")
    (root / "prompts").mkdir()
    shutil.copy(tiny_prompts_path, root / "prompts" / "arith.jsonl")
    return root


@pytest.fixture
def run_env(settings, web_dirs, tmp_path):
    """Settings pointing at the temporary models / datasets / runs directories (the datasets folder, the only one
    a run's config may name files in, is ``prompts/``; a worker started elsewhere gets SELFPLAY_DATASETS_DIR)."""
    settings.MODELS_DIR = web_dirs / "models"
    settings.DATASETS_DIR = web_dirs / "prompts"
    settings.RUNS_DIR = tmp_path / "runs"
    return web_dirs


@pytest.fixture
def tiny_grpo(run_env):
    """(model, config overrides) of a tiny grpo run on the CPU: 4 steps, checkpoint every 2."""
    config = {
        "seed": 0,
        "data": {"path": str(run_env / "prompts" / "arith.jsonl")},
        "reward": "exact",
        "rollout": {"max_new_tokens": 6, "group_size": 2},
        "train": {"steps": 4, "lr": 1e-3, "prompts_per_step": 2, "micro_batch_size": 4, "device": "cpu"},
        "checkpoint": {"every": 2, "keep_last": 2},
        "grpo": {"log_samples": 4},
    }
    return "tiny", config


@pytest.fixture
def roles(db):
    """The role groups, recreated for transactional tests (a flush after one such test removes them)."""
    from importlib import import_module

    from django.apps import apps

    import_module("apps.accounts.migrations.0001_roles").create_roles(apps, None)


def pause_after_step_one(run_id: int, seconds: float = 600):
    """A started thread that asks run ``run_id`` to pause once it is running and reported step 1
    (its own database connection, closed at the end); join it after the worker is done."""
    import threading
    import time

    from django.db import connection

    from apps.runs.models import Run

    def pause():
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                current = Run.objects.get(pk=run_id)
                if current.status == "running" and current.current_step >= 1:
                    current.request_pause()
                    return
                time.sleep(0.02)
        finally:
            connection.close()

    thread = threading.Thread(target=pause)
    thread.start()
    return thread


def burst(*queues: str) -> None:
    """Drain the queues with a real RQ worker in this process (SimpleWorker: no fork next to torch)."""
    import django_rq
    from rq import SimpleWorker

    django_rq.get_worker(*queues, worker_class=SimpleWorker).work(burst=True)


def facts_corpus(texts: list[str]):
    """A ready corpus "facts" with one short document per text."""
    from apps.corpora.models import Corpus, Document

    corpus = Corpus.objects.create(name="facts", status="ready")
    for i, text in enumerate(texts):
        Document.objects.create(corpus=corpus, title=f"fact {i}", text=text, content_hash=f"h{i}")
    return corpus


def launch_tiny_spice(researcher, train: dict, checkpoint: dict) -> None:
    """POST a SPICE run of the tiny model on "facts" through the API, then let the cpu worker run it."""
    from rest_framework.test import APIClient

    config = {
        "seed": 0,
        "rollout": {"max_new_tokens": 6, "group_size": 2},
        "train": {"lr": 1e-3, "micro_batch_size": 4, "device": "cpu", **train},
        "checkpoint": checkpoint,
        "spice": {"challenger_attempts": 2, "challenger_group_size": 2, "max_document_tokens": 64,
                  "format_max_new_tokens": 16},
    }
    client = APIClient()
    client.force_authenticate(researcher)
    response = client.post("/api/v1/runs/", {"method": "spice", "model": "tiny", "corpus": "facts", "config": config},
                           format="json")
    assert response.status_code == 201, response.json()
    burst("cpu")
