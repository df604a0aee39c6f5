"""Checkpoints: explicit and atomic, pruned, and a resumed run takes exactly the steps an
uninterrupted run takes; impossible resumes say why."""
import json
import random

import numpy as np
import pytest
import torch

import trainer
from trainer.checkpoint import (ResumeError, list_checkpoints, load_checkpoint, save_checkpoint)
from trainer.config import load_config
from trainer.engine import make_engine
from trainer.models import load_policy
from trainer.verify import VERIFIERS


@pytest.fixture
def varied_reward(monkeypatch):
    """A deterministic reward that differs between samples of a group (random-init models never
    answer correctly, and all-zero rewards would give zero advantages and nothing to compare)."""
    monkeypatch.setitem(VERIFIERS, "exact", lambda pred, gold: len(pred) % 2 == 0)


def test_save_and_load_restore_weights_optimizer_and_rng(tiny_config, tmp_path):
    cfg = load_config(tiny_config())
    policy = load_policy(cfg)
    engine = make_engine(cfg, policy)
    loss = policy.model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss
    engine.backward(loss)
    engine.step()
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    path = save_checkpoint(tmp_path, 7, cfg, policy, engine, {"cursor": 5, "buffer": [1, 2]})
    assert path.name == "step-000007"
    assert sorted(p.name for p in path.iterdir()) == ["config.yaml", "engine.pt", "meta.json", "model", "state.pt"]
    expected = (random.random(), np.random.rand(), torch.rand(1))

    fresh = load_policy(cfg)
    fresh_engine = make_engine(cfg, fresh)
    state = load_checkpoint(path, cfg, fresh, fresh_engine)
    assert state == {"step": 7, "recipe": {"cursor": 5, "buffer": [1, 2]}}
    assert (random.random(), np.random.rand(), torch.rand(1)) == expected
    for a, b in zip(policy.model.state_dict().values(), fresh.model.state_dict().values()):
        torch.testing.assert_close(a, b)
    assert fresh_engine.steps == 1
    assert fresh_engine.optimizer.state_dict()["state"].keys() == engine.optimizer.state_dict()["state"].keys()


def test_lora_checkpoints_hold_only_the_adapter(tiny_config, tmp_path):
    cfg = load_config(tiny_config(model={"lora": {"r": 2}}))
    policy = load_policy(cfg)
    path = save_checkpoint(tmp_path, 1, cfg, policy, make_engine(cfg, policy))
    assert (path / "model" / "adapter_model.safetensors").is_file()
    assert not (path / "model" / "model.safetensors").exists()
    other = load_policy(cfg)
    load_checkpoint(path, cfg, other, make_engine(cfg, other))


def test_only_the_newest_checkpoints_are_kept_and_no_temp_folder_is_left(tiny_config, tmp_path):
    cfg = load_config(tiny_config(checkpoint={"keep_last": 2}))
    policy = load_policy(cfg)
    engine = make_engine(cfg, policy)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, cfg, policy, engine)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000002", "step-000003"]
    assert [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")] == []


def test_a_resumed_run_matches_an_uninterrupted_one(tiny_config, tmp_path, varied_reward):
    cfg = tiny_config(reward="exact", train={"steps": 4, "lr": 1e-2}, checkpoint={"every": 2})
    straight = trainer.run(cfg, run_dir=tmp_path / "a")
    first = trainer.run({**cfg, "train": {**cfg["train"], "steps": 2}}, run_dir=tmp_path / "b")
    rest = trainer.run(cfg, run_dir=tmp_path / "b", resume=True)
    assert first.steps == 2 and rest.steps == 4 and len(rest.step_seconds) == 2

    def trace(rows):
        return [(r["step"], r["loss"], r["grad_norm"], r["reward_mean"], r["entropy"]) for r in rows
                if r["role"] != "system"]  # system rows are timings

    assert trace(first.metrics + rest.metrics) == trace(straight.metrics)
    assert len({r["grad_norm"] for r in straight.metrics if r["role"] != "system"}) == 4  # real, changing updates
    assert rest.final_checkpoint.endswith("step-000004")


def test_impossible_resumes_say_why(tiny_config, tmp_path, tiny_model_dir):
    cfg = tiny_config(train={"steps": 1})
    with pytest.raises(ResumeError, match="nothing to resume"):
        trainer.run(cfg, run_dir=tmp_path / "empty", resume=True)
    trainer.run(cfg, run_dir=tmp_path / "r")
    with pytest.raises(ResumeError, match="pass --resume"):
        trainer.run(cfg, run_dir=tmp_path / "r")
    with pytest.raises(ResumeError, match="model.lora.r"):
        trainer.run({**cfg, "model": {**cfg["model"], "lora": {"r": 4}}}, run_dir=tmp_path / "r", resume=True)
    (list_checkpoints(tmp_path / "r")[-1] / "engine.pt").unlink()
    with pytest.raises(ResumeError, match="engine.pt is missing"):
        trainer.run({**cfg, "train": {**cfg["train"], "steps": 2}}, run_dir=tmp_path / "r", resume=True)


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of its own for the run folder, resizable (we are root on the test machine; otherwise skipped)."""
    import subprocess

    mnt = tmp_path / "disk"
    mnt.mkdir()

    def mount(size: int, remount: bool = False) -> None:
        options = f"{'remount,' if remount else ''}size={size}"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); needs root")

    yield mnt, mount
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_nearly_full_disk_keeps_fewer_checkpoints_instead_of_stopping_the_run(tiny_config, tmp_path, small_disk):
    """keep_last 3 on a disk with room for ~2.5 checkpoints: the oldest goes early (never the newest), the run
    finishes, and an event says what was removed; the 1.5B GPU runs of 2026-11-26 died on this instead."""
    from trainer.checkpoint import folder_bytes

    probe = trainer.run(tiny_config(train={"steps": 1}), run_dir=tmp_path / "probe")
    size = folder_bytes(list_checkpoints(tmp_path / "probe")[-1])
    mnt, mount = small_disk
    mount(int(size * 2.6) + (1 << 20))  # 2 checkpoints + the run's logs fit, a third does not
    result = trainer.run(tiny_config(train={"steps": 4}, checkpoint={"every": 1, "keep_last": 3}), run_dir=mnt / "run")
    assert probe.steps == 1 and result.steps == 4
    kept = [p.name for p in list_checkpoints(mnt / "run")]
    assert kept[-1] == "step-000004" and len(kept) < 3
    events = [json.loads(line) for line in (mnt / "run" / "samples.jsonl").read_text().splitlines()]
    events = [e for e in events if e.get("data", {}).get("what") == "disk_made_room"]
    assert events and events[0]["data"]["removed"] == ["step-000001"]
    assert "disk nearly full: removed step-000001 early" in events[0]["message"]
    assert "checkpoint.keep_last=3" in events[0]["message"]
