"""train.overlap one_step (trainer/overlap.py): the stale-policy correction by hand, the auto rule, the config's
refusals, the snapshot the rollout samples from, and a GRPO run on the CPU that overlaps, logs its staleness and
resumes from a checkpoint exactly."""
import json
import math

import pytest
import torch

import trainer
from tests.trainer.test_rollout_is import _with_rollout_logprobs
from tests.trainer.test_update import _cfg, _group, _reference_logp
from trainer.algos import policy_loss
from trainer.autotune import OVERLAP_IS_CAP, OVERLAP_MAX_WEIGHT_SHARE, OVERLAP_MIN_ROWS, overlap_is_cap, pick_overlap
from trainer.config import ConfigError, load_config
from trainer.engine import make_engine
from trainer.models import load_policy
from trainer.overlap import STATE_KEY, OneStepOverlap, resolve_overlap
from trainer.rollout import SamplingParams
from trainer.update import policy_update, rollout_is
from trainer.verify import VERIFIERS


# -- the correction, by hand ------------------------------------------------------------------------------
def test_the_stale_policy_correction_by_hand():
    """Decoupled PPO with a capped behaviour weight: the PPO ratio is taken against the trainer's own log-probs
    before the update (pi_prox), and each token's advantage is weighted by w = min(pi_prox / pi_behaviour, cap),
    pi_behaviour being the log-probs recorded when the batch was sampled (one optimizer step earlier)."""
    prox = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])  # the trainer's log-probs, pre-update weights
    behaviour = torch.tensor([[-1.2, -1.0, -2.0, -3.0]])  # recorded at sampling, the weights one step older
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    A = torch.tensor([1.5])
    ref, adv, parts = rollout_is(prox, behaviour, A, mask, cap=OVERLAP_IS_CAP)
    # w = [e^0.2 = 1.2214, e^-1 = 0.3679, e^1.5 = 4.48 -> capped at 2, masked 0]
    w = [math.exp(0.2), math.exp(-1.0), 2.0, 0.0]
    assert adv[0].tolist() == pytest.approx([1.5 * x for x in w], rel=1e-6)
    assert parts["is_truncated_sum"] == 1 and parts["is_weight_sum"] == pytest.approx(sum(w), rel=1e-6)
    assert torch.equal(ref, prox)

    # at the update's forward the weights are the pre-update ones: ratio 1, loss -sum(w A) / 3 tokens
    logp = prox.clone().requires_grad_(True)
    loss, _ = policy_loss(logp, ref, adv, mask, 0.2, 0.2, agg="token_mean")
    assert loss.item() == pytest.approx(-1.5 * sum(w) / 3, rel=1e-6)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-1.5 * x / 3 for x in w], rel=1e-6)

    # the weights moved (a second look at the same batch): the ratio to pi_prox is clipped at 1 +- 0.2
    moved = prox + torch.tensor([[0.5, -0.1, 0.1, 0.0]])  # ratios e^0.5 = 1.65 (clipped to 1.2), 0.905, 1.105
    loss, stats = policy_loss(moved, ref, adv, mask, 0.2, 0.2, agg="token_mean")
    by_hand = -(1.2 * w[0] + math.exp(-0.1) * w[1] + math.exp(0.1) * w[2]) * 1.5 / 3
    assert loss.item() == pytest.approx(by_hand, rel=1e-6)
    assert stats["clip_frac"] == pytest.approx(1 / 3)


def test_the_cap_is_rollout_is_cap_or_two():
    assert overlap_is_cap(0.0) == OVERLAP_IS_CAP == 2.0
    assert overlap_is_cap(5.0) == 5.0


