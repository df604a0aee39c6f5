"""GRPO end to end on the tiny model: the recipe, the CLI, metrics, samples, checkpoints."""
import json
import types

import pytest

import trainer
from trainer.__main__ import main
from trainer.data import DataError, load_prompt_set, missing_prompt_file
from trainer.methods import METHODS
from trainer.methods.grpo import answer_of, reward_stats, score
from trainer.verify import VERIFIERS

STEP_METRICS = {"reward_mean", "reward_std", "zero_variance_groups", "entropy", "response_length", "clip_frac",
                "kl", "grad_norm", "gen_tokens_per_s", "step_seconds", "loss", "tokens", "lr"}


def test_grpo_trains_and_reports_every_step(tiny_config, tmp_path, monkeypatch):
    monkeypatch.setitem(VERIFIERS, "exact", lambda pred, gold: len(pred) % 3 == 0)  # see test_checkpoint
    cfg = tiny_config(reward="exact", train={"steps": 2, "kl_coef": 0.05}, grpo={"log_samples": 3})
    result = trainer.run(cfg, run_dir=tmp_path / "run")
    assert result.steps == 2 and len(result.step_seconds) == 2
    solver = [r for r in result.metrics if r["role"] != "system"]  # system: the run's own costs
    assert [r["step"] for r in solver] == [1, 2]
    for row in solver:
        assert row["role"] == "solver" and STEP_METRICS <= set(row)
    costs = [r for r in result.metrics if r["role"] == "system"]
    assert [r["step"] for r in costs] == [1, 2] and all(r["rollout_tokens"] > 0 for r in costs)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    attempts = [s for s in samples if s["kind"] == "attempt"]
    assert len(attempts) == 6 and {"task"} <= {s["kind"] for s in samples}
    assert all(len(a["token_ids"]) == len(a["loss_mask"]) for a in attempts)
    assert (tmp_path / "run" / "config.yaml").is_file()
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(result.final_checkpoint + "/model")  # a checkpoint is a HF model


def test_the_cli_runs_a_yaml_and_rejects_bad_configs(tiny_config, tmp_path, capsys):
    import yaml

    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tiny_config(train={"steps": 1})))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--set", "rollout.max_new_tokens=4"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 1 and summary["final_checkpoint"].endswith("step-000001")
    assert main(["run", str(path), "--set", "train.stepz=3"]) == 2
    assert "train.stepz: unknown key; did you mean train.steps?" in capsys.readouterr().err
    assert main(["run", str(path), "--resume"]) == 2


def test_a_random_reward_control_rewards_coin_flips_whatever_the_answers(tiny_config, tmp_path, monkeypatch):
    """``--control random-reward``: every answer is right by the verifier, yet the rewards are coins (mean near
    control_p, both values present); the verifier's verdicts stay in the accuracy metric."""
    import yaml

    monkeypatch.setitem(VERIFIERS, "exact", lambda pred, gold: True)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tiny_config(reward="exact", train={"steps": 2, "prompts_per_step": 8},
                                               rollout={"group_size": 8, "max_new_tokens": 4},
                                               grpo={"log_samples": 64})))
    assert main(["run", str(path), "--out", str(tmp_path / "ctl"), "--control", "random-reward"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "ctl" / "metrics.jsonl").read_text().splitlines()]
    solver = [r for r in rows if r["role"] == "solver"]
    assert all(r["accuracy"] == 1.0 for r in solver)  # the verifier said right every time
    rewards = [a["reward"] for line in (tmp_path / "ctl" / "samples.jsonl").read_text().splitlines()
               for a in [json.loads(line)] if a["kind"] == "attempt"]
    assert set(rewards) == {0.0, 1.0} and 0.3 < sum(rewards) / len(rewards) < 0.7  # 128 coins: 0.5 +- 3.6 sd
    assert yaml.safe_load((tmp_path / "ctl" / "config.yaml").read_text())["train"]["control"] == "random-reward"


def test_prompt_sets_and_answers(tmp_path):
    gsm = load_prompt_set("bundled:gsm8k", limit=3)
    assert len(gsm) == 3 and gsm[0]["answer"] == "18"
    assert load_prompt_set("bundled:gpqa")[0]["answer"] in "ABCD"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n')
    with pytest.raises(DataError, match="lacks 'prompt'"):
        load_prompt_set(str(bad))
    with pytest.raises(DataError, match="unknown bundled"):
        load_prompt_set("bundled:mmlu")
    assert answer_of("so \\boxed{42}.") == "42" and answer_of("<answer>7</answer>") == "7"
    assert answer_of("It is 5") == "It is 5"


