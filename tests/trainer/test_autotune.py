"""The ``auto`` speed settings (trainer/autotune.py): the rule's decisions on the shapes that
matter, the update applying it group by group, the engine factory and the run's event saying
what was picked."""
import json

import pytest
import torch

from trainer import autotune
from trainer.config import ConfigError, load_config
from trainer.engine import make_engine, resolved_engine
from trainer.models import load_policy
from trainer.update import Sample, plan_micro_batches, policy_update


def test_the_share_gain_counts_the_tokens_each_path_runs():
    assert autotune.share_gain(40, [256] * 8, 8) == pytest.approx(8 * 296 / (40 + 8 * 256))
    # two chunks of 4 run the prompt twice; each chunk is padded to its longest completion
    assert autotune.share_gain(100, [10, 50, 20, 40, 30, 60, 70, 80], 4) == pytest.approx(
        (8 * 100 + 360) / ((100 + 4 * 80) + (100 + 4 * 40)))
    assert autotune.share_gain(500, [], 8) == 1.0
    with pytest.raises(ValueError, match="micro_batch_size"):
        autotune.share_gain(10, [5], 0)


@pytest.mark.parametrize("prompt, completions, micro, device, shares", [
    # the 321M GRPO benchmark on a GPU: 40-token prompts, 8 x 256 forced tokens (gain 1.13): packed, not shared
    (40, [256] * 8, 16, "cuda", False),
    # SPICE Challenger with a 512-token document (~650-token prompt), 8 answers of ~300 tokens (2.5x): packed
    # (on the H100 sharing was still slower at gain 3.4)
    (650, [300] * 8, 8, "cuda", False),
    # a 2,000-token document, 8 x 256 (gain 4.5: shared 1.27x faster on the H100): shared
    (2048, [256] * 8, 8, "cuda", True),
    # ... and with a 6,000-token document even at 512 forced tokens (5.2x)
    (6100, [512] * 8, 8, "cuda", True),
    # a 512-token prompt with 512-token completions only gains 1.78x: not on a GPU, yes on a CPU
    (512, [512] * 8, 8, "cuda", False),
    (512, [512] * 8, 8, "cpu", True),
    # the CPU benchmark (grpo_vs_trl.py): ~100-token GSM8K prompts, 8 x 64 forced tokens (2.1x): shared
    (100, [64] * 8, 8, "cpu", True),
    # short prompt, long answers on a CPU (1.14x): padded, not shared
    (40, [256] * 8, 8, "cpu", False),
    # one sample is no group
    (6000, [10], 8, "cuda", False),
])
def test_the_share_rule_decides_the_known_shapes(prompt, completions, micro, device, shares):
    assert autotune.share_pays(prompt, completions, micro, device) is shares


def test_the_crossover_constants_sit_between_the_measured_sides():
    """cuda (H100, 321M, bench_share_crossover.py): sharing was slower at gains 1.13 and 3.4 and faster at
    4.5 (prompt 2048, G=8): the threshold lies between."""
    assert autotune.SHARE_MIN_GAIN["cuda"] > autotune.share_gain(40, [256] * 8, 16)
    assert autotune.SHARE_MIN_GAIN["cuda"] > autotune.share_gain(4096, [256] * 4, 16)  # 3.4: 0.98x
    assert autotune.SHARE_MIN_GAIN["cuda"] <= autotune.share_gain(2048, [256] * 8, 16)  # 4.5: 1.27x
    assert autotune.min_share_gain("mps") == autotune.SHARE_MIN_GAIN["cuda"]


def test_engine_and_packing_rules():
    pick = autotune.pick_engine
    assert pick("auto", "cuda", True) == "deepspeed"
    assert pick("auto", "cuda", False) == "torch"
    assert pick("auto", "cpu", True) == "torch"
    assert pick("auto", "cuda", True, zero_stage=3, lora=True) == "torch"
    assert pick("auto", "cuda", True, zero_stage=3, compiled=True) == "torch"
    assert pick("auto", "cuda", True, zero_stage=3) == "deepspeed"
    assert pick("torch", "cuda", True) == "torch" and pick("deepspeed", "cpu", False) == "deepspeed"
    assert autotune.pick_packing("auto", "cuda") is True
    assert autotune.pick_packing("auto", "cpu") is False
    assert autotune.pick_packing(True, "cpu") is True and autotune.pick_packing(False, "cuda") is False


def test_the_config_defaults_are_auto_and_bad_values_are_refused(tiny_config):
    cfg = load_config(tiny_config())
    assert (cfg.train.engine, cfg.train.packing, cfg.train.share_prompt_prefix) == ("auto", "auto", "auto")
    cfg = load_config(tiny_config(), ["train.packing=true", "train.share_prompt_prefix=false", "train.engine=torch"])
    assert (cfg.train.engine, cfg.train.packing, cfg.train.share_prompt_prefix) == ("torch", True, False)
    with pytest.raises(ConfigError) as err:
        load_config(tiny_config(), ["train.packing=sometimes", "train.engine=jax"])
    paths = [p for p, _ in err.value.problems]
    assert "train.packing" in paths and "train.engine" in paths