@pytest.mark.parametrize("ratio, expected", [(1.5, 1.5), (4.0, OVERLAP_IS_CAP)])
def test_the_update_weights_stale_samples_by_the_capped_ratio(tiny_config, ratio, expected):
    """policy_update(is_cap=...) (what a one_step run's update gets): samples whose recorded log-probs give each
    token 1/ratio of the trainer's probability train with gradient min(ratio, cap) x the on-policy one."""
    samples = _group() + _group(seed=1, prompt_len=9)
    cfg = _cfg(tiny_config, micro_batch_size=2)

    def grads(samples, is_cap):
        policy = load_policy(cfg)
        engine = make_engine(cfg, policy)
        engine.step = lambda: 0.0  # keep the gradients
        metrics = policy_update(policy, engine, samples, cfg, is_cap=is_cap)
        return [p.grad.clone() for p in policy.trainable_parameters()], metrics["solver"]

    with torch.no_grad():
        logp = _reference_logp(load_policy(cfg).base_model(), samples)
    plain, _ = grads(_with_rollout_logprobs(samples, logp, 0.0), None)
    stale, m = grads(_with_rollout_logprobs(samples, logp, -math.log(ratio)), overlap_is_cap(0.0))
    for g, p in zip(stale, plain):
        torch.testing.assert_close(g, expected * p, atol=1e-6, rtol=1e-4)
    assert m["is_weight"] == pytest.approx(expected, rel=1e-4)
    assert m["rollout_kl"] == pytest.approx(-math.log(ratio), rel=1e-4)


# -- the auto rule and the config -------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, on", [
    (dict(device_type="cuda", rows=64), True),  # the 321M benchmark's 8 prompts x 8
    (dict(device_type="cuda", rows=512), True),
    (dict(device_type="cuda", rows=63), False),  # a tiny batch
    (dict(device_type="cpu", rows=512), False),  # a CPU: generation and update want the same cores
    (dict(device_type="mps", rows=512), False),
    (dict(device_type="cuda", rows=512, supported=False), False),  # spice, ssp, ...
    (dict(device_type="cuda", rows=512, backend="vllm"), False),
    (dict(device_type="cuda", rows=512, gpus=2), False),
    (dict(device_type="cuda", rows=512, zero_stage=3), False),
    (dict(device_type="cuda", rows=512, zero_stage=2), True),
    (dict(device_type="cuda", rows=512, old_logprobs="rollout"), False),
    (dict(device_type="cuda", rows=512, weight_bytes=int(2e9), gpu_memory_bytes=int(85.5e9)), True),  # 0.5B fp32
    (dict(device_type="cuda", rows=512, weight_bytes=int(28e9), gpu_memory_bytes=int(85.5e9)), False),  # 7B fp32
])
def test_the_auto_rule(kwargs, on, monkeypatch):
    kwargs = {"supported": True, **kwargs}
    picked, reason = pick_overlap("auto", **kwargs)  # faster, its learning not yet compared: off wherever it would be on
    assert picked is False and reason
    if on:
        assert "measured faster on a GPU" in reason and "not yet shown" in reason
    monkeypatch.setattr("trainer.autotune.OVERLAP_FASTER_ON_GPU", False)
    if on:
        assert "not yet measured faster" in pick_overlap("auto", **kwargs)[1]
    monkeypatch.setattr("trainer.autotune.OVERLAP_FASTER_ON_GPU", True)
    monkeypatch.setattr("trainer.autotune.OVERLAP_LEARNS_AS_WELL", True)  # the rule once a held-out run says so
    picked, reason = pick_overlap("auto", **kwargs)
    assert picked is on and reason
    assert OVERLAP_MIN_ROWS == 64 and OVERLAP_MAX_WEIGHT_SHARE == 0.1
    assert pick_overlap("off", **kwargs) == (False, "set in the config")
    assert pick_overlap("one_step", **kwargs) == (True, "set in the config")


def test_auto_is_the_default_and_a_cpu_run_leaves_it_off(tiny_config, monkeypatch):
    cfg = load_config(tiny_config())
    assert cfg.train.overlap == "auto"
    assert not cfg.trainer_reference  # hf + auto: the rollout's log-probs stay the reference when it is off
    assert resolve_overlap(cfg, "cpu") == (False, "no GPU (on a CPU generation and update want the same cores)")
    assert resolve_overlap(cfg, "cuda")[0] is False  # 2 prompts x 4 answers: under 64 sequences
    big = load_config(tiny_config(train={"prompts_per_step": 16}, rollout={"group_size": 4}))
    assert resolve_overlap(big, "cuda")[0] is False  # the shipped default until a held-out comparison
    monkeypatch.setattr("trainer.autotune.OVERLAP_LEARNS_AS_WELL", True)
    assert resolve_overlap(big, "cuda")[0] is True
    with pytest.raises(ConfigError, match="train.overlap"):
        load_config(tiny_config(train={"overlap": "two_step"}))