def test_scoring_reads_the_boxed_answer_or_the_last_number():
    assert score("2 + 3 = \\boxed{5}", "5", "math") == 1.0
    assert score("she sells 1,234 eggs, then 18.", "18", "math") == 1.0  # last number, numerically
    assert score("first 18, then 20", "18", "math") == 0.0
    assert score("no number here", "4", "math") == 0.0
    assert score("\\boxed{\\frac{1}{2}}", "0.5", "math") == 1.0  # a fraction of whole numbers, read exactly
    # a boxed expression goes to math-verify (the fraction above no longer does: it is compared as a number;
    # the last number here, 4, would be wrong)
    assert score("\\boxed{\\sqrt{4}}", "2", "math") == 1.0 and score("\\boxed{\\sqrt{4}}", "4", "math") == 0.0
    assert score("The answer is (C)", "C", "mcq") == 1.0 and score("<answer>Paris</answer>", "paris", "exact") == 1.0


def test_reward_stats_and_registry():
    import torch

    # groups [1, 0] (variance) and [1, 1] (none): mean 0.75, half the groups have zero variance
    stats = reward_stats(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    assert stats["reward_mean"] == 0.75 and stats["zero_variance_groups"] == 0.5
    assert set(METHODS) == {"grpo", "spice", "ssp", "scope", "score", "piplay"}
    assert METHODS["grpo"][0].load().__name__ == "run_grpo"


def test_a_time_limit_stops_after_the_step_with_a_checkpoint_and_resumes(tiny_config, tmp_path):
    """train.time_limit_minutes: the run stops after the first step that ends past the limit, checkpointed,
    and --resume carries on from there (how a learning run fits a GPU machine's lease)."""
    cfg = tiny_config(train={"steps": 4, "time_limit_minutes": 1e-9}, checkpoint={"every": 0, "keep_last": 2})
    first = trainer.run(cfg, run_dir=tmp_path / "run")
    assert first.steps == 1 and first.stopped and first.final_checkpoint.endswith("step-000001")
    second = trainer.run({**cfg, "train": {**cfg["train"], "time_limit_minutes": 0}}, run_dir=tmp_path / "run",
                         resume=True)
    assert second.steps == 4 and not second.stopped


def test_timed_checkpoints_fall_on_a_fixed_grid_of_training_time():
    from trainer.context import timed_checkpoint_due

    every = 60.0
    assert not timed_checkpoint_due(0.0, 59.9, every)
    assert timed_checkpoint_due(0.0, 60.0, every)  # reaching the mark counts
    assert timed_checkpoint_due(55.0, 10.0, every) and not timed_checkpoint_due(65.0, 10.0, every)
    assert timed_checkpoint_due(100.0, 150.0, every)  # crossing 120 and 180 saves once
    assert not timed_checkpoint_due(100.0, 5.0, 0.0)  # off


def test_checkpoint_every_minutes_saves_by_training_time_and_resumes_its_clock(tiny_config, tmp_path):
    """checkpoint.every_minutes: a checkpoint at the first step end after each N minutes of training time (here
    a tiny N: every step), none with a long N; the summed training time travels in the checkpoint."""
    import torch

    from trainer.checkpoint import list_checkpoints

    cfg = tiny_config(train={"steps": 3}, checkpoint={"every": 0, "every_minutes": 1e-9, "keep_last": 5,
                                                      "final": False})
    result = trainer.run(cfg, run_dir=tmp_path / "timed")
    assert [p.name for p in list_checkpoints(tmp_path / "timed")] == ["step-000001", "step-000002", "step-000003"]
    saved = torch.load(list_checkpoints(tmp_path / "timed")[-1] / "state.pt", weights_only=True)["recipe"]
    assert saved["_train_seconds"] == pytest.approx(sum(result.step_seconds))

    long = tiny_config(train={"steps": 3}, checkpoint={"every": 0, "every_minutes": 60, "keep_last": 5,
                                                       "final": False})
    trainer.run(long, run_dir=tmp_path / "long")
    assert list_checkpoints(tmp_path / "long") == []

    # resumed, the clock goes on from the checkpoint's; one saved before the setting existed starts at 0
    more = {**cfg, "train": {**cfg["train"], "steps": 5}}
    again = trainer.run(more, run_dir=tmp_path / "timed", resume=True)
    resumed = torch.load(list_checkpoints(tmp_path / "timed")[-1] / "state.pt", weights_only=True)["recipe"]
    assert resumed["_train_seconds"] == pytest.approx(saved["_train_seconds"] + sum(again.step_seconds))
    last = list_checkpoints(tmp_path / "timed")[-1]
    state = torch.load(last / "state.pt", weights_only=False)
    del state["recipe"]["_train_seconds"]
    torch.save(state, last / "state.pt")
    legacy = trainer.run({**cfg, "train": {**cfg["train"], "steps": 6}}, run_dir=tmp_path / "timed", resume=True)
    newest = torch.load(list_checkpoints(tmp_path / "timed")[-1] / "state.pt", weights_only=True)["recipe"]
    assert newest["_train_seconds"] == pytest.approx(sum(legacy.step_seconds))


def test_each_step_reports_its_phases_before_its_metrics(tiny_config, tmp_path):
    """progress(step, "rollout") at a step's start, "update" when the policy update begins, then
    the step's metrics: what the live page shows during a step of several minutes."""
    from trainer.sink import NullSink

    class Heard(NullSink):
        def __init__(self):
            self.events = []

        def progress(self, step, phase):
            self.events.append((step, phase))

        def metrics(self, step, role, values):
            if role == "solver":
                self.events.append((step, "metrics"))

    heard = Heard()
    trainer.run(tiny_config(train={"steps": 2}), sink=heard, run_dir=tmp_path / "run")
    assert heard.events == [(1, "rollout"), (1, "update"), (1, "metrics"), (2, "rollout"), (2, "update"), (2, "metrics")]


def test_a_launch_finds_the_prompt_file_as_the_trainer_reads_it(tmp_path, monkeypatch):
    """What a launch checks before queueing (trainer.data.missing_prompt_file): ~ expanded as load_prompt_set does."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "p.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    assert missing_prompt_file("~/p.jsonl") is None and load_prompt_set("~/p.jsonl")[0]["answer"] == "2"
    assert missing_prompt_file("~/q.jsonl") == "~/q.jsonl does not exist"
    assert missing_prompt_file(str(tmp_path)) == f"{tmp_path} is a folder; give the JSONL file in it"
    assert missing_prompt_file("bundled:gsm8k") is None and missing_prompt_file(None) is None



def test_timed_checkpoints_follow_the_slowest_rank_so_every_rank_saves_at_the_same_step(tiny_config, monkeypatch):
    """Two ranks whose own step times straddle a mark would split the decision (one saves, the other does not: a
    ZeRO checkpoint is collective, so the run hangs). The steps' seconds are all-reduced first. Here this rank's
    steps take 0.4 s and the other rank's 0.7 s; a checkpoint every second follows the 0.7 s clock."""
    import trainer.context as context
    from trainer.config import load_config

    clock = {"now": 0.0}
    monkeypatch.setattr(context.time, "perf_counter", lambda: clock["now"])
    def all_reduce(values, op="sum"):  # reduces with the other rank's [0.7] by ``op``, as torch.distributed would:
        reduce = {"max": max, "min": min, "sum": lambda a, b: a + b}[op]  # a "sum" would give 1.1 s a step
        return [reduce(v, 0.7) for v in values]

    fake = types.SimpleNamespace(active=lambda: True, is_main=lambda: True, gather_objects=lambda x: [x],
                                 broadcast_object=lambda x: x, all_reduce=all_reduce)
    monkeypatch.setattr(context, "dist", fake)
    monkeypatch.setattr(context, "combine_rank_metrics", lambda per_rank: per_rank[0])
    cfg = load_config(tiny_config(train={"steps": 6}, checkpoint={"every": 0, "every_minutes": 1 / 60, "final": False}))
    ctx = context.RecipeContext(config=cfg, policy=None, generator=None, engine=None)
    saved = []
    monkeypatch.setattr(ctx, "checkpoint", lambda step, extra_state=None: saved.append(step))
    for _ in ctx.steps():
        clock["now"] += 0.4  # this rank's own step
    # the shared clock after each step: 0.7, 1.4, 2.1, 2.8, 3.5, 4.2 -> marks crossed at steps 2, 3, 5, 6
    assert saved == [2, 3, 5, 6]  # this rank's own clock (0.4 ... 2.4) would have saved at 3 and 5 only
    assert ctx.train_seconds == pytest.approx(4.2)
