"""Several ranks (one process per GPU; here CPU processes over gloo, started by torchrun):

- one policy update over samples split unevenly between 2 ranks equals the update of all the
  samples in one process (global loss denominator, averaged gradients, idle micro-batches on
  the rank with less work);
- ``python -m trainer run --gpus 2`` runs SPICE as 2 processes: rank 0 alone writes the run
  folder, the metrics count both ranks' work once, every sample key is unique, and the
  checkpoint resumes in ONE process (a different GPU count) at the next step;
- the pieces: metric combination over ranks, sharding, refusals.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from trainer.context import combine_rank_metrics
from trainer.distributed import shard

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1",
               SELFPLAY_TORCH_THREADS="1", SELFPLAY_DATA_DIR=str(tmp_path / "var"), PYTHONPATH=REPO)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SELFPLAY_LAUNCHED"):
        env.pop(key, None)
    return env


def _torchrun(args, tmp_path, n=2, timeout=300):
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={n}", "--standalone", *args]
    return subprocess.run(cmd, cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=timeout)


def _samples(tokenizer) -> list[dict]:
    """Six samples of different lengths; two with advantage 0 (skipped, still in the denominator)."""
    texts = ["one two", "three four five six", "seven", "eight nine ten", "eleven twelve thirteen fourteen", "x"]
    prompt = tokenizer.encode("Count:", add_special_tokens=False)
    rows = []
    for i, text in enumerate(texts):
        ids = tokenizer.encode(" " + text, add_special_tokens=False)
        rows.append({"prompt_ids": prompt if i % 2 else prompt + [i + 5], "completion_ids": ids,
                     "loss_mask": [1] * len(ids), "old_logprobs": [-3.0 - 0.1 * j for j in range(len(ids))],
                     "advantage": [1.0, -0.5, 0.0, 2.0, -1.0, 0.0][i]})
    return rows


def _update_config(tiny_config, engine="torch", stage=2):
    cfg = tiny_config(train={"micro_batch_size": 2, "lr": 1e-2, "engine": engine, "zero_stage": stage,
                             "share_prompt_prefix": False})
    cfg["model"]["dtype"] = "float32"
    return cfg


def _one_process_update(cfg, rows):
    from trainer.config import load_config
    from trainer.engine import make_engine
    from trainer.models import load_policy
    from trainer.update import Sample, policy_update

    c = load_config(cfg)
    torch.manual_seed(0)
    policy = load_policy(c)
    engine = make_engine(c, policy)
    metrics = policy_update(policy, engine, [Sample(**r) for r in rows], c)
    state = engine.model_state_dict() if getattr(engine, "zero_stage", None) == 3 else policy.model.state_dict()
    return {k: v.detach().float().clone() for k, v in state.items()}, metrics


def _check_two_ranks_equal_one(tmp_path, cfg, rows, split="0,1,2,3,4/5"):
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    (tmp_path / "samples.json").write_text(json.dumps(rows))
    out = tmp_path / "two.pt"
    done = _torchrun(["tests/trainer/ranks_update.py", str(tmp_path / "cfg.json"), str(tmp_path / "samples.json"),
                      str(out), split], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    two = torch.load(out, weights_only=False)
    assert two["world"] == 2
    one, metrics = _one_process_update(cfg, rows)
    # The first AdamW step is nearly sign(gradient): the gradient itself is compared through its
    # global norm (a wrong loss scale over ranks changes it), then the weights.
    assert two["metrics"]["policy"]["grad_norm"] == pytest.approx(metrics["policy"]["grad_norm"], rel=1e-5)
    assert two["metrics"]["policy"]["grad_norm"] > 0
    moved = 0
    for name, value in one.items():
        if name in two["weights"]:
            torch.testing.assert_close(two["weights"][name], value, atol=2e-6, rtol=1e-4, msg=name)
            moved += 1
    assert moved >= 10
    return two


def test_two_ranks_update_like_one_process(tiny_config, smollm2_tokenizer, tmp_path):
    cfg = _update_config(tiny_config)
    rows = _samples(smollm2_tokenizer)
    two = _check_two_ranks_equal_one(tmp_path, cfg, rows)
    # the update really moved the weights (the comparison above is not between two no-ops)
    from safetensors.torch import load_file

    base = load_file(os.path.join(cfg["model"]["name_or_path"], "model.safetensors"))
    name = "model.layers.0.mlp.down_proj.weight"
    assert (two["weights"][name] - base[name].float()).abs().max() > 1e-4


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed (gpu extra)")
@pytest.mark.parametrize("stage", [2, 3])
def test_two_ranks_update_like_one_process_deepspeed(tiny_config, smollm2_tokenizer, tmp_path, stage):
    cfg = _update_config(tiny_config, engine="deepspeed", stage=stage)
    _check_two_ranks_equal_one(tmp_path, cfg, _samples(smollm2_tokenizer))


def _corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    docs = [{"title": f"Doc {i}", "text": f"Item {i} weighs {i * 3} grams and costs {i + 2} coins. " * 3}
            for i in range(6)]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def test_spice_on_two_ranks_then_resume_on_one(tiny_config, tmp_path):
    # checkpoints by training time (checkpoint.every_minutes): the ranks decide on one all-reduced clock
    cfg = tiny_config("spice", corpus={"path": str(_corpus(tmp_path))},
                      train={"steps": 2, "prompts_per_step": 3, "micro_batch_size": 4},
                      checkpoint={"every": 0, "every_minutes": 1e-9, "keep_last": 2, "final": False},
                      spice={"challenger_attempts": 2, "challenger_group_size": 2, "format_max_new_tokens": 16},
                      rollout={"max_new_tokens": 8, "group_size": 2, "temperature": 1.0})
    (tmp_path / "spice.json").write_text(json.dumps(cfg))
    out = tmp_path / "run"
    env = _env(tmp_path)
    done = subprocess.run([sys.executable, "-m", "trainer", "run", str(tmp_path / "spice.json"), "--gpus", "2",
                           "--out", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["steps"] == 2  # one summary line (rank 0)

    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = {(m["step"], m["role"]): m for m in metrics}
    assert len(rows) == len(metrics) == 6  # challenger, reasoner and system per step, written once
    system = rows[(1, "system")]  # the run's costs, both ranks' tokens together
    assert system["rollout_tokens"] > 0 and system["update_tokens"] > 0
    assert system["rollout_tokens_per_s"] == pytest.approx(system["rollout_tokens"] / system["rollout_seconds"])
    # 3 documents x 2 attempts, split 2 + 1 over the ranks, all counted: 6 challenger samples
    assert all(rows[(s, "challenger")]["samples"] == 6 for s in (1, 2))
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    tasks = [r for r in samples if r["kind"] == "task"]
    assert len(tasks) == 12 and len({r["key"] for r in samples}) == len(samples)  # 2 steps x 6, no clash
    assert sorted(os.listdir(out / "checkpoints")) == ["step-000001", "step-000002"]

    again = subprocess.run([sys.executable, "-m", "trainer", "run", str(tmp_path / "spice.json"), "--out", str(out),
                            "--resume", "--set", "train.steps=3"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=400)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["steps"] == 3
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps.count(3) == 3 and steps.count(1) == 3  # step 3 added by the 1-process resume


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed (gpu extra)")
def test_spice_zero3_on_two_ranks_resumes_on_one(tiny_config, tmp_path):
    """ZeRO-3 partitions the weights: generation runs with them gathered (hooks off), the
    checkpoint holds consolidated weights, and one process resumes it."""
    cfg = tiny_config("spice", corpus={"path": str(_corpus(tmp_path))},
                      train={"steps": 1, "prompts_per_step": 2, "engine": "deepspeed", "zero_stage": 3},
                      spice={"challenger_attempts": 2, "challenger_group_size": 2, "format_max_new_tokens": 16},
                      rollout={"max_new_tokens": 8, "group_size": 2})
    (tmp_path / "z3.json").write_text(json.dumps(cfg))
    out, env = tmp_path / "run", _env(tmp_path)
    done = subprocess.run([sys.executable, "-m", "trainer", "run", str(tmp_path / "z3.json"), "--gpus", "2",
                           "--out", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    from safetensors.torch import load_file

    saved = load_file(out / "checkpoints" / "step-000001" / "model" / "model.safetensors")
    assert saved["model.layers.0.mlp.down_proj.weight"].shape == (64, 128)  # whole, not a partition
    again = subprocess.run([sys.executable, "-m", "trainer", "run", str(tmp_path / "z3.json"), "--out", str(out),
                            "--resume", "--set", "train.steps=2"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=400)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["steps"] == 2


def test_multi_rank_refusals(tiny_config, tmp_path):
    env = _env(tmp_path)

    def run(cfg, name, *extra):
        (tmp_path / name).write_text(json.dumps(cfg))
        return subprocess.run([sys.executable, "-m", "trainer", "run", str(tmp_path / name), "--gpus", "2",
                               "--out", str(tmp_path / name[:-5]), *extra], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)

    done = run(tiny_config("grpo", train={"prompts_per_step": 1}), "g.json")
    assert done.returncode == 2 and "train.prompts_per_step" in done.stderr and "2 GPUs" in done.stderr
    done = run(tiny_config("piplay"), "p.json")
    assert done.returncode == 2 and "runs on one GPU" in done.stderr
    (tmp_path / "c.json").write_text(json.dumps(tiny_config("grpo", train={"prompts_per_step": 1, "gpus": 2})))
    done = subprocess.run([sys.executable, "-m", "trainer", "run", str(tmp_path / "c.json"), "--out",
                           str(tmp_path / "c")], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "2 GPUs" in done.stderr  # train.gpus in the config is --gpus's default
    done = run(tiny_config("grpo"), "h.json", "--hostfile", str(tmp_path / "nope"))
    assert done.returncode == 2 and "needs --launcher deepspeed" in done.stderr


def test_combine_rank_metrics_sums_counts_and_averages_the_rest():
    got = combine_rank_metrics([
        {"r": {"samples": 4, "reward": 1.0, "gen_seconds": 2.0, "ratio_min": 0.9, "ratio_max": 1.1}},
        {"r": {"samples": 2, "reward": 0.0, "gen_seconds": 3.0, "ratio_min": 0.8, "ratio_max": 1.05},
         "c": {"valid_rate": 0.5}},
    ])
    assert got == {"r": {"samples": 6.0, "reward": 0.5, "gen_seconds": 3.0, "ratio_min": 0.8, "ratio_max": 1.1},
                   "c": {"valid_rate": 0.5}}


def test_shard_is_strided_and_balanced():
    assert shard(list("abcde"), 0, 2) == ["a", "c", "e"] and shard(list("abcde"), 1, 2) == ["b", "d"]
    with pytest.raises(ValueError, match="outside"):
        shard([1], 2, 2)


def test_a_rank_other_than_0_imports_a_bundled_model_whole(tmp_path):
    """transformers 5 writes a model's files from rank 0 only once torch.distributed is initialized: a rank 1 that
    took the import lock first wrote the tokenizer alone, and every rank then failed to load the folder (a 2-GPU
    run of a not yet imported bundled model, from a fresh data dir)."""
    out = _torchrun(["tests/trainer/import_rank.py"], tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank}: " in out.stdout and "config.json" in out.stdout and "model.safetensors" in out.stdout
    assert out.stdout.count(" llama") == 2, out.stdout


def test_an_import_replaces_only_what_a_failed_import_left(tmp_path):
    """A folder with a tokenizer and no config.json (what the rank-1 import wrote) is cleared for the import; a folder
    holding anything else is refused with its files named, not deleted."""
    from trainer.models import _clear_failed_import

    left = tmp_path / "left"
    left.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (left / name).write_text("{}")
    _clear_failed_import(left)
    assert not left.exists()

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "tokenizer.json").write_text("{}")
    (mine / "notes.txt").write_text("my notes")
    with pytest.raises(RuntimeError, match="notes.txt"):
        _clear_failed_import(mine)
    assert (mine / "notes.txt").read_text() == "my notes"