def test_one_step_is_refused_where_it_is_not_built(tiny_config):
    def problems(method="grpo", **sections):
        with pytest.raises(ConfigError) as err:
            load_config(tiny_config(method, **sections))
        return dict(err.value.problems)

    one = {"device": "cpu", "overlap": "one_step"}
    assert "supported for grpo, not spice" in problems("spice", train=one)["train.overlap"]
    assert "rollout.backend=vllm" in problems(train=one, rollout={"backend": "vllm"})["train.overlap"]
    assert "one GPU" in problems(train={**one, "gpus": 2})["train.overlap"]
    assert "ZeRO-3" in problems(train={**one, "engine": "deepspeed", "zero_stage": 3})["train.overlap"]
    assert "trainer's own" in problems(train={**one, "old_logprobs": "rollout"})["train.old_logprobs"]
    cfg = load_config(tiny_config(train=one))
    assert cfg.trainer_reference and cfg.rollout_logprobs  # the stale log-probs are the IS weights' denominator


# -- the snapshot --------------------------------------------------------------------------------------------
def test_the_rollout_samples_the_snapshot_while_the_live_weights_change(tiny_config):
    """The batch in flight is sampled by the weights copied before the update, whatever the update does to the
    live ones meanwhile; refresh() then copies the live weights; a step's sampling is seeded by the step."""
    cfg = load_config(tiny_config(train={"device": "cpu", "overlap": "one_step"}))
    policy = load_policy(cfg)
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    engine_calls = []  # an engine's hook on the trained module (DeepSpeed's forward prologue): the copy drops it
    policy.model.register_forward_pre_hook(lambda module, args: engine_calls.append(module))
    overlap = OneStepOverlap(policy, cfg)
    try:
        params = SamplingParams(temperature=1.0, max_new_tokens=6)
        prompts = [[5, 17, 42, 99]] * 4
        overlap.refresh(0)
        overlap.submit(2, [{"prompt": "p", "answer": "a"}], [0], prompts, params)
        with torch.no_grad():  # "the update": the live weights move while the rollout runs
            for p in policy.model.parameters():
                p.add_(torch.randn_like(p) * 0.5)
        got = overlap.take(2)
        assert got.version == 0 and got.step == 2 and len(got.completions) == 4
        assert engine_calls == []
        # the recorded log-probs are those of the weights before the change
        old = load_policy(cfg)
        old.model.load_state_dict(before)
        samples = [_sample(c) for c in got.completions]
        with torch.no_grad():
            expected = _reference_logp(old.model, samples)
            moved = _reference_logp(policy.model, samples)
        for b, c in enumerate(got.completions):
            n = len(c.completion_ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), expected[b, :n], atol=1e-4, rtol=1e-4)
            assert not torch.allclose(torch.tensor(c.logprobs), moved[b, :n], atol=1e-2)
        overlap.refresh(1)
        for s, p in zip(overlap.snapshot.parameters(), policy.model.parameters()):
            assert torch.equal(s, p)
        # the same step samples the same tokens (its own seed), whatever the global RNG did meanwhile
        overlap.submit(3, [], [], prompts, params)
        first = overlap.take(3).completions
        torch.rand(1000)
        overlap.submit(3, [], [], prompts, params)
        assert [c.completion_ids for c in overlap.take(3).completions] == [c.completion_ids for c in first]
        with pytest.raises(RuntimeError, match="step 4"):
            overlap.submit(4, [], [], prompts, params)
            overlap.take(5)
        overlap.submit(5, [], [], [[10**9]], params)  # a token id outside the vocabulary: the thread's error
        with pytest.raises(ValueError, match="vocab"):
            overlap.take(5)
    finally:
        overlap.close()


def _sample(c):
    from trainer.update import Sample

    return Sample(c.prompt_ids, c.completion_ids, [1] * len(c.completion_ids), c.logprobs, advantage=0.0)


# -- a run ---------------------------------------------------------------------------------------------------
def _run_config(tiny_config, steps, **train):
    return tiny_config(reward="exact", train={"steps": steps, "overlap": "one_step", **train},
                       checkpoint={"every": 1, "keep_last": 3})


