"""The demo's model on a fresh data dir: a run of the bundled smollm2-135m-instruct pauses after
step 1 and resumes to the end on a real RQ worker (issue 20, blocker 1).

On a fresh data dir the bundled model is imported by the first job, so the first checkpoint holds
the bare name while the resumed job finds the imported folder and spells the model as its path;
the resume compares what the model is (``trainer.models.model_identity``), not the spelling.
The same holds for a run failed (resumable) by the reaper after a Ctrl-C.

Transactional: the job's heartbeat thread and the pause thread use their own DB connections.
"""
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from apps.runs.models import Run
from apps.runs.services import lifecycle
from apps.runs.services.launch import launch
from tests.trainer.conftest import smollm2_dir  # noqa: F401  (fixture)
from tests.web.runs.conftest import burst, pause_after_step_one
from trainer.checkpoint import check_compatible
from trainer.config import load_config
from trainer.models import model_identity

pytestmark = pytest.mark.django_db(transaction=True)
BUNDLED = "smollm2-135m-instruct"


@pytest.fixture
def fresh_data_dir(settings, tmp_path, monkeypatch, tiny_prompts_path):  # noqa: F811
    """A data dir with no imported model, for the web (settings) and the trainer (environment) alike."""
    import shutil

    root = tmp_path / "data"
    (root / "prompts").mkdir(parents=True)
    shutil.copy(tiny_prompts_path, root / "prompts" / "arith.jsonl")
    monkeypatch.setenv("SELFPLAY_DATA_DIR", str(root))
    settings.DATA_DIR = root
    settings.MODELS_DIR = root / "models"
    settings.DATASETS_DIR = root / "prompts"
    settings.RUNS_DIR = root / "runs"
    assert not (root / "models" / BUNDLED).exists()
    return root


def _paused_after_step_one(researcher, data_dir: Path) -> Run:
    """A 3-step grpo run of the bundled model, paused once step 1 is reported (at the step boundary
    after step 1 or 2: the request may land just after the first boundary's check); its first job
    imported the model."""
    config = {"seed": 0, "data": {"path": str(data_dir / "prompts" / "arith.jsonl")}, "reward": "exact",
              "rollout": {"max_new_tokens": 4, "group_size": 2},
              "train": {"steps": 3, "lr": 1e-6, "prompts_per_step": 1, "micro_batch_size": 2, "device": "cpu"},
              "checkpoint": {"every": 10, "keep_last": 1}}
    run = launch("grpo", BUNDLED, None, config=config, user=researcher)
    pauser = pause_after_step_one(run.pk)
    burst("cpu")
    pauser.join()
    run.refresh_from_db()
    assert run.status == "paused", run.error
    assert 1 <= run.current_step < 3
    assert Path(run.checkpoint_path).name == f"step-{run.current_step:06d}"
    assert (data_dir / "models" / BUNDLED / "config.json").is_file()  # imported by the first job (or before it)
    return run


def _finishes(run: Run, paused_at: int) -> None:
    burst("cpu")
    run.refresh_from_db()
    assert run.status == "finished", run.error
    assert run.current_step == 3
    messages = run.events.values_list("message", flat=True)
    assert any(m.startswith(f"resuming from step-{paused_at:06d}") for m in messages)


def test_a_bundled_model_run_on_a_fresh_data_dir_pauses_and_resumes_to_the_end(roles, researcher, fresh_data_dir):
    run = _paused_after_step_one(researcher, fresh_data_dir)
    lifecycle.resume(run, researcher)
    _finishes(run, paused_at=run.current_step)


def test_a_bundled_model_run_failed_by_a_ctrl_c_resumes_to_the_end(roles, researcher, fresh_data_dir, smollm2_dir):
    """README: a demo run left behind by Ctrl-C is marked failed (resumable) by the reaper; Resume continues it.
    The import on a fresh data dir is the test above's: here the data dir already holds the model (hard links to the
    suite's import, or a copy), as a demo's does after its first run."""
    import os
    import shutil

    def link_or_copy(src, dst):  # a copy where the data dir is on another file system
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(smollm2_dir, fresh_data_dir / "models" / BUNDLED, copy_function=link_or_copy)
    run = _paused_after_step_one(researcher, fresh_data_dir)
    lifecycle.resume(run, researcher)
    run.mark_running("worker stopped by Ctrl-C")  # it claimed the run, then died without a heartbeat
    assert lifecycle.reap_stale_runs(now=timezone.now() + timedelta(hours=1)) == [run.pk]
    run.refresh_from_db()
    assert run.status == "failed" and run.resumable, run.error
    lifecycle.resume(run, researcher)
    _finishes(run, paused_at=run.current_step)


def test_model_identity_is_what_the_model_is_not_its_spelling(fresh_data_dir, tmp_path):
    folder = fresh_data_dir / "models" / BUNDLED
    assert model_identity(BUNDLED) == model_identity(str(folder)) == model_identity(str(folder) + "/") == BUNDLED
    assert model_identity(str(tmp_path / "elsewhere" / BUNDLED)) == str((tmp_path / "elsewhere" / BUNDLED).resolve())
    assert model_identity("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_a_resume_still_refuses_another_model(fresh_data_dir):
    def config(model: str):
        return load_config({"method": "grpo", "data": {"path": "bundled:gsm8k"}, "model": {"name_or_path": model}})

    check_compatible(config(BUNDLED), config(str(fresh_data_dir / "models" / BUNDLED)))
    with pytest.raises(Exception, match="model.name_or_path"):
        check_compatible(config(BUNDLED), config(str(fresh_data_dir / "models" / "tiny")))
