"""Blocker 1 of issue 20 as a person meets it: on a fresh data dir, a run of the bundled
smollm2-135m-instruct is paused from its page after step 1 and resumed from it, and it finishes.
Real server (manage.py serve), real worker (manage.py rqworker cpu, whose first job finds no model in
the fresh data dir, so it spells the model by its bare name and imports it on first use), real browser.
Before the fix the resumed job failed with "cannot resume: the config changed what the run is
(model.name_or_path ...)".

The import is handed over as import_gguf lets concurrent processes share one: the test holds the import's
lock, the worker's first job waits on it, the test puts the suite's import in place (hard links) and lets go,
and the job finds the model there. The job's own GGUF import on a fresh data dir (about 35 s) is
test_bundled_resume.py's."""
import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from apps.runs.models import Run
from apps.runs.services.launch import launch
from tests.trainer.conftest import smollm2_dir  # noqa: F401  (fixture)
from tests.web.evals.test_reaping import _kill_tree
from tests.web.runs.test_bundled_resume import BUNDLED, fresh_data_dir  # noqa: F401  (fixture)
from tests.web.runs.test_live_page_browser import CHROMIUM, _database_url, logged_in_page, server  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")]

STATUS = "() => document.querySelector('#run-status').dataset.status"


def _waited_on(lock: Path) -> bool:
    """Whether another process waits to take the flock on ``lock`` (Linux: a "->" line of /proc/locks)."""
    inode = str(lock.stat().st_ino)
    return any(line.split()[1] == "->" and line.split()[6].split(":")[-1] == inode
               for line in Path("/proc/locks").read_text().splitlines())


def _hand_over_the_import(models: Path, lock, imported: Path, staging: Path, seconds: float = 600) -> None:
    """Once the worker's first job waits on the import's ``lock`` (held here: its config was resolved with no
    model in ``models``), put ``imported`` there as import_gguf does (whole, then renamed; hard links, or a copy on
    another file system) and release the lock: the job finds the model and loads it."""
    def link_or_copy(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    deadline = time.monotonic() + seconds
    while not _waited_on(Path(lock.name)):
        assert time.monotonic() < deadline, "the worker's first job never came to import the model"
        time.sleep(0.2)
    assert not (models / BUNDLED).exists()
    shutil.copytree(imported, staging, copy_function=link_or_copy)
    os.replace(staging, models / BUNDLED)
    fcntl.flock(lock, fcntl.LOCK_UN)
    lock.close()


@pytest.fixture
def cpu_worker(private_redis, tmp_path, request):
    """``manage.py rqworker cpu`` on the test database, with the fresh data dir as its SELFPLAY_DATA_DIR."""
    database_url = _database_url()  # before fresh_data_dir moves SELFPLAY_DATA_DIR (the embedded database's address)
    fresh = request.getfixturevalue("fresh_data_dir")
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": private_redis,
           "SELFPLAY_DATA_DIR": str(fresh), "SELFPLAY_DATASETS_DIR": str(fresh / "prompts"), "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen([sys.executable, "manage.py", "rqworker", "cpu"], env=env, cwd=settings.BASE_DIR,
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    yield log
    _kill_tree(worker)


def test_pause_and_resume_a_bundled_model_run_from_its_page(roles, researcher, server, cpu_worker,  # noqa: F811
                                                            fresh_data_dir, smollm2_dir, monkeypatch, tmp_path):
    # (the server starts before fresh_data_dir: only the worker, which imports and trains, needs that dir)
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    models = fresh_data_dir / "models"
    models.mkdir()
    lock = open(models / f".{BUNDLED}.lock", "w")  # import_gguf's lock: the worker's import waits for it
    fcntl.flock(lock, fcntl.LOCK_EX)
    config = {"seed": 0, "data": {"path": str(fresh_data_dir / "prompts" / "arith.jsonl")}, "reward": "exact",
              "rollout": {"max_new_tokens": 4, "group_size": 2},
              "train": {"steps": 6, "lr": 1e-6, "prompts_per_step": 1, "micro_batch_size": 2, "device": "cpu"},
              "checkpoint": {"every": 10, "keep_last": 1}}
    run = launch("grpo", BUNDLED, None, config=config, user=researcher)
    _hand_over_the_import(models, lock, smollm2_dir, tmp_path / "import")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, f"/runs/{run.pk}/")
        try:
            page.wait_for_function("() => Number(document.querySelector('#run-step').innerText) >= 1",
                                   timeout=600_000)  # the worker loads the model, then trains step 1
            page.click("#run-controls >> text=Pause")
            page.wait_for_function(f"() => ({STATUS})() === 'paused'", timeout=300_000)
            page.click("#run-controls >> text=Resume")
            page.wait_for_function(f"() => ({STATUS})() === 'finished'", timeout=600_000)
        except Exception:
            raise AssertionError(f"{Run.objects.get(pk=run.pk).error}\nworker log:\n"
                                 f"{cpu_worker.read_text(errors='replace')[-3000:]}") from None
        assert not errors, errors
        browser.close()
    run.refresh_from_db()
    assert run.status == "finished" and run.current_step == 6, run.error
    assert (fresh_data_dir / "models" / BUNDLED / "config.json").is_file()
    messages = list(run.events.values_list("message", flat=True))
    assert any(m.startswith("resuming from step-") for m in messages), messages
