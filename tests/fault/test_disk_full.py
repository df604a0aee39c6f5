"""The disk fills up while a checkpoint is written.

The run folder lives on a small tmpfs of its own (we are root in the test machine; without the
right to mount, the test is skipped). Once the first checkpoint is in place the tmpfs is shrunk to
what is used plus a little, so the next checkpoint cannot fit. The run must fail with an error
that says the disk is full, the previous checkpoint must stay complete and loadable, no partial
checkpoint may be left behind, and once space is back a resume finishes the run from it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from django.db import connection

from apps.runs.jobs import execute_run
from apps.runs.models import Checkpoint, Metric, Run
from apps.runs.services import lifecycle
from apps.runs.services.launch import launch
from tests.fault.conftest import wait_for
from tests.web.runs.conftest import burst

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = 6
SPARE = 256 * 1024  # bytes left free after the first checkpoint: the logs fit, a checkpoint does not


def _mount(path: Path, size: str, remount: bool = False) -> subprocess.CompletedProcess:
    options = f"{'remount,' if remount else ''}size={size}"
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)


@pytest.fixture
def small_disk(tmp_path, settings):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = _mount(mnt, "512m")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); needs root")
    settings.RUNS_DIR = mnt
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _used_bytes(path: Path) -> int:
    usage = shutil.disk_usage(path)
    return usage.used


def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one_and_says_so(roles, researcher, tiny_grpo, small_disk):
    model, config = tiny_grpo
    config["train"] = {**config["train"], "steps": STEPS}
    config["checkpoint"] = {"every": 2, "keep_last": 3}
    run = launch("grpo", model, None, config=config, user=researcher)

    def work():  # the job function itself (RQ installs signal handlers: main thread only)
        try:
            execute_run(run.pk)
        finally:
            connection.close()

    trainer = threading.Thread(target=work)
    trainer.start()
    first = wait_for(lambda: Checkpoint.objects.filter(run=run).first(), 120, "the first checkpoint")
    limit = _used_bytes(small_disk) + SPARE
    assert _mount(small_disk, str(limit), remount=True).returncode == 0
    trainer.join(timeout=300)

    run.refresh_from_db()
    assert run.status == "failed", f"{run.status}: the second checkpoint fitted on the disk"
    assert "No space left on device" in run.error and "checkpoint" in run.error, run.error
    assert run.resumable, "a run stopped by a full disk resumes from its last checkpoint"
    kept = Path(first.path)
    assert Path(run.checkpoint_path) == kept
    folder = kept.parent
    assert sorted(p.name for p in folder.iterdir()) == [kept.name], "a partial checkpoint was left behind"

    assert {"meta.json", "config.yaml", "engine.pt", "state.pt", "model"} <= set(os.listdir(kept))

    # space is back: a resume loads the kept checkpoint and finishes the run
    assert _mount(small_disk, "512m", remount=True).returncode == 0
    lifecycle.resume(run, researcher)
    burst("cpu")
    run.refresh_from_db()
    assert run.status == "finished", run.error
    steps = sorted(Metric.objects.filter(run=run, name="reward_mean").values_list("step", flat=True))
    assert steps == list(range(1, STEPS + 1))
    assert run.events.filter(message__startswith=f"resuming from {kept.name}").exists()
