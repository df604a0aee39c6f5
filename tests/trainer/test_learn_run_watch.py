"""benchmarks/gpu/learn_run.py watch (issue 22 item 3): checkpoints taken every N minutes of training time
(checkpoint.every_minutes) are evaluated by a watcher on a GPU of their own; here on the CPU, with a real
two-step run of the tiny model, the real evaluation, and no GPU."""
from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import trainer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def learn_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_out")
    old_out = os.environ.get("OUT")
    os.environ["OUT"] = str(out)
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    try:
        yield importlib.import_module("learn_run")
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "gpu"))
        for name in ("learn_run", "common"):
            sys.modules.pop(name, None)
        if old_out is None:
            os.environ.pop("OUT", None)
        else:
            os.environ["OUT"] = old_out


def watch_args(runs, keep, until, bench):
    return SimpleNamespace(run=[str(r) for r in runs], keep=str(keep), until=[str(u) for u in until], deadline=120,
                           bench=[str(bench)], max_new_tokens=8, scoring="exact")


def test_watch_evaluates_each_timed_checkpoint_and_the_shared_base_once(learn_run, tiny_config, tmp_path, monkeypatch):
    cfg = tiny_config(train={"steps": 2}, checkpoint={"every": 0, "every_minutes": 1e-9, "keep_last": 5})
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        trainer.run(cfg, run_dir=run)
        (tmp_path / f"{run.name}.done").touch()
    bench = tmp_path / "bench.jsonl"
    bench.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                             for i in range(3)))
    learn_run.keep_checkpoints(runs[0], tmp_path / "linked")  # what the watcher's linker does every second
    kept, original = tmp_path / "linked" / "step-000002", runs[0] / "checkpoints" / "step-000002"
    assert sorted(p.name for p in kept.iterdir()) == ["config.yaml", "meta.json", "model"]  # no optimizer state
    weights = next(p.name for p in (original / "model").iterdir() if p.suffix == ".safetensors")
    assert (kept / "model" / weights).stat().st_ino == (original / "model" / weights).stat().st_ino  # hard link
    measured = []
    real = learn_run.measure
    monkeypatch.setattr(learn_run, "measure", lambda *a, **k: measured.append(a[0]) or real(*a, **k))

    learn_run.cmd_watch(watch_args(runs, tmp_path / "keep", [tmp_path / "a.done", tmp_path / "b.done"], bench))

    for run in runs:
        evals = [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines()]
        assert [e["step"] for e in evals] == [0, 1, 2]
        seconds = {}
        for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()):
            seconds[row["step"]] = row.get("step_seconds", seconds.get(row["step"]))
        assert evals[2]["train_seconds"] == pytest.approx(seconds[1] + seconds[2], abs=0.11)
        assert sorted(p.name for p in (run / "eval_samples").iterdir()) == [
            "bench-step0.jsonl", "bench-step1.jsonl", "bench-step2.jsonl"]
    assert len(measured) == 5  # the base once for both runs, then 2 checkpoints each
    # evaluated checkpoints' links are gone (they would hold the disk the trainer's pruning frees), not re-linked
    assert [p.name for p in (tmp_path / "keep" / "a").iterdir()] == [] == list((tmp_path / "keep" / "b").iterdir())


def test_keep_skips_a_checkpoint_still_being_written(learn_run, tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / "step-000003" / "model").mkdir(parents=True)  # no meta.json yet: half written
    learn_run.keep_checkpoints(run, tmp_path / "keep")
    assert not (tmp_path / "keep" / "step-000003").exists()