def test_a_grpo_run_overlaps_logs_its_staleness_and_resumes_exactly(tiny_config, tmp_path, monkeypatch):
    monkeypatch.setitem(VERIFIERS, "exact", lambda pred, gold: len(pred) % 3 == 0)  # rewards that vary
    whole = trainer.run(_run_config(tiny_config, 3), run_dir=tmp_path / "whole")
    solver = [r for r in whole.metrics if r["role"] == "solver"]
    assert [r["staleness"] for r in solver] == [0, 1, 1]
    assert all("gen_wait_seconds" in r for r in solver)
    assert any(r.get("is_weight", 0) > 0 for r in solver)  # the behaviour weights were applied
    events = [json.loads(line) for line in (tmp_path / "whole" / "samples.jsonl").read_text().splitlines()]
    auto = [e for e in events if e.get("kind") == "event" and e["data"].get("what") == "auto_settings"]
    assert auto[0]["data"]["overlap"] == "one_step" and "overlap one_step" in auto[0]["message"]
    # the checkpoint of step 1 holds the rollout of step 2, sampled during step 1's update by the weights before it
    state = torch.load(tmp_path / "whole" / "checkpoints" / "step-000001" / "state.pt", weights_only=True)
    assert state["recipe"][STATE_KEY]["step"] == 2 and state["recipe"][STATE_KEY]["version"] == 0
    assert STATE_KEY not in torch.load(tmp_path / "whole" / "checkpoints" / "step-000003" / "state.pt",
                                       weights_only=True)["recipe"]  # the last step samples nothing ahead

    # stopped after step 1, resumed: the same steps, the same numbers
    cut = _run_config(tiny_config, 3, time_limit_minutes=1e-9)
    first = trainer.run(cut, run_dir=tmp_path / "cut")
    assert first.steps == 1 and first.stopped
    second = trainer.run(_run_config(tiny_config, 3), run_dir=tmp_path / "cut", resume=True)
    assert second.steps == 3
    resumed = [r for r in second.metrics if r["role"] == "solver"]
    assert [r["staleness"] for r in resumed] == [1, 1]
    for a, b in zip(solver[1:], resumed):
        for key in ("reward_mean", "loss", "response_length", "grad_norm", "is_weight"):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), key
    end_whole = torch.load(tmp_path / "whole" / "checkpoints" / "step-000003" / "state.pt", weights_only=True)
    end_cut = torch.load(tmp_path / "cut" / "checkpoints" / "step-000003" / "state.pt", weights_only=True)
    assert end_whole["recipe"]["cursor"] == end_cut["recipe"]["cursor"]
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(whole.final_checkpoint + "/model").state_dict()
    b = AutoModelForCausalLM.from_pretrained(second.final_checkpoint + "/model").state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=1e-5)


def test_a_cpu_run_with_auto_overlap_runs_as_before(tiny_config, tmp_path):
    """auto on a CPU: no snapshot, no staleness metric, the auto_settings event says why."""
    result = trainer.run(tiny_config(train={"steps": 1}, checkpoint={"every": 0, "final": False}),
                         run_dir=tmp_path / "run")
    assert all("staleness" not in r for r in result.metrics)
    events = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    auto = [e for e in events if e.get("kind") == "event" and e["data"].get("what") == "auto_settings"][0]
    assert auto["data"]["overlap"] == "off" and auto["data"]["overlap_reason"].startswith("no GPU")


def test_a_lora_run_copies_only_its_adapters(tiny_config, tmp_path, monkeypatch):
    """With LoRA the snapshot is refreshed by copying the adapters (the frozen base never changes)."""
    monkeypatch.setitem(VERIFIERS, "exact", lambda pred, gold: len(pred) % 3 == 0)
    cfg = load_config(_run_config(tiny_config, 2, lr=1e-2) | {"model": {**tiny_config()["model"], "lora": {"r": 4}}})
    policy = load_policy(cfg)
    overlap = OneStepOverlap(policy, cfg)
    try:
        trained = {id(p) for p in policy.model.parameters() if p.requires_grad}
        assert overlap.pairs and all(id(src) in trained for _, src in overlap.pairs)
        assert len(overlap.pairs) < len(list(policy.model.parameters()))
    finally:
        overlap.close()
    result = trainer.run(cfg, run_dir=tmp_path / "run")
    assert [r["staleness"] for r in result.metrics if r["role"] == "solver"] == [0, 1]
