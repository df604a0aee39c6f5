"""``train.report_to`` (trainer/report.py): a standalone ``python -m trainer run`` streams its metrics to TensorBoard
event files in the run folder, or to a W&B run that goes offline without a network; a missing package is a config
error naming the extra to install. The run's checkpoint stays a Hugging Face model folder."""
from __future__ import annotations

import json
import sys

import pytest
import yaml
from transformers import AutoModelForCausalLM

from trainer.__main__ import main
from trainer.config import ConfigError, load_config
from trainer.verify import VERIFIERS


def _config(tiny_config, tmp_path, monkeypatch):
    monkeypatch.setitem(VERIFIERS, "exact", lambda pred, gold: len(pred) % 3 == 0)  # both rewards seen (test_grpo)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tiny_config(reward="exact", train={"steps": 2})))
    return path


def _metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_tensorboard_event_files_go_into_the_run_folder_and_read_back(tiny_config, tmp_path, monkeypatch, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    assert main(["run", str(_config(tiny_config, tmp_path, monkeypatch)), "--out", str(out),
                 "--set", "train.report_to=tensorboard"]) == 0
    files = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 1
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    rows = [r for r in _metrics(out) if r["role"] == "solver"]
    assert all(isinstance(r["wall_clock"], float) for r in rows)  # the compare view's wall-time stamp
    for name in ("reward_mean", "loss", "step_seconds"):
        scalars = events.Scalars(f"solver/{name}")
        assert [s.step for s in scalars] == [1, 2]
        assert [s.value for s in scalars] == pytest.approx([r[name] for r in rows], rel=1e-6)
    assert "solver/wall_clock" not in events.Tags()["scalars"]  # the time axis, not a curve
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    AutoModelForCausalLM.from_pretrained(summary["final_checkpoint"] + "/model")  # a checkpoint is a HF model


@pytest.mark.parametrize("kind", ["tensorboard", "wandb"])
def test_a_missing_package_is_a_config_error_naming_the_extra(kind, tiny_config, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, kind, None)  # how Python marks a module as not importable
    with pytest.raises(ConfigError) as exc:
        load_config(tiny_config(train={"report_to": kind}))
    assert exc.value.problems == [("train.report_to", f"report_to={kind} needs the {kind} package, which is not "
                                   f"installed: pip install 'selfplay[{kind}]' (or set train.report_to=none)")]
    out = tmp_path / "run"
    assert main(["run", str(_config(tiny_config, tmp_path, monkeypatch)), "--out", str(out),
                 "--set", f"train.report_to={kind}"]) == 2
    assert f"pip install 'selfplay[{kind}]'" in capsys.readouterr().err
    assert not (out / "metrics.jsonl").exists()  # refused before any step


def test_report_to_takes_only_known_tools(tiny_config):
    with pytest.raises(ConfigError) as exc:
        load_config(tiny_config(train={"report_to": "mlflow"}))
    assert exc.value.problems[0][0] == "train.report_to" and "'none', 'tensorboard' or 'wandb'" in exc.value.problems[0][1]


def test_wandb_goes_offline_without_a_network_and_logs_into_the_run_folder(tiny_config, tmp_path, monkeypatch, capsys):
    pytest.importorskip("wandb")
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens: W&B unreachable
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    out = tmp_path / "run"
    assert main(["run", str(_config(tiny_config, tmp_path, monkeypatch)), "--out", str(out),
                 "--set", "train.report_to=wandb"]) == 0
    err = capsys.readouterr().err
    assert f"W&B offline (no network to W&B): the run is in {out / 'wandb'}" in err
    run_id = (out / "wandb_run_id").read_text().strip()
    (offline,) = list((out / "wandb").glob(f"offline-run-*-{run_id}"))
    (records,) = list(offline.glob("*.wandb"))  # what `wandb sync` uploads: the metrics and the run's config
    data = records.read_bytes()
    assert b"solver/reward_mean" in data and b"solver/step_seconds" in data and b"report_to" in data