H100, H200 = 85_520_809_984, 150_754_820_096  # total_memory as torch reports it


@pytest.mark.parametrize("params, memory, tokens", [
    (494_032_768, H100, 16384),     # Qwen2.5-Coder-0.5B: ran at 16,384 on an H100 (GRPO on GSM8K)
    (1_543_714_304, H100, 4096),    # Qwen2.5-Coder-1.5B: 16,384 and 8,192 ran out of memory on an H100, 2,048 ran
    (1_543_714_304, H200, 8192),    # ... 4,096 ran on an H200; 8,192 estimated to fit with the chunked logits
    (7_615_616_512, H100, 1024),    # a 7B: the floor
    (134_515_008, H100, 16384),     # SmolLM2-135M: the ceiling
    (1_543_714_304, None, 16384),   # no GPU: packing is off there by default, the value is the ceiling
])
def test_auto_micro_batch_tokens_scale_with_the_model_and_the_gpu(params, memory, tokens):
    assert autotune.pick_micro_batch_tokens("auto", params, memory) == tokens
    assert autotune.pick_micro_batch_tokens(2048, params, memory) == 2048  # a number is kept as set


def test_micro_batch_tokens_is_auto_by_default_and_checked(tiny_config):
    assert load_config(tiny_config()).train.micro_batch_tokens == "auto"
    assert load_config(tiny_config(), ["train.micro_batch_tokens=4096"]).train.micro_batch_tokens == 4096
    for bad in ("0", "lots", "true", "2.5"):
        with pytest.raises(ConfigError) as err:
            load_config(tiny_config(), [f"train.micro_batch_tokens={bad}"])
        assert [p for p, _ in err.value.problems] == ["train.micro_batch_tokens"], bad
        assert "auto or a whole number of tokens" in str(err.value)


def test_the_update_packs_with_the_auto_budget(tiny_config):
    """packing on with micro_batch_tokens auto: a CPU has no GPU memory to scale by, so the ceiling, 16,384."""
    cfg = load_config(tiny_config(train={"packing": True}))
    policy = load_policy(cfg)
    out = policy_update(policy, make_engine(cfg, policy), _group(12, 4, 6, 0), cfg)
    assert out["solver"]["samples"] == 4 and out["solver"]["tokens"] == 24


def _group(prompt_len, n, comp_len, seed, role="solver"):
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(5, 900, (prompt_len,), generator=g).tolist()
    return [Sample(prompt, torch.randint(5, 900, (comp_len,), generator=g).tolist(), [1] * comp_len,
                   [-3.0] * comp_len, advantage=(-1.0) ** i, role=role) for i in range(n)]


def test_auto_shares_only_the_groups_where_it_pays():
    long_prompt = _group(300, 4, 20, seed=0)  # gain (4*320) / (300 + 80) = 3.4
    short_prompt = _group(5, 4, 30, seed=1)  # gain 140 / 125 = 1.12
    plan = plan_micro_batches(long_prompt + short_prompt, 8, "auto", device_type="cpu")
    shared = [group for group, is_shared in plan if is_shared]
    assert len(shared) == 1 and {id(s) for s in shared[0]} == {id(s) for s in long_prompt}
    singles = {id(s) for group, is_shared in plan if not is_shared for s in group}
    assert singles == {id(s) for s in short_prompt}
    # True still shares every group, False none
    assert all(is_shared for _, is_shared in plan_micro_batches(long_prompt + short_prompt, 8, True))
    assert not any(is_shared for _, is_shared in plan_micro_batches(long_prompt + short_prompt, 8, False))


def test_the_update_reports_which_samples_shared_their_prompt(tiny_config):
    cfg = load_config(tiny_config(train={"device": "cpu", "micro_batch_size": 8}))
    policy = load_policy(cfg)
    engine = make_engine(cfg, policy)
    assert resolved_engine(cfg, "cpu") == "torch" and type(engine).__name__ == "TorchEngine"
    metrics = policy_update(policy, engine, _group(300, 4, 20, seed=0) + _group(5, 4, 30, seed=1), cfg)
    assert metrics["solver"]["prompt_shared"] == pytest.approx(0.5)
    off = load_config(tiny_config(train={"device": "cpu", "share_prompt_prefix": False}))
    assert policy_update(policy, engine, _group(300, 4, 20, seed=0), off)["solver"]["prompt_shared"] == 0.0


def test_a_run_records_what_auto_picked(tiny_config, tmp_path):
    from trainer.runner import run

    run(tiny_config(train={"steps": 1}, checkpoint={"every": 0, "final": False}), run_dir=tmp_path / "run")
    events = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    events = [e for e in events if e.get("kind") == "event" and e["data"].get("what") == "auto_settings"]
    assert len(events) == 1
    data = events[0]["data"]
    assert (data["engine"], data["packing"], data["share_prompt_prefix"], data["device"]) == ("torch", False, "auto", "cpu")
    assert data["engine_reason"].startswith("no GPU")
    assert "engine torch" in events[0]["message"] and "packing off" in events[0]["message"]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("prompt_shared" in r for r in rows)
